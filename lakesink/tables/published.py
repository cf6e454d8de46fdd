"""The published table of a sink table: its committed rows, for every engine that reads Delta
by path, without a filter and without copying a byte (but for rows deletion vectors drop).

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
committers, recovery, the vacuum and the operator's commands (``lakesink publish``) call it
after they change the sink table; what other writers change (a ``DELETE``, ``UPDATE``,
``MERGE``, ``RESTORE``, ``OPTIMIZE``, ``REORG`` or ``VACUUM`` of the user's) it takes the
same way, at lakesink's next call.

A committed file that carries a deletion vector (a ``DELETE`` on a table with
``delta.enableDeletionVectors``) is named through a **purged copy**: the file without its
deleted rows, written once per vector into ``PURGED_FOLDER`` below the published table's
root. The published table then carries no deletion vector, and every engine reads it
right, those that read no vector (delta-rs, polars) included. It costs a read and a write
of each such file once per vector, only where one appears.

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
5. A committed file gained a deletion vector, or another one: its purged copy replaces
   what the published table named for it. A crash after the copy is written, before the
   commit, leaves a copy no version names: the next call writes the same file again (its
   name is its vector's digest), and lakesink's vacuum removes copies no version reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from deltalake.exceptions import DeltaError
from deltalake.schema import Field, Schema
from deltalake.transaction import AddAction, RemoveAction

from lakesink.errors import CommitFailedError, TableNotFoundError
from lakesink.storage.access import translated
from lakesink.storage.files import file_exists, file_times, is_delta_table, remove_file
from lakesink.storage.location import join
from lakesink.storage.options import StorageOptions
from lakesink.tables.commits import commit
from lakesink.tables.deletions import (
    PurgedFile,
    has_deletion_vectors,
    kept_rows,
    purge,
    purged_name,
)
from lakesink.tables.deltars import delta_table, read_sink_table_log
from lakesink.tables.format import (
    HIDDEN_PREFIX,
    PUBLISHED_APP_ID,
    PUBLISHED_FOLDER,
    PURGED_FOLDER,
    SINK_ID_PROPERTY,
    VISIBLE,
    commit_metadata,
    published_path,
    user_fields,
)
from lakesink.tables.history import (
    commit_actions,
    commit_time,
    commit_user_metadata,
    table_version,
    version_at,
)
from lakesink.tables.journal import Journal
from lakesink.tables.restores import journal_restores

__all__ = [
    "PublishedTable",
    "current_version",
    "publish",
    "published_table",
    "remove_unread_copies",
]

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
        gone: Files it names that are gone from the store (a VACUUM removed them once the
            sink table let them go): reading it fails until it is brought up.
    """

    path: str
    version: int | None
    sink_version: int | None
    behind: int
    gone: tuple[str, ...] = ()


def published_table(sink_path: str) -> PublishedTable:
    """Where the published table of the sink table at ``sink_path`` stands; changes nothing."""
    path = published_path(sink_path)
    table, version, shown = None, None, None
    if is_delta_table(path):
        table = delta_table(path)
        version, shown = table.version(), table.transaction_version(PUBLISHED_APP_ID)
    changing = 0
    newest = table_version(sink_path)
    for sink_version in range(-1 if shown is None else shown, newest):
        try:
            changing += bool(_since(sink_path, sink_version, sink_version + 1).changed)
        except FileNotFoundError:  # cleaned: counted as a change, to be safe
            changing += 1
    gone = _gone(sink_path, table, shown, newest) if table is not None and changing else ()
    return PublishedTable(
        path=path, version=version, sink_version=shown, behind=changing, gone=gone
    )


def _gone(sink_path: str, table: DeltaTable, shown: int | None, newest: int) -> tuple[str, ...]:
    """The files the published table names that the sink versions after ``shown`` let go
    and that are no longer in the store."""
    try:
        changes = _since(sink_path, -1 if shown is None else shown, newest)
    except FileNotFoundError:
        changes = _difference(delta_table(sink_path, version=newest))
    held = _held(table)
    wanted = {_published_key(_relative(p)) for p in changes.files}
    names = [h["path"] for k, h in held.items() if k in wanted or changes.complete]
    return tuple(n for n in names if not file_exists(join(published_path(sink_path), unquote(n))))


def publish(sink_path: str) -> PublishedTable:
    """Bring the published table of the sink table at ``sink_path`` up to the sink's newest
    version (creating it first if need be); return where it stands.

    What it reads is the sink's commits since the version the published table shows: a
    few small files, whatever the table's history or size (the sink table itself is
    loaded only to create the published table, in scenario 3, or to read the deletion
    vectors of files it is to name, scenario 5).

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
            changes = _difference(delta_table(sink_path, version=target))
        if changes.restored:
            _journal_restores(sink_path)
        if changes.fields is not None and _evolve(table, changes.fields):
            table = delta_table(path)  # its new version: what the update below follows
        actions = _update(sink_path, target, table, changes)
        if not actions:  # pending rows only: nothing it shows changed
            return PublishedTable(
                path=path, version=table.version(), sink_version=mirrored, behind=0
            )
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
    """What changed in the sink's committed partition: each committed file touched (its
    path as the sink's log spells it) with its ``add`` as it ends up (None: gone), and the
    checkpoints whose commits added rows.

    With ``complete``, ``files`` holds every committed file of the sink: a file the
    published table names that is not among them is gone too.
    """

    files: dict[str, dict[str, Any] | None]
    checkpoints: set[int]
    fields: list[dict[str, Any]] | None = None  # the user's columns, if they may have changed
    sink_id: str | None = None  # the sink, as its commits name it
    complete: bool = False
    restored: bool = False  # a RESTORE is among the versions (or may be: ``complete``)

    @property
    def changed(self) -> bool:
        return bool(self.files)


def _since(sink_path: str, mirrored: int, target: int) -> _Changes:
    """The committed files the sink versions after ``mirrored`` up to ``target`` added or
    removed, each with its ``add`` at ``target`` (None: gone by then).

    A file is live under its path and its deletion vector: a DELETE with deletion vectors
    removes a file and adds it again, in one commit, with another vector.

    Raises:
        FileNotFoundError: The sink's log no longer holds one of them.
    """
    live: dict[tuple[str, str | None], dict[str, Any]] = {}  # added since, still there
    touched: set[str] = set()
    checkpoints: set[int] = set()
    fields, sink_id, restored = None, None, False
    for version in range(mirrored + 1, target + 1):
        for action in commit_actions(sink_path, version):
            if "add" in action and _committed(action["add"]):
                live[_file_key(action["add"])] = action["add"]
                touched.add(action["add"]["path"])
            elif "remove" in action and _committed(action["remove"]):
                live.pop(_file_key(action["remove"]), None)
                touched.add(action["remove"]["path"])
            elif "metaData" in action:
                fields = user_fields(json.loads(action["metaData"]["schemaString"]))
            elif "commitInfo" in action:
                restored |= action["commitInfo"].get("operation") == "RESTORE"
                lakesink = _lakesink_metadata(action["commitInfo"])
                sink_id = lakesink.get("sink_id", sink_id)
                if lakesink.get("lakesink") == "commit" and isinstance(
                    lakesink.get("checkpoint_id"), int
                ):
                    checkpoints.add(lakesink["checkpoint_id"])
    ending = {path: add for (path, _), add in live.items()}
    return _Changes(
        files={path: ending.get(path) for path in touched},
        checkpoints=checkpoints,
        fields=fields,
        sink_id=sink_id,
        restored=restored,
    )


def _file_key(action: Mapping[str, Any]) -> tuple[str, str | None]:
    """A file as Delta tells live files apart: its path and its deletion vector's id."""
    vector = action.get("deletionVector")
    if not vector:
        return action["path"], None
    return action[
        "path"
    ], f"{vector['storageType']}{vector['pathOrInlineDv']}@{vector.get('offset')}"


def _difference(sink: DeltaTable) -> _Changes:
    """Every committed file of the sink at its version (scenario 3), from its file list."""
    vectors = kept_rows(sink) if has_deletion_vectors(sink) else {}
    files: dict[str, dict[str, Any] | None] = {}
    for add in _adds(sink):
        if add["partitionValues"].get(VISIBLE) == "true":
            if unquote(add["path"]) in vectors:
                add["deletionVector"] = {"storageType": "listed"}  # found by kept_rows
            files[add["path"]] = add
    return _Changes(
        files=files,
        checkpoints=set(),
        fields=_user_fields(sink),
        sink_id=sink.metadata().configuration.get(SINK_ID_PROPERTY),
        complete=True,
        restored=True,
    )


def _update(
    sink_path: str, target: int, table: DeltaTable, changes: _Changes
) -> list[AddAction | RemoveAction]:
    """The published table's actions that make it name, for each changed committed file,
    the file (or its purged copy, scenario 5) as the sink has it at ``target``."""
    held = _held(table)
    types = {f["name"]: f["type"] for f in json.loads(table.schema().to_json())["fields"]}
    vectors: dict[str, pa.BooleanArray] | None = None
    actions: list[AddAction | RemoveAction] = []
    seen = set()
    for sink_file, add in sorted(changes.files.items()):
        name = _relative(sink_file)
        key = _published_key(name)
        seen.add(key)
        have = held.get(key)
        if add is not None and add.get("deletionVector"):
            if vectors is None:
                vectors = kept_rows(delta_table(sink_path, version=target))
            kept = vectors.get(unquote(sink_file))
            if kept is None:
                raise CommitFailedError(
                    f"{sink_path}@{target}: the committed file {sink_file} has a deletion "
                    "vector that delta-rs does not list; run lakesink publish again"
                )
            name = f"{PURGED_FOLDER}/{purged_name(key, kept)}"
            if have is not None and have["path"] == name:
                continue
            purged = purge(
                join(sink_path, unquote(sink_file)), kept, join(published_path(sink_path), name)
            )
            action: AddAction | None = _published_add(add, types, name=name, purged=purged)
        elif add is not None:
            if have is not None and have["path"] == name:
                continue
            action = _published_add(add, types, name=name)
        else:
            action = None
        if have is not None:
            actions.append(_published_removal(have))
        if action is not None:
            actions.append(action)
    if changes.complete:
        actions.extend(_published_removal(h) for k, h in held.items() if k not in seen)
    return actions


def _published_key(name: str) -> str:
    """What the published table knows a committed file by, whichever copy it names: a
    digest of the file's path below the committed folder (a purged copy's name starts
    with it)."""
    prefix = f"{PURGED_FOLDER}/"
    if name.startswith(prefix):
        return name[len(prefix) :].split("-", 1)[0]
    return hashlib.sha1(name.encode()).hexdigest()[:16]


def _held(table: DeltaTable) -> dict[str, dict[str, Any]]:
    """The files the published table names, by ``_published_key``: each one's path and
    size (read as two columns: a publish's cost stays that of the files it changes, not of
    every file's statistics)."""
    return {
        _published_key(path): {"path": path, "size": size}
        for path, size in _live_files(table, "size_bytes")
    }


def _live_files(table: DeltaTable, *columns: str) -> list[tuple[Any, ...]]:
    """Each live file's path with ``columns`` of delta-rs' add actions."""
    actions = pa.table(table.get_add_actions(flatten=True))
    if "path" not in actions.column_names:
        return []
    picked = actions.select(["path", *columns]).to_pydict()
    return list(zip(*picked.values(), strict=True))


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


def _published_add(
    add: Mapping[str, Any],
    types: Mapping[str, Any],
    *,
    name: str,
    purged: PurgedFile | None = None,
) -> AddAction:
    """The sink's ``add`` of a committed file, as the published table adds it (as ``name``,
    below the committed folder): no partition values, statistics of the user's columns
    (those of a user partition column from its value). A purged copy's rows and null counts
    are its own; the file's bounds still hold for it, if no longer tightly."""
    values = add.get("partitionValues") or {}
    stats = json.loads(add.get("stats") or "{}")
    for key in ("minValues", "maxValues", "nullCount"):
        stats[key] = {
            c: v for c, v in (stats.get(key) or {}).items() if not c.startswith(HIDDEN_PREFIX)
        }
    if purged is not None:
        stats["numRecords"] = purged.rows
        stats["nullCount"] = {
            c: n for c, n in purged.null_counts.items() if not c.startswith(HIDDEN_PREFIX)
        }
        stats["tightBounds"] = False
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
        name,
        purged.size if purged else add["size"],
        {},
        int(time.time() * 1000) if purged else add["modificationTime"],
        True,
        json.dumps(stats),
    )


def _published_removal(held: Mapping[str, Any]) -> RemoveAction:
    """The removal of a file the published table names (an entry of ``_held``)."""
    return RemoveAction(
        held["path"], True, int(time.time() * 1000), size=held["size"], partition_values={}
    )


def _journal_restores(sink_path: str) -> None:
    """Journal the checkpoints a RESTORE among the versions it takes undid
    (``lakesink.tables.restores``): the published table is where lakesink meets it first."""
    sink, _ = read_sink_table_log(sink_path)
    journal = Journal(sink.journal_path, create=False)
    journal_restores(sink_path, journal, journal.transactions(sink.sink_id, table_path=sink_path))


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


def remove_unread_copies(sink_path: str, retain_hours: float, *, dry_run: bool = False) -> int:
    """Delete the purged copies (scenario 5) that no version of the published table a reader
    may still read names: not the newest version's, none a version younger than
    ``retain_hours`` removed, none written since (a publish may be about to commit one).
    Return how many went (with ``dry_run``: would go)."""
    path = published_path(sink_path)
    folder = join(path, PURGED_FOLDER)
    written = file_times(folder)
    if not written:
        return 0
    since = datetime.now(timezone.utc) - timedelta(hours=retain_hours)
    read = {name for (name,) in _live_files(delta_table(path))}
    version = table_version(path)
    while version >= 0 and (at := commit_time(path, version)) is not None and at >= since:
        read |= {a["remove"]["path"] for a in commit_actions(path, version) if "remove" in a}
        version -= 1
    unread = [
        name
        for name, at in written.items()
        if f"{PURGED_FOLDER}/{name}" not in read and at < since and name.endswith(".parquet")
    ]
    if not dry_run:
        for name in unread:
            remove_file(join(folder, name))
    if unread:
        log.info(
            "published table %s: %s %d purged cop(ies) no version reads",
            path,
            "would remove" if dry_run else "removed",
            len(unread),
        )
    return len(unread)


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
