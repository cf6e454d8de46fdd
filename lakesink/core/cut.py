"""A cut across the tables of a group: the state in which readers see all of them at once.

A **group** is the sinks one driver checkpoints together (a ``CheckpointCoordinator``'s, a
``StreamingSink.for_sinks``'s): each checkpoint is committed in all of them or in none. The
sinks publish one after the other, though, so a reader that looks at two of them in between
sees a checkpoint in one and not yet in the other. A **cut** closes that window: once every
sink of the group has published checkpoint N, one durable record names, for each of its
tables, the version at which that table shows exactly the group's committed checkpoints up
to N. Readers read every table of the group at the versions of one cut.

Failure scenarios:

1. Crash between two tables' publishes of checkpoint N: no cut names N yet; readers keep
   the previous cut until the restarted driver has published N everywhere (recovery) and
   records its cut.
2. Crash after the publishes, before the cut is recorded: the same; the restart records it.
3. A checkpoint held for an operator: the cut moves on without it (its rows are masked in
   every table); the operator's commit publishes it in every table of the group and then
   records a new cut (``lakesink commit``).
4. A reader that starts with the pipeline, before its first checkpoint: the group's
   membership is recorded as its first cut before any member is opened (``form_group``),
   so no read of two members ever takes them for tables of no group, each at its own
   latest version; a crash right after it leaves a cut of empty tables, true until the
   restart records the next.

A cut is recorded by the driver that committed the checkpoint (``record_cut``); the Delta
side stores it (``lakesink.tables.cuts``) and reads tables at it (``lakesink.committed``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

__all__ = ["Cut", "CutMember", "CutStore", "CutTable", "form_group", "record_cut"]


@dataclass(frozen=True)
class CutTable:
    """One table in a cut: the version to read it at, where it is, and who writes it."""

    version: int
    location: str
    writer_id: str


@dataclass(frozen=True, kw_only=True)
class Cut:
    """Where each table of a group stands once its checkpoints up to one are published.

    Attributes:
        group_id: The group (its driver's job id or checkpoint location).
        checkpoint_id: Every committed checkpoint of the group up to this one is visible
            at the tables' versions; none after it.
        tables: Per table (its key in the group: a sink id), its version and location,
            and the group's writer of it.
    """

    group_id: str
    checkpoint_id: int
    tables: Mapping[str, CutTable]

    def __post_init__(self) -> None:
        object.__setattr__(self, "tables", MappingProxyType(dict(self.tables)))

    @property
    def versions(self) -> Mapping[str, int]:
        """Per table, the version to read it at."""
        return {key: table.version for key, table in self.tables.items()}


class CutStore(ABC):
    """Where a group's cuts are recorded and read back."""

    #: Identifies the store: members of one group that share it record the cut once.
    location: str

    @abstractmethod
    def record(self, cut: Cut) -> None:
        """Make the cut durable, in one atomic write."""

    @abstractmethod
    def latest(self, group_id: str) -> Cut | None:
        """The group's newest cut, or None before its first."""


@runtime_checkable
class CutMember(Protocol):
    """A sink whose table a cut can name (the hooks a sink engine writes for cuts)."""

    @property
    def cut_key(self) -> str:
        """The table's key in the group (unique among the tables of one store)."""

    def cut_table(self) -> CutTable:
        """The table as it stands now (the group has published through the checkpoint);
        before it exists, its creation: version 0, which holds no row."""

    def cut_store(self) -> CutStore:
        """Where the cut is recorded for this table's readers."""

    def show_cut(self, cut: Cut) -> None:
        """Make the recorded cut what this table's readers by name see (views)."""

    def join_group(self, group_id: str) -> None:
        """Be told, before its first write, that it is one of a group's tables (what it
        writes may then need to say which checkpoint it belongs to)."""


def form_group(group_id: str, sinks: Iterable[Any]) -> None:
    """Tell the sinks that can be cut that they are a group (two or more of them), and make
    that durable, before any of them is opened: each commit of theirs will be recorded in a
    cut, and readers read them at one cut from the moment the first of them exists.

    Membership is a cut too (scenario 4): the group's newest, with every member it does not
    name yet where that member stands now (a table not created yet: its creation, version
    0, which holds no row). Recorded only when a member is missing from the newest cut.
    """
    members = _members(sinks)
    if not members:
        return
    for member in members:
        member.join_group(group_id)
    for store in _stores(members):
        latest = store.latest(group_id)
        known = dict(latest.tables) if latest else {}
        if all(m.cut_key in known for m in members):
            continue
        store.record(
            Cut(
                group_id=group_id,
                checkpoint_id=latest.checkpoint_id if latest else -1,
                tables={m.cut_key: known.get(m.cut_key) or m.cut_table() for m in members},
            )
        )


def record_cut(group_id: str, checkpoint_id: int, sinks: Iterable[Any]) -> Cut | None:
    """Record the cut of a group whose sinks have all published ``checkpoint_id``.

    Only a group of two or more sinks that can be cut (``CutMember``) gets a cut: a table
    alone is read at its latest version. The cut goes to each distinct store of the sinks
    (one, unless their journals differ), then to each sink's readers by name. Returns it,
    or None when there is none to record.
    """
    members = _members(sinks)
    if not members:
        return None
    cut = Cut(
        group_id=group_id,
        checkpoint_id=checkpoint_id,
        tables={m.cut_key: m.cut_table() for m in members},
    )
    for store in _stores(members):
        store.record(cut)
    for member in members:
        member.show_cut(cut)
    return cut


def _members(sinks: Iterable[Any]) -> list[CutMember]:
    """The sinks that can be cut, if two or more (a table alone is read at its latest)."""
    members = [s for s in sinks if isinstance(s, CutMember)]
    return members if len(members) >= 2 else []


def _stores(members: Iterable[CutMember]) -> list[CutStore]:
    """Each distinct store of the members (one, unless their journals differ)."""
    stores: dict[str, CutStore] = {}
    for member in members:
        store = member.cut_store()
        stores.setdefault(store.location, store)
    return list(stores.values())
