# Everything a new user needs: `make test` and `make demo` set up the rest themselves.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
# The jars Spark and lakesink fetch from Maven Central go beside this project-local cache.
export LAKESINK_IVY_DIR ?= $(CURDIR)/.cache/ivy
PYTEST_ARGS ?=

METASTORE_DIR := $(CURDIR)/.cache/metastore
METASTORE_PORT ?= 1527

.PHONY: setup lint format test test-needs test-fast jvm-archive demo docs clean metastore-up metastore-down cluster-up cluster-down kafka-up kafka-down bench bench-scale bench-quick sql-up sql-down s3-up s3-down crash-points crash-points-resume

setup: $(STAMP)

# Fetch the Delta jars (and Spark's Kafka connector, which the tests read Kafka with, and
# hadoop-aws with its AWS SDK, for S3) and build lakesink's S3 log store once, before
# parallel test workers and job processes share the cache.
IVY_STAMP := $(LAKESINK_IVY_DIR)/.lakesink-warm
$(IVY_STAMP): $(STAMP) Makefile
	$(BIN)/python -c "from lakesink.spark.session import KAFKA_CONNECTOR as K, spark_session; from lakesink.storage.options import StorageOptions as S; spark_session(master='local[1]', packages=[K], storage=S()).stop()"
	touch $@

# uv installs what pip would (the same versions), in half the time: it downloads in parallel.
# Compiled to bytecode at install, as pip does: where PYTHONDONTWRITEBYTECODE is set (this
# machine sets it), nothing else would, and every Python process compiles all it imports.
UV := $(BIN)/uv
UV_INSTALL := $(UV) pip install --quiet --compile-bytecode
# lakesink into .venv with the extras $(1), editable.
define install
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet 'uv>=0.9,<1'
	$(UV_INSTALL) --python $(BIN)/python -e '.[$(1)]'
	@java -version >/dev/null 2>&1 || { echo "Java 17 is needed (java not found on PATH)"; exit 1; }
	touch $@
endef

$(STAMP): pyproject.toml
	$(call install,dev)

# The demo needs lakesink with Spark, not the development tools: a new user's first command
# installs what it runs and nothing more.
DEMO_STAMP := $(VENV)/.installed-demo
$(DEMO_STAMP): pyproject.toml
	$(call install,spark)

lint: $(STAMP)
	$(BIN)/ruff check lakesink jobs tests benchmarks
	$(BIN)/ruff format --check lakesink jobs tests benchmarks
	$(BIN)/lint-imports
	$(BIN)/mypy --strict lakesink

format: $(STAMP)
	$(BIN)/ruff format lakesink jobs tests benchmarks
	$(BIN)/ruff check --fix lakesink jobs tests benchmarks

# Debian packages the tests run for real: Chromium opens the validation reports headless,
# the Prometheus Pushgateway receives pushed metrics, slapd is the LDAP directory the SQL
# endpoint's logins are checked against (each test run starts its own, from a throwaway
# folder: the package is installed without a directory of its own). One apt-get for all
# three (a grouped target): parallel makes would otherwise race for dpkg's lock.
TEST_TOOLS := /usr/bin/chromium /usr/bin/prometheus-pushgateway /usr/sbin/slapd
$(TEST_TOOLS) &:
	@command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] || { \
	  echo "the tests need Debian's chromium, prometheus-pushgateway and slapd: install them (as root)"; exit 1; }
	apt-get update -qq
	echo "slapd slapd/no_configuration boolean true" | debconf-set-selections
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium prometheus-pushgateway slapd

# dbt-spark, the dbt client the SQL endpoint's tests run, in a virtualenv of its own: dbt-core
# 1.11 wants pathspec<0.13 where mypy 2 (make lint) wants 1.x, and dbt-core 1.12 downloads
# a parser wheel from GitHub at install time.
DBT := $(CURDIR)/.cache/dbt-venv/bin/dbt
$(DBT): | $(STAMP)
	$(PYTHON) -m venv $(CURDIR)/.cache/dbt-venv
	$(UV_INSTALL) --python $(CURDIR)/.cache/dbt-venv/bin/python 'dbt-spark[PyHive]==1.11.0' 'dbt-core>=1.11,<1.12'

# mitmproxy, the fault-injecting proxy of the crash-point tests in front of the S3 server, in
# an environment of its own: it pins versions of libraries the notebooks need newer.
MITMDUMP := $(CURDIR)/.cache/tools/mitmproxy/bin/mitmdump
$(MITMDUMP): | $(STAMP)
	$(PYTHON) -m venv $(CURDIR)/.cache/tools/mitmproxy
	$(UV_INSTALL) --python $(CURDIR)/.cache/tools/mitmproxy/bin/python mitmproxy==11.0.2

# A class-data archive of the Spark driver JVM, which the tests' JVMs start from: dumped once
# per environment into .cache/jvm (tests/jvm_archive.py says what it saves).
jvm-archive: $(IVY_STAMP)
	$(BIN)/python tests/jvm_archive.py

# The suite CI runs, in two worker processes (a Spark test spends much of its time waiting:
# JVM starts, Delta commits, child jobs): the slow process, crash, cluster fault and soak
# tests and the quick benchmark included. The cluster tests share one standalone cluster.
# What the tests need is made first, three at a time: the downloads (Maven Central, PyPI)
# wait on the network while lint and the class-data archive work the cores.
PYTEST_WORKERS ?= 2
test-needs: lint jvm-archive $(TEST_TOOLS) $(MITMDUMP) $(DBT)

test: $(STAMP)
	$(MAKE) --no-print-directory -j3 test-needs
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadgroup --durations=25 $(PYTEST_ARGS)

# The quick loop while coding: no slow tests.
test-fast: lint jvm-archive
	$(BIN)/python -m pytest -m "not slow" $(PYTEST_ARGS)

# Every change of every crash-point scenario to its lake (tests/crashpoints), killed before
# and after, on local disk (a gate compiled with cc and preloaded) and on an S3 server; the
# table goes into docs/reliability.md. Hours.
crash-points: $(IVY_STAMP) $(MITMDUMP) jvm-archive
	$(BIN)/python tests/crashpoints/run.py --report docs/reliability.md

# The same, going on where it stopped: what the page holds no rows of the current code for.
crash-points-resume: $(IVY_STAMP) $(MITMDUMP) jvm-archive
	$(BIN)/python tests/crashpoints/run.py --resume --report docs/reliability.md

# Sample orders, the ingest job killed mid-checkpoint and restarted, vacuum, the proof.
demo: $(DEMO_STAMP)
	$(BIN)/python jobs/demo.py --out demo-output

# The documentation site, built offline into site/ (mkdocs-material, with the API reference
# from the docstrings and the CLI reference from the parsers): open site/index.html. The
# generated parts are written into the pages first (commit them: the docs test compares).
docs: $(STAMP)
	$(BIN)/python docs/hooks.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The benchmark suite: plain Delta vs lakesink on the same data; the full run's results go to
# docs/bench.json and docs/bench.png (about 20 minutes on 2 cores, with the S3 section). It reports, never asserts.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run --out docs

# How each cost grows with the work: checkpoints of history (10 to 10,000), tables a group
# (2 to 20), rows a checkpoint (10k to 10M here, 100M on a standalone cluster with its tables
# on an S3 server, both started for it) and writers of one table (1 to 8), in both commit
# modes; each curve's report goes to docs/scale-<curve>.json and into docs/benchmarks.md
# ("Cost as the work grows") with its figure. Hours; make test runs none of it.
bench-scale: $(STAMP)
	$(BIN)/python -m benchmarks.scale --out docs --page

# The same report from CI-sized data in a few minutes (make test runs it).
bench-quick: $(STAMP)
	$(BIN)/python -m benchmarks.run --quick --out .cache/bench-quick

# A shared Hive metastore (Derby network server on 127.0.0.1) for writers and SQL readers
# in several processes at once; pass the URL it prints as LAKESINK_METASTORE_URL.
metastore-up: $(STAMP)
	$(BIN)/lakesink metastore start --dir $(METASTORE_DIR) --port $(METASTORE_PORT)

metastore-down: $(STAMP)
	$(BIN)/lakesink metastore stop --dir $(METASTORE_DIR) --port $(METASTORE_PORT)

# The SQL endpoint (lakesink serve, Spark's Thrift JDBC/ODBC server) in the background on
# 127.0.0.1, over the shared metastore if LAKESINK_METASTORE_URL is set; TABLES="/data/orders
# ..." serves their committed views. Logins are checked against the users file
# (~/.config/lakesink/serve-users, or SQL_USERS=FILE; lakesink serve-users add NAME makes
# it), as lakesink serve does; SQL_USERS=none serves without logins (loopback only: every
# user of this host may then read the views). Its log is .cache/sql/serve.log.
SQL_DIR := $(CURDIR)/.cache/sql
SQL_PORT ?= 10000
SQL_USERS ?=
TABLES ?=
SQL_LOGINS := $(if $(filter none,$(SQL_USERS)),--no-auth,$(if $(SQL_USERS),--users $(SQL_USERS)))

sql-up: $(STAMP)
	@mkdir -p $(SQL_DIR)
	@if [ -f $(SQL_DIR)/serve.pid ] && kill -0 $$(cat $(SQL_DIR)/serve.pid) 2>/dev/null; then echo "already running (pid $$(cat $(SQL_DIR)/serve.pid))"; exit 0; fi; \
	nohup $(BIN)/lakesink serve --port $(SQL_PORT) $(SQL_LOGINS) $(foreach t,$(TABLES),--table $(t)) > $(SQL_DIR)/serve.log 2>&1 & echo $$! > $(SQL_DIR)/serve.pid; \
	for i in $$(seq 1 180); do grep -q "serving SQL at" $(SQL_DIR)/serve.log && { grep "serving SQL at" $(SQL_DIR)/serve.log; exit 0; }; kill -0 $$(cat $(SQL_DIR)/serve.pid) 2>/dev/null || { tail -20 $(SQL_DIR)/serve.log; exit 1; }; sleep 1; done; echo "not up after 180 s: $(SQL_DIR)/serve.log"; exit 1

sql-down:
	@if [ -f $(SQL_DIR)/serve.pid ]; then kill $$(cat $(SQL_DIR)/serve.pid) 2>/dev/null; while kill -0 $$(cat $(SQL_DIR)/serve.pid) 2>/dev/null; do sleep 1; done; rm -f $(SQL_DIR)/serve.pid; echo stopped; else echo "not running"; fi

# A local Spark standalone cluster (a master and two 1-core workers, each its own JVM, on
# loopback) to run jobs on with spark-submit: README, "Running on a cluster".
CLUSTER_DIR := $(CURDIR)/.cache/cluster
CLUSTER_PORT ?= 7077

cluster-up: $(STAMP)
	$(BIN)/python tests/servers/cluster.py start --dir $(CLUSTER_DIR) --port $(CLUSTER_PORT)

cluster-down: $(STAMP)
	$(BIN)/python tests/servers/cluster.py stop --dir $(CLUSTER_DIR)

# A one-node Kafka broker (KRaft, 127.0.0.1) to stream orders from: README, "Structured
# Streaming". The first start fetches its jars from Maven Central.
KAFKA_DIR := $(CURDIR)/.cache/kafka
KAFKA_PORT ?= 9092

kafka-up: $(STAMP)
	$(BIN)/python tests/servers/kafka.py start --dir $(KAFKA_DIR) --port $(KAFKA_PORT)

kafka-down: $(STAMP)
	$(BIN)/python tests/servers/kafka.py stop --dir $(KAFKA_DIR)

# A SeaweedFS S3 server (weed mini, 127.0.0.1) with bucket $(S3_BUCKET), for tables at
# s3a://$(S3_BUCKET)/...: it prints the AWS_* variables to export. Its data stay in
# $(S3_DIR) across s3-down / s3-up.
S3_DIR := $(CURDIR)/.cache/s3
S3_PORT ?= 8333
S3_BUCKET ?= lakesink

s3-up: $(STAMP)
	$(BIN)/python tests/servers/s3.py start --dir $(S3_DIR) --port $(S3_PORT) --bucket $(S3_BUCKET)

s3-down: $(STAMP)
	$(BIN)/python tests/servers/s3.py stop --dir $(S3_DIR)

clean:
	rm -rf $(VENV) .cache demo-output spark-warehouse metastore_db derby.log
