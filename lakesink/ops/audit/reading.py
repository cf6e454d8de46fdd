"""Reading a lakesink table for its audit: pin it and its journal to versions that agree,
then read the journal's events, the table's rows per transaction and its Delta history, all
at those versions. Events and the committed view's rows are read by Spark
(``versionAsOf``); the history from the table's log (``lakesink.tables.history``), as
``lakesink.Table`` reads it.

No row names its transaction (format 5): a transaction's visible rows are what its commits
made visible, as each commit records (a MERGE's own metrics, a metadata commit's
``userMetadata``), and its masked rows are its pending partition's, by the log's statistics
of each file. The committed view itself is counted in the data, so the checks hold those
counts against the rows actually there.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, cast, overload

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakesink.core import TxnState
from lakesink.core.validation import ValidationReport
from lakesink.delta.journal import fold, journal_events
from lakesink.delta.table import read_sink_table
from lakesink.errors import LakesinkError
from lakesink.ops.audit.records import AuditSnapshot, Phase, TransactionAudit, ValidationFailure
from lakesink.storage.location import normalize
from lakesink.tables.deltars import pending_rows
from lakesink.tables.format import VISIBLE
from lakesink.tables.history import HistoryEntry, first_versions, read_history, table_version
from lakesink.tables.journal import Journal

__all__ = ["committed_rows", "failed_validations", "snapshot", "table_history", "timeline"]

log = logging.getLogger(__name__)


def snapshot(spark: SparkSession, table_path: str, *, attempts: int = 20) -> AuditSnapshot:
    """Pin a lakesink table and its journal to versions that agree.

    Reads the journal's version, then the table's, then the journal's again, until the
    journal did not move in between (see ``AuditSnapshot`` for what that guarantees).

    Args:
        spark: A Delta-ready session.
        table_path: The lakesink table's folder.
        attempts: How many times to try while writers keep appending to the journal.

    Raises:
        TableNotFoundError: No lakesink table at ``table_path``, or no journal where the
            table says it is.
        LakesinkError: The journal changed during every attempt.
    """
    table_path = normalize(table_path)
    sink_table = read_sink_table(spark, table_path)
    journal = Journal(sink_table.journal_path, create=False)
    journal.transactions(sink_table.sink_id, table_path=table_path)  # the table's own journal

    # Each log's newest version from a listing, no Spark job: every read after it asks for
    # its version by number.
    for attempt in range(attempts):
        before = table_version(journal.path)
        version = table_version(table_path)
        if table_version(journal.path) == before:
            return AuditSnapshot(
                table_path=table_path,
                sink_id=sink_table.sink_id,
                journal_path=journal.path,
                table_version=version,
                journal_version=before,
                taken_at=datetime.now(timezone.utc),
            )
        log.info("journal %s moved while pinning (attempt %d); again", journal.path, attempt + 1)
        time.sleep(0.05 * (attempt + 1))
    raise LakesinkError(
        f"the journal {journal.path} changed every time while pinning {table_path} to a "
        f"version ({attempts} attempts); run the audit again when the writers are quieter"
    )


def table_history(snap: AuditSnapshot) -> tuple[HistoryEntry, ...]:
    """The table's Delta versions up to the snapshot's, oldest first, as lakesink made them
    (``lakesink.tables.history.read_history``, as ``lakesink.Table`` reads them)."""
    return tuple(read_history(snap.table_path, up_to=snap.table_version))


def timeline(
    spark: SparkSession,
    snap: AuditSnapshot,
    *,
    history: Sequence[HistoryEntry] | None = None,
) -> tuple[TransactionAudit, ...]:
    """Every transaction of the sink, by checkpoint id: its journal story and its rows.

    A transaction whose rows are in the table but which the journal never recorded is
    there too, with ``phase`` UNKNOWN.

    Args:
        spark: A Delta-ready session.
        snap: What to read (``snapshot``).
        history: The table's history if already read (``table_history``).
    """
    history = table_history(snap) if history is None else history
    folded = {row.txn_id: row for row in fold(_events(spark, snap)).collect()}
    counts = _row_counts(snap, history)
    commit_versions = first_versions(history, "commit")
    vacuum_versions = first_versions(history, "vacuum")
    now = snap.taken_at.timestamp()
    audits = []
    for txn_id in folded.keys() | counts.keys():
        row = folded.get(txn_id)
        checkpoint_id, visible, masked = counts.get(txn_id, (None, 0, 0))
        state = TxnState(row.state) if row else None
        phase = Phase.of(state)
        times = {
            name: row[name].astimezone(timezone.utc) if row and row[name] else None
            for name in ("opened_at", "pre_committed_at", "committed_at", "aborted_at", "held_at")
        }
        latency = (
            (times["committed_at"] - times["pre_committed_at"]).total_seconds()
            if times["committed_at"] and times["pre_committed_at"]
            else None
        )
        waiting = phase in (Phase.PENDING, Phase.HELD) and times["opened_at"] is not None
        audits.append(
            TransactionAudit(
                # one of the two knows the transaction: folded or counts (-1: its writes are
                # older than the log's retention, and the journal never knew it)
                checkpoint_id=row.checkpoint_id if row else (checkpoint_id or -1),
                txn_id=txn_id,
                writer_id=row.writer_id if row else None,
                state=state,
                phase=phase,
                **times,
                commit_latency_s=latency,
                pending_age_s=(
                    now - cast(datetime, times["opened_at"]).timestamp() if waiting else None
                ),
                row_count=row.row_count if row else None,
                visible_rows=visible,
                masked_rows=masked,
                vacuumed=bool(row.vacuumed) if row else False,
                commit_version=commit_versions.get(txn_id),
                vacuum_version=vacuum_versions.get(txn_id),
                last_error=row.last_error if row else None,
                validation=row.last_validation if row else None,
            )
        )
    return tuple(sorted(audits, key=lambda a: (a.checkpoint_id, a.txn_id)))


def failed_validations(spark: SparkSession, snap: AuditSnapshot) -> tuple[ValidationFailure, ...]:
    """Every failed expectation of every validation run the journal holds, oldest first.

    A run that failed (its report's ``error``) adds one failure with no expectation; so
    does a report that cannot be read, saying so.
    """
    rows = (
        _events(spark, snap)
        .where(F.col("validation").isNotNull())
        .select(
            "checkpoint_id",
            "txn_id",
            "state",
            F.unix_micros("event_time").alias("event_time"),
            "validation",
        )
        .orderBy("event_time", "checkpoint_id", "txn_id")
        .collect()
    )
    return tuple(failure for row in rows for failure in _failures(row))


def _events(spark: SparkSession, snap: AuditSnapshot) -> DataFrame:
    return journal_events(spark, snap.journal_path, version=snap.journal_version).where(
        F.col("sink_id") == snap.sink_id
    )


def _row_counts(
    snap: AuditSnapshot, history: Sequence[HistoryEntry]
) -> dict[str, tuple[int | None, int, int]]:
    """Per transaction in the table: its checkpoint id, visible rows and masked rows.

    Visible: the rows its commits made visible (each commit's own count, summed: a commit
    that ran twice shows twice). Masked: its pending partition's rows, unless a commit of
    it made them visible already (then they are its commit's leftovers, which the commit's
    release or the vacuum removes).
    """
    checkpoints: dict[str, int | None] = {}
    visible: dict[str, int] = {}
    for entry in history:
        for txn_id in entry.txn_ids:
            if entry.lakesink in ("write", "commit"):
                checkpoints.setdefault(txn_id, entry.checkpoint_id)
            if entry.lakesink == "commit":
                visible[txn_id] = visible.get(txn_id, 0) + (entry.rows or 0)
    pending = pending_rows(snap.table_path, version=snap.table_version)
    return {
        txn_id: (
            checkpoints.get(txn_id),
            visible.get(txn_id, 0),
            0 if txn_id in visible else pending.get(txn_id, 0),
        )
        for txn_id in checkpoints.keys() | pending.keys()
    }


def committed_rows(spark: SparkSession, snap: AuditSnapshot) -> int:
    """The committed view's rows at the snapshot's version, counted in the table."""
    return (
        spark.read.format("delta")
        .option("versionAsOf", snap.table_version)
        .load(snap.table_path)
        .where(F.col(VISIBLE))
        .count()
    )


def _failures(row: Any) -> list[ValidationFailure]:
    def failure(**what: Any) -> ValidationFailure:
        return ValidationFailure(
            checkpoint_id=row.checkpoint_id,
            txn_id=row.txn_id,
            state=TxnState(row.state),
            event_time=_utc(row.event_time),
            **what,
        )

    try:
        report = ValidationReport.from_json(row.validation)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # Shown, not skipped: an auditor must see that a report could not be read.
        return [
            failure(
                suite=None,
                policy=None,
                rows=None,
                expectation=None,
                column=None,
                summary=f"unreadable validation report ({type(exc).__name__}: {exc})",
                kwargs=None,
                observed=row.validation,
            )
        ]
    found = [
        failure(
            suite=report.suite,
            policy=report.policy,
            rows=report.rows,
            expectation=f.expectation,
            column=f.column,
            summary=f.summary(),
            kwargs=_json(f.kwargs),
            observed=_json(f.observed),
        )
        for f in report.failed
    ]
    if report.error is not None:
        found.append(
            failure(
                suite=report.suite,
                policy=report.policy,
                rows=report.rows,
                expectation=None,
                column=None,
                summary=f"the run failed: {report.error}",
                kwargs=None,
                observed=None,
            )
        )
    return found


@overload
def _utc(micros: int) -> datetime: ...
@overload
def _utc(micros: None) -> None: ...
@overload
def _utc(micros: int | None) -> datetime | None: ...
def _utc(micros: int | None) -> datetime | None:
    # Epoch microseconds from Spark: no local time zone gets in between.
    return None if micros is None else datetime.fromtimestamp(micros / 1e6, tz=timezone.utc)


def _json(value: object) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)
