"""``lakesink.Table``: one object for a lakesink table, what it holds and what is done to it.

    import lakesink

    table = lakesink.Table("/data/orders")
    for checkpoint in table.checkpoints():
        print(checkpoint.checkpoint_id, checkpoint.state.value, checkpoint.rows)
    rows = table.arrow(checkpoint=41)        # committed rows as they were once 41 was published
    table.commit(spark, 42)                  # an operator publishes a held checkpoint
    plan = table.vacuum(spark, dry_run=True)  # what the vacuum would remove
    table.vacuum(spark)                       # then remove it

What reads the table's log and journal (checkpoints, status, metrics, Arrow rows) goes
through delta-rs or the log's files, with no Spark session and no JVM; what reads or
rewrites rows with Spark (DataFrames, commit, abort, validation, the vacuum, the audit)
takes the session as its first argument. Writing is the sink's part: ``DeltaSink``,
``StreamingSink``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakesink.core import TxnState
from lakesink.errors import ConfigurationError, UnknownCheckpointError
from lakesink.storage.location import normalize
from lakesink.tables.cuts import cut_version
from lakesink.tables.deltars import read_sink_table_log
from lakesink.tables.format import PUBLISHED_PROPERTY, published_path
from lakesink.tables.history import first_versions, read_history
from lakesink.tables.journal import TransactionStatus
from lakesink.tables.restores import restored_statuses

if TYPE_CHECKING:
    import pyarrow as pa
    from prometheus_client import CollectorRegistry
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

    from lakesink.core.validation import ValidationReport
    from lakesink.ops.audit import AuditReport
    from lakesink.ops.status import SinkStatus
    from lakesink.ops.vacuum_report import VacuumReport
    from lakesink.spark.validation import ValidationGate
    from lakesink.tables.format import CommitMode
    from lakesink.tables.published import PublishedTable

__all__ = ["Checkpoint", "Table"]


@dataclass(frozen=True, kw_only=True)
class Checkpoint:
    """One checkpoint of a table: its transactions, one per writer and attempt.

    Attributes:
        checkpoint_id: The id its driver handed out (a job's, a query's batch id).
        state: ``committed`` once every transaction of it that was not aborted is
            committed; ``aborted`` when all were aborted; otherwise the least advanced
            state among the others (``open``, ``pre_committed``, ``held``, ``committing``).
        rows: Rows of its transactions that are not aborted (None if a count is unknown).
        version: The Delta version that made it visible (the last of its transactions'
            commits), for reading the table as of this checkpoint; None until committed,
            or when the commit is older than the table's history.
        vacuumed: Every aborted transaction of it was removed by the vacuum.
        restored: It was committed, then a ``RESTORE`` took the table back to before its
            commit: its rows are gone (its state is then ``aborted``).
        transactions: Each transaction, as folded from the journal.
    """

    checkpoint_id: int
    state: TxnState
    rows: int | None
    version: int | None
    vacuumed: bool
    transactions: tuple[TransactionStatus, ...]
    restored: bool = False


class Table:
    """A lakesink table at ``path`` (a local folder or an object-store URI).

    Raises:
        TableNotFoundError: No lakesink table there.
        FormatVersionError: A lakesink table of a format this version cannot read.
        StorageAccessError: Its store refused or did not answer (as every method may).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = normalize(str(path))
        found, _ = read_sink_table_log(self.path)
        self.sink_id = found.sink_id
        self.journal_path = found.journal_path

    def __repr__(self) -> str:
        return f"Table({self.path!r})"

    @property
    def published(self) -> str:
        """Its published table: a plain Delta table of the committed rows and the user's
        columns, over the same files, for any engine that reads Delta by path (DuckDB's
        ``delta_scan``, polars' ``scan_delta``, Daft, Trino, Spark)."""
        return published_path(self.path)

    @property
    def schema(self) -> StructType:
        """The user columns (what readers see), as of now."""
        from lakesink.delta.table import spark_schema

        found, _ = read_sink_table_log(self.path)
        return spark_schema(found)

    # ---------------------------------------------------------------- what it holds

    def status(self) -> SinkStatus:
        """Where the sink stands: committed, pending, held and aborted transactions."""
        from lakesink.ops.status import sink_status

        return sink_status(self.path)

    def checkpoints(self) -> list[Checkpoint]:
        """Every checkpoint the journal knows, oldest first."""
        status = self.status()
        history = read_history(self.path)
        # A commit a RESTORE undid shows as it is now, journaled or not yet.
        everything = restored_statuses(
            [*status.committed, *status.pending, *status.held, *status.aborted], history
        )
        versions = first_versions(history, "commit")
        by_id: dict[int, list[TransactionStatus]] = {}
        for txn in everything:
            by_id.setdefault(txn.checkpoint_id, []).append(txn)
        return [_checkpoint(cid, by_id[cid], versions) for cid in sorted(by_id)]

    def checkpoint(self, checkpoint_id: int) -> Checkpoint:
        """One checkpoint.

        Raises:
            UnknownCheckpointError: The journal has no such checkpoint of this sink.
        """
        found = [c for c in self.checkpoints() if c.checkpoint_id == checkpoint_id]
        if not found:
            raise _no_checkpoint(self, checkpoint_id)
        return found[0]

    def metrics(self) -> CollectorRegistry:
        """The sink's Prometheus metrics (``lakesink metrics``), as a registry."""
        from lakesink.ops.metrics import sink_registry

        return sink_registry([self.path])

    # ----------------------------------------------------------------------- rows

    def arrow(
        self,
        *,
        checkpoint: int | None = None,
        version: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The committed rows, user columns only, read with delta-rs (no JVM).

        Args:
            checkpoint: As they were once this checkpoint was published (in every table
                of its group, for a table of a group).
            version: As of this Delta version (give one or neither).
            columns: Only these user columns.

        Raises:
            UnknownCheckpointError: ``checkpoint`` is not committed (or not known).
        """
        from lakesink.readers.deltars import arrow

        return arrow(self.path, version=self._version(checkpoint, version), columns=columns)

    def dataframe(
        self, spark: SparkSession, *, checkpoint: int | None = None, version: int | None = None
    ) -> DataFrame:
        """The committed rows as a Spark DataFrame (as of a checkpoint or a version)."""
        from lakesink.readers.spark import committed

        return committed(spark, self.path, version=self._version(checkpoint, version))

    def pending_rows(self, spark: SparkSession, checkpoint_id: int) -> DataFrame:
        """The rows of a checkpoint that is not committed yet (pre-committed or held),
        user columns only: what an auditor looks at before publishing it."""
        from lakesink.delta.table import read_sink_table
        from lakesink.ops.resolve import pending_transactions
        from lakesink.readers.spark import transaction_rows

        transactions = pending_transactions(self.path, checkpoint_id)
        table = read_sink_table(spark, self.path)
        return transaction_rows(spark, table, [t.txn_id for t in transactions])

    # ------------------------------------------------------------------ operations

    def commit(
        self, spark: SparkSession, checkpoint_id: int, *, mode: CommitMode | None = None
    ) -> list[TransactionStatus]:
        """Publish a pending or held checkpoint by hand (its writers must be stopped).

        ``mode`` as ``SinkOptions.commit``: by default the table's own (``merge`` rewrites
        the rows into the committed partition, ``metadata`` moves their files into it);
        given, it must be the table's.
        A checkpoint already committed is left as it is, and its transactions are returned
        (a retry of a commit that landed succeeds).

        Raises:
            UnknownCheckpointError: Nothing of it is pending, and it is not committed (the
                message says why).
            AlreadyRunningError: A writer of it runs.
            CommitStateUnknownError: The commit failed midway; it stays pending.
            StorageAccessError: The store refused or did not answer.
        """
        from lakesink.ops.resolve import resolve_checkpoint

        return resolve_checkpoint(spark, self.path, checkpoint_id, "commit", mode=mode)

    def abort(self, spark: SparkSession, checkpoint_id: int) -> list[TransactionStatus]:
        """Abort a pending or held checkpoint by hand: its rows never become visible.

        A checkpoint already aborted is left as it is, and its transactions are returned.
        """
        from lakesink.ops.resolve import resolve_checkpoint

        return resolve_checkpoint(spark, self.path, checkpoint_id, "abort")

    def validate(
        self, spark: SparkSession, checkpoint_id: int, gate: ValidationGate
    ) -> list[tuple[TransactionStatus, ValidationReport]]:
        """Run ``gate`` on a pending or held checkpoint's rows; the reports are journaled."""
        from lakesink.ops.resolve import revalidate_checkpoint

        return revalidate_checkpoint(spark, self.path, checkpoint_id, gate)

    def publish(self) -> PublishedTable:
        """Bring its published table up to its newest version now (``lakesink publish``):
        after a change of your own (a DELETE, UPDATE, MERGE, RESTORE, OPTIMIZE, REORG or
        VACUUM), which lakesink otherwise takes at its next commit or vacuum. No Spark.

        Raises:
            ConfigurationError: It keeps no published table (``lakesink.published``).
            CommitFailedError: Other updates of it kept landing first.
        """
        from lakesink.tables.published import publish

        found, _ = read_sink_table_log(self.path)
        if not found.published:
            raise ConfigurationError(
                f"the table at {self.path} keeps no published table ({PUBLISHED_PROPERTY} = "
                f"false); keep one: ALTER TABLE delta.`{self.path}` SET TBLPROPERTIES "
                f"('{PUBLISHED_PROPERTY}' = 'true')"
            )
        return publish(self.path)

    def vacuum(self, spark: SparkSession, *, dry_run: bool = False, **options: Any) -> VacuumReport:
        """Remove aborted and expired rows, then their files: ``lakesink.ops.vacuum.vacuum``
        with its defaults, as ``lakesink vacuum`` runs it.

        It runs for real unless ``dry_run=True``, which reports and changes nothing (what
        it removes no reader can see: see ``lakesink.ops.vacuum.vacuum``). ``options`` are
        that function's (``metrics``) and ``plan_vacuum``'s (``retain_hours``,
        ``expire_open_after``, ``compact``, ...).
        """
        from lakesink.ops.vacuum import vacuum

        return vacuum(spark, self.path, dry_run=dry_run, **options)

    def audit(self, spark: SparkSession) -> AuditReport:
        """The audit: the timeline of every checkpoint and the exactly-once checks."""
        from lakesink.ops.audit import audit_table

        return audit_table(spark, self.path)

    def _version(self, checkpoint: int | None, version: int | None) -> int | None:
        if checkpoint is None:
            return version
        if version is not None:
            raise ValueError("give a checkpoint or a version, not both")
        # In a group, the version of the group's cut of the checkpoint: the other tables
        # read as of it agree with this one (even one it wrote no row to).
        in_cut = cut_version(self.sink_id, self.journal_path, checkpoint)
        known = [c for c in self.checkpoints() if c.checkpoint_id == checkpoint]
        if in_cut is not None and (not known or known[0].state is TxnState.COMMITTED):
            return in_cut
        if not known:
            raise _no_checkpoint(self, checkpoint)
        found = known[0]
        if found.state is not TxnState.COMMITTED or found.version is None:
            raise UnknownCheckpointError(
                f"checkpoint {checkpoint} of sink {self.sink_id!r} is {found.state.value}"
                + ("" if found.state is not TxnState.COMMITTED else ", older than the history")
                + ": there is no version of the table that published it"
            )
        return found.version


def _no_checkpoint(table: Table, checkpoint_id: int) -> UnknownCheckpointError:
    return UnknownCheckpointError(
        f"sink {table.sink_id!r} ({table.path}) has no checkpoint {checkpoint_id}"
    )


def _checkpoint(
    checkpoint_id: int, transactions: list[TransactionStatus], versions: dict[str, int]
) -> Checkpoint:
    live = [t for t in transactions if t.state is not TxnState.ABORTED]
    if not live:
        state = TxnState.ABORTED
    elif all(t.state is TxnState.COMMITTED for t in live):
        state = TxnState.COMMITTED
    else:
        state = min((t.state for t in live if t.state is not TxnState.COMMITTED), key=_rank)
    counts = [t.row_count for t in live]
    published = [versions.get(t.txn_id) for t in live]
    aborted = [t for t in transactions if t.state is TxnState.ABORTED]
    return Checkpoint(
        checkpoint_id=checkpoint_id,
        state=state,
        rows=None if None in counts else sum(c for c in counts if c is not None),
        version=(
            max(v for v in published if v is not None)
            if state is TxnState.COMMITTED and None not in published
            else None
        ),
        vacuumed=bool(aborted) and all(t.vacuumed for t in aborted),
        restored=any(t.restored for t in transactions),
        transactions=tuple(sorted(transactions, key=lambda t: t.opened_at)),
    )


def _rank(state: TxnState) -> int:
    return state.rank
