"""Exit statuses as a scheduler sees them: every command and job, run as a process.

How the tests know the table in ``lakesink.cli.exits`` is what processes end with: each
command and job runs as the installed script (or ``python jobs/...``) with an input that
makes it end in one class (bad input 2, a failed check 1, retry later 75, an unexpected
failure 70, done 0), and the status and the message are read from the finished process.
Inputs that are wrong are refused before a JVM starts (no run of them starts ``java``: a
wrapper of it notes every start, and is seen to note spark-submit's): those runs take about
a second.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home
from servers.cluster import free_port

from lakesink.cli.exits import (
    EXIT_BAD_INPUT,
    EXIT_CHECK_FAILED,
    EXIT_CODES,
    EXIT_OK,
    EXIT_SOFTWARE,
    EXIT_TRY_LATER,
    exit_status,
)
from lakesink.errors import (
    AlreadyRunningError,
    AuditFailedError,
    CheckpointOrderError,
    CommitFailedError,
    CommitRoundError,
    CommitStateUnknownError,
    ConfigurationError,
    FormatVersionError,
    LeaseLostError,
    MetricsExportError,
    ReservedColumnError,
    TableNotFoundError,
    UnknownCheckpointError,
    ValidationSuiteError,
)
from lakesink.spark.settings import CommitRetry

SCRIPT = Path(sys.executable).parent / "lakesink"
JOBS = Path(__file__).resolve().parent.parent / "jobs"


SPARK_BANNER = "Using Spark's default log4j profile"  # Spark's first line, on every start


def lakesink(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def job(
    name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(JOBS / name), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def watched_java(folder: Path) -> tuple[dict[str, str], Path]:
    """An environment whose ``java`` (on PATH and as ``$JAVA_HOME/bin/java``, the two ways
    Spark's launcher finds it) notes each start in a file, then runs the real one."""
    jdk = os.environ.get("JAVA_HOME")
    real = os.path.join(jdk, "bin", "java") if jdk else shutil.which("java")
    assert real, "java is not on PATH"
    home, started = folder / "jdk", folder / "java-starts"
    (home / "bin").mkdir(parents=True)
    wrapper = home / "bin" / "java"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> "{started}"\nexec "{real}" "$@"\n')
    wrapper.chmod(0o755)
    path = f"{home / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {**os.environ, "JAVA_HOME": str(home), "PATH": path}, started


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (AuditFailedError("a check failed"), EXIT_CHECK_FAILED),
        (AlreadyRunningError("another run holds the lock"), EXIT_TRY_LATER),
        (LeaseLostError("lost"), EXIT_TRY_LATER),
        (MetricsExportError("no answer"), EXIT_TRY_LATER),
        (CommitRoundError("2 commits failed", [(1, RuntimeError("x"))]), EXIT_TRY_LATER),
        (CommitFailedError("conflicted"), EXIT_TRY_LATER),
        (CommitStateUnknownError("maybe"), EXIT_TRY_LATER),
        (ConfigurationError("bad option"), EXIT_BAD_INPUT),
        (ValidationSuiteError("bad suite"), EXIT_BAD_INPUT),
        (TableNotFoundError("no table"), EXIT_BAD_INPUT),
        (FormatVersionError("old"), EXIT_BAD_INPUT),
        (ReservedColumnError("_lakesink_x"), EXIT_BAD_INPUT),
        (UnknownCheckpointError("no such checkpoint"), EXIT_BAD_INPUT),
        (CheckpointOrderError("backwards"), EXIT_BAD_INPUT),
        (RuntimeError("a bug"), EXIT_SOFTWARE),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else str(value),
)
def test_each_error_ends_a_command_with_the_status_of_its_class(error, status):
    assert exit_status(error) == status


def test_options_that_cannot_work_are_refused_when_made():
    with pytest.raises(ConfigurationError, match=r"max_attempts=0\): a commit needs at least"):
        CommitRetry(max_attempts=0)
    with pytest.raises(ConfigurationError, match="initial_backoff_s"):
        CommitRetry(initial_backoff_s=10, max_backoff_s=1)


def test_every_help_names_the_exit_statuses():
    helped = [lakesink("--help"), lakesink("vacuum", "--help"), job("ingest.py", "--help")]
    for result in helped:
        assert result.returncode == EXIT_OK, result.stderr
        assert " ".join(EXIT_CODES.split()) in " ".join(result.stdout.split())


@pytest.fixture(scope="module")
def tables(spark, tmp_path_factory) -> dict[str, str]:
    """A lakesink table with a committed, a pre-committed and an aborted checkpoint; one
    whose pending checkpoint lost a data file; one whose log is damaged."""
    from deltalake import DeltaTable

    from lakesink.delta.sink import DeltaSink
    from lakesink.ops.status import sink_status
    from lakesink.tables.format import PENDING

    folder = tmp_path_factory.mktemp("exits")
    schema = "order_id BIGINT"
    paths = {name: str(folder / name / "orders") for name in ("good", "lost", "damaged")}
    for name, path in paths.items():
        sink = DeltaSink.open(spark, path, schema=schema, view_name=f"exits_{name}")
        sink.write(spark.createDataFrame([(1,)], schema))
        sink.notify_checkpoint_complete(sink.prepare_commit())  # checkpoint 1: committed
        sink.write(spark.createDataFrame([(2,)], schema))
        sink.prepare_commit()  # checkpoint 2: pre-committed, left pending
        sink.write(spark.createDataFrame([(3,)], schema))
        sink.close()  # checkpoint 3: aborted
    # A storage accident under a pending checkpoint: its data file is gone.
    (pending,) = sink_status(paths["lost"]).pending
    # The one the table lists (Spark's write leaves an empty file beside it, in no version).
    (pending_file,) = [
        f for f in DeltaTable(paths["lost"]).file_uris() if f"{PENDING}={pending.txn_id}" in f
    ]
    Path(pending_file).unlink()
    log_files = sorted((Path(paths["damaged"]) / "_delta_log").glob("*.json"))
    log_files[-1].write_text("{ this is not a Delta action\n")
    return paths


def test_bad_input_ends_each_command_and_job_with_2_before_spark_starts(tables, tmp_path):
    missing = str(tmp_path / "nothing")
    good = tables["good"]
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "s", "expectations": []}))
    env, java_starts = watched_java(tmp_path)
    # The watch sees a start through spark-submit, the launcher pyspark runs (from there).
    spark_submit = Path(_find_spark_home()) / "bin" / "spark-submit"
    shown = subprocess.run([spark_submit, "--version"], capture_output=True, env=env, timeout=300)
    assert shown.returncode == 0 and java_starts.is_file(), shown.stderr[-2000:]
    java_starts.unlink()
    runs = {
        "status": lakesink("status", missing, env=env),
        "metrics": lakesink("metrics", missing, env=env),
        "checkpoints": lakesink("checkpoints", "--state", missing, env=env),
        "commit (no table)": lakesink("commit", missing, "--checkpoint", "1", "--yes", env=env),
        "abort (committed)": lakesink("abort", good, "--checkpoint", "1", "--yes", env=env),
        "commit (aborted)": lakesink("commit", good, "--checkpoint", "3", "--yes", env=env),
        "abort (never was)": lakesink("abort", good, "--checkpoint", "9", "--yes", env=env),
        "validate": lakesink("validate", good, "--checkpoint", "1", "--suite", str(suite), env=env),
        "checkpoint-view": lakesink("checkpoint-view", missing, "--checkpoint", "1", env=env),
        "migrate-table": lakesink("migrate-table", missing, env=env),
        "migrate-checkpoints": lakesink("migrate-checkpoints", missing, env=env),
        "vacuum": lakesink("vacuum", missing, env=env),
        "jobs/vacuum.py": job("vacuum.py", "--table", missing, env=env),
        "jobs/ingest.py": job(
            "ingest.py", "--kafka", "127.0.0.1:9", "--table", missing, "--state", missing, env=env
        ),
    }
    # A retry of a commit or abort that landed: nothing to do, and that is success.
    settled = {
        "commit (committed)": lakesink("commit", good, "--checkpoint", "1", "--yes", env=env),
        "abort (aborted)": lakesink("abort", good, "--checkpoint", "3", "--yes", env=env),
    }
    for what, result in runs.items():
        assert result.returncode == EXIT_BAD_INPUT, (what, result.stderr[-2000:])
        assert "Traceback" not in result.stderr, what
        assert "starting Spark" not in result.stderr, what
    for what, result in settled.items():
        assert result.returncode == EXIT_OK, (what, result.stderr[-2000:])
        assert "nothing to do" in result.stdout + result.stderr, what
    # Refused (or settled) before any JVM: no run started java.
    assert not java_starts.exists(), java_starts.read_text()
    assert "no Delta table at" in runs["status"].stderr
    assert "checkpoint 1: it is already committed" in runs["abort (committed)"].stderr
    assert "checkpoint 3: it was aborted" in runs["commit (aborted)"].stderr
    assert "the sink has no such checkpoint (pending checkpoints: 2)" in (
        runs["abort (never was)"].stderr
    )
    assert "--kafka needs --topic" in runs["jobs/ingest.py"].stderr


def test_a_failed_check_ends_with_1_and_try_later_with_75(tables):
    down = lakesink("metastore", "status", "--port", str(free_port()))
    assert down.returncode == EXIT_CHECK_FAILED, down.stderr
    assert "no metastore server answers" in down.stderr

    gateway = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    unpushed = lakesink("metrics", tables["good"], "--push-gateway", gateway)
    assert unpushed.returncode == EXIT_TRY_LATER, unpushed.stderr[-2000:]
    assert "Traceback" not in unpushed.stderr


@pytest.mark.slow
def test_a_commit_that_fails_ends_with_75_and_leaves_its_checkpoint_pending(tables, tmp_path):
    from lakesink.ops.status import sink_status

    temp = {**os.environ, "TMPDIR": str(tmp_path)}  # where the JVM's output file goes
    failed = lakesink(
        "commit", tables["lost"], "--checkpoint", "2", "--yes", "--master", "local[1]", env=temp
    )
    assert failed.returncode == EXIT_TRY_LATER, failed.stderr[-3000:]
    assert "stays pending" in failed.stderr
    assert [t.checkpoint_id for t in sink_status(tables["lost"]).pending] == [2]
    # Spark's side of the failure is kept out of the way, in a file the command names.
    assert SPARK_BANNER not in failed.stderr
    (kept,) = tmp_path.glob("lakesink-spark-*.log")
    assert f"Spark's own output of this run (or run with --verbose): {kept}" in failed.stderr
    assert SPARK_BANNER in kept.read_text()


@pytest.mark.slow
def test_a_command_shows_sparks_own_output_only_with_verbose(tables, tmp_path):
    temp = {**os.environ, "TMPDIR": str(tmp_path)}
    view = ["checkpoint-view", tables["good"], "--checkpoint", "2", "--master", "local[1]"]
    quiet = lakesink(*view, "--name", "exits_quiet", env=temp)
    assert quiet.returncode == EXIT_OK, quiet.stderr[-3000:]
    assert SPARK_BANNER not in quiet.stderr and "WARN" not in quiet.stderr
    assert list(tmp_path.iterdir()) == []  # a run that succeeded leaves no output file
    verbose = lakesink(*view, "--name", "exits_verbose", "--verbose", env=temp)
    assert verbose.returncode == EXIT_OK, verbose.stderr[-3000:]
    assert SPARK_BANNER in verbose.stderr


def test_an_unexpected_failure_ends_with_70_and_its_trace(tables):
    damaged = lakesink("status", tables["damaged"])
    assert damaged.returncode == EXIT_SOFTWARE, damaged.stderr[-2000:]
    assert "failed unexpectedly" in damaged.stderr and "Traceback" in damaged.stderr


@pytest.mark.slow
def test_read_only_commands_on_s3_exit_0_every_time(spark, s3_server):
    """delta-rs's S3 client could abort a process at exit (status 134) after the command
    had printed its answer; run often enough, one such run showed up almost every time."""
    from s3_fixture import s3_uri

    from lakesink.delta.sink import DeltaSink

    path = s3_uri("exits") + "/orders"
    with DeltaSink.open(spark, path, schema="order_id BIGINT", view_name="exits_s3") as sink:
        sink.write(spark.createDataFrame([(1,)], "order_id BIGINT"))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    for _ in range(8):
        for command in ("status", "metrics"):
            done = lakesink(command, path)
            assert done.returncode == EXIT_OK, (command, done.returncode, done.stderr[-2000:])
            assert "terminate called" not in done.stderr
