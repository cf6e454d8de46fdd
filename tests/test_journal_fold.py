"""The journal's two folds agree: ``fold_events`` (Python over a delta-rs read: recovery,
the vacuum, ``lakesink status``) and ``fold`` (Spark SQL: the audit).

A real journal on disk gets events that exercise every rule: states out of clock order
(a later-ranked event with an earlier time), a retried commit's attempts, errors and
validation reports given and not, a vacuumed abort, and two sinks.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

from lakesink.core import TxnState
from lakesink.delta.journal import fold, journal_events
from lakesink.tables.deltars import COMPACT_EVERY, delta_table
from lakesink.tables.journal import Journal, JournalEntry, read_transactions

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=timezone.utc)


def event(txn: str, state: TxnState, seconds: int, sink: str = "orders", **extra) -> JournalEntry:
    return JournalEntry(
        sink_id=sink,
        table_path="/data/orders",
        checkpoint_id=int(txn[-1]),
        txn_id=txn,
        writer_id="0",
        state=state,
        event_time=T0 + timedelta(seconds=seconds),
        **extra,
    )


def test_both_folds_give_every_transaction_the_same_status(spark, tmp_path):
    journal = Journal(str(tmp_path / "journal"))
    journal.record(
        event("t1", TxnState.OPEN, 0),
        event("t1", TxnState.PRE_COMMITTED, 1, row_count=5),
        event("t1", TxnState.COMMITTED, 2, row_count=5),
        event("t2", TxnState.OPEN, 0),
        event("t2", TxnState.ABORTED, 3, error="boom"),
        event("t2", TxnState.ABORTED, 9, detail="vacuumed: 3 rows removed"),
        event("t3", TxnState.OPEN, 0),
        event("t3", TxnState.HELD, 4, row_count=7, validation='{"success": false}'),
        event("t3", TxnState.COMMITTING, 5, attempt=1, error="conflict"),
        event("t3", TxnState.COMMITTING, 6, attempt=2),
        # A clock behind: pre-committed stamped before its open; the rank decides.
        event("t4", TxnState.OPEN, 10),
        event("t4", TxnState.PRE_COMMITTED, 8, row_count=1),
        event("t5", TxnState.OPEN, 0, sink="totals"),
        # Committed, then a RESTORE undid its commit.
        event("t6", TxnState.COMMITTED, 2, row_count=4),
        event("t6", TxnState.ABORTED, 12, detail="restored: RESTORE at version 9"),
    )
    journal.record(event("t2", TxnState.OPEN, 11, error="late"))  # a later commit, lower rank

    ours = read_transactions(journal.path, "orders")
    theirs = {
        row.txn_id: row
        for row in fold(journal_events(spark, journal.path).where("sink_id = 'orders'")).collect()
    }

    assert [s.txn_id for s in ours] == ["t1", "t2", "t3", "t4", "t6"]
    assert {s.txn_id: s.state for s in ours} == {
        "t1": TxnState.COMMITTED,
        "t2": TxnState.ABORTED,
        "t3": TxnState.COMMITTING,
        "t4": TxnState.PRE_COMMITTED,
        "t6": TxnState.ABORTED,
    }
    for status in ours:
        row = theirs[status.txn_id]
        assert status.state.value == row.state, status.txn_id
        assert status.opened_at == row.opened_at.astimezone(timezone.utc), status.txn_id
        assert status.updated_at == row.updated_at.astimezone(timezone.utc), status.txn_id
        assert (status.row_count, status.attempts) == (row.row_count, row.attempts)
        assert (status.last_error, status.last_validation) == (row.last_error, row.last_validation)
        assert {s.value for s in status.states} == set(row.states), status.txn_id
        for state in (TxnState.PRE_COMMITTED, TxnState.COMMITTED, TxnState.ABORTED, TxnState.HELD):
            at = row[f"{state.value}_at"]
            expected = at.astimezone(timezone.utc) if at is not None else None
            assert status.first_at.get(state) == expected, (status.txn_id, state)
        assert status.vacuumed == row.vacuumed, status.txn_id
        assert status.restored == row.restored, status.txn_id
    assert ours[1].vacuumed and ours[1].last_error == "late"
    assert ours[4].restored and not ours[4].vacuumed
    assert read_transactions(journal.path, "orders", writer_id="w9") == []


def test_a_journal_appended_by_writers_at_once_is_compacted_and_loses_no_event(lake):
    """Each append is a file; an append that leaves more than ``COMPACT_EVERY`` merges
    them. Four writers append one event a commit at once, across the compaction: every
    event reads back once, and the table keeps at most ``COMPACT_EVERY`` files. The
    writers overlapped the compaction: each had appended before it, and some after."""
    path = f"{lake}/journal"
    Journal(path)  # version 0
    per_writer = COMPACT_EVERY // 4 + 10
    spans: dict[int, tuple[float, float]] = {}  # a writer's first and last append (epoch ms)

    def writer(index: int) -> None:
        journal = Journal(path)
        first = None
        for n in range(per_writer):
            txn = f"w{index}-{n}"
            journal.record(
                JournalEntry(
                    sink_id="orders",
                    table_path="/data/orders",
                    checkpoint_id=n,
                    txn_id=txn,
                    writer_id=str(index),
                    state=TxnState.OPEN,
                    event_time=T0,
                )
            )
            first = first or time.time() * 1000
        spans[index] = (first, time.time() * 1000)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(writer, range(4)))

    table = delta_table(path)
    compactions = [c["timestamp"] for c in table.history() if c["operation"] == "OPTIMIZE"]
    assert compactions, "no append compacted the journal"
    first_compaction = min(compactions)
    assert all(start < first_compaction for start, _ in spans.values()), spans
    assert sum(end > first_compaction for _, end in spans.values()) >= 2, spans
    assert table.get_add_actions(flatten=True).num_rows <= COMPACT_EVERY < 4 * per_writer
    txns = [s.txn_id for s in read_transactions(path, "orders")]
    assert sorted(txns) == sorted(f"w{i}-{n}" for i in range(4) for n in range(per_writer))
