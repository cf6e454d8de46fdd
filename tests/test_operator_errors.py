"""Every mistake an operator makes gets one line and an exit status a scheduler can act on.

How the tests know:

- **A store that refuses or does not answer.** Every command and job of the command-line
  reference that reaches a lakesink store runs, as a process, against the S3 server with a
  wrong secret, against a bucket that does not exist, against an endpoint where nothing
  listens (a closed port: the shared server stays up), and against a local folder it may
  not enter (the folder is ``nobody``'s, mode 0700, and the child is root without the
  capabilities that take root past mode bits: it still runs this clone's interpreter, even
  from a private folder). Each must end with exit 78, one line on stderr naming the store, the
  location and the cause, no traceback, before any Spark starts (run without Java).
  ``jars`` reaches no store; ``metastore`` keeps its own local folder, not a table's.
  Every command checks its stores before it starts Spark, so no run here starts one; a
  failure met inside Spark is told apart by the same code from the Py4J exception, which
  the in-process tests below raise from the suite's session.
- **A running writer.** A writer holding a pre-committed checkpoint (a sink of this process,
  its lock or lease held) is refused by ``commit`` and ``abort`` before Spark starts (run
  without Java).
- **Counts that must agree.** Each pair of outputs the issue found disagreeing is compared:
  ``status`` and ``abort`` against the rows the table holds, the metrics' checkpoint
  counter against the commit-latency histogram, the vacuum's dry run against its run, the
  Python vacuum's report against what it printed, the sink's log against its journal.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest
from s3_fixture import s3_uri
from servers.cluster import free_port

from lakesink.cli.exits import EXIT_BAD_INPUT, EXIT_CONFIG, EXIT_OK, EXIT_TRY_LATER
from lakesink.errors import StorageAccessError

SCRIPT = Path(sys.executable).parent / "lakesink"
JOBS = Path(__file__).resolve().parents[1] / "jobs"
SUITE = Path(__file__).parent / "data" / "suites" / "orders_quality.json"
SCHEMA = "order_id BIGINT, customer STRING"
# A Java that is not there: a run that answers with its own message under it started no
# Spark (spark-submit takes $JAVA_HOME/bin/java), which a clock could only suggest.
NO_JAVA = {"JAVA_HOME": "/nonexistent/lakesink-tests-no-java"}
SPARK_BANNER = "Using Spark's default log4j profile"  # Spark's first line, on every start
# How a run names itself in its message, where that is not how it was started.
SAID_AS = {"jobs/vacuum.py": "lakesink vacuum", "ingest": "lakesink ingest"}
# Root without the capabilities that read and enter any folder whatever its mode bits.
NO_DAC = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]


@dataclass(frozen=True)
class Run:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    seconds: float


def run(argv: list[str], *, env: dict[str, str] | None = None, prefix=()) -> Run:
    started = time.monotonic()
    done = subprocess.run(
        [*prefix, *argv],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        stdin=subprocess.DEVNULL,
    )
    return Run(argv, done.returncode, done.stdout, done.stderr, time.monotonic() - started)


def lakesink(*args: str, **options) -> Run:
    return run([str(SCRIPT), *args], **options)


def job(name: str, *args: str, **options) -> Run:
    return run([sys.executable, str(JOBS / name), *args], **options)


def open_sink(spark, path: str, **options):
    from lakesink.delta.sink import DeltaSink

    view = f"operator_{uuid.uuid4().hex[:8]}"
    return DeltaSink.open(spark, path, schema=SCHEMA, view_name=view, **options)


def rows(spark, ids):
    return spark.createDataFrame([(i, f"c-{i}") for i in ids], SCHEMA)


def write(spark, sink, ids) -> str:
    """Write into the sink's open transaction; its id."""
    sink.write(rows(spark, ids))
    return sink.state.current.handle.txn_id


def masked_rows(spark, table: str) -> dict[str, int]:
    """The rows of each pending transaction the table holds, counted by Spark."""
    from lakesink.tables.format import PENDING

    found = spark.read.format("delta").load(table).where(f"{PENDING} IS NOT NULL")
    return {r[0]: r[1] for r in found.groupBy(PENDING).count().collect()}


# ------------------------------------------------------------ stores that refuse lakesink


@dataclass(frozen=True)
class Store:
    """Where the commands are pointed, and how the store turns them away."""

    lake: str  # the folder the table, the state and the landing folder are in
    says: str  # what the one line says of the store and the cause
    env: dict[str, str] = field(default_factory=dict)
    prefix: tuple[str, ...] = ()  # how the process is run (as nobody for a local folder)

    def path(self, name: str) -> str:
        return f"{self.lake}/{name}"


def commands(store: Store, tmp_path: Path) -> dict[str, Run]:
    """Each command and job of the command-line reference that reaches a store, run."""
    table, state, landing = store.path("orders"), store.path("_state"), store.path("landing")
    options = {"env": {**store.env, **NO_JAVA}, "prefix": store.prefix}
    checkpoint = ("--checkpoint", "2")
    return {
        "lakesink status": lakesink("status", table, **options),
        "lakesink checkpoints": lakesink("checkpoints", "--state", state, **options),
        "lakesink metrics": lakesink("metrics", table, **options),
        "lakesink commit": lakesink("commit", table, *checkpoint, "--yes", **options),
        "lakesink abort": lakesink("abort", table, *checkpoint, "--yes", **options),
        "lakesink validate": lakesink(
            "validate", table, *checkpoint, "--suite", str(SUITE), **options
        ),
        "lakesink checkpoint-view": lakesink("checkpoint-view", table, *checkpoint, **options),
        "lakesink serve": lakesink(
            "serve", "--no-auth", "--table", table, "--port", str(free_port()), **options
        ),
        "lakesink migrate-checkpoints": lakesink("migrate-checkpoints", state, **options),
        "lakesink migrate-table": lakesink("migrate-table", table, **options),
        "lakesink vacuum": lakesink("vacuum", table, "--dry-run", **options),
        "jobs/vacuum.py": job("vacuum.py", "--table", table, **options),
        "ingest": job(
            "ingest.py", "--landing", landing, "--table", table, "--state", state, **options
        ),
    }


def refused(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


@pytest.fixture(scope="module")
def private_lake(spark, tmp_path_factory) -> str:
    """A lakesink table (committed, pre-committed and aborted checkpoints), a job's state
    and a landing folder, in a folder only its owner (nobody) may enter."""
    folder = tmp_path_factory.mktemp("private") / "lake"
    sink = open_sink(spark, str(folder / "orders"))
    write(spark, sink, [1])
    sink.notify_checkpoint_complete(sink.prepare_commit())
    write(spark, sink, [2])
    sink.prepare_commit()
    write(spark, sink, [3])
    sink.close()
    (folder / "landing").mkdir()
    (folder / "_state").mkdir()
    for entry in (folder, *folder.rglob("*")):
        shutil.chown(entry, "nobody", "nogroup")
    folder.chmod(0o700)
    return str(folder)


@pytest.fixture(params=["wrong secret", "missing bucket", "stopped server", "local folder"])
def store(request, s3_server) -> Store:
    if request.param == "wrong secret":
        return Store(
            s3_uri("operator"),
            f"S3 at {s3_server.endpoint} refused",
            env={"AWS_SECRET_ACCESS_KEY": "not-the-secret"},
        )
    if request.param == "missing bucket":
        bucket = f"no-such-bucket-{uuid.uuid4().hex[:8]}"
        return Store(f"s3a://{bucket}/lake", f"S3 at {s3_server.endpoint} has no bucket")
    if request.param == "stopped server":
        port = free_port()
        assert refused(port)  # nothing listens there: as a server that stopped
        endpoint = f"http://127.0.0.1:{port}"
        return Store(
            s3_uri("operator"),
            f"S3 at {endpoint} does not answer",
            env={"AWS_ENDPOINT_URL": endpoint},
        )
    assert shutil.which("setpriv"), "util-linux's setpriv runs the child without them"
    lake = request.getfixturevalue("private_lake")
    # The control: without those capabilities the OS itself refuses the folder; with them,
    # status reads it.
    assert run(["ls", lake], prefix=NO_DAC).returncode != 0
    assert lakesink("status", f"{lake}/orders").returncode == EXIT_OK
    return Store(lake, "the local file system refused", prefix=tuple(NO_DAC))


@pytest.mark.slow
def test_every_command_says_a_refusing_store_in_one_line_with_exit_78(
    store, tmp_path, record_property
):
    runs = commands(store, tmp_path)
    seconds = sorted((round(done.seconds, 2), what) for what, done in runs.items())
    record_property("figures", f"refused in {seconds[0][0]} to {seconds[-1][0]} s: {seconds}")

    wrong = []
    for what, done in runs.items():
        lines = done.stderr.strip().splitlines()
        line = lines[-1] if lines else ""
        if not (
            done.returncode == EXIT_CONFIG
            and len(lines) == 1
            and line.startswith(f"{SAID_AS.get(what, what)}: {store.says}")
            and store.lake in line
            and "Traceback" not in done.stderr
            and "starting Spark" not in done.stderr
            and SPARK_BANNER not in done.stderr
        ):
            wrong.append(
                f"{what}: exit {done.returncode} after {done.seconds:.1f} s:\n{done.stderr}"
            )
    assert not wrong, "\n".join(wrong)


@pytest.mark.slow
def test_verbose_shows_the_trace_the_line_stands_for(s3_server):
    wrong_secret = {"AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    table = s3_uri("operator") + "/orders"

    quiet = lakesink("status", table, env=wrong_secret)
    verbose = lakesink("status", table, "--verbose", env=wrong_secret)

    assert quiet.returncode == verbose.returncode == EXIT_CONFIG
    assert "Traceback" in verbose.stderr and "SignatureDoesNotMatch" in verbose.stderr
    assert verbose.stderr.strip().splitlines()[-1] == quiet.stderr.strip()
    assert "SignatureDoesNotMatch" in quiet.stderr  # the cause, in the one line


def test_a_failure_inside_spark_is_a_storage_access_error_too(spark, s3_server):
    from lakesink.storage.access import access_error

    missing = f"s3a://no-such-bucket-{uuid.uuid4().hex[:8]}/orders"
    with pytest.raises(StorageAccessError, match="has no bucket"):
        open_sink(spark, missing)

    # S3A with a wrong secret, for one bucket only: its own settings, not the session's.
    bucket = f"wrong-secret-{uuid.uuid4().hex[:8]}"
    spark._jsc.hadoopConfiguration().set(f"fs.s3a.bucket.{bucket}.secret.key", "not-it")
    with pytest.raises(Exception) as raised:
        spark.read.format("delta").load(f"s3a://{bucket}/orders").count()
    assert type(raised.value).__name__ == "Py4JJavaError"  # Spark's own, through Py4J
    found = access_error(raised.value)
    assert found is not None and "\n" not in str(found)
    assert str(found).startswith(f"S3 at {s3_server.endpoint} refused s3a://{bucket}/orders")
    assert "access denied (HTTP 403" in str(found)


def test_expired_credentials_are_told_from_a_wrong_secret():
    """The S3 server here cannot issue temporary credentials; AWS's answer to expired ones
    (its documented error body, as obstore and delta-rs quote it) is read instead."""
    from lakesink.storage.access import access_error

    body = (
        "Generic S3 error: Error performing GET https://s3.amazonaws.com/b?list-type=2 in "
        '31ms - Server returned non-2xx status code: 400 Bad Request: <?xml version="1.0" '
        'encoding="UTF-8"?>\n<Error><Code>ExpiredToken</Code><Message>The provided token '
        'has expired.</Message></Error>\n\nDebug source:\nGeneric {\n    store: "S3",\n}'
    )

    found = access_error(OSError(body), "s3a://b/orders")

    assert found is not None and "\n" not in str(found)
    assert "refused s3a://b/orders: the credentials expired (ExpiredToken); renew them" in (
        str(found)
    )
    assert access_error(OSError("no such file")) is None  # anything else stays itself


# ------------------------------------------------------------------- a running writer


def test_commit_and_abort_refuse_a_running_writer_before_spark_starts(spark, lake, record_property):
    from lakesink.ops.resolve import plan_resolution
    from lakesink.ops.status import sink_status

    table = f"{lake}/orders"
    sink = open_sink(spark, table)
    write(spark, sink, [1, 2])
    held = sink.prepare_commit()  # pre-committed; this live process holds the writer's lock
    try:
        refusals = {
            action: lakesink(action, table, "--checkpoint", str(held), "--yes", env=NO_JAVA)
            for action in ("commit", "abort")
        }
    finally:
        sink.close()

    record_property(
        "figures", ", ".join(f"{a} refused in {d.seconds:.2f} s" for a, d in refusals.items())
    )
    for action, done in refusals.items():
        assert done.returncode == EXIT_TRY_LATER, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"lakesink {action}: writer '0' of sink 'orders' is running")
        assert f"checkpoint {held} itself" in line and done.stdout == ""
        assert "starting Spark" not in done.stderr and SPARK_BANNER not in done.stderr
    (pending,) = sink_status(table).pending
    assert pending.checkpoint_id == held  # nothing changed
    # The control: with the writer stopped, the same commit may go ahead; it needs Spark,
    # which cannot start without Java.
    assert not plan_resolution(table, held, "commit").done
    control = lakesink("commit", table, "--checkpoint", str(held), "--yes", env=NO_JAVA)
    assert control.returncode != EXIT_OK and "starting Spark" in control.stderr
    assert sink_status(table).pending[0].checkpoint_id == held


def test_a_commit_or_abort_that_landed_before_succeeds_again_and_says_so(spark, tmp_path):
    from lakesink.ops.status import sink_status

    table = str(tmp_path / "orders")
    sink = open_sink(spark, table)
    write(spark, sink, [1, 2])
    sink.notify_checkpoint_complete(sink.prepare_commit())  # checkpoint 1: committed
    write(spark, sink, [3])
    sink.close()  # checkpoint 2: aborted
    before = sink_status(table)

    again = {
        "commit": lakesink("commit", table, "--checkpoint", "1", "--yes"),
        "abort": lakesink("abort", table, "--checkpoint", "2", "--yes"),
        "commit --json": lakesink("commit", table, "--checkpoint", "1", "--yes", "--json"),
    }
    contrary = {
        "commit an aborted one": lakesink("commit", table, "--checkpoint", "2", "--yes"),
        "abort a committed one": lakesink("abort", table, "--checkpoint", "1", "--yes"),
    }

    assert again["commit"].returncode == EXIT_OK, again["commit"].stderr
    assert again["commit"].stdout.startswith(
        f"checkpoint 1 of {table} is already committed (1 transaction(s), 2 rows)"
    )
    assert again["abort"].returncode == EXIT_OK, again["abort"].stderr
    assert "checkpoint 2 of" in again["abort"].stdout
    assert "is already aborted (1 transaction(s), 1 rows)" in again["abort"].stdout
    (settled,) = json.loads(again["commit --json"].stdout)["already_committed"]["transactions"]
    assert settled["state"] == "committed" and settled["rows"] == 2
    for done in again.values():
        assert "starting Spark" not in done.stderr and done.stderr == ""
    assert contrary["commit an aborted one"].returncode == EXIT_BAD_INPUT
    assert "it was aborted" in contrary["commit an aborted one"].stderr
    assert contrary["abort a committed one"].returncode == EXIT_BAD_INPUT
    assert "it is already committed" in contrary["abort a committed one"].stderr
    assert sink_status(table) == before  # nothing was done, nothing changed


# ---------------------------------------------------------------- counts that agree


def test_status_and_abort_count_the_rows_the_table_holds(spark, tmp_path):
    table = str(tmp_path / "orders")
    sink = open_sink(spark, table)
    write(spark, sink, [1, 2])
    sink.notify_checkpoint_complete(sink.prepare_commit())  # checkpoint 1: committed
    aborted = write(spark, sink, [3, 4])
    sink.close()  # checkpoint 2: aborted, 2 rows masked
    gone = open_sink(spark, table)
    opened = write(spark, gone, [5])  # checkpoint 3: open, its writer gone before its
    gone._release()  # pre-commit (as after a crash)
    held = masked_rows(spark, table)
    assert held == {aborted: 2, opened: 1}

    status = lakesink("status", table, "--json")
    text = lakesink("status", table)
    question = lakesink("abort", table, "--checkpoint", "3")  # no terminal: asks, refuses

    assert status.returncode == text.returncode == EXIT_OK, status.stderr + text.stderr
    (sink_report,) = json.loads(status.stdout)["sinks"]
    listed = {t["txn_id"]: t["rows"] for t in (*sink_report["aborted"], *sink_report["pending"])}
    assert listed == held
    assert "rows ?" not in text.stdout
    assert "aborted       writer 0" in text.stdout and "rows 2" in text.stdout
    assert question.returncode == EXIT_BAD_INPUT
    assert f"abort checkpoint 3 of {table}: 1 transaction(s), {held[opened]} rows (open)?" in (
        question.stderr
    )


def test_the_committed_checkpoints_and_the_latency_histogram_count_the_same(spark, tmp_path):
    from prometheus_client import generate_latest
    from test_metrics import samples

    from lakesink.delta.sink import DeltaSink
    from lakesink.jobs.ingest import ORDERS_SCHEMA
    from lakesink.ops.metrics import sink_registry
    from lakesink.ops.resolve import resolve_checkpoint
    from lakesink.spark.validation import ValidationGate

    table = str(tmp_path / "orders")
    gate = ValidationGate.from_file(SUITE, policy="quarantine")
    sink = DeltaSink.open(spark, table, schema=ORDERS_SCHEMA, validation=gate)

    def orders(ids, amount):
        when = datetime(2026, 1, 1)
        return spark.createDataFrame([(i, "c-1", amount, when) for i in ids], ORDERS_SCHEMA)

    sink.write(orders([1, 2], 10.0))
    sink.notify_checkpoint_complete(sink.prepare_commit())  # 1: passes, committed
    sink.write(orders([3], -5.0))
    sink.notify_checkpoint_complete(sink.prepare_commit())  # 2: fails, held
    sink.close()
    resolve_checkpoint(spark, table, 2, "commit")  # an operator commits it by hand

    got = samples(generate_latest(sink_registry([table])).decode(), sink="orders")

    assert got["lakesink_committed_checkpoints_total"] == 2
    assert got["lakesink_commit_latency_seconds_count"] == 2
    assert got["lakesink_commit_latency_seconds_bucket[+Inf]"] == 2


def test_the_vacuums_dry_run_and_run_report_the_same_compaction(spark, tmp_path):
    from lakesink.cli.commands.vacuum import _summary
    from lakesink.ops.vacuum import vacuum

    table = str(tmp_path / "orders")
    sink = open_sink(spark, table)
    for ids in ([1], [2]):
        write(spark, sink, ids)
        sink.notify_checkpoint_complete(sink.prepare_commit())
    write(spark, sink, [3])
    sink.close()  # an aborted transaction: the run journals its removal before compacting
    options = dict(retain_hours=0, allow_short_retention=True, compact_min_files=2)

    dry = vacuum(spark, table, dry_run=True, **options)
    with console_output(spark) as printed:
        real = vacuum(spark, table, **options)
        by_the_vacuum = printed()
        # The control: Delta's own VACUUM prints its count there, which a caller's
        # terminal shows.
        spark.sql(f"VACUUM delta.`{table}` RETAIN 168 HOURS").collect()
        by_delta = printed()

    assert [(c.what, c.files_before) for c in dry.compaction] == [
        (c.what, c.files_removed) for c in real.compaction
    ]
    assert [c.what for c in real.compaction] == ["committed rows", "journal"]
    journal_dry, journal_real = (
        next(line for line in _summary(report).splitlines() if "the journal" in line)
        for report in (dry, real)
    )
    (count,) = {c.files_before for c in dry.compaction if c.what == "journal"}
    assert journal_dry == f"  would compact the journal: {count} file(s)"
    assert journal_real == f"  compacted the journal: {count} file(s) rewritten into 1"
    # The Python vacuum's only output is its report: Delta's own count stays unprinted.
    assert real.files_removed > 0 and by_the_vacuum == ""
    assert by_delta.startswith("Deleted 0 files and directories in a total of")


@contextmanager
def console_output(spark):
    """What Scala code run for this thread prints to the console (Delta's ``println``),
    while the block runs: a function that returns it so far."""
    jvm = spark._jvm
    console = getattr(jvm.scala, "Console$").__getattr__("MODULE$")
    buffer = jvm.java.io.ByteArrayOutputStream()
    shown = console.out()
    console.setOutDirect(jvm.java.io.PrintStream(buffer, True))
    try:
        yield lambda: str(buffer.toString())
    finally:
        console.setOutDirect(shown)


def test_a_sink_logs_an_abort_only_when_it_aborts_something(spark, tmp_path, caplog):
    from lakesink.ops.status import sink_status

    caplog.set_level(logging.DEBUG, logger="lakesink.core.protocol")
    empty, written = str(tmp_path / "empty" / "orders"), str(tmp_path / "written" / "orders")
    for table in (empty, written):
        sink = open_sink(spark, table)
        write(spark, sink, [1])
        sink.notify_checkpoint_complete(sink.prepare_commit())
        if table == written:
            write(spark, sink, [2])
        caplog.clear()
        sink.close()
        closing = [r for r in caplog.records if "closing" in r.getMessage()]
        aborted = sink_status(table).aborted
        if table == empty:  # nothing written since the checkpoint: nothing aborted, no news
            assert aborted == ()
            assert [(r.levelno, r.getMessage()) for r in closing] == [
                (
                    logging.DEBUG,
                    "lakesink[orders/0]: closing; the open transaction of checkpoint 2 wrote "
                    "nothing: nothing to abort",
                )
            ]
        else:
            assert [t.checkpoint_id for t in aborted] == [2]
            assert [(r.levelno, r.getMessage()) for r in closing] == [
                (
                    logging.INFO,
                    "lakesink[orders/0]: closing; the open transaction of checkpoint 2 is aborted",
                )
            ]


def test_the_landing_folder_must_exist_before_spark_starts(tmp_path):
    done = job(
        "ingest.py",
        *("--landing", str(tmp_path / "landing"), "--table", str(tmp_path / "orders")),
        *("--state", str(tmp_path / "_state")),
    )

    assert done.returncode == EXIT_BAD_INPUT
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(
        f"lakesink ingest: the landing folder {tmp_path / 'landing'} does not exist"
    )
    assert "starting Spark" not in done.stderr and SPARK_BANNER not in done.stderr


def test_a_kafka_broker_that_does_not_answer_is_said_in_one_line_before_spark_starts(tmp_path):
    with socket.socket() as listener:  # a port nothing listens on once it is closed
        listener.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{listener.getsockname()[1]}"
    done = lakesink(
        "ingest", "--kafka", address, "--topic", "orders", "--table", str(tmp_path / "orders"),
        "--state", str(tmp_path / "_state"),
    )  # fmt: skip

    assert done.returncode == EXIT_CONFIG
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"lakesink ingest: no Kafka broker answers at --kafka {address} ")
    assert "starting Spark" not in done.stderr and SPARK_BANNER not in done.stderr


def test_a_kafka_address_that_is_not_host_and_port_is_refused_by_the_options(tmp_path):
    done = lakesink(
        "ingest", "--kafka", "$KAFKA_BROKER", "--topic", "orders", "--table",
        str(tmp_path / "orders"), "--state", str(tmp_path / "_state"),
    )  # fmt: skip

    assert done.returncode == EXIT_BAD_INPUT
    assert done.stderr.strip().splitlines()[-1] == (
        "lakesink ingest: error: argument --kafka: '$KAFKA_BROKER' is not HOST:PORT "
        "(e.g. 127.0.0.1:9092); several are separated by commas"
    )
