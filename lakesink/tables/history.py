"""What lakesink's own commits did, read back from a sink table's Delta history and log.

Each Delta commit lakesink makes carries ``userMetadata`` (``tables.format.commit_metadata``)
naming its operation, checkpoint and transactions. The audit reads the history through
Spark, the table object through delta-rs; both read each entry, and which version made a
transaction visible, here. A writer looks its own commit up in the log files
(``find_commit``): an append whose answer was lost may have landed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lakesink.errors import TableNotFoundError
from lakesink.storage.files import folder_names, read_bytes
from lakesink.storage.location import join

__all__ = [
    "HistoryEntry",
    "commit_actions",
    "find_commit",
    "first_versions",
    "history_entry",
    "table_version",
]

# How far a commit's time (the committing process's clock) may trail the clock of the
# process that looks for it.
CLOCK_SKEW_MS = 60_000

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


def table_version(path: str) -> int:
    """The newest version of the Delta table at ``path``: its newest commit in the log
    (listed, not read: delta-rs would load every file of the table).

    Raises:
        TableNotFoundError: No commit there.
    """
    versions = [
        int(name.split(".")[0])
        for name in folder_names(join(path, "_delta_log"))
        if name.endswith(".json") and name.split(".")[0].isdigit()
    ]
    if not versions:
        raise TableNotFoundError(f"no Delta table at {path}")
    return max(versions)


def commit_actions(path: str, version: int) -> list[dict[str, Any]]:
    """The actions of version ``version`` of the Delta table at ``path``, from its log file.

    Raises:
        FileNotFoundError: No such version (yet, or any more).
    """
    content = read_bytes(join(path, "_delta_log", f"{version:020d}.json"))
    return [json.loads(line) for line in content.decode().splitlines() if line.strip()]


def find_commit(path: str, user_metadata: str, *, since_ms: int) -> int | None:
    """The version of the commit of the table at ``path`` that carries ``user_metadata``,
    made after ``since_ms`` (milliseconds since the epoch); None if there is none.

    Reads the log from its newest version back to the first commit older than
    ``since_ms``: a few files, for a writer that sent its commit a moment ago.
    """
    for version in range(table_version(path), -1, -1):
        try:
            actions = commit_actions(path, version)
        except FileNotFoundError:  # cleaned up: older than any commit in question
            return None
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if info.get("userMetadata") == user_metadata:
            return version
        if int(info.get("timestamp", 0)) < since_ms - CLOCK_SKEW_MS:
            return None
    return None
