"""The vacuum job on a real Spark session, with real lakesink tables built by DeltaSink."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_metrics import samples

from lakesink import Table, committed
from lakesink.core import TxnState
from lakesink.delta.journal import journal_events
from lakesink.delta.sink import DeltaSink
from lakesink.delta.vacuum import RETENTION_CHECK_CONF
from lakesink.errors import ConfigurationError, TableNotFoundError
from lakesink.ops.compact import MAX_FILE_BYTES, MIN_FILE_BYTES, file_target
from lakesink.ops.vacuum import vacuum
from lakesink.tables.format import CHECKPOINT_ID, PENDING, VISIBLE
from lakesink.tables.history import read_history
from lakesink.tables.journal import Journal, JournalEntry, default_journal_path

SCHEMA = "order_id BIGINT, item STRING"
HOUR_MS = 3_600_000
JOB = Path(__file__).resolve().parents[1] / "jobs" / "vacuum.py"


class Clock:
    """A clock the test sets; ``millis()`` is all DeltaSink and vacuum read."""

    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def millis(self) -> int:
        return self.now_ms


@pytest.fixture
def table(tmp_path) -> Path:
    return tmp_path / "orders"


def open_sink(spark, table: Path, **options) -> DeltaSink:
    return DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_vacuum", **options)


def write(spark, sink: DeltaSink, ids) -> str:
    """Write rows into the sink's open transaction; return that transaction's id."""
    sink.write(spark.createDataFrame([(i, f"item-{i}") for i in ids], SCHEMA))
    current = sink.state.current
    assert current is not None
    return current.handle.txn_id


def abort_one(spark, table: Path, ids, **options) -> str:
    """A writer that writes and closes without a checkpoint: its transaction is aborted."""
    sink = open_sink(spark, table, **options)
    txn_id = write(spark, sink, ids)
    sink.close()
    return txn_id


def rows_by_txn(spark, table: Path) -> dict[str, set[tuple[int, bool]]]:
    """Each transaction's rows, as (order id, visible). A masked row's transaction is its
    pending partition; a committed row's is the one the table's history says published its
    checkpoint (the MERGE stamps each row it publishes with it; the tests here commit one
    transaction per checkpoint)."""
    published: dict[int, set[str]] = {}
    for entry in read_history(str(table)):
        if entry.lakesink == "commit" and entry.rows:
            published.setdefault(entry.checkpoint_id, set()).update(entry.txn_ids)
    found: dict[str, set[tuple[int, bool]]] = {}
    for row in spark.read.format("delta").load(str(table)).collect():
        if row[VISIBLE]:
            (txn,) = published[row[CHECKPOINT_ID]]
        else:
            txn = row[PENDING]
        found.setdefault(txn, set()).add((row.order_id, row[VISIBLE]))
    return found


def journal_of(table: Path) -> Journal:
    return Journal(default_journal_path(str(table)), create=False)


def states(spark, table: Path) -> dict[str, TxnState]:
    return {s.txn_id: s.state for s in journal_of(table).transactions(table.name)}


def aborted_details(spark, table: Path, txn_id: str) -> list[str]:
    events = journal_events(spark, default_journal_path(str(table)))
    found = events.where(f"txn_id = '{txn_id}' AND state = 'aborted'").collect()
    return sorted(e.detail for e in found)


def versions(spark, table: Path) -> tuple[int, int]:
    def latest(path: str) -> int:
        return spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first().version

    return latest(str(table)), latest(default_journal_path(str(table)))


def test_aborted_rows_and_their_files_go(spark, table):
    txn = abort_one(spark, table, [1, 2])
    files = list(table.glob(f"{VISIBLE}=false/{PENDING}={txn}/*.parquet"))
    size = sum(f.stat().st_size for f in files)
    assert files

    report = vacuum(spark, str(table), retain_hours=0, allow_short_retention=True)

    assert report.txn_ids == (txn,) and report.transactions[0].rows == 2
    assert report.rows_removed == 2 and not report.dry_run
    assert report.files_removed == len(files) > 0
    assert report.bytes_removed == size > 0
    assert not any(f.exists() for f in files)
    assert not list(table.glob(f"{VISIBLE}=false/{PENDING}={txn}/*.parquet"))
    assert rows_by_txn(spark, table) == {}
    details = aborted_details(spark, table, txn)
    assert len(details) == 2  # the sink's abort, then the vacuum's
    assert [d for d in details if d.startswith("vacuumed:")] == ["vacuumed: 2 rows removed"]
    assert spark.conf.get(RETENTION_CHECK_CONF, None) is None  # the check is back on


def test_committed_pre_committed_and_recent_open_rows_stay(spark, table):
    sink = open_sink(spark, table, writer_id="a")
    write(spark, sink, [1, 2])
    sink.notify_checkpoint_complete(sink.prepare_commit())  # committed
    write(spark, sink, [3])
    sink.prepare_commit()  # pre-committed, never notified: recovery would commit it
    write(spark, sink, [4])  # open, seconds old
    dead = abort_one(spark, table, [9], writer_id="b")
    before = rows_by_txn(spark, table)

    report = vacuum(spark, str(table))

    assert report.txn_ids == (dead,) and report.rows_removed == 1
    after = rows_by_txn(spark, table)
    assert after == {txn: found for txn, found in before.items() if txn != dead}
    assert sorted(after.values(), key=min) == [
        {(1, True), (2, True)},
        {(3, False)},
        {(4, False)},
    ]
    assert sorted(r.order_id for r in committed(spark, str(table)).collect()) == [1, 2]


def test_an_expired_open_transaction_is_marked_aborted_and_removed(spark, table):
    clock = Clock()
    sink = open_sink(spark, table, clock=clock)
    old_pre_committed = write(spark, sink, [1])
    sink.prepare_commit()  # as old as the open one, but never removed
    old_open = write(spark, sink, [2])
    sink._release()  # the writer dies (its lock goes), leaving the open transaction behind

    clock.now_ms += 23 * HOUR_MS  # not expired yet
    assert vacuum(spark, str(table), clock=clock, dry_run=True).transactions == ()

    clock.now_ms += 2 * HOUR_MS
    report = vacuum(spark, str(table), clock=clock)

    assert report.expired_txn_ids == (old_open,) and report.rows_removed == 1
    assert states(spark, table) == {
        old_pre_committed: TxnState.PRE_COMMITTED,
        old_open: TxnState.ABORTED,
    }
    assert aborted_details(spark, table, old_open) == [
        "expired by vacuum after 25.0 h",
        "vacuumed: 1 rows removed",
    ]
    assert rows_by_txn(spark, table) == {old_pre_committed: {(1, False)}}


def test_an_old_open_transaction_of_a_live_writer_is_not_expired(spark, table):
    clock = Clock()
    sink = open_sink(spark, table, clock=clock)
    slow = write(spark, sink, [1, 2])
    clock.now_ms += 25 * HOUR_MS

    report = vacuum(spark, str(table), clock=clock)

    # The writer still runs, so it may still pre-commit: expiring it would lose its rows.
    assert report.transactions == () and report.skipped_txn_ids == (slow,)
    assert states(spark, table) == {slow: TxnState.OPEN}
    sink.notify_checkpoint_complete(sink.prepare_commit())
    assert sorted(r.order_id for r in committed(spark, str(table)).collect()) == [1, 2]
    assert states(spark, table) == {slow: TxnState.COMMITTED}
    sink.close()


def test_dry_run_changes_nothing_yet_reports_the_same_numbers(spark, table):
    clock = Clock()
    aborted = abort_one(spark, table, [1, 2], writer_id="a", clock=clock)
    gone = open_sink(spark, table, writer_id="b", clock=clock)
    expiring = write(spark, gone, [3])
    gone._release()
    clock.now_ms += 25 * HOUR_MS
    before = versions(spark, table), rows_by_txn(spark, table), states(spark, table)
    options = dict(retain_hours=0, allow_short_retention=True, clock=clock)

    dry = vacuum(spark, str(table), dry_run=True, **options)

    assert (versions(spark, table), rows_by_txn(spark, table), states(spark, table)) == before
    assert dry.dry_run and set(dry.txn_ids) == {aborted, expiring}
    assert dry.expired_txn_ids == (expiring,)
    assert dry.rows_removed == 3 and dry.files_removed >= 2 and dry.bytes_removed > 0

    real = vacuum(spark, str(table), **options)

    # The same report, but for what compaction did (the dry run counts the files it would
    # compact, the run also what it rewrote).
    assert replace(dry, dry_run=False, compaction=real.compaction) == real
    assert [(c.what, c.files_before) for c in dry.compaction] == [
        (c.what, c.files_before) for c in real.compaction
    ]
    assert rows_by_txn(spark, table) == {}


def test_a_second_run_removes_nothing(spark, table):
    txn = abort_one(spark, table, [1])
    first = vacuum(spark, str(table))

    second = vacuum(spark, str(table))

    assert first.rows_removed == 1 and first.txn_ids == (txn,)
    assert second.rows_removed == 0 and second.transactions == ()
    assert [d for d in aborted_details(spark, table, txn) if d.startswith("vacuumed:")] == [
        "vacuumed: 1 rows removed"
    ]


def test_vacuum_while_another_writer_appends_and_commits_loses_nothing(spark, table):
    live = open_sink(spark, table, writer_id="live")
    for ids in (range(5), range(5, 10)):  # two files to compact in the committed partition
        write(spark, live, ids)
        live.notify_checkpoint_complete(live.prepare_commit())
    dead = abort_one(spark, table, [-1, -2], writer_id="dead")
    before = {r.order_id for r in committed(spark, str(table)).collect()}
    appended: list[int] = []
    errors: list[BaseException] = []
    writing, vacuumed = threading.Event(), threading.Event()

    def ingest() -> None:
        batch = 100
        try:
            while not vacuumed.is_set():
                write(spark, live, range(batch, batch + 5))
                writing.set()  # its first append landed; the vacuum starts now
                live.notify_checkpoint_complete(live.prepare_commit())
                appended.extend(range(batch, batch + 5))
                batch += 5
        except BaseException as exc:
            errors.append(exc)
            writing.set()

    writer = threading.Thread(target=ingest)
    writer.start()
    try:
        assert writing.wait(timeout=600)
        start = versions(spark, table)[0]
        report = vacuum(spark, str(table), compact_min_files=2)
        end = versions(spark, table)[0]
    finally:
        vacuumed.set()
        writer.join()

    assert errors == []
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where(
        f"version > {start} AND version <= {end}"
    )
    operations = {r.operation for r in history.collect()}
    assert {"DELETE", "OPTIMIZE", "VACUUM END"} <= operations
    assert operations & {"WRITE", "MERGE"}, "the writer committed nothing while vacuum ran"
    assert report.txn_ids == (dead,) and report.rows_removed == 2
    after = sorted(r.order_id for r in committed(spark, str(table)).collect())
    assert after == sorted([*before, *appended])
    assert dead not in rows_by_txn(spark, table)
    live.close()


@pytest.mark.slow
def test_vacuum_compacts_the_committed_rows_and_the_journal_unless_told_not_to(spark, table):
    sink = open_sink(spark, table)
    for ids in ([1, 2], [3], [4, 5]):
        write(spark, sink, ids)
        sink.notify_checkpoint_complete(sink.prepare_commit())
    write(spark, sink, [6])
    pending = sink.prepare_commit()  # its file is left alone
    journal = default_journal_path(str(table))
    before = rows_by_txn(spark, table)
    committed_files = list(table.glob(f"{VISIBLE}=true/*/*.parquet"))
    assert len(committed_files) >= 3

    metrics = table.parent / "vacuum.prom"
    skipped = run_job(
        *("--table", str(table), "--no-compact", "--json", "--master", "local[1]"),
        *("--metrics-file", str(metrics)),
    )
    assert skipped.returncode == 0, skipped.stderr
    ran = json.loads(skipped.stdout)
    assert ran["compaction"] == []
    # The run's figures, for Prometheus' textfile collector, are the report's.
    figures = samples(metrics.read_text(), sink=ran["sink_id"], table=ran["table_path"])
    assert figures["lakesink_vacuum_last_run_files_removed"] == ran["files_removed"]
    assert figures["lakesink_vacuum_last_run_bytes_removed"] == ran["bytes_removed"]
    assert figures["lakesink_vacuum_last_run_files_compacted"] == 0
    assert figures["lakesink_vacuum_last_run_duration_seconds"] > 0
    # Three committed files are below the default threshold: nothing to compact.
    assert [c.what for c in vacuum(spark, str(table), dry_run=True).compaction] == ["journal"]
    report = vacuum(spark, str(table), compact_min_files=2)

    (rows_part, journal_part) = report.compaction
    assert (rows_part.what, journal_part.what) == ("committed rows", "journal")
    assert rows_part.files_before == len(committed_files)
    assert rows_part.files_removed == len(committed_files) and rows_part.files_added == 1
    assert journal_part.files_removed > 1 and journal_part.files_added == 1
    assert rows_by_txn(spark, table) == before  # every row, every flag, as it was
    live = committed(spark, str(table))
    assert len(live.inputFiles()) == 1
    assert sorted(r.order_id for r in live.collect()) == [1, 2, 3, 4, 5]
    assert len(spark.read.format("delta").load(journal).inputFiles()) == 1
    sink.notify_checkpoint_complete(pending)  # the pending rows still commit
    assert sorted(r.order_id for r in committed(spark, str(table)).collect()) == [1, 2, 3, 4, 5, 6]
    sink.close()


@pytest.mark.slow
def test_a_part_worth_several_files_compacts_into_one_file_per_core(spark, tmp_path):
    # Delta's own target (1 GiB) would leave this part one file, read by one core.
    table = str(tmp_path / "wide")
    schema, size = "id BIGINT, digest STRING", 40_000  # hex digests: 1.5 MB a checkpoint
    sink = DeltaSink.open(spark, table, schema=schema, view_name="v_wide", commit="metadata")
    for start in range(0, 8 * size, size):
        rows = spark.range(start, start + size).selectExpr("id", "sha2(CAST(id AS STRING), 256)")
        sink.write(rows.toDF("id", "digest"))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    cores = spark.sparkContext.defaultParallelism
    (part,) = [c for c in vacuum(spark, table, compact_min_files=2).compaction if c.path == table]
    assert part.bytes_before > cores * MIN_FILE_BYTES  # worth a file per core
    assert (part.files_removed, part.files_added) == (part.files_before, cores)
    assert len(committed(spark, table).inputFiles()) == cores
    assert committed(spark, table).count() == 8 * size


def test_compacted_files_are_a_share_of_the_part_per_core_within_bounds():
    mib = 1 << 20
    assert file_target(3 * mib, 2) == MIN_FILE_BYTES  # too small to split
    assert 10 * mib < file_target(20 * mib, 2) < 20 * mib / 1.5  # two files
    assert file_target(100 << 30, 4) == MAX_FILE_BYTES  # Delta's own target
    assert file_target(0, 0) == MIN_FILE_BYTES


def test_aborted_after_a_pre_commit_goes_but_aborted_after_a_commit_decision_stays(spark, table):
    recovered = abort_one(spark, table, [1])  # as if recovery aborted it once pre-committed
    decided = abort_one(spark, table, [2])  # an inconsistent journal: left to a human
    journal = journal_of(table)
    status = {s.txn_id: s for s in journal.transactions(table.name)}
    journal.record(
        *(
            JournalEntry(
                sink_id=table.name,
                table_path=str(table),
                checkpoint_id=status[txn].checkpoint_id,
                txn_id=txn,
                writer_id="0",
                state=state,
                event_time=status[txn].opened_at,
            )
            for txn, state in ((recovered, TxnState.PRE_COMMITTED), (decided, TxnState.COMMITTING))
        )
    )

    report = vacuum(spark, str(table), dry_run=True)

    assert report.txn_ids == (recovered,) and report.skipped_txn_ids == (decided,)
    assert report.rows_removed == 1


def test_retain_hours_is_the_retention_delta_applies(spark, table):
    """Files of known age: older than --retain-hours go, younger stay (not the table's 168 h).

    Delta 4.4 ignores RETAIN n HOURS for n other than 0 unless told not to: then neither
    stray file here would go, and the report would name a retention that was not used.
    """
    abort_one(spark, table, [1])
    now = time.time()
    stray = {}
    for name, age_hours in (("old", 10), ("young", 1)):
        path = table / f"part-stray-{name}.parquet"
        path.write_bytes(b"not referenced by the table")
        os.utime(path, (now - age_hours * 3600, now - age_hours * 3600))
        stray[name] = path

    dry = vacuum(spark, str(table), retain_hours=5, allow_short_retention=True, dry_run=True)
    report = vacuum(spark, str(table), retain_hours=5, allow_short_retention=True)

    assert dry.files_removed == report.files_removed == 1  # the aborted rows' file is 0 h old
    assert report.retain_hours == 5
    assert not stray["old"].exists()
    assert stray["young"].exists()


def test_a_too_short_retention_without_the_flag_is_refused(spark, table):
    txn = abort_one(spark, table, [1])
    before = versions(spark, table)

    with pytest.raises(
        ConfigurationError,
        match=r"retain_hours=1 is below the table's delta\.deletedFileRetentionDuration "
        r"\(168 h\) .*allow_short_retention=True",
    ):
        vacuum(spark, str(table), retain_hours=1)

    assert versions(spark, table) == before
    assert rows_by_txn(spark, table) == {txn: {(1, False)}}


def test_a_path_without_a_lakesink_table_is_refused(spark, tmp_path):
    missing = tmp_path / "missing"
    with pytest.raises(TableNotFoundError, match=f"no Delta table at {re.escape(str(missing))}"):
        vacuum(spark, str(missing))
    plain = tmp_path / "plain"
    spark.range(1).write.format("delta").save(str(plain))
    with pytest.raises(TableNotFoundError, match=r"at .*plain is not a lakesink table"):
        vacuum(spark, str(plain))


def run_job(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(JOB), *args],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=900,
    )


@pytest.mark.slow
def as_json(report) -> dict:
    return json.loads(json.dumps(report.as_dict()))


def test_the_job_prints_json_and_exits_0_or_2_with_the_message(spark, table, tmp_path):
    txn = abort_one(spark, table, [1, 2])
    before = versions(spark, table)

    done = run_job("--table", str(table), "--dry-run", "--json", "--master", "local[1]")

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["dry_run"] is True and report["rows_removed"] == 2
    assert [t["txn_id"] for t in report["transactions"]] == [txn]
    assert report["files_kept"] >= 1 and report["kept_until"]  # past the retention, 168 h
    # One vacuum: the library function and the table object report the same dry run (when
    # files stay until is taken from each run's clock).
    for same in (vacuum(spark, str(table), dry_run=True), Table(table).vacuum(spark, dry_run=True)):
        assert as_json(same) == report | {"kept_until": as_json(same)["kept_until"]}
    assert versions(spark, table) == before

    # For real, the table given as the first argument as every command takes it; the
    # report says what went now and what stays for time travel, and until when.
    ran = run_job(str(table), "--no-compact", "--master", "local[1]")
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert "removed 2 row(s) of 1 transaction(s) from the table" in ran.stdout
    kept = r"^\d+ file\(s\) of the removed rows stay for time travel until "
    kept += r"\d{4}-\d\d-\d\d \d\d:\d\d UTC; a vacuum after that deletes them$"
    assert re.search(kept, ran.stdout, re.M), ran.stdout
    status = subprocess.run(
        [str(Path(sys.executable).parent / "lakesink"), "status", str(table), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    (sink,) = json.loads(status.stdout)["sinks"]
    assert [(t["txn_id"], t["vacuumed"]) for t in sink["aborted"]] == [(txn, True)]

    missing = tmp_path / "missing"
    failed = run_job("--table", str(missing))

    assert failed.returncode == 2
    assert f"no Delta table at {missing}" in failed.stderr
    assert "Traceback" not in failed.stderr
