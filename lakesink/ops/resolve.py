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

from lakesink.core import Cut, LoggedTransaction, TransactionHolder, TxnState, record_cut
from lakesink.core.recovery import check_resolvable
from lakesink.delta.modes import CommitMode
from lakesink.delta.readers import create_pending_view, pending_rows
from lakesink.delta.sink import DeltaSink, DeltaTransaction, SinkOptions
from lakesink.errors import UnknownCheckpointError
from lakesink.ops.status import SinkStatus, sink_status
from lakesink.tables.cuts import group_cut
from lakesink.tables.deltars import read_sink_table_log
from lakesink.tables.format import read_sink_table
from lakesink.tables.journal import Journal, TransactionStatus

if TYPE_CHECKING:
    from lakesink.core.validation import ValidationReport
    from lakesink.spark.validation import ValidationGate

__all__ = [
    "checkpoint_tables",
    "create_checkpoint_view",
    "pending_transactions",
    "resolve_checkpoint",
    "revalidate_checkpoint",
]

log = logging.getLogger(__name__)


def checkpoint_tables(path: str) -> tuple[Cut | None, dict[str, str]]:
    """Where a checkpoint of the table at ``path`` is resolved: in every table of its group
    (and the group's newest cut), or in the table alone; the tables by sink id."""
    found, _ = read_sink_table_log(path)
    cut = group_cut(found.sink_id, found.journal_path)
    if cut is None:
        return None, {found.sink_id: path}
    return cut, {key: table.location for key, table in cut.tables.items()}


def pending_transactions(path: str, checkpoint_id: int) -> list[TransactionStatus]:
    """The transactions of a checkpoint that are not yet committed or aborted, in the table
    at ``path`` and, for a table of a group, in every table of its group.

    Read from the tables' logs and journals with delta-rs, no JVM: a command refuses a
    wrong table or checkpoint in a fraction of a second, before Spark starts.

    Raises:
        TableNotFoundError: No lakesink table at ``path``.
        FormatVersionError: A lakesink table of another format.
        UnknownCheckpointError: Nothing of the checkpoint is pending; the message says
            whether it is already committed, was aborted, or never was.
    """
    _, tables = checkpoint_tables(path)
    found = [
        t
        for table in tables.values()
        for t in _unfinished(sink_status(table))
        if t.checkpoint_id == checkpoint_id
    ]
    if found:
        return found
    status = sink_status(path)
    if any(t.checkpoint_id == checkpoint_id for t in status.committed):
        why = "it is already committed"
    elif any(t.checkpoint_id == checkpoint_id for t in status.aborted):
        why = "it was aborted (its rows never become visible; the vacuum removes them)"
    else:
        why = "the sink has no such checkpoint"
    unfinished = sorted({t.checkpoint_id for t in _unfinished(status)})
    raise UnknownCheckpointError(
        f"sink {status.sink_id!r} has nothing pending in checkpoint {checkpoint_id}: {why} "
        f"(pending checkpoints: {', '.join(map(str, unfinished)) or 'none'})"
    )


def _unfinished(status: SinkStatus) -> list[TransactionStatus]:
    return [*status.pending, *status.held]


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
    mode: CommitMode = "merge",
    progress: Callable[[str], None] = log.info,
) -> list[TransactionStatus]:
    """Commit or abort every pending transaction of the checkpoint; return them.

    In a table of a group (``lakesink.core.cut``) the checkpoint is committed or aborted in
    every table of the group, never in one alone, and a commit then records the group's
    new cut: readers see it in all the tables at once. Every transaction is checked before
    any writer's is touched. ``mode`` is how a commit makes the rows visible, as
    ``SinkOptions.commit``: ``"merge"`` or ``"metadata"`` (the files added again as
    committed, no row rewritten; the table must allow it).

    Raises:
        UnknownCheckpointError: Nothing is pending in that checkpoint.
        ProtocolError: Commit of a transaction never pre-committed, or abort of one whose
            commit was already decided.
        AlreadyRunningError: A writer of the checkpoint is still running.
        ConfigurationError: An unknown ``mode``, or a table the metadata commit cannot
            write exactly.
    """
    SinkOptions(commit=mode)  # an unknown mode is refused before anything is read
    cut, tables = checkpoint_tables(path)
    transactions = pending_transactions(path, checkpoint_id)
    commit = action == "commit"
    check_resolvable([_logged(t) for t in transactions], commit=commit)
    sinks = []
    for sink_id, table in sorted(tables.items()):
        mine = [t for t in transactions if t.sink_id == sink_id]
        for writer_id in sorted({t.writer_id for t in mine}):
            rows = sum(t.row_count or 0 for t in mine if t.writer_id == writer_id)
            progress(
                f"{action} checkpoint {checkpoint_id} of {table}: writer {writer_id}, {rows} rows"
            )
            options = SinkOptions(sink_id=sink_id, writer_id=writer_id, commit=mode)
            sink = DeltaSink(spark, table, options=options)
            sink.resolve(checkpoint_id, commit=commit, reason=f"operator {action}")
            sinks.append(sink)
    if cut is not None and commit:
        record_cut(cut.group_id, max(cut.checkpoint_id, checkpoint_id), _one_per_table(sinks))
        progress(f"the group's tables are read at its new cut: {', '.join(sorted(tables))}")
    return transactions


def _one_per_table(sinks: list[DeltaSink]) -> list[DeltaSink]:
    return list({sink.sink_id: sink for sink in sinks}.values())


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
