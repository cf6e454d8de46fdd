"""Operator recovery: commit, abort or re-validate a sink's pending checkpoint by hand.

For when a job cannot be restarted to recover by itself, or the validation gate held a
checkpoint. ``plan_resolution`` decides, from the journal and the writers' locks and leases
and without Spark, whether a commit or abort can go ahead: a running writer, a transaction
never pre-committed (for a commit), one whose commit was decided (for an abort) are refused
before a command starts Spark, and a checkpoint already committed (or aborted) needs
nothing. Then each writer's transactions go through the protocol's ``resolve``, which takes
the writer's lock itself (a writer that started in between is still refused). A checkpoint
of a table of a group (``lakesink.core.cut``) is settled in every table of the group, never
in one alone, and a commit then records the group's new cut.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Literal

from pyspark.sql import SparkSession

from lakesink.core import Cut, LoggedTransaction, TransactionHolder, TxnState
from lakesink.core.checkpointing import GlobalCommitter
from lakesink.core.recovery import check_resolvable
from lakesink.delta.committer import Committable
from lakesink.delta.options import SinkOptions
from lakesink.delta.sink import DeltaSink
from lakesink.delta.table import read_sink_table
from lakesink.errors import AlreadyRunningError, UnknownCheckpointError
from lakesink.ops.status import SinkStatus, sink_status
from lakesink.readers.spark import create_pending_view, transaction_rows
from lakesink.storage.lease import writer_lock
from lakesink.storage.location import is_uri
from lakesink.tables.cuts import DeltaCutStore, GroupTable, cuts_path, group_cut
from lakesink.tables.deltars import read_sink_table_log
from lakesink.tables.format import CommitMode, check_commit_mode
from lakesink.tables.journal import Journal, TransactionStatus
from lakesink.tables.published import publish

if TYPE_CHECKING:
    from lakesink.core.validation import ValidationReport
    from lakesink.spark.validation import ValidationGate

__all__ = [
    "Resolution",
    "checkpoint_tables",
    "create_checkpoint_view",
    "pending_transactions",
    "plan_resolution",
    "resolve_checkpoint",
    "revalidate_checkpoint",
    "settle",
]

log = logging.getLogger(__name__)


def checkpoint_tables(path: str) -> tuple[Cut | None, dict[str, str]]:
    """Where a checkpoint of the table at ``path`` is settled: in every table of its group
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
    found = _pending_in(tables.values(), checkpoint_id)
    if not found:
        raise _nothing_pending(sink_status(path), checkpoint_id)
    return found


def _pending_in(tables: Iterable[str], checkpoint_id: int) -> list[TransactionStatus]:
    return [t for table in tables for t in _unfinished(sink_status(table), checkpoint_id)]


@dataclass(frozen=True, kw_only=True)
class Resolution:
    """What an operator's commit or abort of a checkpoint comes to, decided before Spark.

    Attributes:
        action: ``commit`` or ``abort``.
        checkpoint_id: The checkpoint.
        transactions: Those to settle; when ``done``, those already settled.
        done: The checkpoint is already in the state the action leads to (a retry of a
            commit or abort that landed): nothing to do.
        tables: The tables it is settled in, by sink id: the table's group's, or itself.
        cut: The group's newest cut (None: a table in no group).
    """

    action: Literal["commit", "abort"]
    checkpoint_id: int
    transactions: tuple[TransactionStatus, ...]
    done: bool
    tables: Mapping[str, str]
    cut: Cut | None = None

    @property
    def rows(self) -> int | None:
        """Their rows (None when a count is unknown)."""
        counts = [t.row_count for t in self.transactions]
        return None if None in counts else sum(c for c in counts if c is not None)


def plan_resolution(
    path: str, checkpoint_id: int, action: Literal["commit", "abort"]
) -> Resolution:
    """Whether a commit or abort of the checkpoint can go ahead, from the journal and the
    writers' locks and leases, without Spark: what a command checks before it starts it.

    Raises:
        UnknownCheckpointError: Nothing of it is pending, and it is not already in the
            state the action leads to (a commit of an aborted one, an abort of a committed
            one, or no such checkpoint).
        ProtocolError: A commit of a transaction never pre-committed, or an abort of one
            whose commit was decided.
        AlreadyRunningError: A writer of the checkpoint is running (it settles it itself).
    """
    cut, tables = checkpoint_tables(path)
    status = sink_status(path)
    found = _pending_in(tables.values(), checkpoint_id)
    if not found:
        settled = {"commit": status.committed, "abort": status.aborted}[action]
        done = tuple(t for t in settled if t.checkpoint_id == checkpoint_id)
        committed = any(t.checkpoint_id == checkpoint_id for t in status.committed)
        if done and (action == "commit" or not committed):
            return Resolution(
                action=action,
                checkpoint_id=checkpoint_id,
                transactions=done,
                done=True,
                tables=tables,
                cut=cut,
            )
        raise _nothing_pending(status, checkpoint_id)
    check_resolvable([_logged(t, tables[t.sink_id]) for t in found], commit=action == "commit")
    for sink_id, writer_id in sorted({(t.sink_id, t.writer_id) for t in found}):
        lock = writer_lock(tables[sink_id], sink_id, writer_id)
        if lock.is_held():
            # A lease outlives a holder that died by up to its duration; a lock file does not.
            gone = " (or, if it died, wait until its lease runs out)" if is_uri(path) else ""
            raise AlreadyRunningError(
                f"writer {writer_id!r} of sink {sink_id!r} is running (it holds "
                f"{lock.path}) and settles checkpoint {checkpoint_id} itself; to {action} it "
                f"by hand, stop it first{gone}"
            )
    return Resolution(
        action=action,
        checkpoint_id=checkpoint_id,
        transactions=tuple(found),
        done=False,
        tables=tables,
        cut=cut,
    )


def _unfinished(status: SinkStatus, checkpoint_id: int) -> list[TransactionStatus]:
    return [t for t in (*status.pending, *status.held) if t.checkpoint_id == checkpoint_id]


def _nothing_pending(status: SinkStatus, checkpoint_id: int) -> UnknownCheckpointError:
    if any(t.checkpoint_id == checkpoint_id for t in status.committed):
        why = "it is already committed"
    elif any(t.checkpoint_id == checkpoint_id for t in status.aborted):
        why = "it was aborted (its rows never become visible; the vacuum removes them)"
    else:
        why = "the sink has no such checkpoint"
    unfinished = sorted({t.checkpoint_id for t in (*status.pending, *status.held)})
    return UnknownCheckpointError(
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
    mode: CommitMode | None = None,
    progress: Callable[[str], None] = log.info,
) -> list[TransactionStatus]:
    """Commit or abort every pending transaction of the checkpoint; return them.

    In a table of a group (``lakesink.core.cut``) the checkpoint is committed or aborted in
    every table of the group, never in one alone, and a commit then records the group's
    new cut: readers see it in all the tables at once. Every transaction is checked before
    any writer's is touched (``plan_resolution``). A checkpoint already in the state the
    action leads to is left as it is, and its settled transactions are returned: a retry of
    a commit or abort that landed succeeds.
    ``mode`` is how a commit makes the rows visible, as ``SinkOptions.commit``: the
    table's own (recorded when it was created) unless given, and then it must be the
    table's. ``progress`` hears of each writer's transactions once they
    are settled.

    Raises:
        UnknownCheckpointError: Nothing is pending in that checkpoint, and it is not
            already committed (for a commit) or aborted (for an abort).
        ProtocolError: Commit of a transaction never pre-committed, or abort of one whose
            commit was already decided.
        AlreadyRunningError: A writer of the checkpoint is still running.
        ConfigurationError: An unknown ``mode``, or another than the table's.
    """
    if mode is not None:
        check_commit_mode(mode)  # an unknown mode is refused before anything is read
    plan = plan_resolution(path, checkpoint_id, action)
    commit = action == "commit"
    done = (TxnState.COMMITTED if commit else TxnState.ABORTED).value
    settling = () if plan.done else plan.transactions
    writers = {f"{t.sink_id}/{t.writer_id}": (t.sink_id, t.writer_id) for t in settling}
    sinks = {
        key: DeltaSink(
            spark,
            plan.tables[sink_id],
            options=SinkOptions(sink_id=sink_id, writer_id=writer_id, commit=mode),
        )
        for key, (sink_id, writer_id) in sorted(writers.items())
    }

    def settled(key: str) -> None:
        sink_id, writer_id = writers[key]
        mine = [t for t in plan.transactions if (t.sink_id, t.writer_id) == writers[key]]
        progress(
            f"{done} checkpoint {checkpoint_id} of {plan.tables[sink_id]}: writer {writer_id}, "
            f"{_rows(t.row_count for t in mine)} rows"
        )

    settle(plan, sinks, reason=f"operator {action}", done=settled, progress=progress)
    return list(plan.transactions)


def settle(
    plan: Resolution,
    sinks: Mapping[str, DeltaSink],
    *,
    reason: str,
    done: Callable[[str], None] = lambda key: None,
    progress: Callable[[str], None] = log.info,
) -> None:
    """Settle the plan's checkpoint in ``sinks`` (its writers' sinks, none when the plan is
    done), then, for a commit, what follows it: the group's cut over all its tables, and
    every published table brought up to date.

    Failure scenarios (the operator runs the command again):

    1. Killed after some tables of the group were committed, before the others: the
       others are settled now, and the cut and published tables cover the first ones too.
    2. Killed after every table was committed, before the cut or a published table: the
       plan is done; the cut is recorded and the published tables brought up to date.
    """
    commit = plan.action == "commit"
    # Each table's log, read once: where its cuts go, and whether it keeps a published table.
    found = {k: read_sink_table_log(path)[0] for k, path in plan.tables.items()} if commit else {}
    members: dict[str, DeltaSink | GroupTable] = dict(sinks)
    if plan.cut is not None and commit:  # the group's other tables, as its last cut named them
        settling = {sink.sink_id for sink in sinks.values()}
        for key, named in plan.cut.tables.items():
            if key not in settling:
                store = DeltaCutStore(cuts_path(found[key].journal_path))
                members[key] = GroupTable(key, named, store)
    group = GlobalCommitter(members, group_id=plan.cut.group_id if plan.cut else None)
    through = max(plan.cut.checkpoint_id, plan.checkpoint_id) if plan.cut else plan.checkpoint_id
    if group.resolve(
        plan.checkpoint_id,
        commit=commit,
        reason=reason,
        through=through,
        pending=list(sinks),
        done=done,
    ):
        progress(f"the group's tables are read at its new cut: {', '.join(sorted(plan.tables))}")
    # What a commit killed before its publish left behind, too.
    for key, table in found.items():
        if table.published:
            publish(plan.tables[key])


def _rows(counts: Iterable[int | None]) -> str:
    """A sum of row counts, or ``?`` when one is unknown."""
    found = list(counts)
    return "uncounted" if None in found else str(sum(c for c in found if c is not None))


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
    journal = Journal(table.journal_path, create=False)
    results = []
    for txn in transactions:
        report = gate.validate(transaction_rows(spark, table, [txn.txn_id]))
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


def _logged(status: TransactionStatus, table: str) -> LoggedTransaction[Committable]:
    handle = Committable.of(status, table)
    return LoggedTransaction(TransactionHolder(handle, status.checkpoint_id, 0), status.state)
