"""What an operator asks first: where each sink stands, and the job's checkpoint history.

Read with delta-rs from the tables' logs and the small journal and checkpoint tables: no
Spark job and no JVM, so ``lakesink status`` answers in a fraction of a second.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakesink.core import TxnState
from lakesink.core.validation import ValidationReport
from lakesink.storage.location import normalize
from lakesink.tables.checkpoints import checkpoints_path, read_history
from lakesink.tables.deltars import partition_files, read_sink_table_log
from lakesink.tables.format import PENDING, CommitMode
from lakesink.tables.journal import TransactionStatus, read_transactions
from lakesink.tables.published import PublishedTable, published_table

__all__ = ["SinkStatus", "job_status", "sink_status"]


@dataclass(frozen=True, kw_only=True)
class SinkStatus:
    """A sink's state, folded from its journal."""

    sink_id: str
    table_path: str
    journal_path: str
    committed: tuple[TransactionStatus, ...]
    pending: tuple[TransactionStatus, ...]  # open, pre-committed or being committed
    held: tuple[TransactionStatus, ...]  # failed validation: an operator decides
    aborted: tuple[TransactionStatus, ...]
    commit_mode: CommitMode = "merge"
    published: PublishedTable | None = (
        None  # the committed rows, for any engine by path (None: off)
    )

    @property
    def last_committed_checkpoint(self) -> int | None:
        return max((s.checkpoint_id for s in self.committed), default=None)

    @property
    def committed_rows(self) -> int:
        return sum(s.row_count or 0 for s in self.committed)

    def as_dict(self, now: datetime) -> dict[str, Any]:
        def txn(status: TransactionStatus) -> dict[str, Any]:
            return {
                "checkpoint_id": status.checkpoint_id,
                "txn_id": status.txn_id,
                "writer_id": status.writer_id,
                "state": status.state.value,
                "age_seconds": round((now - status.opened_at).total_seconds(), 1),
                "rows": status.row_count,
                "last_error": status.last_error,
                "validation": _summary(status.last_validation),
                "vacuumed": status.vacuumed,  # its rows are gone from the table
                "restored": status.restored,  # committed, then undone by a RESTORE
            }

        published = self.published
        return {
            "sink_id": self.sink_id,
            "table": self.table_path,
            "journal": self.journal_path,
            "commit_mode": self.commit_mode,
            "published": None
            if published is None
            else {
                "path": published.path,
                "version": published.version,
                "table_version": published.sink_version,
                "versions_behind": published.behind,
                "gone_files": list(published.gone),
            },
            "last_committed_checkpoint": self.last_committed_checkpoint,
            "committed_rows": self.committed_rows,
            "pending": [txn(s) for s in self.pending],
            "held": [txn(s) for s in self.held],
            "aborted": [txn(s) for s in self.aborted],
        }


def sink_status(path: str) -> SinkStatus:
    """Where the sink writing the lakesink table at ``path`` stands."""
    path = normalize(path)
    table, _ = read_sink_table_log(path)
    transactions = _with_masked_rows(
        path, read_transactions(table.journal_path, table.sink_id, table_path=path)
    )
    return SinkStatus(
        sink_id=table.sink_id,
        table_path=path,
        journal_path=table.journal_path,
        committed=tuple(s for s in transactions if s.state is TxnState.COMMITTED),
        pending=tuple(s for s in transactions if s.state.pending),
        held=tuple(s for s in transactions if s.state is TxnState.HELD),
        aborted=tuple(s for s in transactions if s.state is TxnState.ABORTED),
        commit_mode=table.commit_mode,
        published=published_table(path) if table.published else None,
    )


def _with_masked_rows(path: str, transactions: list[TransactionStatus]) -> list[TransactionStatus]:
    """The transactions, each one the journal gives no row count (an open one: its count is
    journaled at its pre-commit) counted from its masked rows in the table's log, while
    they are there."""
    unknown = [
        t.txn_id for t in transactions if t.row_count is None and t.state is not TxnState.COMMITTED
    ]
    found = partition_files(path, PENDING, unknown) if unknown else {}
    return [
        dataclasses.replace(t, row_count=found[t.txn_id].rows) if t.txn_id in found else t
        for t in transactions
    ]


def job_status(state_dir: str, job_id: str) -> dict[str, Any]:
    """A job's last completed checkpoint and every input item it quarantined."""
    records = read_history(checkpoints_path(state_dir), job_id)
    return {
        "job_id": job_id,
        "state": normalize(state_dir),
        "last_completed_checkpoint": records[-1].checkpoint_id if records else None,
        "quarantined": [
            {"checkpoint_id": r.checkpoint_id, "item": q.item, "reason": q.reason}
            for r in records
            for q in r.quarantined
        ],
    }


def _summary(report_json: str | None) -> str | None:
    if report_json is None:
        return None
    return ValidationReport.from_json(report_json).summary()
