"""Audit queries: what happened to a sink, and whether the exactly-once promise held.

The auditing notebooks (``notebooks/audit.ipynb``) are thin over these functions, so what
an auditor looks at is tested code. Every function takes an :class:`AuditSnapshot`: the
table and its journal pinned to a pair of Delta versions that agree with each other, so an
audit of a sink that is being written to sees a consistent picture, not a commit caught
half-way between its journal events and its MERGE.

The sources, and what each says:

- the journal (``lakesink.tables.journal``): every state change of every transaction;
- the table's rows, counted per transaction, visible and masked;
- the table's Delta history: each commit lakesink made carries ``userMetadata`` naming the
  operation (write, commit, vacuum), the checkpoint and the transaction
  (``lakesink.tables.format.commit_metadata``), so a Delta version can be lined up with the
  journal event it belongs to.

The exactly-once checks (:func:`exactly_once_checks`) compare these sources; each returns
the transactions (or Delta versions) that break it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any, cast, overload

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from lakesink.core import TxnState
from lakesink.core.validation import ValidationReport
from lakesink.errors import AuditFailedError, LakesinkError
from lakesink.storage.location import normalize
from lakesink.tables.format import CHECKPOINT_ID, TXN_ID, VISIBLE, read_sink_table
from lakesink.tables.history import HistoryEntry, first_versions, history_entry
from lakesink.tables.journal import Journal, fold

if TYPE_CHECKING:
    import pandas

__all__ = [
    "AuditFailedError",
    "AuditReport",
    "AuditSnapshot",
    "CheckResult",
    "Finding",
    "HistoryEntry",
    "Phase",
    "TransactionAudit",
    "ValidationFailure",
    "audit_table",
    "exactly_once_checks",
    "failed_validations",
    "raise_on_failures",
    "snapshot",
    "table_history",
    "timeline",
    "to_frame",
]

log = logging.getLogger(__name__)

# Delta operations that cannot add, remove or change a row: anything else on a lakesink
# table that lakesink did not make is a change behind the journal's back.
ROW_PRESERVING_OPERATIONS = frozenset(
    {
        "CREATE TABLE",
        "VACUUM START",
        "VACUUM END",
        "OPTIMIZE",
        "REORG",
        "SET TBLPROPERTIES",
        "UNSET TBLPROPERTIES",
        "UPGRADE PROTOCOL",
        "ADD CONSTRAINT",
        "DROP CONSTRAINT",
        "ADD COLUMNS",
        "CHANGE COLUMN",
    }
)


# An operator's commit decision is journaled before its MERGE: its rows may be visible.
class Phase(str, Enum):
    """Where a transaction stands, as an auditor groups it."""

    PENDING = "pending"  # open, pre-committed, or being committed
    HELD = "held"  # failed validation under the quarantine policy: an operator decides
    COMMITTED = "committed"
    ABORTED = "aborted"
    UNKNOWN = "unknown"  # rows in the table under a transaction the journal never recorded

    @classmethod
    def of(cls, state: TxnState | None) -> Phase:
        if state is None:
            return cls.UNKNOWN
        return cls.PENDING if state.pending else cls(state.value)


@dataclass(frozen=True, kw_only=True)
class AuditSnapshot:
    """A lakesink table and its journal, pinned to versions that agree with each other.

    ``journal_version`` was the journal's latest both before and after ``table_version``
    was read. So every change the journal records as done (a ``committed`` event follows
    its MERGE) is in ``table_version``, and every event journaled before a change in
    ``table_version`` (a pre-commit, an operator's decision) is in ``journal_version``. A
    commit caught between its MERGE and its ``committed`` event (or stopped there by a
    crash, until recovery commits it again) shows pre-committed, with its commit version.

    Attributes:
        table_path: The table's folder.
        sink_id: The sink that writes it (the table's ``lakesink.sinkId``).
        journal_path: Its journal (the table's ``lakesink.journal``).
        table_version: The Delta version of the table every query reads.
        journal_version: The Delta version of the journal every query reads.
        taken_at: When the versions were pinned; pending ages are measured to it.
    """

    table_path: str
    sink_id: str
    journal_path: str
    table_version: int
    journal_version: int
    taken_at: datetime


@dataclass(frozen=True, kw_only=True)
class TransactionAudit:
    """One transaction, from its journal events, its rows in the table and Delta history.

    Attributes:
        checkpoint_id, txn_id, writer_id: The transaction's identity.
        state: Its journal state; None if only the table knows it (``Phase.UNKNOWN``).
        phase: The state as an auditor groups it.
        opened_at, pre_committed_at, committed_at, aborted_at, held_at: The first journal
            event of each state (None if it never reached it).
        commit_latency_s: Seconds from pre-commit to commit.
        pending_age_s: For a pending or held transaction, seconds from its first event to
            the snapshot.
        row_count: The rows the journal recorded at pre-commit.
        visible_rows, masked_rows: Its rows in the table at the snapshot's version.
        vacuumed: The vacuum job removed its rows.
        commit_version: The Delta version whose commit (a MERGE, or a metadata commit) made
            its rows visible.
        vacuum_version: The Delta version whose DELETE removed its rows.
        last_error: The latest error journaled for it.
        validation: Its latest validation report (JSON), if it was validated.
    """

    checkpoint_id: int
    txn_id: str
    writer_id: str | None
    state: TxnState | None
    phase: Phase
    opened_at: datetime | None
    pre_committed_at: datetime | None
    committed_at: datetime | None
    aborted_at: datetime | None
    held_at: datetime | None
    commit_latency_s: float | None
    pending_age_s: float | None
    row_count: int | None
    visible_rows: int
    masked_rows: int
    vacuumed: bool
    commit_version: int | None
    vacuum_version: int | None
    last_error: str | None
    validation: str | None


@dataclass(frozen=True, kw_only=True)
class ValidationFailure:
    """One failed expectation (or a validation run that errored) of one transaction.

    Attributes:
        checkpoint_id, txn_id: The transaction validated.
        state: The state the validation left it in: ``held`` (quarantine policy),
            ``aborted`` (abort policy) or ``pre_committed`` (warn policy: committed anyway).
        event_time: When the report was journaled.
        suite, policy: The expectation suite and the policy applied on failure.
        rows: Rows validated.
        expectation, column: The expectation that failed and its column (None when the
            run itself failed, or the report cannot be read).
        summary: A few words on what was wrong (``amount min 0.0 < 0.01``).
        kwargs: The expectation's arguments, as JSON.
        observed: What GX observed, as JSON (an unreadable report: its text).
    """

    checkpoint_id: int
    txn_id: str
    state: TxnState
    event_time: datetime
    suite: str | None
    policy: str | None
    rows: int | None
    expectation: str | None
    column: str | None
    summary: str
    kwargs: str | None
    observed: str | None


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One thing that breaks a check: a transaction, a Delta version, or a total."""

    reason: str
    txn_id: str | None = None
    checkpoint_id: int | None = None
    version: int | None = None

    @property
    def offender(self) -> str:
        """The id to name: the transaction, else the Delta version, else ``total``."""
        if self.txn_id is not None:
            return self.txn_id
        return f"version {self.version}" if self.version is not None else "total"


@dataclass(frozen=True, kw_only=True)
class CheckResult:
    """One exactly-once check: passed when it has no findings."""

    name: str
    description: str
    findings: tuple[Finding, ...] = ()

    @property
    def passed(self) -> bool:
        return not self.findings

    @property
    def offenders(self) -> tuple[str, ...]:
        """The offending ids, each once, in order of first finding."""
        return tuple(dict.fromkeys(f.offender for f in self.findings))

    def __str__(self) -> str:
        if self.passed:
            return f"PASS  {self.name}"
        return f"FAIL  {self.name}: {', '.join(self.offenders)}"


@dataclass(frozen=True, kw_only=True)
class AuditReport:
    """Everything the audit of one lakesink table found, read from one snapshot."""

    snapshot: AuditSnapshot
    history: tuple[HistoryEntry, ...]
    timeline: tuple[TransactionAudit, ...]
    validation_failures: tuple[ValidationFailure, ...]
    checks: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def audit_table(spark: SparkSession, table_path: str) -> AuditReport:
    """Audit the lakesink table at ``table_path``: pin it, then run every query once.

    Raises:
        TableNotFoundError: No lakesink table at ``table_path``, or no journal where the
            table says it is.
    """
    snap = snapshot(spark, table_path)
    history = table_history(spark, snap)
    audits = timeline(spark, snap, history=history)
    report = AuditReport(
        snapshot=snap,
        history=history,
        timeline=audits,
        validation_failures=failed_validations(spark, snap),
        checks=exactly_once_checks(spark, snap, audits=audits, history=history),
    )
    log.info(
        "audit of %s (sink %r, version %d): %s",
        snap.table_path,
        snap.sink_id,
        snap.table_version,
        "; ".join(str(c) for c in report.checks),
    )
    return report


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
    from delta.tables import DeltaTable

    table_path = normalize(table_path)
    sink_table = read_sink_table(spark, table_path)
    journal = Journal(spark, sink_table.journal_path, create=False)
    journal.transactions(sink_table.sink_id, table_path=table_path)  # the table's own journal
    table = DeltaTable.forPath(spark, table_path)
    journal_table = DeltaTable.forPath(spark, journal.path)

    def latest(delta_table: DeltaTable) -> int:
        # A Delta table has at least one version, so history(1) has a row.
        return int(cast(Row, delta_table.history(1).select("version").first())[0])

    for attempt in range(attempts):
        before = latest(journal_table)
        table_version = latest(table)
        if latest(journal_table) == before:
            return AuditSnapshot(
                table_path=table_path,
                sink_id=sink_table.sink_id,
                journal_path=journal.path,
                table_version=table_version,
                journal_version=before,
                taken_at=datetime.now(timezone.utc),
            )
        log.info("journal %s moved while pinning (attempt %d); again", journal.path, attempt + 1)
        time.sleep(0.05 * (attempt + 1))
    raise LakesinkError(
        f"the journal {journal.path} changed every time while pinning {table_path} to a "
        f"version ({attempts} attempts); run the audit again when the writers are quieter"
    )


def table_history(spark: SparkSession, snap: AuditSnapshot) -> tuple[HistoryEntry, ...]:
    """The table's Delta versions up to the snapshot's, oldest first, as lakesink made them.

    Versions older than the table's log retention (``delta.logRetentionDuration``, 30 days
    by default) are gone from Delta's history and so from here.
    """
    from delta.tables import DeltaTable

    rows = (
        DeltaTable.forPath(spark, snap.table_path)
        .history()
        .where(F.col("version") <= snap.table_version)
        .select(
            "version",
            F.unix_micros("timestamp").alias("micros"),
            "operation",
            "operationMetrics",
            "userMetadata",
        )
        .orderBy("version")
        .collect()
    )
    return tuple(
        history_entry(
            version=row.version,
            timestamp=_utc(row.micros),
            operation=row.operation,
            user_metadata=row.userMetadata,
            metrics=row.operationMetrics,
        )
        for row in rows
    )


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
    history = table_history(spark, snap) if history is None else history
    folded = {row.txn_id: row for row in fold(_events(spark, snap)).collect()}
    counts = _row_counts(spark, snap)
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
                # one of the two knows the transaction: folded or counts
                checkpoint_id=cast(int, row.checkpoint_id if row else checkpoint_id),
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


def exactly_once_checks(
    spark: SparkSession,
    snap: AuditSnapshot,
    *,
    audits: Sequence[TransactionAudit] | None = None,
    history: Sequence[HistoryEntry] | None = None,
) -> tuple[CheckResult, ...]:
    """The checks an auditor of exactly-once wants; each names what breaks it.

    1. No duplicate transaction rows: no transaction has more rows in the table than the
       journal recorded at its pre-commit, and no append of a transaction is in the
       history twice.
    2. No visible row of a non-committed transaction: every visible row belongs to a
       transaction the journal shows committed, decided (``committing``), or pre-committed
       with its lakesink commit MERGE in the history (a commit in flight).
    3. Committed row counts equal the journal's: each committed transaction has exactly
       its journaled rows visible and none masked, and the committed view's total is the
       sum of the journal's committed rows.
    4. No row changed outside lakesink: every Delta version that can change rows was made
       by lakesink (carries its ``userMetadata``).

    Args:
        spark: A Delta-ready session.
        snap: What to read (``snapshot``).
        audits: The sink's timeline if already read (``timeline``).
        history: The table's history if already read (``table_history``).
    """
    history = table_history(spark, snap) if history is None else history
    audits = timeline(spark, snap, history=history) if audits is None else audits
    return (
        _check_duplicates(audits, history),
        _check_visibility(audits),
        _check_counts(audits),
        _check_foreign_changes(history),
    )


def raise_on_failures(reports: Iterable[AuditReport]) -> None:
    """Raise ``AuditFailedError`` naming every failed check, its table and offenders."""
    failed = [
        f"{c.name} in {r.snapshot.table_path} ({'; '.join(f.reason for f in c.findings)})"
        for r in reports
        for c in r.checks
        if not c.passed
    ]
    if failed:
        raise AuditFailedError("exactly-once audit failed: " + " | ".join(failed))


def to_frame(records: Iterable[Any], *, record_type: type | None = None) -> pandas.DataFrame:
    """The records (this module's dataclasses) as a pandas DataFrame, for display and plots.

    Args:
        records: Records of one type.
        record_type: Their type: gives the columns even when there are no records.
    """
    import pandas

    def plain(value: object) -> object:
        return value.value if isinstance(value, Enum) else value

    rows = [
        {name: plain(value) for name, value in dataclasses.asdict(record).items()}
        for record in records
    ]
    columns = [f.name for f in dataclasses.fields(record_type)] if record_type else None
    return pandas.DataFrame(rows, columns=columns)


# ------------------------------------------------------------------ internals


def _events(spark: SparkSession, snap: AuditSnapshot) -> DataFrame:
    return (
        spark.read.format("delta")
        .option("versionAsOf", snap.journal_version)
        .load(snap.journal_path)
        .where(F.col("sink_id") == snap.sink_id)
    )


def _row_counts(spark: SparkSession, snap: AuditSnapshot) -> dict[str, tuple[int, int, int]]:
    """Per transaction in the table: its checkpoint id, visible rows and masked rows."""
    visible = F.col(VISIBLE)
    rows = (
        spark.read.format("delta")
        .option("versionAsOf", snap.table_version)
        .load(snap.table_path)
        .groupBy(TXN_ID, CHECKPOINT_ID)
        .agg(
            F.count(F.when(visible, 1)).alias("visible"),
            F.count(F.when(~visible, 1)).alias("masked"),
        )
        .collect()
    )
    return {r[TXN_ID]: (r[CHECKPOINT_ID], r.visible, r.masked) for r in rows}


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


def _check_duplicates(
    audits: Sequence[TransactionAudit], history: Sequence[HistoryEntry]
) -> CheckResult:
    findings = [
        _finding(
            a,
            f"has {a.visible_rows + a.masked_rows} rows in the table, the journal "
            f"pre-committed {a.row_count}",
        )
        for a in audits
        if a.row_count is not None and a.visible_rows + a.masked_rows > a.row_count
    ]
    appends = Counter(
        (e.txn_ids[0], e.checkpoint_id, e.step)
        for e in history
        if e.lakesink == "write" and e.txn_ids
    )
    findings += [
        Finding(
            txn_id=txn_id,
            checkpoint_id=checkpoint_id,
            reason=f"{txn_id} (checkpoint {checkpoint_id}) has append {step} in the history "
            f"{times} times",
        )
        for (txn_id, checkpoint_id, step), times in appends.items()
        if times > 1
    ]
    return CheckResult(
        name="no duplicate transaction rows",
        description="no transaction has more rows in the table than it pre-committed, and "
        "no append of a transaction is in the Delta history twice",
        findings=tuple(findings),
    )


def _finding(audit: TransactionAudit, what: str) -> Finding:
    """A finding about one transaction, named with its checkpoint."""
    return Finding(
        txn_id=audit.txn_id,
        checkpoint_id=audit.checkpoint_id,
        reason=f"{audit.txn_id} (checkpoint {audit.checkpoint_id}) {what}",
    )


def _check_visibility(audits: Sequence[TransactionAudit]) -> CheckResult:
    findings = tuple(
        _finding(
            a,
            f"has {a.visible_rows} visible rows but is "
            f"{a.state.value if a.state else 'not in the journal'}",
        )
        for a in audits
        if a.visible_rows and not _publishable(a)
    )
    return CheckResult(
        name="no visible row of a non-committed checkpoint",
        description="every visible row belongs to a transaction the journal shows committed "
        "(or whose commit MERGE is made and its committed event still to come)",
        findings=findings,
    )


def _check_counts(audits: Sequence[TransactionAudit]) -> CheckResult:
    done = [a for a in audits if a.state is TxnState.COMMITTED]
    findings = [
        _finding(
            a,
            f"has {a.visible_rows} visible and {a.masked_rows} masked rows, the journal "
            f"committed {a.row_count}",
        )
        for a in done
        if a.visible_rows != a.row_count or a.masked_rows
    ]
    # Every visible row, whoever it belongs to: what the committed view shows. A commit
    # between its MERGE and its "committed" event counts what it shows.
    visible_total = sum(a.visible_rows for a in audits)
    in_flight = sum(
        a.visible_rows for a in audits if a.state is not TxnState.COMMITTED and _publishable(a)
    )
    journaled = sum(a.row_count or 0 for a in done) + in_flight
    if visible_total != journaled:
        findings.append(
            Finding(
                reason=f"the committed view has {visible_total} rows, the journal's "
                f"committed transactions {journaled}"
            )
        )
    return CheckResult(
        name="committed row counts equal the journal's",
        description="each committed transaction shows exactly its journaled rows, and the "
        "committed view's total is the journal's",
        findings=tuple(findings),
    )


def _publishable(audit: TransactionAudit) -> bool:
    """May its rows be visible: committed, decided, or its commit MERGE already made.

    The normal commit journals ``committed`` after its MERGE, and nothing before it but the
    pre-commit: a pre-committed transaction whose lakesink commit MERGE is in the history
    is a commit in flight, or stopped by a crash until recovery commits it again.
    """
    return (audit.state is not None and audit.state.decided) or (
        audit.state is TxnState.PRE_COMMITTED and audit.commit_version is not None
    )


def _check_foreign_changes(history: Sequence[HistoryEntry]) -> CheckResult:
    findings = tuple(
        Finding(
            version=e.version,
            reason=f"version {e.version} ({e.operation}, {e.timestamp:%Y-%m-%d %H:%M:%S} UTC) "
            "was not made by lakesink",
        )
        for e in history
        if e.lakesink is None and e.operation not in ROW_PRESERVING_OPERATIONS
    )
    return CheckResult(
        name="no row changed outside lakesink",
        description="every Delta version that can change rows carries lakesink's metadata",
        findings=findings,
    )


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
