"""The exactly-once checks: pure functions over an audit's records, each naming what breaks
it, so each can be tried on records built by hand."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from lakesink.core import TxnState
from lakesink.errors import AuditFailedError
from lakesink.ops.audit.records import AuditReport, CheckResult, Finding, TransactionAudit
from lakesink.tables.history import HistoryEntry

__all__ = [
    "ROW_PRESERVING_OPERATIONS",
    "check_counts",
    "check_duplicates",
    "check_foreign_changes",
    "check_visibility",
    "raise_on_failures",
    "run_checks",
]

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


def run_checks(
    audits: Sequence[TransactionAudit],
    history: Sequence[HistoryEntry],
    *,
    committed_rows: int | None = None,
) -> tuple[CheckResult, ...]:
    """The checks an auditor of exactly-once wants, on a sink's timeline and its table's
    history (both read at one snapshot).

    1. No duplicate transaction rows: no transaction has more rows in the table than the
       journal recorded at its pre-commit, and no append of a transaction is in the
       history twice.
    2. No visible row of a non-committed transaction: every visible row belongs to a
       transaction the journal shows committed, decided (``committing``), or pre-committed
       with its lakesink commit MERGE in the history (a commit in flight).
    3. Committed row counts equal the journal's: each committed transaction has exactly
       its journaled rows visible and none masked, and the committed view's total (its
       rows counted in the table, ``committed_rows``, when given) is the sum of the
       journal's committed rows.
    4. No row changed outside lakesink: every Delta version that can change rows was made
       by lakesink (carries its ``userMetadata``).
    """
    return (
        check_duplicates(audits, history),
        check_visibility(audits),
        check_counts(audits, committed_rows=committed_rows),
        check_foreign_changes(history),
    )


def check_duplicates(
    audits: Sequence[TransactionAudit], history: Sequence[HistoryEntry]
) -> CheckResult:
    """Check 1 of ``run_checks``."""
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


def check_visibility(audits: Sequence[TransactionAudit]) -> CheckResult:
    """Check 2 of ``run_checks``."""
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


def check_counts(
    audits: Sequence[TransactionAudit], *, committed_rows: int | None = None
) -> CheckResult:
    """Check 3 of ``run_checks``."""
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
    visible_total = (
        sum(a.visible_rows for a in audits) if committed_rows is None else committed_rows
    )
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


def check_foreign_changes(history: Sequence[HistoryEntry]) -> CheckResult:
    """Check 4 of ``run_checks``."""
    findings = tuple(
        Finding(
            version=e.version,
            reason=f"version {e.version} ({_described(e)}) was not made by lakesink",
        )
        for e in history
        if e.lakesink is None and e.operation not in ROW_PRESERVING_OPERATIONS
    )
    return CheckResult(
        name="no row changed outside lakesink",
        description="every Delta version that can change rows carries lakesink's metadata",
        findings=findings,
    )


def _described(entry: HistoryEntry) -> str:
    """Its operation and time, or what its commit leaves out (the protocol needs neither)."""
    when = f"{entry.timestamp:%Y-%m-%d %H:%M:%S} UTC" if entry.timestamp else "no time"
    return f"{entry.operation or 'no operation'}, {when}"


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


def _finding(audit: TransactionAudit, what: str) -> Finding:
    """A finding about one transaction, named with its checkpoint."""
    return Finding(
        txn_id=audit.txn_id,
        checkpoint_id=audit.checkpoint_id,
        reason=f"{audit.txn_id} (checkpoint {audit.checkpoint_id}) {what}",
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
