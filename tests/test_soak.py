"""Concurrency soak on the cluster: two ingest jobs, a third writer, the vacuum job, readers.

Two ingest jobs run on the cluster (one core each) into two sinks that share one journal,
the first's table committing by MERGE, the second's by metadata (each table's mode, recorded
when the test creates it). In this process, at the same time: a third writer commits (by
MERGE, its table's way) and aborts transactions of its own in the first job's table, racing
the first job's MERGEs and releases, the vacuum logic runs over both tables in a loop, and
two readers query the committed views of both tables throughout. Bounded: each job has a fixed
number of files, the third writer a fixed number of transactions, the whole a deadline.

How the test knows nothing was lost, duplicated or shown too early: every reader checks
each snapshot it reads (no order id twice, no id only aborted transactions write, every
transaction the table's history says was published by then recorded in the journal as
pre-committed or later and never aborted, the snapshot's rows the rows those commits
published, no table ever shrinking); at the end each table holds exactly the ids of its
job's files and of the third writer's committed transactions, once each, every transaction a
reader ever saw is committed in the journal, the journal's row counts are the rows its
history says each transaction published, which add up to the committed rows, and the vacuum
job removed every aborted row. (No row names its transaction: format 5 keeps that in the
log, in the ``userMetadata`` of each commit.)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from cluster_fixture import SubmittedJob, submit_ingest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from servers.cluster import LocalCluster
from test_ingest_crash import generate

from lakesink import committed
from lakesink.core import TxnState
from lakesink.delta.sink import DeltaSink
from lakesink.jobs.ingest import ORDERS_SCHEMA
from lakesink.ops.vacuum import vacuum
from lakesink.streaming import recorded_batch
from lakesink.tables.history import read_history
from lakesink.tables.journal import Journal, TransactionStatus

pytestmark = pytest.mark.slow

# A bound on the concurrent phase, against a hang: the counts below end it first (in 392 s
# once on 2 cores, while the rest of the suite ran). A much slower machine can give itself
# more time with $LAKESINK_SOAK_DEADLINE_S.
DEADLINE_S = float(os.environ.get("LAKESINK_SOAK_DEADLINE_S", "600"))
FILES_PER_JOB, ORDERS_PER_JOB = 3, 1_500  # 3 checkpoints per job, one file each
WRITER_TXNS = 30  # at most, while the jobs run (3 at least); every third one is aborted
WRITER_ROWS = 50
WRITER_IDS = 500_000_000  # the third writer's committed ids start here
POISON_IDS = 900_000_000  # only ever written by transactions that are then aborted
JOBS = ("a", "b")
COMMITS = {"a": "merge", "b": "metadata"}  # each job's commit mode: the soak holds in both
# Pauses between a reader's rounds and the vacuum's: back to back, the four threads kept
# both cores busy and slowed the jobs they watch to a crawl (75 s per checkpoint).
READER_PAUSE_S, VACUUM_PAUSE_S = 1.0, 5.0


@dataclass
class Soak:
    """The shared state of the soak's threads, and the figures it reports."""

    spark: SparkSession
    tables: dict[str, str]  # sink id -> table path
    journal: str
    jobs_done: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    writer_ids: set[int] = field(default_factory=set)  # the third writer's committed ids
    writer_commits: int = 0
    writer_aborts: int = 0
    vacuum_runs: int = 0
    rows_vacuumed: int = 0
    snapshots_checked: int = 0
    seen_txns: set[str] = field(default_factory=set)  # every txn a reader saw visible
    conflicts_logged: int = 0

    def run(self, target: Callable[..., None], *args: object) -> threading.Thread:
        def guarded() -> None:
            try:
                target(*args)
            except BaseException as exc:
                self.errors.append(exc)
                self.done.set()

        thread = threading.Thread(target=guarded, name=target.__name__, daemon=True)
        thread.start()
        return thread

    # ---------------------------------------------------------------- the threads

    def third_writer(self, stop_at: float) -> None:
        """Commit and abort transactions in the first table, beside its ingest job."""
        session = self.spark.newSession()  # its own SQL conf (commit metadata)
        path = self.tables["orders_a"]
        sink = self._open(session, path)
        for number in range(1, WRITER_TXNS + 1):
            if self.done.is_set() or time.monotonic() > stop_at:
                break
            if number > 3 and self.jobs_done.is_set():
                break
            if number % 3 == 0:  # written, then the writer goes away: aborted on close
                sink.write(_orders(session, POISON_IDS + number * WRITER_ROWS))
                sink.close()
                self.writer_aborts += 1
                sink = self._open(session, path)
                continue
            first = WRITER_IDS + number * WRITER_ROWS
            sink.write(_orders(session, first))
            sink.notify_checkpoint_complete(sink.prepare_commit())
            self.writer_ids.update(range(first, first + WRITER_ROWS))
            self.writer_commits += 1
        sink.close()

    def vacuum_loop(self) -> None:
        """The vacuum job's logic over both tables, again and again, until the end."""
        session = self.spark.newSession()
        while not self.done.is_set():
            self.vacuum_once(session)
            self.done.wait(VACUUM_PAUSE_S)

    def vacuum_once(self, session: SparkSession) -> None:
        for path in self.tables.values():
            report = vacuum(session, path)
            self.vacuum_runs += 1
            self.rows_vacuumed += report.rows_removed

    def reader(self) -> None:
        """Read each table's latest snapshot through the committed view, and check it."""
        session = self.spark.newSession()
        last_rows: dict[str, int] = {}
        while not self.done.is_set():
            for sink_id, path in self.tables.items():
                rows = self.check_snapshot(session, sink_id, path)
                if rows < last_rows.get(sink_id, 0):
                    self.violations.append(f"{sink_id} shrank from {last_rows[sink_id]} to {rows}")
                last_rows[sink_id] = rows
            self.done.wait(READER_PAUSE_S)

    def check_snapshot(self, session: SparkSession, sink_id: str, path: str) -> int:
        from delta.tables import DeltaTable

        version = DeltaTable.forPath(session, path).history(1).first()["version"]
        ids = Counter(r.order_id for r in committed(session, path, version=version).collect())
        # The transactions visible in the snapshot: those its commits up to it published.
        published = _published_rows(path, up_to=version)
        txns = set(published)
        # Read after the snapshot: a transaction visible in it was pre-committed before.
        states = {
            t.txn_id: t.state for t in Journal(self.journal, create=False).transactions(sink_id)
        }
        where = f"{sink_id} version {version}"
        twice = [i for i, n in ids.items() if n > 1]
        poison = [i for i in ids if i >= POISON_IDS]
        unrecorded = [
            t
            for t in txns
            if states.get(t)
            not in (TxnState.PRE_COMMITTED, TxnState.COMMITTING, TxnState.COMMITTED)
        ]
        if twice:
            self.violations.append(f"{where}: ids visible twice {twice[:5]}")
        if poison:
            self.violations.append(f"{where}: ids of aborted transactions visible {poison[:5]}")
        if unrecorded:
            self.violations.append(
                f"{where}: visible transactions not pre-committed or committed in the journal: "
                f"{[(t, states.get(t)) for t in unrecorded]}"
            )
        if sum(ids.values()) != sum(published.values()):
            self.violations.append(
                f"{where}: {sum(ids.values())} rows visible, but its commits published "
                f"{sum(published.values())}"
            )
        self.seen_txns |= txns
        self.snapshots_checked += 1
        return sum(ids.values())

    def _open(self, session: SparkSession, path: str) -> DeltaSink:
        return DeltaSink.open(
            session,
            path,
            writer_id="third",
            journal_path=self.journal,
            view_name="soak_third",
        )


def _orders(session: SparkSession, first: int) -> DataFrame:
    return session.range(first, first + WRITER_ROWS).select(
        F.col("id").alias("order_id"),
        F.lit("third-writer").alias("customer"),
        F.lit(1.0).alias("amount"),
        F.current_timestamp().alias("ordered_at"),
    )


def test_two_jobs_a_third_writer_vacuum_and_readers_keep_exactly_once(
    spark, spark_cluster: LocalCluster, tmp_path: Path, record_property
):
    tables_dir = tmp_path / "tables"
    tables = {f"orders_{job}": str(tables_dir / f"orders_{job}") for job in JOBS}
    journal = str(tables_dir / "_lakesink_journal")
    # Created up front: two jobs that both find no journal would both try to create it.
    # Each table records its commit mode, which its job and the third writer then use.
    for job, (sink_id, path) in zip(JOBS, tables.items(), strict=True):
        DeltaSink.open(
            spark,
            path,
            schema=ORDERS_SCHEMA,
            journal_path=journal,
            view_name=f"soak_{sink_id}",
            commit=COMMITS[job],
        ).close()
    for job in JOBS:
        generate(tmp_path / job, ORDERS_PER_JOB, FILES_PER_JOB)

    started = time.monotonic()
    jobs = {job: _submit(spark_cluster, tmp_path, job, tables, journal) for job in JOBS}
    soak = Soak(spark, tables, journal)
    deadline = started + DEADLINE_S
    with _counting_conflicts() as conflicts:
        threads = [
            soak.run(soak.third_writer, deadline),
            soak.run(soak.vacuum_loop),
            soak.run(soak.reader),
            soak.run(soak.reader),
        ]
        overran = not _await_jobs(jobs.values(), soak, deadline)
        soak.jobs_done.set()
        threads[0].join(timeout=max(deadline - time.monotonic(), 1.0))
        soak.done.set()
        for thread in threads:
            thread.join(timeout=120)
        soak.vacuum_once(spark)  # once more, after the last abort
    if overran:
        for running in jobs.values():
            running.kill_driver()
    soak.conflicts_logged = conflicts.count
    elapsed = time.monotonic() - started
    figures = _figures(spark, soak, tmp_path, elapsed)
    summary = ", ".join(f"{k} {v}" for k, v in figures.items())
    record_property("figures", summary)  # printed in the terminal summary, xdist or not
    print(f"soak figures: {summary}")

    assert not soak.errors, f"a soak thread failed: {soak.errors!r}"
    assert not overran, f"the ingest jobs did not finish within {DEADLINE_S:.0f}s"
    for name, running in jobs.items():
        assert running.process.returncode == 0, f"job {name}:\n{running.tail()}"
    assert not soak.violations, "\n".join(soak.violations[:20])
    assert soak.snapshots_checked >= 4 and soak.vacuum_runs >= 2  # they really ran
    assert soak.writer_commits >= 2 and soak.writer_aborts >= 1
    jobs_ids = set(range(1, ORDERS_PER_JOB + 1))
    _assert_exactly(spark, tables["orders_a"], jobs_ids | soak.writer_ids)
    _assert_exactly(spark, tables["orders_b"], jobs_ids)
    final = {
        t.txn_id: t
        for sink_id in tables
        for t in Journal(journal, create=False).transactions(sink_id)
    }
    seen_not_committed = [t for t in soak.seen_txns if final[t].state is not TxnState.COMMITTED]
    assert not seen_not_committed, f"readers saw transactions never committed: {seen_not_committed}"
    for sink_id, path in tables.items():
        _assert_journal_counts_rows(
            spark, path, [t for t in final.values() if t.sink_id == sink_id]
        )
        raw = spark.read.format("delta").load(path)
        assert raw.where(F.col("order_id") >= POISON_IDS).count() == 0, "aborted rows left"


def _submit(
    cluster: LocalCluster, tmp_path: Path, job: str, tables: dict[str, str], journal: str
) -> SubmittedJob:
    arguments = [
        "--landing", str(tmp_path / job / "landing"),
        "--table", tables[f"orders_{job}"],
        "--journal", journal,
        "--state", str(tmp_path / job / "state"),
        "--job-id", f"soak-{job}",
        "--files-per-checkpoint", "1",
        "--commit", COMMITS[job],
    ]  # fmt: skip
    return submit_ingest(
        cluster,
        tmp_path,
        *arguments,
        conf={"spark.cores.max": "1"},  # one executor each: both jobs run at once
        name=f"ingest-{job}",
    )


def _await_jobs(jobs: Iterable[SubmittedJob], soak: Soak, deadline: float) -> bool:
    """Wait for the ingest jobs to end; False if the deadline came first."""
    while time.monotonic() < deadline:
        if all(job.process.poll() is not None for job in jobs) or soak.errors:
            return True
        time.sleep(0.5)
    return False


def _assert_exactly(spark: SparkSession, path: str, expected: set[int]) -> None:
    ids = Counter(r.order_id for r in committed(spark, path).collect())
    assert set(ids) == expected, (
        f"{path}: {len(expected - set(ids))} ids lost, {len(set(ids) - expected)} unexpected"
    )
    assert max(ids.values()) == 1, f"{path}: ids committed twice"


def _assert_journal_counts_rows(
    spark: SparkSession, path: str, statuses: Iterable[TransactionStatus]
) -> None:
    visible = +_published_rows(path)  # the transactions that published rows
    journaled = {t.txn_id: t.row_count for t in statuses if t.state is TxnState.COMMITTED}
    assert journaled == dict(visible), f"{path}: the journal's row counts are not the rows"
    rows = committed(spark, path).count()
    assert rows == sum(visible.values()), f"{path}: {rows} rows, its commits published others"


def _published_rows(path: str, *, up_to: int | None = None) -> Counter:
    """Per transaction, the rows its commits published, from the table's history (up to
    version ``up_to``): the ``rows`` of its lakesink "commit" entries."""
    published: Counter = Counter()
    for entry in read_history(path, up_to=up_to):
        if entry.lakesink == "commit":
            for txn in entry.txn_ids:
                published[txn] += entry.rows or 0
    return published


def _figures(spark: SparkSession, soak: Soak, tmp_path: Path, elapsed: float) -> dict:
    events = spark.read.format("delta").load(soak.journal)
    latency = (
        events.groupBy("txn_id")
        .agg(
            F.min(F.when(F.col("state") == "pre_committed", F.col("event_time"))).alias("pre"),
            F.max(F.when(F.col("state") == "committed", F.col("event_time"))).alias("done"),
        )
        .where("pre IS NOT NULL AND done IS NOT NULL")
        .select(F.max(F.col("done").cast("double") - F.col("pre").cast("double")))
        .first()[0]
    )
    retried = events.where("state = 'committing' AND attempt > 1").count()
    checkpoints = {  # batches in each query's commit log (ids from 0)
        job: recorded_batch(spark, str(tmp_path / job / "state" / f"soak-{job}")) + 1
        for job in JOBS
    }
    rows = {sink: committed(spark, path).count() for sink, path in soak.tables.items()}
    return {
        "wall_s": round(elapsed, 1),
        "checkpoints_committed": {**checkpoints, "third_writer": soak.writer_commits},
        "aborted_by_third_writer": soak.writer_aborts,
        "rows_committed": rows,
        "conflicts_retried": {"commits (journal)": retried, "logged": soak.conflicts_logged},
        "max_commit_latency_s": round(latency or 0.0, 2),
        "reader_snapshots_checked": soak.snapshots_checked,
        "vacuum_runs": soak.vacuum_runs,
        "rows_vacuumed": soak.rows_vacuumed,
    }


class _ConflictCounter(logging.Handler):
    """Counts the write conflicts lakesink retried in this process (commits and vacuum)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "conflicted" in record.getMessage():
            self.count += 1


@contextmanager
def _counting_conflicts() -> Iterator[_ConflictCounter]:
    counter = _ConflictCounter()
    logger = logging.getLogger("lakesink.spark.settings")  # where retry_on_conflict logs
    level = logger.level
    logger.addHandler(counter)
    logger.setLevel(logging.INFO)
    try:
        yield counter
    finally:
        logger.removeHandler(counter)
        logger.setLevel(level)
