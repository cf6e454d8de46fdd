"""What lakesink's own commits did, read back from a sink table's Delta history.

Each Delta commit lakesink makes carries ``userMetadata`` (``tables.format.commit_metadata``)
naming its operation, checkpoint and transactions. The audit reads the history through
Spark, the table object through delta-rs; both read each entry, and which version made a
transaction visible, here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

__all__ = ["HistoryEntry", "first_versions", "history_entry"]

# The operationMetrics entry that counts the rows an operation wrote, flipped or deleted.
_ROWS_METRIC = {
    "WRITE": "numOutputRows",
    "STREAMING UPDATE": "numOutputRows",
    "MERGE": "numTargetRowsUpdated",
    "UPDATE": "numUpdatedRows",
    "DELETE": "numDeletedRows",
}


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """One Delta version of the table, with what lakesink says it did.

    Attributes:
        version: The Delta version.
        timestamp: When it was committed.
        operation: Delta's operation name (``WRITE``, ``MERGE``, ``DELETE``, ...).
        lakesink: The lakesink operation (``write``, ``commit``, ``vacuum``), or None for
            a version lakesink did not make.
        checkpoint_id: The checkpoint a write or commit belongs to.
        txn_ids: The transaction(s) it touched: one for a write or commit, the vacuumed
            ones for a vacuum.
        step: The append's number within its transaction (writes only).
        rows: Rows appended (write), made visible (commit) or deleted (vacuum), from
            Delta's operation metrics.
    """

    version: int
    timestamp: datetime
    operation: str
    lakesink: str | None
    checkpoint_id: int | None
    txn_ids: tuple[str, ...]
    step: int | None
    rows: int | None


def history_entry(
    *,
    version: int,
    timestamp: datetime,
    operation: str,
    user_metadata: str | None,
    metrics: Mapping[str, object] | None,
) -> HistoryEntry:
    """One entry, from the fields of a history row (Spark's or delta-rs')."""
    try:
        metadata = json.loads(user_metadata) if user_metadata else {}
    except json.JSONDecodeError:
        metadata = {}
    if not isinstance(metadata, dict) or "lakesink" not in metadata:
        metadata = {}
    txn_ids = metadata.get("txn_ids") or ([metadata["txn_id"]] if "txn_id" in metadata else [])
    metric = (metrics or {}).get(_ROWS_METRIC.get(operation, ""))
    return HistoryEntry(
        version=int(version),
        timestamp=timestamp,
        operation=operation,
        lakesink=metadata.get("lakesink"),
        checkpoint_id=metadata.get("checkpoint_id"),
        txn_ids=tuple(txn_ids),
        step=metadata.get("step"),
        rows=int(str(metric)) if metric is not None else None,
    )


def first_versions(history: Sequence[HistoryEntry], operation: str) -> dict[str, int]:
    """Per transaction, the first version of ``operation`` that changed rows of it.

    A repeated commit (recovery re-commits when in doubt) flips nothing: the first MERGE
    that flipped rows is the one that made the transaction visible.
    """
    found: dict[str, int] = {}
    for entry in sorted(history, key=lambda e: e.version):
        if entry.lakesink == operation and entry.rows != 0:
            for txn_id in entry.txn_ids:
                found.setdefault(txn_id, entry.version)
    return found
