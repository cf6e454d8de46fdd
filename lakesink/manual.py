"""Operator recovery: commit, abort or re-validate a sink's pending checkpoint by hand.

For when a job cannot be restarted to recover by itself, or the validation gate held a
checkpoint. The writers of the checkpoint must not be running (their locks are taken), and
a decided checkpoint cannot be aborted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from pyspark.sql import SparkSession

from lakesink.delta_sink import DeltaSink
from lakesink.errors import ProtocolError, UnknownCheckpointError
from lakesink.journal import TransactionStatus, TxnState
from lakesink.status import sink_status

if TYPE_CHECKING:
    from lakesink.validation import ValidationGate, ValidationReport

__all__ = ["pending_transactions", "resolve_checkpoint", "revalidate_checkpoint"]

log = logging.getLogger(__name__)


def pending_transactions(
    spark: SparkSession, path: str, checkpoint_id: int
) -> list[TransactionStatus]:
    """The not yet committed or aborted transactions of a checkpoint; raise if none."""
    status = sink_status(spark, path)
    found = [t for t in (*status.pending, *status.held) if t.checkpoint_id == checkpoint_id]
    if not found:
        raise UnknownCheckpointError(
            f"sink {status.sink_id!r} has nothing pending in checkpoint {checkpoint_id} "
            f"(pending checkpoints: {sorted({t.checkpoint_id for t in status.pending}) or 'none'})"
        )
    return found


def resolve_checkpoint(
    spark: SparkSession,
    path: str,
    checkpoint_id: int,
    action: Literal["commit", "abort"],
    *,
    progress: Callable[[str], None] = log.info,
) -> list[TransactionStatus]:
    """Commit or abort every pending transaction of the checkpoint; return them.

    Raises:
        UnknownCheckpointError: Nothing is pending in that checkpoint.
        ProtocolError: Commit of a transaction never pre-committed, or abort of one whose
            commit was already decided.
        AlreadyRunningError: A writer of the checkpoint is still running.
    """
    transactions = pending_transactions(spark, path, checkpoint_id)
    for txn in transactions:
        if action == "commit" and txn.state is TxnState.OPEN:
            raise ProtocolError(
                f"transaction {txn.txn_id} of checkpoint {checkpoint_id} was never "
                "pre-committed, so it may be incomplete; abort it instead"
            )
        if action == "abort" and txn.state is TxnState.COMMITTING:
            raise ProtocolError(
                f"the commit of transaction {txn.txn_id} (checkpoint {checkpoint_id}) was "
                "already decided; it can only be committed"
            )
    for txn in transactions:
        progress(
            f"{action} checkpoint {checkpoint_id}, transaction {txn.txn_id} "
            f"(writer {txn.writer_id}, {txn.row_count} rows)"
        )
        sink = DeltaSink(spark, path, sink_id=txn.sink_id, writer_id=txn.writer_id)
        sink.resolve_by_hand(txn, commit=action == "commit")
    return transactions


def revalidate_checkpoint(
    spark: SparkSession, path: str, checkpoint_id: int, gate: ValidationGate
) -> list[tuple[TransactionStatus, ValidationReport]]:
    """Run ``gate`` on the rows of a checkpoint's pre-committed or held transactions.

    Each report is journaled; no state changes (commit or abort afterwards).

    Raises:
        UnknownCheckpointError: Nothing pre-committed or held in that checkpoint.
    """
    transactions = [
        t for t in pending_transactions(spark, path, checkpoint_id) if t.state is not TxnState.OPEN
    ]
    if not transactions:
        raise UnknownCheckpointError(
            f"checkpoint {checkpoint_id} of {path} has only open transactions, whose rows "
            "may be incomplete; nothing to validate"
        )
    results = []
    for txn in transactions:
        sink = DeltaSink(spark, path, sink_id=txn.sink_id, writer_id=txn.writer_id)
        results.append((txn, sink.revalidate(txn, gate)))
    return results
