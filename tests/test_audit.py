"""The audit queries on a lakesink table built through the real API, then tampered with.

The story the fixture writes, with times from a test clock (seconds after its start):

1. writer "a": checkpoint 1, 3 rows written at 0, pre-committed at 10, committed at 25;
2. checkpoint 2, 2 rows written at 30; the writer closes at 35 (aborted), then the vacuum
   job removes them at 40;
3. writer "a" again, with a validation gate under the ``warn`` policy: checkpoint 3, 2 rows
   (one with a negative order id) written at 50 fail the suite at 60, and are committed
   anyway at 120;
4. checkpoint 4, 2 rows written at 130, pre-committed at 140; its commit at 150 stops
   (a crash) after the MERGE, before the journal records it committed;
5. checkpoint 5, 2 rows written at 160, pre-committed at 170, never committed (pending);
6. writer "b", with the gate under ``quarantine``: checkpoint 6, 2 rows (one without an
   item) written at 180 fail the suite at 190 and are held;
7. checkpoint 7, 1 row written at 200; the writer closes at 205 (aborted, kept masked).

So the committed view must show exactly checkpoints 1, 3 and 4: 7 rows. A step hook reads
the table's Delta history right after each commit (its MERGE, then the release of its
pending files) and append, so the expected history mapping is what Delta reported at the
time, not a guess.

The last part tries each check on records built by hand, with no Spark: each finds what was
planted, and passes a sink that kept its promise; and the history's reader on a log written
by hand.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from delta.tables import DeltaTable
from deltalake import CommitProperties, write_deltalake

from lakesink.core import TxnState, step_hook
from lakesink.delta.committer import Committable, MergeCommitter
from lakesink.delta.sink import DeltaSink
from lakesink.errors import AuditFailedError, CommitRoundError, TableNotFoundError
from lakesink.ops.audit import (
    AuditReport,
    AuditSnapshot,
    Phase,
    TransactionAudit,
    audit_table,
    exactly_once_checks,
    failed_validations,
    raise_on_failures,
    snapshot,
    to_frame,
)
from lakesink.ops.audit.checks import (
    check_counts,
    check_duplicates,
    check_foreign_changes,
    check_visibility,
    run_checks,
)
from lakesink.ops.vacuum import vacuum
from lakesink.spark.validation import ValidationGate
from lakesink.tables.format import PENDING, VISIBLE
from lakesink.tables.history import HistoryEntry, read_history

# One xdist worker runs the module and the story is session-scoped, so it is written once:
# xdist may interleave other modules' tests on that worker, which ends a module scope.
pytestmark = pytest.mark.xdist_group("audit")

SCHEMA = "order_id BIGINT, item STRING"
# A GX 1.x suite file, as ExpectationSuite.to_json_dict() writes it.
SUITE = {
    "name": "orders_sane",
    "expectations": [
        {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "item"}},
        {
            "type": "expect_column_values_to_be_between",
            "kwargs": {"column": "order_id", "min_value": 1, "max_value": 1000},
        },
    ],
    "meta": {},
}
T0_MS = 1_700_000_000_000
CHECK_NAMES = (
    "no duplicate transaction rows",
    "no visible row of a non-committed checkpoint",
    "committed row counts equal the journal's",
    "no row changed outside lakesink",
)


class Crash(Exception):
    """A process death, simulated at a protocol step."""


class Clock:
    """A clock the test sets; DeltaSink and vacuum read ``millis()``."""

    def __init__(self) -> None:
        self.now_ms = T0_MS

    def at(self, seconds: float) -> None:
        self.now_ms = T0_MS + int(seconds * 1000)

    def millis(self) -> int:
        return self.now_ms


@dataclass
class Story:
    """What the fixture did, as the sink and Delta reported it while it happened."""

    path: Path
    txn: dict[int, str] = field(default_factory=dict)  # checkpoint id -> txn id
    commit_version: dict[str, int] = field(default_factory=dict)  # its MERGE
    release_version: dict[str, int] = field(default_factory=dict)  # the release after it
    append_version: dict[str, list[int]] = field(default_factory=dict)
    vacuum_version: int = -1


def latest_version(spark, path: Path) -> int:
    return int(DeltaTable.forPath(spark, str(path)).history(1).first().version)


def build_audited_table(spark, path: Path) -> Story:
    """Write the module docstring's story into a lakesink table at ``path``."""
    story = Story(path=path)
    clock = Clock()
    suite = path.parent / "suite.json"
    suite.write_text(json.dumps(SUITE))

    crash_after_publish: set[str] = set()

    def hook(step: str, checkpoint_id: int) -> None:
        txn_id = story.txn[checkpoint_id]  # the story's checkpoint ids are one writer's each
        if step == "after_publish":
            # A commit is two versions: the insert-only MERGE, then the release of the
            # transaction's pending files (delta-rs).
            release, merge = DeltaTable.forPath(spark, str(path)).history(2).collect()
            assert (merge.operation, release.operation) == ("MERGE", "WRITE")
            story.commit_version[txn_id] = merge.version
            story.release_version[txn_id] = release.version
            if txn_id in crash_after_publish:
                raise Crash(f"after the MERGE of checkpoint {checkpoint_id}")
        elif step == "after_append":
            story.append_version.setdefault(txn_id, []).append(latest_version(spark, path))

    def open_sink(writer: str, policy: str | None = None) -> DeltaSink:
        gate = ValidationGate.from_file(suite, policy=policy) if policy else None
        with step_hook(hook):
            return DeltaSink.open(
                spark,
                str(path),
                schema=SCHEMA,
                writer_id=writer,
                view_name=f"audit_{path.name}",
                validation=gate,
                clock=clock,
            )

    def write(sink: DeltaSink, rows: list[tuple], at: float) -> None:
        clock.at(at)
        story.txn[sink.current_checkpoint_id] = sink.state.current.handle.txn_id
        sink.write(spark.createDataFrame(rows, SCHEMA))

    def checkpoint(sink: DeltaSink, at: float) -> int:
        clock.at(at)
        return sink.prepare_commit()

    def commit(sink: DeltaSink, checkpoint_id: int, at: float) -> None:
        clock.at(at)
        sink.notify_checkpoint_complete(checkpoint_id)

    def close(sink: DeltaSink, at: float) -> None:
        clock.at(at)
        sink.close()

    sink = open_sink("a")
    write(sink, [(1, "apple"), (2, "pear"), (3, "fig")], at=0)
    commit(sink, checkpoint(sink, at=10), at=25)
    write(sink, [(6, "lime"), (7, "date")], at=30)
    close(sink, at=35)  # checkpoint 2 aborted

    story.vacuum_version = latest_version(spark, path) + 1  # its DELETE comes next
    clock.at(40)
    report = vacuum(spark, str(path), retain_hours=0, allow_short_retention=True, clock=clock)
    assert report.txn_ids == (story.txn[2],)

    sink = open_sink("a", "warn")
    write(sink, [(-8, "sloe"), (9, "yuzu")], at=50)
    commit(sink, checkpoint(sink, at=60), at=120)  # checkpoint 3 fails, committed anyway
    write(sink, [(10, "quince"), (11, "grape")], at=130)
    crash_after_publish.add(story.txn[4])
    with pytest.raises(CommitRoundError):
        commit(sink, checkpoint(sink, at=140), at=150)  # checkpoint 4: MERGE, no record
    write(sink, [(12, "lemon"), (13, "melon")], at=160)
    checkpoint(sink, at=170)  # checkpoint 5 pending
    sink.close()

    sink = open_sink("b", "quarantine")
    write(sink, [(14, None), (15, "olive")], at=180)
    checkpoint(sink, at=190)  # checkpoint 6 fails, held
    write(sink, [(16, "peach")], at=200)
    close(sink, at=205)  # checkpoint 7 aborted, rows kept masked
    return story


@pytest.fixture(scope="session")
def story(spark, tmp_path_factory) -> Story:
    return build_audited_table(spark, tmp_path_factory.mktemp("audit") / "orders")


@pytest.fixture(scope="session")
def report(spark, story) -> AuditReport:
    """The audit of the untouched table."""
    return audit_table(spark, str(story.path))


def tampered_copy(story: Story, tmp_path: Path) -> Path:
    """A copy of the table and of the journal beside it (same sink) to tamper with."""
    copy = tmp_path / "orders"
    shutil.copytree(story.path, copy)
    shutil.copytree(story.path.parent / "_lakesink_journal", tmp_path / "_lakesink_journal")
    return copy


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp((T0_MS + seconds * 1000) / 1000, tz=timezone.utc)


def checks_by_name(spark, path: Path) -> dict:
    return {c.name: c for c in exactly_once_checks(spark, snapshot(spark, str(path)))}


def test_timeline_tells_each_checkpoint_as_it_happened(story, report):
    snap = report.snapshot
    audits = {a.checkpoint_id: a for a in report.timeline}

    assert sorted(audits) == [1, 2, 3, 4, 5, 6, 7]
    assert {c: a.txn_id for c, a in audits.items()} == story.txn
    assert {c: a.phase for c, a in audits.items()} == {
        1: Phase.COMMITTED,
        2: Phase.ABORTED,
        3: Phase.COMMITTED,
        4: Phase.PENDING,  # its MERGE is made; recovery will record it committed
        5: Phase.PENDING,
        6: Phase.HELD,
        7: Phase.ABORTED,
    }
    states = (audits[4].state, audits[5].state, audits[6].state)
    assert states == (TxnState.PRE_COMMITTED, TxnState.PRE_COMMITTED, TxnState.HELD)
    writers = {c: a.writer_id for c, a in audits.items()}
    assert writers == {1: "a", 2: "a", 3: "a", 4: "a", 5: "a", 6: "b", 7: "b"}
    # Rows: what the journal recorded, and what the table holds, visible and masked.
    counts = {c: (a.row_count, a.visible_rows, a.masked_rows) for c, a in audits.items()}
    assert counts == {
        1: (3, 3, 0),
        2: (2, 0, 0),  # never pre-committed (its abort counts what it wrote); vacuumed
        3: (2, 2, 0),
        4: (2, 2, 0),
        5: (2, 0, 2),
        6: (2, 0, 2),
        7: (1, 0, 1),
    }
    assert [c for c, a in audits.items() if a.vacuumed] == [2]
    # Times come from the sinks' clock: latency is pre-commit -> commit, exactly.
    assert (audits[1].opened_at, audits[1].pre_committed_at, audits[1].committed_at) == (
        at(0),
        at(10),
        at(25),
    )
    latencies = {c: a.commit_latency_s for c, a in audits.items() if a.commit_latency_s}
    assert latencies == {1: 15.0, 3: 60.0}
    ended = (audits[2].aborted_at, audits[6].held_at, audits[7].aborted_at)
    assert ended == (at(35), at(190), at(205))
    ages = {c: a.pending_age_s for c, a in audits.items() if a.pending_age_s is not None}
    assert ages == {
        c: pytest.approx((snap.taken_at - at(opened)).total_seconds())
        for c, opened in ((4, 130), (5, 160), (6, 180))
    }
    assert [c for c, a in audits.items() if a.validation] == [3, 4, 5, 6]
    frame = to_frame(audits.values())
    phases = ["committed", "aborted", "committed", "pending", "pending", "held", "aborted"]
    assert list(frame["phase"]) == phases


def test_failed_validations_name_each_failed_expectation_and_what_it_led_to(story, report):
    found = [
        (f.checkpoint_id, f.txn_id, f.state, f.policy, f.expectation, f.column, f.rows)
        for f in report.validation_failures
    ]

    # Checkpoints 4 and 5 were validated too, and passed: they are no failures.
    assert found == [
        (
            3,
            story.txn[3],
            TxnState.PRE_COMMITTED,  # warn: committed anyway
            "warn",
            "expect_column_values_to_be_between",
            "order_id",
            2,
        ),
        (
            6,
            story.txn[6],
            TxnState.HELD,
            "quarantine",
            "expect_column_values_to_not_be_null",
            "item",
            2,
        ),
    ]
    warned, held = report.validation_failures
    assert (warned.event_time, held.event_time) == (at(60), at(190))
    assert warned.suite == held.suite == "orders_sane"
    assert "-8" in warned.observed and json.loads(warned.kwargs)["min_value"] == 1
    assert "null" in held.summary
    assert to_frame(report.validation_failures)["state"].tolist() == ["pre_committed", "held"]


def test_history_lines_delta_versions_up_with_the_journal(story, report):
    snap, history = report.snapshot, report.history
    audits = {a.checkpoint_id: a for a in report.timeline}

    # The version each MERGE made is the version that made its checkpoint visible.
    # Checkpoint 4's too, though the journal has not recorded that commit yet.
    assert {c: audits[c].commit_version for c in (1, 3, 4)} == {
        c: story.commit_version[story.txn[c]] for c in (1, 3, 4)
    }
    assert [audits[c].commit_version for c in (2, 5, 6, 7)] == [None] * 4
    assert audits[2].vacuum_version == story.vacuum_version
    assert [c for c, a in audits.items() if a.vacuum_version is not None] == [2]

    by_version = {e.version: e for e in history}
    assert [e.version for e in history] == list(range(snap.table_version + 1))
    assert by_version[0].operation == "CREATE TABLE" and by_version[0].lakesink is None
    for checkpoint, rows in ((1, 3), (3, 2), (4, 2)):
        entry = by_version[audits[checkpoint].commit_version]
        assert (entry.operation, entry.lakesink, entry.rows) == ("MERGE", "commit", rows)
        assert (entry.checkpoint_id, entry.txn_ids) == (checkpoint, (story.txn[checkpoint],))
        # Its release removed the pending files the MERGE had copied: the same rows.
        released = by_version[story.release_version[story.txn[checkpoint]]]
        assert (released.lakesink, released.checkpoint_id, released.rows) == (
            "release",
            checkpoint,
            rows,
        )
        assert released.txn_ids == (story.txn[checkpoint],)
    deleted = by_version[story.vacuum_version]
    assert (deleted.operation, deleted.lakesink, deleted.txn_ids, deleted.rows) == (
        "DELETE",
        "vacuum",
        (story.txn[2],),
        2,
    )
    # Every append is there once, as the write it was, with the rows it wrote.
    writes = {e.version: e for e in history if e.lakesink == "write"}
    assert sorted(writes) == sorted(v for vs in story.append_version.values() for v in vs)
    assert {(e.checkpoint_id, e.step, e.rows) for e in writes.values()} == {
        (1, 1, 3),
        (2, 1, 2),
        (3, 1, 2),
        (4, 1, 2),
        (5, 1, 2),
        (6, 1, 2),
        (7, 1, 1),
    }


def test_every_check_passes_on_the_untouched_table(spark, story, report):
    # The committed view holds exactly checkpoints 1, 3 and 4 (its commit in flight), each
    # row once: the checks pass on it.
    visible = spark.read.format("delta").load(str(story.path)).where(VISIBLE)
    assert sorted(r.order_id for r in visible.collect()) == [-8, 1, 2, 3, 9, 10, 11]
    assert report.snapshot.table_version == latest_version(spark, story.path)
    assert [c.name for c in report.checks] == list(CHECK_NAMES)
    assert [str(c) for c in report.checks] == [f"PASS  {name}" for name in CHECK_NAMES]
    assert report.passed
    raise_on_failures([report])  # raises nothing
    assert failed_validations(spark, report.snapshot) == report.validation_failures


def commit_aborted(spark, table: Path, checkpoint_id: int, txn_id: str, writer_id: str) -> int:
    """Make an aborted transaction's rows visible with a commit of lakesink's own committer,
    as one that ignored the journal would; return the version of its MERGE. (No row names
    its transaction: the audit knows a transaction's visible rows by the commits that
    published them.)"""
    MergeCommitter(spark).commit(
        Committable(
            table=str(table),
            sink_id="orders",
            checkpoint_id=checkpoint_id,
            txn_id=txn_id,
            writer_id=writer_id,
        )
    )
    merge = DeltaTable.forPath(spark, str(table)).history().where("operation = 'MERGE'")
    return merge.orderBy("version", ascending=False).first().version


def test_making_an_aborted_transactions_rows_visible_fails_the_visibility_check(
    spark, story, tmp_path
):
    copy = tampered_copy(story, tmp_path)
    aborted = story.txn[7]
    tamper_version = commit_aborted(spark, copy, 7, aborted, "b")

    report = audit_table(spark, str(copy))
    checks = {c.name: c for c in report.checks}

    assert checks["no duplicate transaction rows"].passed
    visibility = checks["no visible row of a non-committed checkpoint"]
    assert visibility.offenders == (aborted,)
    assert str(visibility) == f"FAIL  no visible row of a non-committed checkpoint: {aborted}"
    assert "1 visible rows but is aborted" in visibility.findings[0].reason
    assert {a.txn_id: a.commit_version for a in report.timeline}[aborted] == tamper_version
    # The committed view now shows a row the journal never committed.
    assert checks["committed row counts equal the journal's"].offenders == ("total",)
    assert checks["no row changed outside lakesink"].passed  # it wore lakesink's metadata
    with pytest.raises(AuditFailedError, match=aborted) as raised:
        raise_on_failures([report])
    assert isinstance(raised.value, AssertionError)
    assert f"no visible row of a non-committed checkpoint in {copy}" in str(raised.value)


def test_making_an_aborted_transactions_rows_visible_by_hand_fails_the_audit(
    spark, story, tmp_path
):
    """An UPDATE of the masking bit outside lakesink: the committed view's rows counted in
    the table are more than the journal committed, and the version is none of lakesink's."""
    copy = tampered_copy(story, tmp_path)
    aborted = story.txn[7]
    spark.sql(f"UPDATE delta.`{copy}` SET {VISIBLE} = true WHERE {PENDING} = '{aborted}'").collect()
    tamper_version = latest_version(spark, copy)

    report = audit_table(spark, str(copy))
    checks = {c.name: c for c in report.checks}

    assert checks["committed row counts equal the journal's"].offenders == ("total",)
    assert checks["no row changed outside lakesink"].offenders == (f"version {tamper_version}",)
    assert not report.passed
    with pytest.raises(AuditFailedError, match=f"version {tamper_version}"):
        raise_on_failures([report])


def test_a_duplicate_append_of_a_committed_transaction_fails_the_duplicate_check(spark, tmp_path):
    path = tmp_path / "orders"
    sink = DeltaSink.open(spark, str(path), schema=SCHEMA, view_name="audit_duplicate")
    sink.write(spark.createDataFrame([(1, "apple"), (2, "pear"), (3, "fig")], SCHEMA))
    victim = sink.state.current.handle.txn_id
    # Replay the append as a retry that Delta failed to skip would, before the commit: the
    # same rows into the transaction's pending partition, the same lakesink metadata, so
    # only the row counts and the history can tell.
    first_write = next(e for e in read_history(str(path)) if e.lakesink == "write")
    assert first_write.txn_ids == (victim,)
    metadata = (
        DeltaTable.forPath(spark, str(path))
        .history()
        .where(f"version = {first_write.version}")
        .first()
        .userMetadata
    )
    rows = spark.read.format("delta").load(str(path)).where(f"{PENDING} = '{victim}'")
    rows.write.format("delta").mode("append").option("userMetadata", metadata).save(str(path))
    sink.notify_checkpoint_complete(sink.prepare_commit())  # its MERGE publishes all 6
    sink.close()

    checks = checks_by_name(spark, path)

    duplicates = checks["no duplicate transaction rows"]
    assert duplicates.offenders == (victim,)
    assert [f.reason for f in duplicates.findings] == [
        f"{victim} (checkpoint 1) has 6 rows in the table, the journal pre-committed 3",
        f"{victim} (checkpoint 1) has append 1 in the history 2 times",
    ]
    assert checks["committed row counts equal the journal's"].offenders == (victim, "total")
    assert checks["no visible row of a non-committed checkpoint"].passed
    assert checks["no row changed outside lakesink"].passed  # it wore lakesink's metadata
    assert json.loads(metadata)["txn_id"] == victim


def test_a_table_lakesink_did_not_write_is_refused(spark, tmp_path):
    plain = tmp_path / "plain"
    spark.createDataFrame([(1,)], "x INT").write.format("delta").save(str(plain))

    with pytest.raises(TableNotFoundError, match="is not a lakesink table"):
        snapshot(spark, str(plain))


# ------------------------------------------------- the checks, on records built by hand


def txn(name: str, state: TxnState | None, **what) -> TransactionAudit:
    """A transaction of checkpoint 1 as the audit reads it: no row, no time, unless given."""
    fields = {
        "checkpoint_id": 1,
        "txn_id": name,
        "writer_id": "a",
        "state": state,
        "phase": Phase.of(state),
        "opened_at": None,
        "pre_committed_at": None,
        "committed_at": None,
        "aborted_at": None,
        "held_at": None,
        "commit_latency_s": None,
        "pending_age_s": None,
        "row_count": None,
        "visible_rows": 0,
        "masked_rows": 0,
        "vacuumed": False,
        "commit_version": None,
        "vacuum_version": None,
        "last_error": None,
        "validation": None,
    }
    return TransactionAudit(**{**fields, **what})


def entry(version: int, operation: str, lakesink: str | None = None, **what) -> HistoryEntry:
    fields = {
        "timestamp": at(version),
        "checkpoint_id": None,
        "txn_ids": (),
        "step": None,
        "rows": None,
    }
    return HistoryEntry(
        version=version, operation=operation, lakesink=lakesink, **{**fields, **what}
    )


# A sink that kept its promise: "c" committed (3 rows), "f" committed by a MERGE whose
# "committed" event is still to come (2 rows), "x" aborted (1 row masked), "p" pending.
CLEAN_TIMELINE = (
    txn("c", TxnState.COMMITTED, row_count=3, visible_rows=3, commit_version=2),
    txn("f", TxnState.PRE_COMMITTED, row_count=2, visible_rows=2, commit_version=4),
    txn("x", TxnState.ABORTED, row_count=1, masked_rows=1),
    txn("p", TxnState.PRE_COMMITTED, row_count=2, masked_rows=2),
)
CLEAN_HISTORY = (
    entry(0, "CREATE TABLE"),
    entry(1, "WRITE", "write", checkpoint_id=1, txn_ids=("c",), step=1, rows=3),
    entry(2, "MERGE", "commit", checkpoint_id=1, txn_ids=("c",), rows=3),
    entry(3, "WRITE", "write", checkpoint_id=1, txn_ids=("f",), step=1, rows=2),
    entry(4, "MERGE", "commit", checkpoint_id=1, txn_ids=("f",), rows=2),
    entry(5, "OPTIMIZE"),
)


def test_every_check_passes_on_a_sink_that_kept_its_promise():
    results = run_checks(CLEAN_TIMELINE, CLEAN_HISTORY)

    assert [c.name for c in results] == list(CHECK_NAMES)
    assert [c.findings for c in results] == [()] * 4


def test_the_duplicate_check_finds_extra_rows_and_a_replayed_append():
    grown = txn("c", TxnState.COMMITTED, row_count=3, visible_rows=3, masked_rows=1)
    replayed = entry(6, "WRITE", "write", checkpoint_id=1, txn_ids=("f",), step=1, rows=2)

    found = check_duplicates([grown, *CLEAN_TIMELINE[1:]], [*CLEAN_HISTORY, replayed])

    assert [f.reason for f in found.findings] == [
        "c (checkpoint 1) has 4 rows in the table, the journal pre-committed 3",
        "f (checkpoint 1) has append 1 in the history 2 times",
    ]
    assert found.offenders == ("c", "f")
    assert check_duplicates(CLEAN_TIMELINE, CLEAN_HISTORY).passed


def test_the_visibility_check_finds_rows_no_commit_published():
    shown = [
        txn("x", TxnState.ABORTED, row_count=1, visible_rows=1),
        txn("p", TxnState.PRE_COMMITTED, row_count=2, visible_rows=2),  # no commit MERGE
        txn("h", TxnState.HELD, row_count=1, visible_rows=1),
        txn("u", None, checkpoint_id=9, visible_rows=4),
    ]

    found = check_visibility([*CLEAN_TIMELINE[:2], *shown])

    assert found.offenders == ("x", "p", "h", "u")
    assert found.findings[0].reason == "x (checkpoint 1) has 1 visible rows but is aborted"
    assert (
        found.findings[3].reason == "u (checkpoint 9) has 4 visible rows but is not in the journal"
    )
    assert str(found) == "FAIL  no visible row of a non-committed checkpoint: x, p, h, u"
    # A decided commit may show its rows before its MERGE is in the history.
    assert check_visibility([txn("d", TxnState.COMMITTING, row_count=1, visible_rows=1)]).passed


def test_the_count_check_finds_a_committed_transaction_short_and_the_total_off():
    short = txn("c", TxnState.COMMITTED, row_count=3, visible_rows=2, commit_version=2)
    masked = txn("m", TxnState.COMMITTED, row_count=1, visible_rows=1, masked_rows=1)

    found = check_counts([short, masked, *CLEAN_TIMELINE[1:]])

    assert found.offenders == ("c", "m", "total")
    assert [f.reason for f in found.findings] == [
        "c (checkpoint 1) has 2 visible and 0 masked rows, the journal committed 3",
        "m (checkpoint 1) has 1 visible and 1 masked rows, the journal committed 1",
        "the committed view has 5 rows, the journal's committed transactions 6",
    ]
    # Rows nobody journaled make the total wrong even when every committed one is right.
    stray = txn("u", None, checkpoint_id=9, visible_rows=4)
    assert check_counts([*CLEAN_TIMELINE, stray]).offenders == ("total",)


def test_the_foreign_change_check_finds_versions_lakesink_did_not_make():
    history = [
        *CLEAN_HISTORY,
        entry(6, "DELETE"),
        entry(7, "", timestamp=None),  # a commit with no commitInfo
        entry(8, "SET TBLPROPERTIES"),
    ]

    found = check_foreign_changes(history)

    assert found.offenders == ("version 6", "version 7")
    assert [f.reason for f in found.findings] == [
        "version 6 (DELETE, 2023-11-14 22:13:26 UTC) was not made by lakesink",
        "version 7 (no operation, no time) was not made by lakesink",
    ]


def test_raise_on_failures_names_each_failed_check_and_its_table():
    snap = AuditSnapshot(
        table_path="/lake/orders",
        sink_id="orders",
        journal_path="/lake/_lakesink_journal",
        table_version=6,
        journal_version=9,
        taken_at=at(300),
    )
    history = (*CLEAN_HISTORY, entry(6, "DELETE"))

    def report(history: tuple[HistoryEntry, ...]) -> AuditReport:
        checks = run_checks(CLEAN_TIMELINE, history)
        return AuditReport(
            snapshot=snap,
            history=history,
            timeline=CLEAN_TIMELINE,
            validation_failures=(),
            checks=checks,
        )

    raise_on_failures([report(CLEAN_HISTORY)])  # raises nothing
    with pytest.raises(AuditFailedError) as raised:
        raise_on_failures([report(CLEAN_HISTORY), report(history)])
    assert str(raised.value) == (
        "exactly-once audit failed: no row changed outside lakesink in /lake/orders "
        "(version 6 (DELETE, 2023-11-14 22:13:26 UTC) was not made by lakesink)"
    )


def test_the_history_numbers_each_version_by_its_log_file(tmp_path):
    # delta-rs's own history numbered these down from the version it opened, and left out a
    # commit without commitInfo (the protocol makes it optional), shifting the older ones.
    path = str(tmp_path / "table")
    for n in range(3):
        metadata = {"userMetadata": json.dumps({"lakesink": "write", "txn_id": f"t{n}"})}
        write_deltalake(
            path,
            pa.table({"x": [n]}),
            mode="append",
            commit_properties=CommitProperties(custom_metadata=metadata),
        )
    log = tmp_path / "table" / "_delta_log"
    added = [line for line in (log / f"{2:020d}.json").read_text().splitlines() if '"add"' in line]
    (log / f"{3:020d}.json").write_text("\n".join(added) + "\n")  # a bare commit

    history = read_history(path)

    assert [(e.version, e.lakesink, e.txn_ids) for e in history] == [
        (0, "write", ("t0",)),
        (1, "write", ("t1",)),
        (2, "write", ("t2",)),
        (3, None, ()),
    ]
    assert (history[3].operation, history[3].timestamp) == ("", None)
    assert check_foreign_changes(history).offenders == ("version 3",)
    assert read_history(path, up_to=1) == history[:2]
