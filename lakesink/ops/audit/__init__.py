"""Audit queries: what happened to a sink, and whether the exactly-once promise held.

The auditing notebooks (``notebooks/audit.ipynb``) are thin over these functions, so what
an auditor looks at is tested code. Every query takes an :class:`AuditSnapshot`: the
table and its journal pinned to a pair of Delta versions that agree with each other, so an
audit of a sink that is being written to sees a consistent picture, not a commit caught
half-way between its journal events and its MERGE.

The sources, and what each says:

- the journal (``lakesink.tables.journal``): every state change of every transaction;
- the table: each transaction's visible rows (what its commits recorded making visible)
  and masked rows (its pending partition's, from the log), and the committed view's rows
  counted in the data;
- the table's Delta history: each commit lakesink made carries ``userMetadata`` naming the
  operation (write, commit, vacuum), the checkpoint and the transaction
  (``lakesink.tables.format.commit_metadata``), so a Delta version can be lined up with the
  journal event it belongs to.

The exactly-once checks (:func:`exactly_once_checks`) compare these sources; each returns
the transactions (or Delta versions) that break it. The package is split by job:
``records`` (what an audit finds), ``reading`` (the pinned reads), ``checks`` (pure
functions over the records) and ``render`` (pandas DataFrames).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyspark.sql import SparkSession

from lakesink.ops.audit.checks import raise_on_failures, run_checks
from lakesink.ops.audit.reading import (
    committed_rows,
    failed_validations,
    snapshot,
    table_history,
    timeline,
)
from lakesink.ops.audit.records import (
    AuditReport,
    AuditSnapshot,
    CheckResult,
    Finding,
    Phase,
    TransactionAudit,
    ValidationFailure,
)
from lakesink.ops.audit.render import to_frame

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lakesink.tables.history import HistoryEntry

__all__ = [
    "AuditReport",
    "AuditSnapshot",
    "CheckResult",
    "Finding",
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


def audit_table(spark: SparkSession, table_path: str) -> AuditReport:
    """Audit the lakesink table at ``table_path``: pin it, then run every query once.

    Raises:
        TableNotFoundError: No lakesink table at ``table_path``, or no journal where the
            table says it is.
    """
    snap = snapshot(spark, table_path)
    history = table_history(snap)
    audits = timeline(spark, snap, history=history)
    report = AuditReport(
        snapshot=snap,
        history=history,
        timeline=audits,
        validation_failures=failed_validations(spark, snap),
        checks=run_checks(audits, history, committed_rows=committed_rows(spark, snap)),
    )
    log.info(
        "audit of %s (sink %r, version %d): %s",
        snap.table_path,
        snap.sink_id,
        snap.table_version,
        "; ".join(str(c) for c in report.checks),
    )
    return report


def exactly_once_checks(
    spark: SparkSession,
    snap: AuditSnapshot,
    *,
    audits: Sequence[TransactionAudit] | None = None,
    history: Sequence[HistoryEntry] | None = None,
) -> tuple[CheckResult, ...]:
    """The exactly-once checks (``checks.run_checks`` says each) on the table ``snap`` pins.

    Args:
        spark: A Delta-ready session.
        snap: What to read (``snapshot``).
        audits: The sink's timeline if already read (``timeline``).
        history: The table's history if already read (``table_history``).
    """
    history = table_history(snap) if history is None else history
    audits = timeline(spark, snap, history=history) if audits is None else audits
    return run_checks(audits, history, committed_rows=committed_rows(spark, snap))
