"""What one vacuum run did: ``VacuumReport``, its transactions, the figures ``lakesink vacuum``
prints and ``lakesink.ops.metrics`` exports.

Apart from the vacuum itself so that the metrics read a report without importing the
vacuum, which sends them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime

from lakesink.ops.compact import Compaction

__all__ = ["VacuumReport", "VacuumedTransaction"]


@dataclass(frozen=True, kw_only=True)
class VacuumedTransaction:
    """One transaction whose masked rows were (or, in a dry run, would be) removed."""

    txn_id: str
    checkpoint_id: int
    writer_id: str
    rows: int
    expired: bool  # an open transaction past the expiry, aborted by this run


@dataclass(frozen=True, kw_only=True)
class VacuumReport:
    """What one vacuum run removed (or, with ``dry_run``, would remove).

    Attributes:
        table_path: The table vacuumed.
        sink_id: The sink whose journal decided what to remove.
        dry_run: True if nothing was changed.
        retain_hours: The Delta VACUUM retention used.
        transactions: The transactions whose rows were removed, by checkpoint id.
        rows_removed: Rows deleted (the DELETE's own count; a dry run counts them).
        files_removed: Data files Delta VACUUM deleted from storage (all of the table's
            files past the retention, not only this run's).
        bytes_removed: Their total size.
        files_kept: Files of the rows this run removed that stay on storage for time
            travel until ``kept_until`` (the retention from now); a vacuum after that
            deletes them. 0 with a zero retention: they went with this run.
        kept_until: When the retention of those files ends (None when none are kept).
        skipped_txn_ids: Candidates left alone: the journal shows a commit decided for
            them, or (expired ones) their writer still runs or pre-committed them after
            the plan read the journal.
        compaction: What compaction did to each table (a dry run: their file counts).
        republished_txn_ids: Committed transactions whose masked leftovers this run made
            visible (a dry run: would make).
    """

    table_path: str
    sink_id: str
    dry_run: bool
    retain_hours: float
    transactions: tuple[VacuumedTransaction, ...]
    rows_removed: int
    files_removed: int
    bytes_removed: int
    files_kept: int = 0
    kept_until: datetime | None = None
    skipped_txn_ids: tuple[str, ...] = ()
    compaction: tuple[Compaction, ...] = ()
    republished_txn_ids: tuple[str, ...] = ()

    @property
    def txn_ids(self) -> tuple[str, ...]:
        """The ids of the vacuumed transactions."""
        return tuple(t.txn_id for t in self.transactions)

    @property
    def expired_txn_ids(self) -> tuple[str, ...]:
        """The ids of the open transactions this run expired."""
        return tuple(t.txn_id for t in self.transactions if t.expired)

    def as_dict(self) -> dict[str, object]:
        """The report as plain JSON-ready data."""
        data = asdict(self)
        data["kept_until"] = self.kept_until.isoformat() if self.kept_until else None
        return data
