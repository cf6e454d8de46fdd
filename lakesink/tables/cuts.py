"""The cuts table beside a journal: where a group's cuts are recorded and read (delta-rs).

``_lakesink_cuts`` sits beside the journal of the group's tables (its sinks share one
journal unless told otherwise; a group whose journals differ records its cuts beside each).
Every cut is appended whole in one commit (a blind append, which never conflicts), one row
per table. Readers find a table's cuts by its sink id and read the table at the version of
its group's newest cut (``versions_at_cut``); what a group is, and why, is in
``lakesink.core.cut``.

Which cut is the newest: the one with the highest checkpoint id, and among cuts of one
checkpoint (an operator's commit of a held checkpoint records the group again) the one
recorded last.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable

from lakesink.core.cut import Cut, CutStore, CutTable
from lakesink.errors import ConfigurationError
from lakesink.storage.files import is_delta_table
from lakesink.storage.location import join, parent, relative_to_parent, resolve_relative
from lakesink.tables.deltars import (
    append_table,
    delta_table,
    ensure_log_table,
    read_log_rows,
    read_sink_table_log,
)
from lakesink.tables.format import CUTS_FORMAT, CUTS_SCHEMA, JOURNAL_FORMAT
from lakesink.tables.history import commit_user_metadata, table_version

__all__ = [
    "CUTS_NAME",
    "DeltaCutStore",
    "GroupTable",
    "cut_version",
    "cuts_path",
    "group_cut",
    "newest_cuts",
    "past_cut",
    "read_versions",
    "versions_at_cut",
    "view_cut",
]

log = logging.getLogger(__name__)

CUTS_NAME = "_lakesink_cuts"


def cuts_path(journal_path: str) -> str:
    """Where the cuts of tables journaled in ``journal_path`` are: beside the journal."""
    return join(parent(journal_path), CUTS_NAME)


class DeltaCutStore(CutStore):
    """The cuts table at ``path`` (made on the first record)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.location = path

    def record(self, cut: Cut) -> None:
        now = datetime.now(timezone.utc)
        keys = sorted(cut.versions)
        rows = pa.Table.from_pydict(
            {
                "group_id": [cut.group_id] * len(keys),
                "checkpoint_id": [cut.checkpoint_id] * len(keys),
                "sink_id": keys,
                # A table beside the cuts as ../<name>: moved or copied with them (and the
                # journal), the group still names its own tables.
                "table_path": [
                    relative_to_parent(cut.tables[k].location, self.path) or cut.tables[k].location
                    for k in keys
                ],
                "table_version": [cut.tables[k].version for k in keys],
                "writer_id": [cut.tables[k].writer_id for k in keys],
                "recorded_at": [now] * len(keys),
            },
            schema=CUTS_SCHEMA,
        )
        append_table(self._table(), self.path, rows)
        log.info(
            "cut of group %s at checkpoint %d: %s",
            cut.group_id,
            cut.checkpoint_id,
            ", ".join(f"{k}@{cut.tables[k].version}" for k in keys),
        )

    def latest(self, group_id: str) -> Cut | None:
        return newest_cuts(self.rows(group_id=group_id), self.path).get(group_id)

    def rows(self, **equal: str) -> list[dict[str, Any]]:
        """Its rows whose columns equal ``equal`` (none before the first cut)."""
        if not is_delta_table(self.path):
            return []
        return read_log_rows(self.path, what="cuts table", version=CUTS_FORMAT, missing="", **equal)

    def _table(self) -> DeltaTable:
        ensure_log_table(
            self.path, schema=CUTS_SCHEMA, version=CUTS_FORMAT, what="cuts table", create=True
        )
        return delta_table(self.path)


class GroupTable:
    """A table of a group as it stands, named in the group's cut but not written here: what
    an operator's commit records beside the tables it settles (``CutMember``)."""

    def __init__(self, key: str, table: CutTable, store: CutStore) -> None:
        self.cut_key = key
        self._table = table
        self._store = store

    def cut_table(self) -> CutTable:
        return CutTable(table_version(self._table.location), self._table.location,
                        self._table.writer_id)  # fmt: skip

    def cut_store(self) -> CutStore:
        return self._store

    def show_cut(self, cut: Cut) -> None:
        """No views here: a writer of the table points its own at its next cut."""

    def join_group(self, group_id: str) -> None:
        """Named in the group's cut already."""


def newest_cuts(rows: Iterable[Mapping[str, Any]], cuts: str) -> dict[str, Cut]:
    """Each group's newest cut among the rows of the cuts table at ``cuts``."""
    by_cut: dict[tuple[str, int, datetime], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for row in rows:
        by_cut[(row["group_id"], row["checkpoint_id"], row["recorded_at"])][row["sink_id"]] = row
    newest: dict[str, tuple[tuple[int, datetime], Cut]] = {}
    for (group_id, checkpoint_id, at), members in by_cut.items():
        order = (checkpoint_id, at)
        if group_id in newest and newest[group_id][0] >= order:
            continue
        cut = Cut(
            group_id=group_id,
            checkpoint_id=checkpoint_id,
            tables={
                k: CutTable(
                    int(r["table_version"]),
                    resolve_relative(cuts, r["table_path"]),
                    r["writer_id"],
                )
                for k, r in members.items()
            },
        )
        newest[group_id] = (order, cut)
    return {group_id: cut for group_id, (_, cut) in newest.items()}


def _newest_of(journals: Iterable[str]) -> dict[str, Cut]:
    found: dict[str, Cut] = {}
    for journal in sorted(set(journals)):
        store = DeltaCutStore(cuts_path(journal))
        found.update(newest_cuts(store.rows(), store.path))
    return found


def _group_of(sink_id: str, cuts: Mapping[str, Cut]) -> Cut | None:
    """The newest cut of the one group the table is in; None for none or several."""
    found = [cut for cut in cuts.values() if sink_id in cut.tables]
    return found[0] if len(found) == 1 else None


def versions_at_cut(tables: Mapping[str, tuple[str, str]]) -> dict[str, int | None]:
    """The version to read each table at: its group's newest cut's, else None (the latest).

    A table's cut version is taken on past the versions after it that publish no
    checkpoint (``past_cut``): others' changes (a DELETE, an UPDATE, a RESTORE) show at
    once, as they do in Delta's own read, and the checkpoints shown stay the cut's.

    ``tables`` maps each table's location to its sink id and journal. A table in no group
    is read at its latest version; so is one that several groups write (two streaming
    queries into one table): a cut of one group says nothing of the other's commits.
    Tables read together must be of one group to be read at one cut.

    Raises:
        ConfigurationError: The tables are of different groups (or some of a group, some
            of none), so no one cut holds them all.
    """
    cuts = _newest_of(journal for _, journal in tables.values())
    chosen: dict[str, int | None] = {}
    groups: set[str | None] = set()
    for location, (sink_id, _) in tables.items():
        cut = _group_of(sink_id, cuts)
        groups.add(cut.group_id if cut else None)
        chosen[location] = past_cut(location, cut.tables[sink_id].version) if cut else None
    if len(tables) > 1 and len(groups) > 1:
        raise ConfigurationError(
            "the tables "
            + ", ".join(tables)
            + " are not all of one group (the sinks one job or streaming query commits "
            "together), so no one cut holds them; read them one by one"
        )
    return chosen


def past_cut(path: str, version: int) -> int:
    """The newest version of the table at ``path`` that holds the same checkpoints as
    ``version``: up to the first later version that is a lakesink commit (its other
    versions are pending appends, the vacuum's removals of masked rows and compaction,
    which change no committed row, and other writers' changes, which readers see)."""
    newest = table_version(path)
    for later in range(version + 1, newest + 1):
        try:
            operation = commit_user_metadata(path, later).get("lakesink")
        except FileNotFoundError:  # not there (yet): stay where it is known
            return later - 1
        if operation == "commit":
            return later - 1
    return newest


def group_cut(sink_id: str, journal_path: str) -> Cut | None:
    """The newest cut of the one group the table of ``sink_id`` is in (None: none, or
    several)."""
    return _group_of(sink_id, _newest_of([journal_path]))


def view_cut(sink_id: str, journal_path: str) -> Cut | None:
    """The newest cut of the table's group, if its views by name should read at its cuts.

    Views filter the group's rows by checkpoint id (``lakesink.readers.spark``), which is
    right only for a table that its group alone writes: in one group, and every writer the
    journal knows of it is the group's. Otherwise None: its views show its latest commits.
    """
    cut = group_cut(sink_id, journal_path)
    if cut is None:
        return None
    writers = {
        row["writer_id"]
        for row in read_log_rows(
            journal_path, what="journal", version=JOURNAL_FORMAT, missing="", sink_id=sink_id
        )
    }
    return cut if writers <= {cut.tables[sink_id].writer_id} else None


def read_versions(paths: Sequence[str]) -> dict[str, int | None]:
    """``versions_at_cut`` for the lakesink tables at ``paths`` (their logs say who they are),
    every version pinned when there are several: tables of no group, each at the version it
    has now, all taken before any is read (read one after the other at "the latest", a
    commit between two reads would show one table after it and the other before).

    Raises: as ``versions_at_cut``; TableNotFoundError, FormatVersionError for a path that
    holds no lakesink table of this version.
    """
    tables = {}
    for path in paths:
        found, _ = read_sink_table_log(path)
        tables[path] = (found.sink_id, found.journal_path)
    versions = versions_at_cut(tables)
    if len(paths) > 1:
        versions = {p: table_version(p) if v is None else v for p, v in versions.items()}
    return versions


def cut_version(sink_id: str, journal_path: str, checkpoint_id: int) -> int | None:
    """The version of the table of ``sink_id`` in its group's cut of ``checkpoint_id``: the
    table as the group showed once that checkpoint was published everywhere (None: the
    table is in no group, or the group recorded no cut of that checkpoint)."""
    found = [
        r
        for r in DeltaCutStore(cuts_path(journal_path)).rows(sink_id=sink_id)
        if r["checkpoint_id"] == checkpoint_id
    ]
    if len({r["group_id"] for r in found}) != 1:
        return None
    return int(max(found, key=lambda r: r["recorded_at"])["table_version"])
