"""The ingest job (a streaming query) on a real Spark standalone cluster: task retries,
speculation, dead JVMs.

The cluster is a master and two 1-core workers, each its own JVM (``spark_cluster``), and
the job runs through ``spark-submit`` as the clusters guide says, with aggressive speculative
execution. Faults are real: in one job run, a whole worker JVM is SIGKILLed while it runs
a task of micro-batch 1's pre-commit write, an executor while it runs a task of batch 2's
commit MERGE of the orders sink, and the driver in the middle of batch 2's MERGE of the
totals sink, after the orders sink committed; both tables are then switched to the metadata
commit (``ALTER TABLE ... SET TBLPROPERTIES ('lakesink.commitMode' = 'metadata')``, as an
operator does while no writer runs) and the job restarted with ``--commit metadata``, which
publishes what the killed MERGE left pending. One run for all of them, because a job start
on the cluster costs more than any test's checks; one such run with the tables, journal and
checkpoint location on local disk, and one with them on the S3 server (``s3_fixture``).

How the tests know nothing was lost or duplicated: every generated order id is in the
committed view exactly once and the totals table sums to the number of orders, and each
checkpoint's committed rows (the MERGE stamps each row with its checkpoint) are the rows
the journal committed for its transaction; and that
the fault really hit the intended work: the Spark event log shows a task attempt of that
very stage failing with ``ExecutorLostFailure`` and the same task succeeding afterwards
(or, for the driver, the journal shows the commit decided but not done when it died).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from cluster_fixture import (
    SubmittedJob,
    lost_task_attempts,
    stage_descriptions,
    stage_is,
    submit_ingest,
)
from s3_fixture import s3_uri
from servers.cluster import LocalCluster, submit_command
from test_ingest_crash import generate

from lakesink import committed
from lakesink.core import TxnState
from lakesink.jvm import delta_jars
from lakesink.storage.location import join
from lakesink.storage.options import StorageOptions
from lakesink.streaming import recorded_batch
from lakesink.tables.format import CHECKPOINT_ID, COMMIT_MODE_PROPERTY, VISIBLE
from lakesink.tables.journal import Journal

ORDERS, FILES = 30_000, 6  # three micro-batches (0, 1, 2) of two files, 10,000 orders each
CLUSTER_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "clusters.md"
# The insert-only MERGE's stage that writes the published rows into new files: its job's
# description ends so (the job that lists the files it reads goes on, ": Filtering files").
MERGE_INSERTS = "MERGE operation - writing new files for only inserts"


def merge_write(stage: dict) -> bool:
    return f"{stage.get('name', '')} {stage.get('description', '')}".endswith(MERGE_INSERTS)


# Copies launch as soon as a task runs longer than the stage's first finished one (0.1 s
# at least); single-task stages get one after 0.2 s. The efficiency check is off, or Spark
# only copies tasks that process records slower than average.
SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "50ms",
    "spark.speculation.quantile": "0.1",
    "spark.speculation.multiplier": "1.0",
    "spark.speculation.minTaskRuntime": "100ms",
    "spark.speculation.task.duration.threshold": "200ms",
    "spark.speculation.efficiency.enabled": "false",
}


def ingest_arguments(work: Path, lake: str) -> list[str]:
    """The job over ``work``'s landing folder, its tables and state in ``lake``."""
    return [
        "--landing", str(work / "landing"),
        "--table", join(lake, "orders"),
        "--totals-table", join(lake, "totals"),
        "--state", join(lake, "state"),
        "--files-per-checkpoint", "2",
    ]  # fmt: skip


def assert_every_order_once(spark, lake: str, orders: int = ORDERS) -> None:
    """Every order committed once, both sinks, and the journal's row counts are the rows."""
    ids = Counter(r.order_id for r in committed(spark, join(lake, "orders")).collect())
    assert set(ids) == set(range(1, orders + 1)), f"{orders - len(ids)} orders lost"
    duplicated = {i: n for i, n in ids.items() if n > 1}
    assert not duplicated, f"orders committed more than once: {list(duplicated.items())[:10]}"
    totals = committed(spark, join(lake, "totals")).groupBy().sum("orders").first()[0]
    assert totals == orders  # the second sink of the same checkpoints, also exactly once
    # No row names its transaction (format 5); each committed row of the orders sink (every
    # one published by a MERGE in its first run) carries its checkpoint, and the sink's one
    # writer has one transaction per checkpoint.
    visible = Counter(
        r[CHECKPOINT_ID]
        for r in spark.read.format("delta").load(join(lake, "orders")).where(VISIBLE).collect()
    )
    journal = Journal(join(lake, "_lakesink_journal"), create=False)
    committed_txns = [t for t in journal.transactions("orders") if t.state is TxnState.COMMITTED]
    journaled = {t.checkpoint_id: t.row_count for t in committed_txns}
    assert len(journaled) == len(committed_txns), "a checkpoint with two committed transactions"
    assert journaled == dict(visible), "the journal's row counts are not the committed rows"


def assert_lost_task_retried(events: list[dict], *words: str) -> dict:
    """A task of a stage described by ``words`` died with its executor and then succeeded."""
    described = stage_descriptions(events)
    lost = [
        e
        for e in lost_task_attempts(events)
        if all(word in described[e["Stage ID"]] for word in words)
    ]
    assert lost, f"no task of a {' '.join(words)!r} stage was lost: {lost_task_attempts(events)}"
    for attempt in lost:
        # By partition: a lost shuffle output makes Spark resubmit the stage (a new stage
        # attempt, whose tasks are indexed afresh) rather than retry the task alone.
        stage, partition = attempt["Stage ID"], attempt["Task Info"]["Partition ID"]
        assert any(
            e["Event"] == "SparkListenerTaskEnd"
            and (e["Stage ID"], e["Task Info"]["Partition ID"]) == (stage, partition)
            and e["Task End Reason"]["Reason"] == "Success"
            for e in events
        ), f"partition {partition} of stage {stage} never succeeded after its executor died"
    return lost[0]


def test_the_guide_runs_the_cluster_the_way_the_tests_do():
    """The cluster guide's commands are the fixture's: same start command, same spark-submit
    flags (the guide's own run of them is tests/test_docs.py's)."""
    text = CLUSTER_GUIDE.read_text()
    assert "python tests/servers/cluster.py start --dir" in text
    assert "python tests/servers/cluster.py stop --dir" in text
    lines = re.sub(r"\\\n\s*", " ", text).splitlines()
    (submit,) = [line[2:] for line in lines if line.startswith("$ spark-submit")]
    words = shlex.split(submit.replace('"$(lakesink jars --files)"', "JARS"))
    master = words[words.index("--master") + 1]
    application = words.index("$(lakesink app)")
    assert words[application + 1] == "ingest"
    expected = submit_command(master, "app")[1:-1]
    files = ",".join(str(jar) for jar in delta_jars())
    assert [files if w == "JARS" else w for w in words[1:application]] == expected
    assert "export PYSPARK_PYTHON=" in text  # the executors' and the driver's Python


@dataclass(frozen=True)
class FaultedRun:
    """One job run on the cluster with three faults, then its restart."""

    lake: str  # where its tables and state are: local disk, or the S3 server
    job: SubmittedJob
    worker_victim: dict  # its whole worker JVM killed during batch 1's append
    merge_victim: dict  # killed alone during batch 2's commit MERGE
    last_checkpoint_at_kill: int  # in Spark's commit log when the driver died in 2's MERGE
    states_at_kill: dict[str, TxnState]  # sink id -> its batch 2 transaction's, then
    restarted: SubmittedJob


@pytest.fixture(scope="module", params=["local", "s3"])
def faulted_run(spark, spark_cluster: LocalCluster, tmp_path_factory, request) -> FaultedRun:
    """The faulted job with its tables and checkpoint location on local disk or on S3."""
    work = tmp_path_factory.mktemp("faulted")
    generate(work, ORDERS, FILES)
    on_s3 = request.param == "s3"
    lake = s3_uri("faulted") if on_s3 else str(work)
    storage = StorageOptions.from_env() if on_s3 else None
    job = submit_ingest(
        spark_cluster,
        work,
        *ingest_arguments(work, lake),
        conf=SPECULATION,
        storage=storage,
        env={"LAKESINK_HOLD_AT": "before_append@1,after_record@2,after_publish@2"},
    )
    try:
        # The orders sink writes first: its append of batch 1 is the only "save" stage
        # between its before_append and after_append markers.
        with job.stepped_until(
            stage_is("save at"), held="before_append@1", before="after_append@1.1"
        ) as busy:
            worker_victim = busy[0]
            host = worker_victim["hostPort"].rsplit(":", 1)[0]
            (worker,) = [w for w in spark_cluster.workers if w.host == host]
            spark_cluster.kill_worker(worker.index)  # the worker JVM and its executor
        spark_cluster.revive()
        # Batch 2 is in Spark's commit log: its commits come next, orders first.
        with job.stepped_until(
            merge_write, held="after_record@2", before="after_publish@2.1"
        ) as busy:
            merge_victim = busy[0]
            os.kill(job.executor_pid(merge_victim), signal.SIGKILL)  # its worker lives on
        # The orders sink committed batch 2: the totals sink's commit comes next.
        with job.stepped_until(merge_write, held="after_publish@2", before="after_publish@2.2"):
            job.kill_driver()
    except BaseException:
        # A job left held at a step would keep both workers' cores, and the next cluster
        # test's jobs would wait for them until their deadline.
        if job.process.poll() is None:
            job.kill_driver()
        raise
    finally:
        spark_cluster.revive()
    last = recorded_batch(spark, join(lake, "state", "ingest"))
    journal = Journal(join(lake, "_lakesink_journal"), create=False)
    states = {
        sink: t.state
        for sink in ("orders", "totals")
        for t in journal.transactions(sink)
        if t.checkpoint_id == 2
    }
    # The other commit mode finishes what the MERGE left: each table switched to it first
    # (no writer runs), as a table refuses a commit mode other than its own.
    for sink in ("orders", "totals"):
        spark.sql(
            f"ALTER TABLE delta.`{join(lake, sink)}` "
            f"SET TBLPROPERTIES ('{COMMIT_MODE_PROPERTY}' = 'metadata')"
        )
    restarted = submit_ingest(
        spark_cluster,
        work,
        *ingest_arguments(work, lake),
        "--commit",
        "metadata",
        name="restarted",
        storage=storage,
    )
    assert restarted.wait() == 0, restarted.tail()
    return FaultedRun(
        lake=lake,
        job=job,
        worker_victim=worker_victim,
        merge_victim=merge_victim,
        last_checkpoint_at_kill=last,
        states_at_kill=states,
        restarted=restarted,
    )


@pytest.mark.slow
def test_speculative_copies_on_both_workers_duplicate_no_order(
    spark, faulted_run: FaultedRun, record_property
):
    assert_every_order_once(spark, faulted_run.lake)
    events = faulted_run.job.event_log()
    hosts = {
        e["Executor Info"]["Host"] for e in events if e["Event"] == "SparkListenerExecutorAdded"
    }
    assert len(hosts) == 2, f"the job did not run on both workers: {hosts}"
    copies = [
        e
        for e in events
        if e["Event"] == "SparkListenerTaskStart" and e["Task Info"]["Speculative"]
    ]
    described = stage_descriptions(events)
    # Tasks that write the table's data files: the pre-commit's append ("save") and the
    # commit's MERGE inserts. Which of them Spark copies depends on their timing.
    in_writes = [
        e
        for e in copies
        if "save at" in described[e["Stage ID"]] or described[e["Stage ID"]].endswith(MERGE_INSERTS)
    ]
    assert in_writes, f"no speculative copy of a Delta write task: {len(copies)} elsewhere"
    record_property(
        "figures", f"{len(copies)} speculative task copies, {len(in_writes)} of Delta write tasks"
    )


@pytest.mark.slow
def test_the_job_starts_from_lakesinks_cached_jars_without_ivy_or_sparks_info_lines(
    faulted_run: FaultedRun,
):
    for job in (faulted_run.job, faulted_run.restarted):
        lines = job.log_file.read_text(errors="replace").splitlines()
        ivy = [line for line in lines if ":: resolv" in line or "ivy" in line.lower()]
        assert not ivy, ivy[:5]  # no resolution, no download: the jars are files
        # spark.log.level applies once SparkContext has named Spark's, the OS's and Java's
        # versions: those three lines, and no other INFO line of Spark's (hundreds before).
        spark_info = [line for line in lines if " INFO " in line and "lakesink" not in line]
        assert len(spark_info) == 3 and "Running Spark version" in spark_info[0], spark_info[:5]


@pytest.mark.slow
def test_worker_killed_during_the_pre_commit_write(spark, faulted_run: FaultedRun):
    assert_every_order_once(spark, faulted_run.lake)
    lost = assert_lost_task_retried(faulted_run.job.event_log(), "save at")
    assert lost["Task End Reason"]["Executor ID"] == faulted_run.worker_victim["id"]


@pytest.mark.slow
def test_executor_killed_during_the_commit_merge(spark, faulted_run: FaultedRun):
    assert_every_order_once(spark, faulted_run.lake)
    lost = assert_lost_task_retried(faulted_run.job.event_log(), MERGE_INSERTS)
    assert lost["Task End Reason"]["Executor ID"] == faulted_run.merge_victim["id"]


@pytest.mark.slow
def test_driver_killed_during_the_commit_merge_then_restarted(spark, faulted_run: FaultedRun):
    # It died inside the commit: batch 2 was in Spark's commit log and its orders committed,
    # its totals not yet.
    assert faulted_run.job.process.returncode == -signal.SIGKILL
    assert faulted_run.last_checkpoint_at_kill == 2
    assert faulted_run.states_at_kill["orders"] is TxnState.COMMITTED
    assert faulted_run.states_at_kill["totals"] is not TxnState.COMMITTED
    # The restart finished that commit, by metadata: every order once.
    assert faulted_run.restarted.process.returncode == 0
    assert_every_order_once(spark, faulted_run.lake)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{join(faulted_run.lake, 'totals')}`")
    published = [
        row
        for row in history.collect()
        if row.operation == "WRITE" and '"lakesink": "commit"' in (row.userMetadata or "")
    ]
    assert published, "the restart did not commit the totals by metadata"
