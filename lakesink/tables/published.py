"""The published table of a sink table: its committed rows, for every engine that reads Delta
by path, without a filter and without copying a byte.

A sink table holds its committed rows in one partition's folder (``PUBLISHED_FOLDER``). The
published table is a plain Delta table rooted in that folder, whose ``add`` actions name
the same files by their paths below it: DuckDB's ``delta_scan``, polars' ``scan_delta``,
Daft, Trino, delta-rs and Spark read it by its path (``published_path``) and see the
committed rows and the user's columns, nothing else. Its schema is the sink table's user
columns; it is unpartitioned (``lakesink.tables.format`` says why), each file's statistics
carrying the user partition values, which the files hold too.

It is derived, never ahead: ``publish`` brings it up to the sink table's newest version,
applying the committed partition's adds and removes of each sink commit since the one it
mirrors (a commit's ``txn`` action records which: ``PUBLISHED_APP_ID``'s version), in one
commit of its own whose ``userMetadata`` names the checkpoints it adds. The sink's
committers, recovery, the vacuum and the operator's commands call it after they change the
sink table.

Failure scenarios it handles:

1. A crash after a sink commit, before the published table's: it stays at the committed
   state before (behind, never wrong); the next open, commit or vacuum brings it up.
2. Two brought up at once (two writers of one table, a writer and the vacuum): each
   commits only right after the version it read; the other's commit fails, and it reads
   again and finds less, or nothing, to do.
3. The sink's log was cleaned past the version it mirrors (it stayed behind longer than
   the log's retention): it is brought up from the sink's files at its newest version
   instead, each file added or removed by comparing the two tables' lists.
4. A crash while it is created: its creation is one commit (the schema, no file); a
   folder left without it gets it at the next call.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from deltalake.exceptions import DeltaError
from deltalake.schema import Field, Schema
from deltalake.transaction import AddAction, RemoveAction

from lakesink.errors import CommitFailedError, TableNotFoundError
from lakesink.storage.access import translated
from lakesink.storage.files import is_delta_table
from lakesink.storage.options import StorageOptions
from lakesink.tables.commits import commit
from lakesink.tables.deltars import delta_table
from lakesink.tables.format import (
    HIDDEN_PREFIX,
    PUBLISHED_APP_ID,
    PUBLISHED_FOLDER,
    SINK_ID_PROPERTY,
    VISIBLE,
    commit_metadata,
    published_path,
    user_fields,
)
from lakesink.tables.history import (
    commit_actions,
    commit_user_metadata,
    table_version,
    version_at,
)

__all__ = ["PublishedTable", "current_version", "publish", "published_table"]

log = logging.getLogger(__name__)

# Attempts before giving up: each is needed only when another update landed first.
ROUNDS = 10
# Partition value types whose Delta string is also their statistic's JSON value.
_STAT_TYPES = {"string": str, "date": str, "integer": int, "long": int, "short": int, "byte": int}


@dataclass(frozen=True, kw_only=True)
class PublishedTable:
    """Where a sink table's published table stands.

    Attributes:
        path: Its location (inside the sink table's committed partition).
        version: Its newest Delta version (None: not created yet).
        sink_version: The sink table version it shows (None: none yet).
        behind: How many sink versions after that one change the committed rows (0: it
            is up to date; versions that only add pending rows change nothing it shows).
    """

    path: str
    version: int | None
    sink_version: int | None
    behind: int


def published_table(sink_path: str) -> PublishedTable:
    """Where the published table of the sink table at ``sink_path`` stands; changes nothing."""
    path = published_path(sink_path)
    version = shown = None
    if is_delta_table(path):
        table = delta_table(path)
        version, shown = table.version(), table.transaction_version(PUBLISHED_APP_ID)
    changing = 0
    for sink_version in range(-1 if shown is None else shown, table_version(sink_path)):
        try:
            changing += bool(_since(sink_path, sink_version, sink_version + 1).changed)
        except FileNotFoundError:  # cleaned: counted as a change, to be safe
            changing += 1
    return PublishedTable(path=path, version=version, sink_version=shown, behind=changing)


def publish(sink_path: str) -> PublishedTable:
    """Bring the published table of the sink table at ``sink_path`` up to the sink's newest
    version (creating it first if need be); return where it stands.

    What it reads is the sink's commits since the version the published table shows: a
    few small files, whatever the table's history or size (the sink table itself is
    loaded only to create the published table, or in scenario 3).

    Raises:
        CommitFailedError: Other updates kept landing first, every round.
        StorageAccessError: The store refused or did not answer.
    """
    path = published_path(sink_path)
    for _ in range(ROUNDS):
        target = table_version(sink_path)
        if not is_delta_table(path):
            _create(path, _user_fields(delta_table(sink_path, version=target)))
        table = delta_table(path)
        mirrored = table.transaction_version(PUBLISHED_APP_ID)
        if mirrored is not None and mirrored >= target:
            return PublishedTable(
                path=path, version=table.version(), sink_version=mirrored, behind=0
            )
        try:
            changes = _since(sink_path, -1 if mirrored is None else mirrored, target)
        except FileNotFoundError:  # scenario 3: the sink's log no longer reaches back
            changes = _difference(delta_table(sink_path, version=target), table)
        if changes.fields is not None and _evolve(table, changes.fields):
            table = delta_table(path)  # its new version: what the update below follows
        if not changes.changed:  # pending rows only: nothing it shows changed
            return PublishedTable(
                path=path, version=table.version(), sink_version=mirrored, behind=0
            )
        types = {f["name"]: f["type"] for f in json.loads(table.schema().to_json())["fields"]}
        actions: list[AddAction | RemoveAction] = [
            *changes.removes,
            *(_published_add(a, types) for a in changes.adds),
        ]
        metadata = json.loads(
            commit_metadata(
                "publish",
                changes.sink_id or "",
                sink_version=target,
                checkpoints=sorted(changes.checkpoints),
            )
        )
        try:
            landed = commit(
                path,
                table,
                actions,
                metadata,
                transactions=[(PUBLISHED_APP_ID, target)],
                retries=0,  # scenario 2: right after what it read, or not at all
            )
        except DeltaCommitFailedError:
            continue
        log.debug(
            "published table %s at version %d shows %s@%d", path, landed.version, sink_path, target
        )
        return PublishedTable(path=path, version=landed.version, sink_version=target, behind=0)
    raise CommitFailedError(
        f"bringing the published table {path} up to date conflicted with other updates "
        f"in each of {ROUNDS} attempts; the next commit or vacuum brings it up"
    )


@dataclass
class _Changes:
    """What the published table lacks: files to add (the sink's ``add`` actions), removals
    (its own), and the checkpoints whose commits added rows."""

    adds: list[dict[str, Any]]
    removes: list[RemoveAction]
    checkpoints: set[int]
    fields: list[dict[str, Any]] | None = None  # the user's columns, if they may have changed
    sink_id: str | None = None  # the sink, as its commits name it

    @property
    def changed(self) -> bool:
        return bool(self.adds or self.removes)


def _since(sink_path: str, mirrored: int, target: int) -> _Changes:
    """The committed partition's adds and removes of the sink versions after ``mirrored``
    up to ``target``, netted by path.

    Raises:
        FileNotFoundError: The sink's log no longer holds one of them.
    """
    adds: dict[str, dict[str, Any]] = {}
    removes: dict[str, dict[str, Any]] = {}
    checkpoints: set[int] = set()
    fields, sink_id = None, None
    for version in range(mirrored + 1, target + 1):
        for action in commit_actions(sink_path, version):
            if "add" in action and _committed(action["add"]):
                adds[action["add"]["path"]] = action["add"]
            elif "remove" in action and _committed(action["remove"]):
                path = action["remove"]["path"]
                if adds.pop(path, None) is None:
                    removes[path] = action["remove"]
            elif "metaData" in action:
                fields = user_fields(json.loads(action["metaData"]["schemaString"]))
            elif "commitInfo" in action:
                lakesink = _lakesink_metadata(action["commitInfo"])
                sink_id = lakesink.get("sink_id", sink_id)
                if lakesink.get("lakesink") == "commit" and isinstance(
                    lakesink.get("checkpoint_id"), int
                ):
                    checkpoints.add(lakesink["checkpoint_id"])
    return _Changes(
        adds=list(adds.values()),
        removes=[_published_removal(r) for r in removes.values()],
        checkpoints=checkpoints,
        fields=fields,
        sink_id=sink_id,
    )


def _difference(sink: DeltaTable, table: DeltaTable) -> _Changes:
    """What the published table lacks and holds in excess, from both tables' file lists."""
    prefix = f"{PUBLISHED_FOLDER}/"
    wanted = {a["path"]: a for a in _adds(sink) if a["partitionValues"].get(VISIBLE) == "true"}
    held = {a["path"]: a for a in _adds(table)}
    adds = [a for p, a in wanted.items() if _relative(p) not in held]
    gone = [a for p, a in held.items() if f"{prefix}{p}" not in wanted]
    return _Changes(
        adds=adds,
        removes=[_published_removal(a | {"path": prefix + a["path"]}) for a in gone],
        checkpoints=set(),
        fields=_user_fields(sink),
        sink_id=sink.metadata().configuration.get(SINK_ID_PROPERTY),
    )


def _adds(table: DeltaTable) -> list[dict[str, Any]]:
    """A table's live files as ``add`` actions of its log (delta-rs gives each path as the
    log spells it)."""
    actions = pa.table(table.get_add_actions(flatten=False))
    if "path" not in actions.column_names:
        return []
    return [
        {
            "path": row["path"],
            "size": row["size_bytes"],
            "modificationTime": row["modification_time"],
            "dataChange": True,
            "partitionValues": {k: _spelled(v) for k, v in (row.get("partition") or {}).items()},
            "stats": _stats_json(row),
        }
        for row in actions.to_pylist()
    ]


def _spelled(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def _stats_json(row: Mapping[str, Any]) -> str | None:
    if row.get("num_records") is None:
        return None
    return json.dumps(
        {
            "numRecords": row["num_records"],
            "nullCount": row.get("null_count") or {},
            "minValues": row.get("min") or {},
            "maxValues": row.get("max") or {},
        },
        default=str,
    )


def _committed(file: Mapping[str, Any]) -> bool:
    return (file.get("partitionValues") or {}).get(VISIBLE) == "true"


def _relative(path: str) -> str:
    """A committed file's path as the published table names it: below the committed
    partition's folder (as the sink's log spells it)."""
    prefix = f"{PUBLISHED_FOLDER}/"
    if not path.startswith(prefix):
        raise CommitFailedError(
            f"a committed file is not in the committed partition's folder ({path}); "
            "lakesink tables take no random file prefixes"
        )
    return path[len(prefix) :]


def _published_add(add: Mapping[str, Any], types: Mapping[str, Any]) -> AddAction:
    """The sink's ``add`` of a committed file, as the published table adds it: its path
    below the committed folder, no partition values, statistics of the user's columns
    (those of a user partition column from its value)."""
    values = add.get("partitionValues") or {}
    stats = json.loads(add.get("stats") or "{}")
    for key in ("minValues", "maxValues", "nullCount"):
        stats[key] = {
            c: v for c, v in (stats.get(key) or {}).items() if not c.startswith(HIDDEN_PREFIX)
        }
    for column, value in values.items():
        if column.startswith(HIDDEN_PREFIX):
            continue
        if value is None:
            stats["nullCount"][column] = stats.get("numRecords")
            continue
        stats["nullCount"][column] = 0
        kind = _STAT_TYPES.get(types.get(column, ""))
        if kind is not None:  # other types' partition strings are not their stats' form
            stats["minValues"][column] = stats["maxValues"][column] = kind(value)
    return AddAction(
        _relative(add["path"]),
        add["size"],
        {},
        add["modificationTime"],
        add.get("dataChange", True),
        json.dumps(stats),
    )


def _published_removal(remove: Mapping[str, Any]) -> RemoveAction:
    return RemoveAction(
        _relative(remove["path"]),
        remove.get("dataChange", True),
        int(remove.get("deletionTimestamp") or remove.get("modificationTime") or 0),
        size=remove.get("size"),
        partition_values={},
    )


def _lakesink_metadata(info: Mapping[str, Any]) -> dict[str, Any]:
    """A sink commit's lakesink ``userMetadata`` ({} for one lakesink did not make)."""
    try:
        metadata = json.loads(info.get("userMetadata") or "{}")
    except json.JSONDecodeError:
        return {}
    return metadata if isinstance(metadata, dict) and "lakesink" in metadata else {}


def _user_fields(sink: DeltaTable) -> list[dict[str, Any]]:
    return user_fields(json.loads(sink.schema().to_json()))


def _create(path: str, fields: list[dict[str, Any]]) -> None:
    """Create the published table at ``path``, no file in it (scenario 4)."""
    schema = Schema.from_json(json.dumps({"type": "struct", "fields": fields}))
    storage = StorageOptions.from_env()
    try:
        with translated(path):
            DeltaTable.create(
                storage.deltars_uri(path),
                schema,
                mode="ignore",
                storage_options=storage.deltars_options(path) or None,
            )
    except DeltaError:  # another process created it meanwhile
        if not is_delta_table(path):
            raise
    log.info("created the published table %s", path)


def _evolve(table: DeltaTable, fields: list[dict[str, Any]]) -> bool:
    """Add to the published table the columns the sink table gained (lakesink only ever
    adds nullable columns); return whether there were any."""
    have = {f["name"] for f in json.loads(table.schema().to_json())["fields"]}
    added = [f for f in fields if f["name"] not in have]
    if added:
        table.alter.add_columns([Field.from_json(json.dumps(f)) for f in added])
        log.info(
            "published table %s: added column(s) %s",
            table.table_uri,
            ", ".join(f["name"] for f in added),
        )
    return bool(added)


def current_version(sink_path: str) -> int | None:
    """The newest version of the published table, if it shows the sink table's newest
    committed rows (the sink versions since the one it shows added pending rows only);
    None if the table has none, or it is behind. Read from the two logs' newest commits,
    no table's file list loaded."""
    path = published_path(sink_path)
    try:
        version = table_version(path)
    except TableNotFoundError:  # none (yet)
        return None
    shown = _shown_back_from(path, version)
    if shown is None:
        return None
    try:
        if _since(sink_path, shown, table_version(sink_path)).changed:
            return None
    except FileNotFoundError:  # the sink's log was cleaned past it: far behind
        return None
    return version


def oldest_shown(sink_path: str, since: datetime) -> int | None:
    """The oldest sink table version that a version of the published table committed since
    ``since`` (or current then) shows; None before its first update.

    Each update shows a sink version at least as new as the one before, so it is the one
    the version current at ``since`` shows (or, if the table is younger, its first update).
    """
    path = published_path(sink_path)
    if not is_delta_table(path):
        return None
    start = version_at(path, since)
    # The update current then (if its log still holds it); if none showed one (its
    # creation was current then), its first update.
    if start is not None and (shown := _shown_back_from(path, start)) is not None:
        return shown
    for version in range(0 if start is None else start + 1, table_version(path) + 1):
        with contextlib.suppress(FileNotFoundError):
            shown = commit_user_metadata(path, version).get("sink_version")
            if isinstance(shown, int):
                return shown
    return None


def _shown_back_from(path: str, version: int) -> int | None:
    """The sink version that the newest update of the published table at ``path`` up to
    ``version`` shows; None if there is none, or the log no longer holds it."""
    for older in range(version, -1, -1):
        try:
            shown = commit_user_metadata(path, older).get("sink_version")
        except FileNotFoundError:
            return None
        if isinstance(shown, int):
            return shown
    return None
