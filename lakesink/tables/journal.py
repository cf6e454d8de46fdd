"""The journal: an append-only Delta table of every transaction state change.

One row per event (never updated), so any number of sinks and writers append to one
journal without conflicting, and an auditor can replay the whole history. A transaction's
current state is its latest event by rank (``TxnState.rank``): states only move forward
(open -> pre_committed [-> held] -> committing -> committed, or -> aborted), so clocks that
disagree cannot undo one. ``fold`` is the one place that turns events into that state.

A validation run (the audit gate, ``lakesink.spark.validation``) is journaled as an event
whose ``validation`` column holds the report as JSON; its state is what the run left the
transaction in (pre-committed when it passed or only warned, held, or aborted). The vacuum
journals an ``aborted`` event whose detail starts with ``vacuumed:`` once it removed a
transaction's rows; a committed transaction whose commit a user's ``RESTORE`` undid (its
rows are gone from the table) gets an ``aborted`` event whose detail starts with
``restored:`` (``lakesink.tables.restores``).

Two folds, one rule: ``fold_events`` turns a sink's events into ``TransactionStatus``
records (read with delta-rs, no Spark job: recovery, the vacuum and ``lakesink status``
use it), and ``lakesink.delta.journal.fold`` does the same in Spark SQL, with more
columns, as a DataFrame for the audit to join with the table's history.
``tests/test_journal_fold.py`` checks that they agree.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Protocol, TypedDict

from lakesink.core import TxnState
from lakesink.errors import ConfigurationError
from lakesink.storage.files import is_delta_table
from lakesink.storage.location import join, normalize, parent, relative_to_parent
from lakesink.tables.deltars import append_rows, ensure_log_table, read_log_rows
from lakesink.tables.format import JOURNAL_FORMAT, JOURNAL_SCHEMA

__all__ = [
    "JOURNAL_ENV",
    "RESTORED_PREFIX",
    "VACUUMED_PREFIX",
    "Journal",
    "JournalEntry",
    "TransactionFields",
    "TransactionId",
    "TransactionStatus",
    "check_owner",
    "default_journal_path",
    "fold_events",
    "read_transactions",
    "transaction_fields",
]

log = logging.getLogger(__name__)

JOURNAL_ENV = "LAKESINK_JOURNAL"
# The detail of the aborted event that says a transaction's rows were removed.
VACUUMED_PREFIX = "vacuumed:"
# The detail of the aborted event that says a RESTORE undid a transaction's commit.
RESTORED_PREFIX = "restored:"


class TransactionId(Protocol):
    """What names a transaction wherever it is handled: a writer's handle, a folded status."""

    @property
    def checkpoint_id(self) -> int: ...
    @property
    def txn_id(self) -> str: ...
    @property
    def writer_id(self) -> str: ...


class TransactionFields(TypedDict):
    """The fields that name a transaction, as keyword arguments for a record of it."""

    checkpoint_id: int
    txn_id: str
    writer_id: str


def transaction_fields(txn: TransactionId) -> TransactionFields:
    """``txn``'s naming fields, for the journal event, committable or commit metadata of it."""
    return {"checkpoint_id": txn.checkpoint_id, "txn_id": txn.txn_id, "writer_id": txn.writer_id}


@dataclass(frozen=True, kw_only=True)
class JournalEntry:
    """One state change of one transaction."""

    sink_id: str
    table_path: str
    checkpoint_id: int
    txn_id: str
    writer_id: str
    state: TxnState
    event_time: datetime
    attempt: int = 0
    row_count: int | None = None
    error: str | None = None
    detail: str | None = None
    validation: str | None = None  # a ValidationReport as JSON

    def as_row(self) -> tuple[Any, ...]:
        return tuple(
            getattr(self, f.name).value if f.name == "state" else getattr(self, f.name)
            for f in fields(self)
        )


@dataclass(frozen=True, kw_only=True)
class TransactionStatus:
    """Where one transaction stands now, folded from its journal events."""

    sink_id: str
    txn_id: str
    checkpoint_id: int
    writer_id: str
    state: TxnState
    opened_at: datetime
    updated_at: datetime
    row_count: int | None
    attempts: int
    last_error: str | None
    last_validation: str | None = None  # the latest ValidationReport JSON, if validated
    # When it first entered each state it was ever in (commit latency is committed minus
    # pre-committed).
    first_at: Mapping[TxnState, datetime] = field(default_factory=dict)
    vacuumed: bool = False  # its rows were removed by the vacuum job
    restored: bool = False  # committed, then a RESTORE took the table back to before it

    def __post_init__(self) -> None:
        object.__setattr__(self, "opened_at", _utc(self.opened_at))
        object.__setattr__(self, "updated_at", _utc(self.updated_at))
        object.__setattr__(
            self, "first_at", MappingProxyType({s: _utc(t) for s, t in self.first_at.items()})
        )

    @property
    def states(self) -> frozenset[TxnState]:
        """Every state it was ever in."""
        return frozenset(self.first_at)

    def event(
        self, *, table_path: str, state: TxnState, event_time: datetime, **extra: Any
    ) -> JournalEntry:
        """A new event of this transaction (what an operator or the vacuum journals)."""
        return JournalEntry(
            **transaction_fields(self),
            sink_id=self.sink_id,
            table_path=table_path,
            state=state,
            event_time=event_time,
            **extra,
        )


def default_journal_path(table_path: str) -> str:
    """``$LAKESINK_JOURNAL`` if set, else ``_lakesink_journal`` beside the table's folder."""
    configured = os.environ.get(JOURNAL_ENV)
    if configured:
        return normalize(configured)
    return join(parent(normalize(table_path)), "_lakesink_journal")


def read_transactions(
    path: str, sink_id: str, *, writer_id: str | None = None, table_path: str | None = None
) -> list[TransactionStatus]:
    """The current status of each transaction of a sink, ordered by checkpoint id.

    Read from the journal at ``path`` with delta-rs: no Spark job, no JVM. Given the
    ``table_path`` of the sink's table, the journal is first checked to be that table's
    (``check_owner``).

    Raises:
        TableNotFoundError: No journal there.
        FormatVersionError: A journal of another format.
        ConfigurationError: The journal holds the sink's events of another live table.
    """
    equal = {"sink_id": sink_id, **({"writer_id": writer_id} if writer_id else {})}
    rows = read_log_rows(
        path,
        what="journal",
        version=JOURNAL_FORMAT,
        missing=f"pass the journal path the sink was written with (or set ${JOURNAL_ENV})",
        **equal,
    )
    if table_path is not None:
        check_owner(path, table_path, sink_id, {row["table_path"] for row in rows})
    return fold_events(rows)


def check_owner(journal: str, table: str, sink_id: str, tables_in_events: Iterable[str]) -> None:
    """Refuse a journal whose events of ``sink_id`` belong to another table that still exists.

    A table copied with its journal beside it has the copy of the journal: events of its
    old location, in another folder, are its own history. A table whose journal lies
    elsewhere (recorded whole), or one beside another table of the same sink id, would
    share that journal with the other table: their transactions would mix, and recovery
    or the vacuum of one would act on the other's.

    Raises:
        ConfigurationError: Naming both tables and what to do.
    """
    beside = relative_to_parent(journal, table) is not None
    for other in sorted(set(tables_in_events) - {table}):
        if beside and parent(other) != parent(table):
            continue  # moved or copied here with the journal: its history
        if _table_exists(other):
            raise ConfigurationError(
                f"the journal {journal} holds sink {sink_id!r}'s transactions of the table at "
                f"{other}, which still exists, not of the table at {table}: two tables would "
                "share one journal. If this table is a copy, copy its journal beside it and "
                "record it there (ALTER TABLE ... SET TBLPROPERTIES ('lakesink.journal' = "
                "'../_lakesink_journal')), or give the copy its own sink id"
            )


def _table_exists(location: str) -> bool:
    try:
        return is_delta_table(location)
    except Exception as exc:  # another store, unreachable: it cannot be told apart
        log.warning("cannot tell whether %s still holds a table: %s", location, exc)
        return False


def fold_events(events: Iterable[Mapping[str, Any]]) -> list[TransactionStatus]:
    """One status per transaction of the events (journal rows), by checkpoint and txn id.

    Its state is that of its latest event by rank, then time, then attempt; its row count
    the largest any event gave; its last error and validation the latest given.
    """
    by_txn: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for event in events:
        by_txn[(event["sink_id"], event["txn_id"])].append(event)

    def latest(found: list[Mapping[str, Any]], column: str) -> Any:
        given = [e for e in found if e[column] is not None]
        return max(given, key=lambda e: e["event_time"])[column] if given else None

    statuses = []
    for (sink_id, txn_id), found in by_txn.items():
        last = max(found, key=lambda e: (TxnState(e["state"]).rank, e["event_time"], e["attempt"]))
        times = [e["event_time"] for e in found]
        counts = [e["row_count"] for e in found if e["row_count"] is not None]
        statuses.append(
            TransactionStatus(
                sink_id=sink_id,
                txn_id=txn_id,
                checkpoint_id=found[0]["checkpoint_id"],
                writer_id=found[0]["writer_id"],
                state=TxnState(last["state"]),
                opened_at=min(times),
                updated_at=max(times),
                row_count=max(counts) if counts else None,
                attempts=max(e["attempt"] for e in found),
                last_error=latest(found, "error"),
                last_validation=latest(found, "validation"),
                first_at={
                    state: min(e["event_time"] for e in found if e["state"] == state.value)
                    for state in {TxnState(e["state"]) for e in found}
                },
                vacuumed=_aborted_as(found, VACUUMED_PREFIX),
                restored=_aborted_as(found, RESTORED_PREFIX),
            )
        )
    return sorted(statuses, key=lambda s: (s.checkpoint_id, s.txn_id))


def _aborted_as(events: Iterable[Mapping[str, Any]], prefix: str) -> bool:
    """Whether one of a transaction's events is an abort whose detail starts with ``prefix``."""
    return any(
        e["state"] == TxnState.ABORTED.value and (e["detail"] or "").startswith(prefix)
        for e in events
    )


class Journal:
    """Read and append journal events in the Delta table at ``path`` (through delta-rs).

    Args:
        path: The journal table's folder.
        create: Create the table if it is missing; otherwise a missing journal is an error.
    """

    def __init__(self, path: str, *, create: bool = True) -> None:
        self.path = normalize(path)
        ensure_log_table(
            self.path,
            schema=JOURNAL_SCHEMA,
            version=JOURNAL_FORMAT,
            what="journal",
            create=create,
            missing=f"pass the journal path the sink was written with (or set ${JOURNAL_ENV})",
        )

    def record(self, *entries: JournalEntry) -> None:
        """Append the entries in one Delta commit (a blind append: it never conflicts)."""
        append_rows(self.path, [e.as_row() for e in entries])
        for entry in entries:
            log.debug("journal: %s", entry)

    def transactions(
        self, sink_id: str, *, writer_id: str | None = None, table_path: str | None = None
    ) -> list[TransactionStatus]:
        """The current status of each transaction of a sink, ordered by checkpoint id
        (``read_transactions``)."""
        return read_transactions(self.path, sink_id, writer_id=writer_id, table_path=table_path)


def _utc(moment: datetime) -> datetime:
    # PySpark hands TIMESTAMPs back as naive datetimes in the process's local time zone.
    return moment.astimezone(timezone.utc)
