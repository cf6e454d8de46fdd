"""The journal: an append-only Delta table of every transaction state change.

One row per event (never updated), so any number of sinks and writers append to one
journal without conflicting, and an auditor can replay the whole history. A transaction's
current state is its latest event; states only move forward
(open -> pre_committed [-> held] -> committing -> committed, or -> aborted).

A validation run (the audit gate, ``lakesink.validation``) is journaled as an event whose
``validation`` column holds the report as JSON; its state is what the run left the
transaction in (pre-committed when it passed or only warned, held, or aborted).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from lakesink.errors import TableNotFoundError
from lakesink.sql import delta_path, string_literal

__all__ = [
    "JOURNAL_ENV",
    "Journal",
    "JournalEntry",
    "TransactionStatus",
    "TxnState",
    "default_journal_path",
]

log = logging.getLogger(__name__)

JOURNAL_ENV = "LAKESINK_JOURNAL"


class TxnState(str, Enum):
    """Where a transaction stands. The value is what the journal stores."""

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    HELD = "held"  # failed validation under the quarantine policy: an operator decides
    COMMITTING = "committing"  # the commit decision: recovery must finish it
    COMMITTED = "committed"
    ABORTED = "aborted"

    @property
    def rank(self) -> int:
        return _RANK[self]

    @property
    def committable(self) -> bool:
        """Pre-committed or decided: recovery commits it."""
        return self in (TxnState.PRE_COMMITTED, TxnState.COMMITTING)


_RANK = {
    TxnState.OPEN: 0,
    TxnState.PRE_COMMITTED: 1,
    TxnState.HELD: 2,
    TxnState.COMMITTING: 3,
    TxnState.COMMITTED: 4,
    TxnState.ABORTED: 4,
}

JOURNAL_SCHEMA = (
    "sink_id STRING NOT NULL, table_path STRING NOT NULL, checkpoint_id BIGINT NOT NULL, "
    "txn_id STRING NOT NULL, writer_id STRING NOT NULL, state STRING NOT NULL, "
    "event_time TIMESTAMP NOT NULL, attempt INT NOT NULL, row_count BIGINT, "
    "error STRING, detail STRING, validation STRING"
)


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

    def as_row(self) -> tuple:
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

    def __post_init__(self) -> None:
        object.__setattr__(self, "opened_at", _utc(self.opened_at))
        object.__setattr__(self, "updated_at", _utc(self.updated_at))


def default_journal_path(table_path: str) -> str:
    """``$LAKESINK_JOURNAL`` if set, else ``_lakesink_journal`` beside the table's folder."""
    configured = os.environ.get(JOURNAL_ENV)
    if configured:
        return str(Path(configured).resolve())
    return str(Path(table_path).resolve().parent / "_lakesink_journal")


class Journal:
    """Read and append journal events in the Delta table at ``path``.

    Args:
        spark: A Delta-ready session.
        path: The journal table's folder.
        create: Create the table if it is missing; otherwise a missing journal is an error.
    """

    def __init__(self, spark: SparkSession, path: str, *, create: bool = True) -> None:
        self.spark = spark
        self.path = str(Path(path).resolve())
        self._ensure_table(create)

    def _ensure_table(self, create: bool) -> None:
        from delta.tables import DeltaTable

        if DeltaTable.isDeltaTable(self.spark, self.path):
            return
        if not create:
            raise TableNotFoundError(
                f"no lakesink journal at {self.path}: pass the journal path the sink was "
                f"written with (or set ${JOURNAL_ENV})"
            )
        if Path(self.path).exists() and any(Path(self.path).iterdir()):
            raise TableNotFoundError(
                f"journal path {self.path} exists and is not a Delta table; "
                "point the journal at an empty or new folder"
            )
        (
            DeltaTable.createIfNotExists(self.spark)
            .location(self.path)
            .addColumns(self.spark.createDataFrame([], JOURNAL_SCHEMA).schema)
            .property("delta.appendOnly", "true")
            .execute()
        )
        log.info("created journal %s", self.path)

    def record(self, *entries: JournalEntry) -> None:
        """Append the entries in one Delta commit (a blind append: it never conflicts)."""
        if not entries:
            return
        frame = self.spark.createDataFrame([e.as_row() for e in entries], JOURNAL_SCHEMA)
        frame.write.format("delta").mode("append").save(self.path)
        for entry in entries:
            log.debug("journal: %s", entry)

    def events(self) -> DataFrame:
        """Every event, as a DataFrame."""
        return self.spark.read.format("delta").load(self.path)

    def transactions(
        self, sink_id: str, *, writer_id: str | None = None
    ) -> list[TransactionStatus]:
        """The current status of each transaction of a sink, ordered by checkpoint id.

        A transaction's state is its event of highest state rank (then latest time, then
        highest attempt): states only move forward, so clocks that disagree cannot undo one.
        """
        rank = " ".join(f"WHEN {string_literal(s.value)} THEN {s.rank}" for s in TxnState)
        writer_filter = f"AND writer_id = {string_literal(writer_id)}" if writer_id else ""
        rows = self.spark.sql(
            f"""
            SELECT sink_id, txn_id,
              first(checkpoint_id) AS checkpoint_id,
              first(writer_id) AS writer_id,
              max_by(state, struct(CASE state {rank} END, event_time, attempt)) AS state,
              min(event_time) AS opened_at,
              max(event_time) AS updated_at,
              max(row_count) AS row_count,
              max(attempt) AS attempts,
              max_by(error, CASE WHEN error IS NOT NULL THEN event_time END) AS last_error,
              max_by(validation, CASE WHEN validation IS NOT NULL THEN event_time END)
                AS last_validation
            FROM {delta_path(self.path)}
            WHERE sink_id = {string_literal(sink_id)} {writer_filter}
            GROUP BY sink_id, txn_id
            ORDER BY checkpoint_id, txn_id
            """
        ).collect()
        return [
            TransactionStatus(
                **{**row.asDict(), "state": TxnState(row.state)},
            )
            for row in rows
        ]


def _utc(moment: datetime) -> datetime:
    # PySpark hands TIMESTAMPs back as naive datetimes in the process's local time zone.
    return moment.astimezone(timezone.utc)
