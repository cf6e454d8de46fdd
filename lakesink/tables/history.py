"""What lakesink's own commits did, read back from a sink table's Delta log.

Each Delta commit lakesink makes carries ``userMetadata`` (``tables.format.commit_metadata``)
naming its operation, checkpoint and transactions. The table's history is read here, one
way, from the commit files of its log (``read_history``): by the audit, at the version it
pinned, and by ``lakesink.Table`` and the read-only commands, which have no JVM. A writer
looks its own commit up in the same files (``find_commit``): an append whose answer was
lost may have landed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from lakesink.errors import TableNotFoundError
from lakesink.storage.files import folder_names, read_bytes
from lakesink.storage.location import join

__all__ = [
    "HistoryEntry",
    "commit_actions",
    "commit_rows",
    "commit_time",
    "commit_user_metadata",
    "find_commit",
    "first_versions",
    "last_operation",
    "lineage",
    "read_history",
    "table_version",
    "version_at",
]

# Commit files read at once: a history of thousands of versions on an object store is one
# request per version.
LOG_READERS = 16

# How far a commit's time (the committing process's clock) may trail the clock of the
# process that looks for it.
CLOCK_SKEW_MS = 60_000

# The operationMetrics entry that counts the rows an operation wrote, flipped or deleted.
_ROWS_METRIC = {
    "WRITE": "numOutputRows",
    "STREAMING UPDATE": "numOutputRows",
    "MERGE": "numTargetRowsInserted",
    "UPDATE": "numUpdatedRows",
    "DELETE": "numDeletedRows",
}


@dataclass(frozen=True, kw_only=True)
class HistoryEntry:
    """One Delta version of the table, with what lakesink says it did.

    Attributes:
        version: The Delta version.
        timestamp: When it was committed (None if its commit does not say).
        operation: Delta's operation name (``WRITE``, ``MERGE``, ``DELETE``, ...; empty
            if its commit does not say).
        lakesink: The lakesink operation (``write``, ``commit``, ``vacuum``), or None for
            a version lakesink did not make.
        checkpoint_id: The checkpoint a write or commit belongs to.
        txn_ids: The transaction(s) it touched: one for a write or commit, the vacuumed
            ones for a vacuum.
        step: The append's number within its transaction (writes only).
        rows: Rows appended (write), made visible (commit) or deleted (vacuum), from
            Delta's operation metrics.
        restored_to: For a ``RESTORE``, the version (or the time) it took the table back
            to; None for any other operation.
    """

    version: int
    timestamp: datetime | None
    operation: str
    lakesink: str | None
    checkpoint_id: int | None
    txn_ids: tuple[str, ...]
    step: int | None
    rows: int | None
    restored_to: int | datetime | None = None


# Neither Spark's history nor delta-rs' serves both readers. Spark's needs a JVM, which
# Table and the read-only commands do without. delta-rs 1.6 numbers the commit infos it
# finds down from the version it opened: a table opened as of an older version (the
# audit's pin) gets the newest commits under older numbers, and a commit without a
# commitInfo action (the protocol makes it optional) is left out, shifting every older
# version by one, so a change made that way would hide from the audit. The commit files
# are what both read; read here, each version is the number of its file.
def read_history(path: str, *, up_to: int | None = None) -> list[HistoryEntry]:
    """The Delta history of the table at ``path``, oldest first, up to version ``up_to``
    (all of it if None), with what lakesink says each commit did.

    Versions older than the table's log retention (``delta.logRetentionDuration``, 30 days
    by default) are gone from its log and so from here.

    Raises:
        StorageAccessError: The store refused or did not answer.
    """
    versions = [v for v in _commit_versions(path) if up_to is None or v <= up_to]
    with ThreadPoolExecutor(max_workers=LOG_READERS) as pool:
        infos = list(pool.map(lambda version: _commit_info(path, version), versions))
    return [
        _entry(version, info)
        for version, info in zip(versions, infos, strict=True)
        if info is not None  # cleaned up since the listing: older than the retention
    ]


def _entry(version: int, info: Mapping[str, Any]) -> HistoryEntry:
    try:
        metadata = json.loads(info.get("userMetadata") or "{}")
    except json.JSONDecodeError:
        metadata = {}
    if not isinstance(metadata, dict) or "lakesink" not in metadata:
        metadata = {}
    txn_ids = metadata.get("txn_ids") or ([metadata["txn_id"]] if "txn_id" in metadata else [])
    operation = str(info.get("operation", ""))
    metric = (info.get("operationMetrics") or {}).get(_ROWS_METRIC.get(operation, ""))
    # With in-commit timestamps on, that is the commit's time (as Spark's history shows).
    millis = info.get("inCommitTimestamp", info.get("timestamp"))
    return HistoryEntry(
        version=version,
        timestamp=(
            None if millis is None else datetime.fromtimestamp(millis / 1000, tz=timezone.utc)
        ),
        operation=operation,
        lakesink=metadata.get("lakesink"),
        checkpoint_id=metadata.get("checkpoint_id"),
        txn_ids=tuple(txn_ids),
        step=metadata.get("step"),
        # delta-rs records no metrics: lakesink's own commits through it name their rows
        rows=int(str(metric)) if metric is not None else metadata.get("rows"),
        restored_to=_restored_to(info) if operation == "RESTORE" else None,
    )


def _restored_to(info: Mapping[str, Any]) -> int | datetime | None:
    """What a RESTORE took the table back to: ``RESTORE ... TO VERSION AS OF`` records the
    version, ``... TO TIMESTAMP AS OF`` the time."""
    parameters = info.get("operationParameters") or {}
    version, moment = parameters.get("version"), parameters.get("timestamp")
    if version is not None and str(version).isdigit():
        return int(version)
    if moment:
        with contextlib.suppress(ValueError):
            parsed = datetime.fromisoformat(str(moment))
            return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return None


def lineage(history: Sequence[HistoryEntry]) -> set[int]:
    """The versions whose changes the table's newest version holds: each version back from
    the newest, except that a RESTORE holds its target version's state, not the versions
    between (they were undone). A version older than the log's retention is taken to hold
    the one before it."""
    by_version = {entry.version: entry for entry in history}
    if not by_version:
        return set()
    held: set[int] = set()
    version = max(by_version)
    while version >= 0 and version not in held:
        held.add(version)
        target = by_version[version].restored_to if version in by_version else None
        if isinstance(target, datetime):
            target = max(
                (e.version for e in history if e.timestamp is not None and e.timestamp <= target),
                default=None,
            )
        version = target if isinstance(target, int) and target < version else version - 1
    return held


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
    versions = _commit_versions(path)
    if not versions:
        raise TableNotFoundError(f"no Delta table at {path}")
    return versions[-1]


def _commit_versions(path: str) -> list[int]:
    """The versions of the commit files in the table's log, oldest first (listed, not read)."""
    return sorted(
        int(name.split(".")[0])
        for name in folder_names(join(path, "_delta_log"))
        if name.endswith(".json") and name.split(".")[0].isdigit()
    )


def commit_actions(path: str, version: int) -> list[dict[str, Any]]:
    """The actions of version ``version`` of the Delta table at ``path``, from its log file.

    Raises:
        FileNotFoundError: No such version (yet, or any more).
    """
    return list(_actions(path, version))


def _actions(path: str, version: int) -> Iterator[dict[str, Any]]:
    """The actions of a version, parsed as they are taken (its file is read at once)."""
    content = read_bytes(join(path, "_delta_log", f"{version:020d}.json"))
    return (json.loads(line) for line in content.decode().splitlines() if line.strip())


def _commit_info(path: str, version: int) -> dict[str, Any] | None:
    """The ``commitInfo`` action of a version ({} if it has none), None if its file is gone.

    Spark and delta-rs write it first, so the rest (a MERGE's every file) is not parsed.
    """
    try:
        actions = _actions(path, version)
    except FileNotFoundError:
        return None
    return next((dict(a["commitInfo"]) for a in actions if "commitInfo" in a), {})


def find_commit(path: str, user_metadata: str, *, since_ms: int) -> int | None:
    """The version of the commit of the table at ``path`` that carries ``user_metadata``,
    made after ``since_ms`` (milliseconds since the epoch); None if there is none.

    A commit lakesink made through delta-rs adds keys of its own to the ``userMetadata``
    it is given (a nonce, its rows: ``lakesink.tables.commits``), so a JSON object matches
    one that holds every key and value of it. Reads the log from its newest version back to
    the first commit older than ``since_ms``: a few files, for a writer that sent its
    commit a moment ago.
    """
    wanted = _parsed(user_metadata)
    for version in range(table_version(path), -1, -1):
        info = _commit_info(path, version)
        if info is None:  # cleaned up: older than any commit in question
            return None
        found = _parsed(info.get("userMetadata"))
        if found == wanted or (
            isinstance(found, dict) and isinstance(wanted, dict) and found.items() >= wanted.items()
        ):
            return version
        if int(info.get("timestamp", 0)) < since_ms - CLOCK_SKEW_MS:
            return None
    return None


def _parsed(user_metadata: object) -> object:
    try:
        return json.loads(str(user_metadata))
    except json.JSONDecodeError:
        return user_metadata


def last_operation(path: str, txn_id: str, operations: Collection[str]) -> HistoryEntry | None:
    """The newest lakesink commit of one of ``operations`` (``commit``, ``write``, ...) that
    names transaction ``txn_id``, looked for from the table's newest version back to the
    transaction's first write; None if there is none since then.

    Raises:
        LookupError: The log was cleaned before the search reached the transaction's writes
            (older than the table's log retention): it cannot tell.
    """
    for version in range(table_version(path), -1, -1):
        info = _commit_info(path, version)
        if info is None:
            break
        entry = _entry(version, info)
        if txn_id in entry.txn_ids:
            if entry.lakesink in operations:
                return entry
            if entry.lakesink == "write":
                return None
    raise LookupError(f"the log of {path} no longer reaches back to transaction {txn_id}")


def commit_rows(path: str, version: int) -> int | None:
    """The rows version ``version`` appended, flipped or deleted, as its commit says (None:
    it does not, or there is no such version)."""
    info = _commit_info(path, version)
    return None if info is None else _entry(version, info).rows


def commit_time(path: str, version: int) -> datetime | None:
    """When version ``version`` of the table was committed (None: no such version)."""
    info = _commit_info(path, version)
    millis = None if info is None else info.get("inCommitTimestamp", info.get("timestamp"))
    return None if millis is None else datetime.fromtimestamp(millis / 1000, tz=timezone.utc)


def commit_user_metadata(path: str, version: int) -> dict[str, Any]:
    """The ``userMetadata`` of version ``version``, parsed ({} if it has none, or no JSON).

    Raises:
        FileNotFoundError: No such version (yet, or any more).
    """
    info = _commit_info(path, version)
    if info is None:
        raise FileNotFoundError(f"{path} has no version {version}")
    try:
        metadata = json.loads(info.get("userMetadata") or "{}")
    except json.JSONDecodeError:
        return {}
    return metadata if isinstance(metadata, dict) else {}


def version_at(path: str, when: datetime) -> int | None:
    """The table's newest version committed at or before ``when`` (None: none was, or the
    log no longer holds it), found by bisecting the log's commit times."""
    versions = _commit_versions(path)
    low, high, found = 0, len(versions) - 1, None
    while low <= high:
        middle = (low + high) // 2
        at = commit_time(path, versions[middle])
        if at is not None and at <= when:
            found, low = versions[middle], middle + 1
        else:
            high = middle - 1
    return found
