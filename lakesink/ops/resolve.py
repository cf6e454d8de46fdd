"""Operator recovery: commit, abort or re-validate a sink's pending checkpoint by hand.

For when a job cannot be restarted to recover by itself, or the validation gate held a
checkpoint. Commit and abort go through the protocol's ``resolve`` of each writer of the
checkpoint, which takes the writer's lock (so it refuses while the writer runs) and refuses
to commit a transaction never pre-committed or to abort one whose commit was decided.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal

from pyspark.sql import SparkSession

from lakesink.core import LoggedTransaction, TransactionHolder, TxnState
from lakesink.core.recovery import check_resolvable
from lakesink.delta.readers import create_pending_view, pending_rows
from lakesink.delta.sink import DeltaSink, DeltaTransaction, SinkOptions
from lakesink.errors import UnknownCheckpointError
from lakesink.ops.status import sink_status
from lakesink.tables.format import read_sink_table
from lakesink.tables.journal import Journal, TransactionStatus

if TYPE_CHECKING:
    from lakesink.core.validation import ValidationReport
    from lakesink.spark.validation import ValidationGate

__all__ = [
    "create_checkpoint_view",
    "pending_transactions",
    "resolve_checkpoint",
    "revalidate_checkpoint",
]

log = logging.getLogger(__name__)


def pending_transactions(path: str, checkpoint_id: int) -> list[TransactionStatus]:
    """The transactions of a checkpoint that are not yet committed or aborted.

    Read from the table's log and its journal with delta-rs, no JVM: a command refuses a
    wrong table or checkpoint in a fraction of a second, before Spark starts.

    Raises:
        TableNotFoundError: No lakesink table at ``path``.
        FormatVersionError: A lakesink table of another format.
        UnknownCheckpointError: Nothing of the checkpoint is pending; the message says
            whether it is already committed, was aborted, or never was.
    """
    status = sink_status(path)
    found = [t for t in (*status.pending, *status.held) if t.checkpoint_id == checkpoint_id]
    if found:
        return found
    if any(t.checkpoint_id == checkpoint_id for t in status.committed):
        why = "it is already committed"
    elif any(t.checkpoint_id == checkpoint_id for t in status.aborted):
        why = "it was aborted (its rows never become visible; the vacuum removes them)"
    else:
        why = "the sink has no such checkpoint"
    unfinished = sorted({t.checkpoint_id for t in (*status.pending, *status.held)})
    raise UnknownCheckpointError(
        f"sink {status.sink_id!r} has nothing pending in checkpoint {checkpoint_id}: {why} "
        f"(pending checkpoints: {', '.join(map(str, unfinished)) or 'none'})"
    )


def create_checkpoint_view(
    spark: SparkSession, path: str, checkpoint_id: int, view_name: str | None = None
) -> tuple[str, list[TransactionStatus]]:
    """A catalog view of a pending or held checkpoint's rows, to audit them with SQL.

    Every writer's transaction of the checkpoint that is pre-committed or held is in it.
    ``view_name`` defaults to ``<sink id>_checkpoint_<id>``. Returns the view's name and
    the transactions.

    Raises:
        UnknownCheckpointError: Nothing of the checkpoint is pending.
    """
    table = read_sink_table(spark, path)
    transactions = pending_transactions(path, checkpoint_id)
    name = view_name or f"{table.sink_id}_checkpoint_{checkpoint_id}"
    create_pending_view(spark, table, name, [t.txn_id for t in transactions])
    log.info("created view %s of checkpoint %d of %s", name, checkpoint_id, path)
    return name, transactions


def resolve_checkpoint(
    spark: SparkSession,
    path: str,
    checkpoint_id: int,
    action: Literal["commit", "abort"],
    *,
    mode: str = "merge",
    progress: Callable[[str], None] = log.info,
) -> list[TransactionStatus]:
    """Commit or abort every pending transaction of the checkpoint; return them.

    Every transaction is checked before any writer's is touched. ``mode`` is how a commit
    makes the rows visible, as ``SinkOptions.commit``: ``"merge"`` or ``"metadata"`` (the
    files added again as committed, no row rewritten; the table must allow it).

    Raises:
        UnknownCheckpointError: Nothing is pending in that checkpoint.
        ProtocolError: Commit of a transaction never pre-committed, or abort of one whose
            commit was already decided.
        AlreadyRunningError: A writer of the checkpoint is still running.
        ConfigurationError: An unknown ``mode``, or a table the metadata commit cannot
            write exactly.
    """
    SinkOptions(commit=mode)  # an unknown mode is refused before anything is read
    transactions = pending_transactions(path, checkpoint_id)
    commit = action == "commit"
    check_resolvable([_logged(t) for t in transactions], commit=commit)
    for writer_id in sorted({t.writer_id for t in transactions}):
        mine = [t for t in transactions if t.writer_id == writer_id]
        rows = sum(t.row_count or 0 for t in mine)
        progress(f"{action} checkpoint {checkpoint_id}: writer {writer_id}, {rows} rows")
        options = SinkOptions(sink_id=mine[0].sink_id, writer_id=writer_id, commit=mode)
        DeltaSink(spark, path, options=options).resolve(
            checkpoint_id, commit=commit, reason=f"operator {action}"
        )
    return transactions


def revalidate_checkpoint(
    spark: SparkSession, path: str, checkpoint_id: int, gate: ValidationGate
) -> list[tuple[TransactionStatus, ValidationReport]]:
    """Run ``gate`` on the rows of a checkpoint's pre-committed or held transactions.

    Each report is journaled with the transaction's unchanged state (commit or abort it
    afterwards).

    Raises:
        UnknownCheckpointError: Nothing pre-committed or held in that checkpoint.
    """
    transactions = [
        t for t in pending_transactions(path, checkpoint_id) if t.state is not TxnState.OPEN
    ]
    if not transactions:
        raise UnknownCheckpointError(
            f"checkpoint {checkpoint_id} of {path} has only open transactions, whose rows "
            "may be incomplete; nothing to validate"
        )
    table = read_sink_table(spark, path)
    journal = Journal(spark, table.journal_path, create=False)
    results = []
    for txn in transactions:
        report = gate.validate(pending_rows(spark, table, [txn.txn_id]))
        journal.record(
            txn.event(
                table_path=table.path,
                state=txn.state,
                event_time=datetime.now(timezone.utc),
                row_count=txn.row_count,
                detail="validated again by an operator",
                validation=report.to_json(),
            )
        )
        results.append((txn, report))
    return results


def _logged(status: TransactionStatus) -> LoggedTransaction[DeltaTransaction]:
    handle = DeltaTransaction(status.txn_id, status.checkpoint_id, status.writer_id)
    return LoggedTransaction(TransactionHolder(handle, status.checkpoint_id, 0), status.state)
