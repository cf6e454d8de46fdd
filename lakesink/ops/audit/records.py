"""What an audit finds, as plain records: no query here, so the checks and the notebooks'
tables work on records read by ``reading`` or built by hand."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from lakesink.core import TxnState
from lakesink.tables.history import HistoryEntry

__all__ = [
    "AuditReport",
    "AuditSnapshot",
    "CheckResult",
    "Finding",
    "Phase",
    "TransactionAudit",
    "ValidationFailure",
]


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
