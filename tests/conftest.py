"""One Spark session for the whole test run; tests that use it are marked ``spark``.

``tests/core/`` holds the engine-free core's tests: where pyspark is not installed, they
are the only ones collected (``pip install --no-deps -e . pytest && pytest -m "not spark"``).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import jvm_archive
import pytest
from packaging.version import Version

# The JVMs the tests start (each job, kernel, metastore, cluster daemon and executor) live
# for seconds to minutes, and on 2 cores the C2 JIT compiler's threads took much of their
# CPU: a 4-checkpoint ingest job cost 209 CPU-seconds (114 s) with it and 132 (92 s)
# without. A driver JVM also spent most of its start loading and verifying Spark's classes:
# from the class-data archive `make test` dumps first, a sink's open and two checkpoints
# cost 25.8 CPU-seconds of the JVM where they cost 34.3 (idle, the AWS variables set).
# Set before any JVM starts, so all of them inherit it; the JVM notes it on stderr.
os.environ.setdefault("JAVA_TOOL_OPTIONS", jvm_archive.java_options())
# A JVM that runs for the whole session gains from C2 (tests/test_delta_sink.py in one
# process: 268 s with it, 453 s without); its command line overrides the variable.
FULL_JIT = {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=4"}
# The session's heap: with Spark's 1g, a worker's JVM spent 8% of its CPU in the serial
# collector, its old generation 80% full; with 2g,
# tests/test_delta_sink.py in one process took 385 CPU-s instead of 428.
SESSION_HEAP = {"spark.driver.memory": "2g"}

# Small and quiet: 2 cores on CI, so few partitions, no UI, no progress bars.
TEST_SPARK_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # Delta's VACUUM lists folders in this many tasks (10000 by default: minutes on 2 cores)
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


@pytest.fixture(scope="session")
def spark(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[object]:
    """The session every Spark test shares; it reaches the test S3 server too (the
    ``s3_server`` fixture sets the ``AWS_*`` variables it reads)."""
    from lakesink.spark.session import KAFKA_CONNECTOR, spark_session

    request.getfixturevalue("s3_server")

    warehouse = tmp_path_factory.mktemp("warehouse")
    session = spark_session(
        master="local[2]",
        app_name="lakesink-tests",
        packages=[KAFKA_CONNECTOR],
        conf={
            **TEST_SPARK_CONF,
            **FULL_JIT,
            **SESSION_HEAP,
            "spark.sql.warehouse.dir": str(warehouse),
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


CPU_SAMPLE_DIR = os.environ.get("LAKESINK_CPU_SAMPLE_DIR")


def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    """Under ``tests/cpu_by_test.py``: which test this worker runs now, for the CPU its
    Spark session and servers spend meanwhile."""
    if CPU_SAMPLE_DIR:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        Path(CPU_SAMPLE_DIR, worker).write_text(f"{os.getpid()} {nodeid}")


CORE_TESTS = Path(__file__).resolve().parent / "core"
HAVE_PYSPARK = importlib.util.find_spec("pyspark") is not None


def pytest_ignore_collect(collection_path: Path) -> bool | None:
    """Without pyspark, leave out every test module but the core's (they import it)."""
    if HAVE_PYSPARK or collection_path.is_dir() or collection_path.suffix != ".py":
        return None
    return CORE_TESTS not in collection_path.resolve().parents


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if "spark" in fixtures:
            item.add_marker(pytest.mark.spark)
        if "spark_cluster" in fixtures:  # one worker runs them all: one cluster, not two
            item.add_marker(pytest.mark.xdist_group("cluster"))
            item.add_marker(pytest.mark.cluster)
        if "kafka_broker" in fixtures:  # one worker runs them all: one broker, not two
            item.add_marker(pytest.mark.xdist_group("kafka"))
        if "connect_server" in fixtures:  # one worker runs them all: one server, not two
            item.add_marker(pytest.mark.xdist_group("connect"))
        if "quick_run" in fixtures:  # one worker makes the quick benchmark run, once
            item.add_marker(pytest.mark.xdist_group("bench"))
            item.add_marker(pytest.mark.bench)
        elif _uses_a_module_fixture(item):
            # One worker runs the tests of a module that share a module-scoped fixture (a
            # SQL server, a Derby server, a table written once): two would build it twice.
            item.add_marker(pytest.mark.xdist_group(f"module-{item.module.__name__}"))


def _uses_a_module_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None or item.get_closest_marker("xdist_group") is not None:
        return False
    return any(
        definition.scope == "module"
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
    )


def pytest_report_header() -> str:
    """The free disk a run starts with: the S3 server answers every write with HTTP 500 once
    its disk is full, which reads as a bug in whatever test meets it first."""
    folder = tempfile.gettempdir()
    usage = shutil.disk_usage(folder)
    return f"disk: {usage.free / 2**30:.1f} GiB free of {usage.total / 2**30:.0f} GiB at {folder}"


def pytest_configure(config: pytest.Config) -> None:
    """Refuse a pytest that pytest-xdist's ``--dist loadgroup`` cannot group with.

    pytest-xdist up to 3.8 groups tests by renaming ``item._nodeid``, which pytest 9.2 no
    longer reads: every group would be split across workers, and each worker would build
    the group's session fixtures (the cluster, the crash chain, the quick benchmark) again.
    """
    if config.getoption("dist", default="no") != "loadgroup":
        return
    installed = {name: version(name) for name in ("pytest", "pytest-xdist")}
    pytest_release, xdist_release = (Version(v).release[:2] for v in installed.values())
    if pytest_release >= (9, 2) and xdist_release <= (3, 8):
        raise pytest.UsageError(
            f"pytest {installed['pytest']} with pytest-xdist {installed['pytest-xdist']} "
            "splits --dist loadgroup groups across workers; install the versions "
            "pyproject.toml allows: pip install -e '.[dev]'"
        )


# The local Spark standalone cluster of the cluster, fault and soak tests (session-scoped),
# and the summary lines with the figures those tests record.
from cluster_fixture import pytest_terminal_summary, spark_cluster  # noqa: E402, F401
from connect_fixture import connect_server  # noqa: E402, F401
from kafka_fixture import kafka_broker  # noqa: E402, F401
from s3_fixture import STORES, s3_server  # noqa: E402, F401
from tools_fixture import ldap_directory, push_gateway  # noqa: E402, F401


@pytest.fixture(params=STORES)
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh folder for a test's tables and state: on local disk, then on the S3 server.

    The storage-independent guarantees take it, so each holds on both stores.
    """
    if request.param == "local":
        return str(tmp_path / "lake")
    from s3_fixture import s3_uri

    request.getfixturevalue("s3_server")
    return s3_uri("lake")


@pytest.fixture(params=["merge", "metadata"])
def commit(request: pytest.FixtureRequest) -> str:
    """A sink's commit mode (``SinkOptions.commit``): the MERGE, then the metadata commit.

    The guarantees both modes keep (crashes at every step, several writers, readers during
    commits, the downstream stream) take it, so each holds in both.
    """
    return request.param
