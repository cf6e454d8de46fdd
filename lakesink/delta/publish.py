"""The metadata commit: a transaction's rows made visible without reading or writing one.

A sink table is partitioned by the masking bit and the pending transaction, and Delta keeps
a file's partition values in its ``add`` action in the log. So one Delta commit that moves
every file of the transaction's pending partition into the committed one publishes its
rows: each file is placed at its committed partition's path (``_lakesink_visible=true/
_lakesink_pending=__HIVE_DEFAULT_PARTITION__/...``, the user's own partition folders kept)
without its bytes being written again (a hard link on local disk, a copy inside an object
store), and the commit removes it from the pending partition and adds it in the committed
one, its statistics carried over. It is written by delta-rs, in milliseconds whatever the
rows on local disk.

Why the files move rather than being added again where they are: a file's folder would
then name the pending partition while the log says committed, and an engine that takes
partition values from paths (polars) would misread every such row. Moved, a file's path
always agrees with the log, as after a MERGE.

Why it is exactly once: the commit removes the pending files it publishes, so of two
publishes of one transaction, or a publish and a DELETE of its pending partition,
delta-rs' conflict check lets one commit and fails the other, which reads the table again.

Failure scenarios it handles:

1. Two publishes of one transaction race (a restarted writer, an operator): both place
   the same files; one commits, the other conflicts, reads again and finds nothing pending.
2. Another commit rewrote the pending partition between the read and this commit. One
   that changes data (a DELETE) makes this commit conflict; it reads again. One that does
   not (an OPTIMIZE: delta-rs' check lets it pass) is found in the log versions between the
   read and this commit (``lakesink.tables.commits.Landed``): the rows of the files it
   replaced are then visible in this commit's copies, and masked in its new files; the
   next commit removes those copies and publishes the new files, together, so a reader
   sees the rows once throughout.
3. A crash after the files were placed, before the commit: the placed files are in no
   version of the table (Delta's VACUUM deletes them in time); the next publish places
   them again and commits.
4. The commit landed and its answer was lost: the pending partition is empty; publishing
   again finds nothing to publish.

Every committed file sits in the committed partition's folder, where the table's published
table names it (``lakesink.tables.published``): a table written with random file prefixes,
whose files sit in no partition's folder, is refused when it is opened.

What it trades against the MERGE: ``RESTORE`` to a version before a publish brings the
files back to their pending paths only if those still exist; the change data feed shows
each row deleted as masked and inserted as visible; delta-rs cannot write a table with row
tracking, domain metadata or in-commit timestamps (such a table is refused, naming the
property and the way out). A pending file that a user's ``DELETE`` gave a deletion vector
cannot be moved by delta-rs, whose actions carry none: such a transaction is committed by
the MERGE instead (``lakesink.delta.committer``).
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any, cast

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from deltalake.transaction import AddAction, RemoveAction

from lakesink.errors import CommitFailedError, ConfigurationError
from lakesink.storage.files import place_file
from lakesink.storage.location import join
from lakesink.tables.commits import SPARK_ONLY_FEATURES, commit
from lakesink.tables.deletions import has_deletion_vectors, kept_rows
from lakesink.tables.deltars import delta_table
from lakesink.tables.format import (
    COMMIT_MODE_PROPERTY,
    PENDING,
    PUBLISHED_FOLDER,
    VISIBLE,
    pending_txn_rows,
)

__all__ = [
    "SESSION_DEFAULTS",
    "check_defaults_publishable",
    "check_partition_types",
    "check_publishable",
    "pending_files",
    "publish",
    "refused_for_metadata",
    "release",
    "vectors_in",
]

log = logging.getLogger(__name__)

# Attempts before giving up: each is needed only when another commit raced the last one.
PUBLISH_ROUNDS = 10
# The table property that turns each feature delta-rs cannot write on.
_FEATURE_PROPERTIES = {
    "rowTracking": "delta.enableRowTracking",
    "inCommitTimestamp": "delta.enableInCommitTimestamps",
}
# Types (Arrow's names and Spark's) whose partition values delta-rs hands back in a form
# that turns back into Delta's own string exactly.
_EXACT_PARTITION_TYPES = frozenset(
    {
        *("string", "large_string", "utf8", "large_utf8", "bool", "date32"),
        *("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"),
        *("tinyint", "smallint", "int", "bigint", "boolean", "date"),
    }
)


def check_publishable(table: DeltaTable, path: str) -> None:
    """Refuse a table (read as ``table``) whose publish delta-rs could not write exactly.

    Raises:
        ConfigurationError: The table uses a writer feature delta-rs does not write, or a
            partition column of a type ``check_partition_types`` refuses.
    """
    found = sorted(set(table.protocol().writer_features or []) & SPARK_ONLY_FEATURES)
    if found:
        raise refused_for_metadata(path, found)
    types = {f.name: str(f.type) for f in pa.schema(table.schema().to_arrow())}
    check_partition_types(path, {c: types[c] for c in table.metadata().partition_columns})


def refused_for_metadata(path: str, features: Sequence[str]) -> ConfigurationError:
    """What to raise for a table committed by metadata that uses ``features``, which
    delta-rs cannot write: which properties turned them on, and how to go on."""
    named = ", ".join(
        f"{f} ({_FEATURE_PROPERTIES[f]} = true)" if f in _FEATURE_PROPERTIES else f
        for f in features
    )
    return ConfigurationError(
        f"the table at {path} uses {named}, which the metadata commit (written by "
        "delta-rs) cannot write; commit it by MERGE: ALTER TABLE "
        f"delta.`{path}` SET TBLPROPERTIES ('{COMMIT_MODE_PROPERTY}' = 'merge'), "
        "then start its writers with commit='merge'"
    )


# Where a session turns a property on for every new table (Delta's
# spark.databricks.delta.properties.defaults.<name> gives a new table delta.<name>).
SESSION_DEFAULTS = "spark.databricks.delta.properties.defaults."


def check_defaults_publishable(path: str, defaults: Mapping[str, str]) -> None:
    """Refuse to create a table committed by metadata that the session's defaults for new
    tables (``defaults``: each table property they set) would give a feature delta-rs
    cannot write.

    Raises:
        ConfigurationError: Naming each default and the ways out.
    """
    on = {
        prop: value
        for prop, value in defaults.items()
        if (prop in _FEATURE_PROPERTIES.values() and value.lower() == "true")
        or (
            prop.startswith("delta.feature.")
            and prop.removeprefix("delta.feature.") in SPARK_ONLY_FEATURES
        )
    }
    if on:
        named = ", ".join(
            f"{SESSION_DEFAULTS}{p.removeprefix('delta.')} = {v}" for p, v in on.items()
        )
        raise ConfigurationError(
            f"this session's defaults for new tables ({named}) would create the table at "
            f"{path} with a feature the metadata commit (written by delta-rs) cannot write; "
            "nothing was created: give the sink commit='merge', or unset the default for "
            "this session (spark.conf.unset(...))"
        )


def vectors_in(table: DeltaTable, txn_id: str) -> int:
    """How many pending files of transaction ``txn_id`` carry a deletion vector (a user's
    DELETE, UPDATE or MERGE that reached its pending rows)."""
    if not has_deletion_vectors(table):
        return 0
    folder = f"{VISIBLE}=false/{PENDING}={txn_id}/"
    return sum(name.startswith(folder) for name in kept_rows(table))


def check_partition_types(path: str, types: Mapping[str, str]) -> None:
    """Refuse partition columns (name to Arrow or Spark type name) whose values delta-rs
    hands back in another form than Delta's own (a timestamp, a decimal, a float, binary).

    Raises:
        ConfigurationError: One is; the message names it.
    """
    odd = [
        f"{column} ({kind})"
        for column, kind in types.items()
        if kind.split("[")[0] not in _EXACT_PARTITION_TYPES
    ]
    if odd:
        raise ConfigurationError(
            f"the table at {path} is partitioned by {', '.join(odd)}: the metadata commit "
            "copies partition values of strings, integers, dates and booleans only; use "
            "the default commit='merge'"
        )


def publish(
    path: str,
    txn_id: str,
    user_metadata: Mapping[str, Any],
    *,
    transactions: Sequence[tuple[str, int]] = (),
) -> int:
    """Make the rows of transaction ``txn_id`` visible with Delta commits that move its
    files into the committed partition; return how many rows this call made visible (0:
    none were pending).

    ``user_metadata`` tags each commit (the audit lines history up with the journal by it);
    each records a ``txn`` action per (app id, version) of ``transactions``.

    Raises:
        CommitFailedError: Other commits kept conflicting with it, every round.
    """
    rows = 0
    revived: list[dict[str, Any]] = []  # published copies of files a rewrite had removed
    for _ in range(PUBLISH_ROUNDS):
        table = delta_table(path)
        files = pending_files(table, txn_id)
        if not files and not revived:
            return rows
        if vectors_in(table, txn_id):  # a DELETE reached its rows since the committer looked
            raise CommitFailedError(
                f"a pending file of transaction {txn_id} of {path} gained a deletion vector "
                "while it was published; it stays pending: commit again (by MERGE, then)"
            )
        actions: list[AddAction | RemoveAction] = [_removal(copy, visible=True) for copy in revived]
        published: dict[str, dict[str, Any]] = {}
        for file in files:
            committed = _committed_path(file["path"], txn_id)
            place_file(join(path, file["path"]), join(path, committed))
            actions.append(_removal(file, visible=False))
            actions.append(_visible(file, committed))
            published[file["path"]] = {**file, "path": committed}
        made_visible = sum(f["num_records"] or 0 for f in files)
        try:
            landed = commit(
                path,
                table,
                actions,
                {**user_metadata, "rows": made_visible},
                transactions=transactions,
            )
        except DeltaCommitFailedError as exc:  # a conflict: nothing landed; read again
            log.info("publishing transaction %s of %s conflicted (%s); again", txn_id, path, exc)
            continue
        rows += made_visible - sum(f["num_records"] or 0 for f in revived)
        # A rewrite that committed first without Delta's conflict check noticing (an
        # OPTIMIZE: its removes change no data) keeps those rows in new, masked files: the
        # next round publishes them and removes the copies of the files it replaced.
        revived = [published[p] for p in landed.removed_between & published.keys()]
        if revived:
            log.warning(
                "%s: a commit rewrote %d file(s) of transaction %s's pending partition while "
                "it was published; publishing its new files in their place",
                path,
                len(revived),
                txn_id,
            )
    raise CommitFailedError(
        f"publishing transaction {txn_id} of {path} conflicted with other commits in each of "
        f"{PUBLISH_ROUNDS} attempts (an OPTIMIZE or DELETE running on its partition?); "
        "it stays pending: commit again"
    )


def release(path: str, txn_id: str, user_metadata: Mapping[str, Any]) -> int:
    """Remove the pending files of transaction ``txn_id``, whose rows a MERGE already made
    visible, in one delta-rs commit; return how many masked rows went (0: none were left).

    The MERGE copies a transaction's rows into the committed partition and leaves its
    pending files; they are masked, so no reader of committed rows ever sees them, and this
    commit drops them from the log without reading them (their bytes go with the next
    VACUUM past the retention).

    Raises:
        CommitFailedError: Other commits kept conflicting with it, every round.
    """
    for _ in range(PUBLISH_ROUNDS):
        table = delta_table(path)
        files = pending_files(table, txn_id)
        if not files:
            return 0
        rows = sum(f["num_records"] or 0 for f in files)
        try:
            commit(
                path,
                table,
                [_removal(file, visible=False) for file in files],
                {**user_metadata, "rows": rows},
            )
        except DeltaCommitFailedError as exc:  # a conflict: nothing landed; read again
            log.info("releasing transaction %s of %s conflicted (%s); again", txn_id, path, exc)
            continue
        return rows
    raise CommitFailedError(
        f"releasing the pending files of transaction {txn_id} of {path} conflicted with "
        f"other commits in each of {PUBLISH_ROUNDS} attempts; its rows are visible, and the "
        "next commit or vacuum releases them"
    )


def _committed_path(pending: str, txn_id: str) -> str:
    """Where a pending file of ``txn_id`` goes in the committed partition: its folder's
    first two parts (the masking bit and the transaction) changed, the rest kept."""
    folder = f"{VISIBLE}=false/{PENDING}={txn_id}/"
    if not pending.startswith(folder):  # the table's check refuses random file prefixes
        raise CommitFailedError(
            f"a file of transaction {txn_id} is not in its partition's folder ({pending}); "
            "lakesink tables take no random file prefixes"
        )
    return f"{PUBLISHED_FOLDER}/{pending[len(folder) :]}"


def pending_files(table: DeltaTable, txn_id: str) -> list[dict[str, Any]]:
    """The live files of the transaction's pending partition, as delta-rs lists them."""
    actions = pa.table(table.get_add_actions(flatten=False))
    if "partition" not in actions.column_names:
        return []
    mine = actions.filter(pending_txn_rows(txn_id).expression(within="partition"))
    return cast(list[dict[str, Any]], mine.to_pylist())


def _visible(file: Mapping[str, Any], path: str) -> AddAction:
    """The file added at ``path`` in the committed partition, its statistics carried over."""
    return AddAction(
        path,
        file["size_bytes"],
        _values(file, {VISIBLE: "true", PENDING: None}),
        file["modification_time"],
        True,
        _stats(file),
    )


def _removal(file: Mapping[str, Any], *, visible: bool) -> RemoveAction:
    """The removal of a file: a pending one (its copy is published by the same commit), or
    a published copy (``visible``) whose rows a rewrite moved to another file."""
    lakesink = (
        {VISIBLE: "true", PENDING: None}
        if visible
        else {
            VISIBLE: "false",
            PENDING: file["partition"][PENDING],
        }
    )
    return RemoveAction(
        file["path"],
        True,
        int(time.time() * 1000),
        size=file["size_bytes"],
        partition_values=_values(file, lakesink),
    )


def _values(file: Mapping[str, Any], lakesink: dict[str, str | None]) -> dict[str, str | None]:
    """The file's partition values with lakesink's set as given, in Delta's string form:
    the user's own kept (their types checked by check_publishable)."""
    values = dict(lakesink)
    for column, value in file["partition"].items():
        if column in values:
            continue
        if value is None:
            values[column] = None
        elif isinstance(value, bool):
            values[column] = str(value).lower()
        elif isinstance(value, date):
            values[column] = value.isoformat()
        else:
            values[column] = str(value)
    return values


def _stats(file: Mapping[str, Any]) -> str:
    """The file's statistics as Delta's JSON: row count, null counts, and the minimum and
    maximum of each column whose value reads back exactly (numbers, strings, dates).

    A bound left out only stops readers skipping the file on that column; one written in a
    form Delta parses differently could make them skip rows they need.
    """
    stats: dict[str, Any] = {"numRecords": file["num_records"]}
    if file.get("null_count"):
        stats["nullCount"] = file["null_count"]
    for key, out in (("min", "minValues"), ("max", "maxValues")):
        bounds = _exact(file.get(key) or {})
        if bounds:
            stats[out] = bounds
    return json.dumps(stats, default=_no_json)


def _exact(bounds: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for column, value in bounds.items():
        if isinstance(value, Mapping):
            nested = _exact(value)
            if nested:
                kept[column] = nested
        elif isinstance(value, bool) or value is None:
            continue
        elif isinstance(value, (int, str)) or (isinstance(value, float) and math.isfinite(value)):
            kept[column] = value
        elif type(value) is date:
            kept[column] = value.isoformat()
    return kept


def _no_json(value: object) -> object:
    raise TypeError(f"cannot write {value!r} into Delta statistics")
