"""The Delta Lake implementation of the two-phase-commit hooks.

- ``_invoke`` appends a DataFrame's rows to the target table, masked
  (``_lakesink_visible = false``) in a partition of their transaction's own
  (``_lakesink_pending = <transaction id>``), no column of lakesink's on a row
  (``lakesink.delta.writer``: Spark writes the files, one delta-rs commit adds them). Each
  append's commit names its writer, transaction and step in the transaction in its
  ``userMetadata``, and records a Delta ``txn`` action (the writer, the checkpoint id); an
  append whose answer was lost is looked up in the log by it before it is sent again, so
  a retry never duplicates rows, and a new transaction, even one replaying a checkpoint id,
  is never taken for another's repeat.
- ``_pre_commit`` counts the rows (from the statistics of the files it added, so not read
  back), runs the validation gate on them if the sink has one, journals the verdict and
  hands over the transaction's ``Committable`` with its row count.
- ``_commit`` makes the rows visible with the table's committer (``lakesink.delta.committer``:
  an insert-only MERGE idempotent by Delta's txn version, or a metadata commit), then
  journals it committed. The decision to commit
  is durable before that: the driver's checkpoint record, or (standalone) the pre-commit
  itself, which recovery always commits; an operator's commit journals it
  (``committing``).
- ``_post_commit`` brings the table's published table up: after the commit, or in a
  group after its cut is recorded (``lakesink.core.GlobalCommitter``), and after recovery.
- ``_abort`` and ``_hold`` journal the transaction aborted or held; its rows stay masked
  (aborted ones until the vacuum job removes them).
- ``_log`` folds this writer's journal, for recovery.

Why the partitions: a commit reads its own transaction's pending partition, so Delta reads
only that transaction's files and checks write conflicts against them alone (open-source
Delta checks conflicts per partition read): appends of other transactions, other commits
(which only add files to the committed partition), compaction of the committed partition
and the vacuum's removal of aborted partitions never conflict with it.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakesink.core import (
    Clock,
    Cut,
    CutStore,
    CutTable,
    LoggedTransaction,
    PreCommit,
    TransactionHolder,
    TransactionLog,
    TwoPhaseCommitSink,
    TxnState,
    current_step_hook,
)
from lakesink.delta.committer import Committable, Committer, committer
from lakesink.delta.options import SinkOptions, sink_options, view_name_for
from lakesink.delta.publish import (
    check_partition_types,
    check_publishable,
    refused_for_metadata,
)
from lakesink.delta.table import (
    check_columns,
    check_partition_columns,
    check_reserved,
    ensure_sink_table,
    spark_schema,
)
from lakesink.delta.writer import (
    add_staged,
    append_through_spark,
    remove_staging_log,
    write_staged,
)
from lakesink.errors import (
    CommitStateUnknownError,
    ConfigurationError,
    ProtocolError,
    TableNotFoundError,
)
from lakesink.readers.spark import (
    create_committed_view,
    cut_view_name,
    show_cut,
    transaction_rows,
)
from lakesink.spark.settings import (
    labelled,
)
from lakesink.spark.sql import (
    check_column_names,
    check_file_name_part,
    check_path,
    quote_identifier,
    quote_name,
    string_literal,
)
from lakesink.storage.access import translated
from lakesink.storage.lease import writer_lock
from lakesink.storage.location import name as location_name
from lakesink.storage.location import normalize
from lakesink.tables.commits import SPARK_ONLY_FEATURES, unwritable_features
from lakesink.tables.cuts import DeltaCutStore, cuts_path, view_cut
from lakesink.tables.deltars import delta_table, has_sink_history
from lakesink.tables.format import (
    CHECKPOINT_ID,
    SinkTable,
    commit_metadata,
    writer_app_id,
)
from lakesink.tables.history import find_commit, table_version
from lakesink.tables.journal import (
    Journal,
    JournalEntry,
    default_journal_path,
    transaction_fields,
)
from lakesink.tables.published import publish

if TYPE_CHECKING:
    from lakesink.core.validation import ValidationReport
    from lakesink.spark.validation import ValidationGate

__all__ = ["DeltaSink"]

log = logging.getLogger(__name__)

APPEND_ATTEMPTS = 3


@dataclass
class _Progress:
    """The writer's own account of its open transaction (its committable carries what a
    commit needs once it is pre-committed)."""

    txn_id: str
    appends: int = 0  # appends so far (each append's step in its transaction)
    rows: int | None = 0  # rows appended, as observed; None once a count is unknown
    failure: str | None = None  # an append that failed for good: which rows landed is unknown


class DeltaSink(TwoPhaseCommitSink[Committable, DataFrame]):
    """An exactly-once sink into one Delta table.

    Standalone (the sink drives its own checkpoints) open it with ``DeltaSink.open``; in a
    job, hand it to a ``CheckpointCoordinator``, which restores it. Creating one checks
    its options and touches nothing; the table and journal are created (when ``schema``
    is given) or checked when the sink starts.

    Args:
        spark: A Delta-ready session (``lakesink.spark_session()``).
        path: The target table's folder.
        schema: The user columns. Required to create the table; checked against an
            existing one (a DDL string or a ``StructType``).
        options: Naming, journal, validation, retries, timeout (``SinkOptions``).
        clock: Where transaction ages and journal times come from.
        **fields: ``SinkOptions`` fields, instead of or over ``options``.
    """

    handle_type = Committable

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        *,
        schema: StructType | str | None = None,
        options: SinkOptions | None = None,
        clock: Clock | None = None,
        **fields: Any,
    ) -> None:
        options = sink_options(options, fields)
        # Every name is checked before anything is written: a name Spark, Delta or a file
        # name cannot take fails here, named, not half-way through creating the table.
        self.path = check_path(normalize(path))
        self.sink_id = options.sink_id or location_name(self.path)
        self.writer_id = check_file_name_part(options.writer_id, what="writer id")
        if not self.sink_id:
            raise ConfigurationError("sink_id must not be empty")
        super().__init__(
            name=f"lakesink[{self.sink_id}/{self.writer_id}]",
            clock=clock,
            timeout=options.timeout,
        )
        self.spark = spark
        self.options = options
        self.view_name = view_name_for(options.view_name, self.sink_id)
        if options.table_name:
            quote_name(options.table_name, what="table name")
            if options.table_name == self.view_name:
                raise ConfigurationError(
                    f"table_name and view_name are both {options.table_name!r}; give them "
                    "different names"
                )
        self.journal_path = check_path(
            normalize(options.journal_path or default_journal_path(self.path)),
            what="journal path",
        )
        self._given_schema = _as_struct(spark, schema)
        if self._given_schema is not None:
            check_column_names(self._given_schema.fieldNames())
            check_reserved(self._given_schema, "the schema")
            if options.validation is not None:  # refused before a table is made
                options.validation.check_columns(self._given_schema.fieldNames())
            if options.partition_by is not None:
                check_partition_columns(tuple(options.partition_by), self._given_schema)
                if options.commit == "metadata":  # refused before a table is made
                    types = {f.name: f.dataType.simpleString() for f in self._given_schema}
                    check_partition_types(self.path, {c: types[c] for c in options.partition_by})
        self._step_hook = current_step_hook()  # a test's fault injection, else none
        self._committer: Committer | None = None  # the table's mode's, once it is open
        # Whether appends go through Spark's own Delta write (the table has a feature
        # delta-rs cannot commit to: lakesink.delta.writer), decided when it is open.
        self._through_spark = False
        # Two live processes as one writer would journal each other's transactions as
        # lingering and abort them. The lock (a lease on object storage) is hidden from
        # Delta by its leading underscore.
        self._lock = writer_lock(self.path, self.sink_id, self.writer_id)
        self._progress: _Progress | None = None  # the open transaction's
        # Transactions the journal knows (their open event is in): only those have
        # anything to abort. A transaction leaves it when it is committed or aborted.
        self._journaled: set[str] = set()
        self.schema: StructType = self._given_schema or StructType()
        self._table: SinkTable | None = None
        self._journal: Journal | None = None
        # The group cut view its committed view reads through ("": none); None until the
        # first cut this process records decides it.
        self._cut_view: str | None = None
        self._group_id: str | None = None  # the group it was told it is one of

    @classmethod
    def open(cls, spark: SparkSession, path: str, **arguments: Any) -> DeltaSink:
        """Create or open the table, recover from the journal, register the committed view.

        For a sink that drives its own checkpoints (``checkpoint()`` then
        ``notify_checkpoint_complete``): every transaction this writer pre-committed is
        committed, held ones stay held, open ones are aborted, and checkpoint ids continue
        above every id the sink used. Takes the constructor's arguments.
        """
        sink = cls(spark, path, **arguments)
        sink.initialize_from_log()
        return sink

    @property
    def journal(self) -> Journal:
        """The sink's journal (the sink must have started)."""
        if self._journal is None:
            raise ProtocolError(f"{self.name} has not started: its journal is not open yet")
        return self._journal

    @property
    def validation(self) -> ValidationGate | None:
        return self.options.validation

    @property
    def committer(self) -> Committer:
        """The committer of the table's commit mode (the sink must have started)."""
        if self._committer is None:
            raise ProtocolError(f"{self.name} has not started: its committer is not known yet")
        return self._committer

    def prepare_commit(self) -> int:
        """Pre-commit the open transaction; return its checkpoint id for the commit."""
        checkpoint_id = self.current_checkpoint_id
        self.snapshot_state(checkpoint_id)
        return checkpoint_id

    @property
    def sink_table(self) -> SinkTable:
        """What the sink's table says of itself (the sink must have started); for the
        operator's view of the table, ``lakesink.Table(sink.path)``."""
        if self._table is None:
            raise ProtocolError(f"{self.name} has not started: its table is not open yet")
        return self._table

    def transaction_rows(self, transaction: Committable) -> DataFrame:
        """The transaction's masked rows, user columns only (what a suite audits)."""
        return transaction_rows(self.spark, self.sink_table, [transaction.txn_id])

    # ------------------------------------------------- a table in a group's cut

    @property
    def cut_key(self) -> str:
        """How the table is named in a cut: its sink id, as in the journal."""
        return self.sink_id

    def cut_table(self) -> CutTable:
        """The table's newest version (a cut is recorded once the group published); 0, its
        creation, before the table exists (the group's membership is recorded first)."""
        try:
            version = table_version(self.path)
        except TableNotFoundError:
            version = 0
        return CutTable(version, self.path, self.writer_id)

    def cut_store(self) -> CutStore:
        """The cuts table beside the sink's journal."""
        return DeltaCutStore(cuts_path(self.journal_path))

    def join_group(self, group_id: str) -> None:
        """One of a group's tables: in the metadata mode its rows carry their checkpoint id
        (the group's views show a cut by it; a MERGE writes it anyway)."""
        self._group_id = group_id

    def show_cut(self, cut: Cut) -> None:
        """Point the committed view at the group's cut (once), and move the cut along.

        Decided at the first cut this process records: a table that others than its group
        write keeps a view of its latest commits (``lakesink.tables.cuts.view_cut``). A
        sink that has not started (an operator's) has no view to point.
        """
        if self._table is None:
            return
        if self._cut_view is None:
            group = view_cut(self.sink_id, self.journal_path)
            self._cut_view = ""
            if group is not None and group.group_id == cut.group_id:
                self._cut_view = cut_view_name(self.view_name, cut.group_id)
                show_cut(self.spark, self._cut_view, cut.checkpoint_id)
                create_committed_view(
                    self.spark,
                    self.path,
                    self.view_name,
                    self.schema.fieldNames(),
                    cut_view=self._cut_view,
                )
        elif self._cut_view:
            show_cut(self.spark, self._cut_view, cut.checkpoint_id)

    # ----------------------------------------------------------------- hooks

    def _acquire(self) -> None:
        # A new table's journal is made before it (ensure_sink_table), then the writer
        # lock, then the view: a crash after any of them leaves what the next open completes.
        # The first contact with the store: a refusal is said as one, whichever client met it.
        with translated(self.path):
            self._table, created = ensure_sink_table(
                self.spark,
                self.path,
                sink_id=self.sink_id,
                schema=self._given_schema,
                journal=self.journal_path,
                partition_by=self.options.partition_by,
                merge_schema=self.options.merge_schema,
                commit_mode=self.options.commit,
                published=self.options.published,
            )
            self.schema = spark_schema(self._table)
            table = delta_table(self.path)
            if self._table.commit_mode == "metadata":
                check_publishable(table, self.path)
            features = set(table.protocol().writer_features or []) & SPARK_ONLY_FEATURES
            self._through_spark = bool(features)
            if features:
                log.info(
                    "%s: the table uses %s, which delta-rs cannot commit to: appending "
                    "through Spark",
                    self.name,
                    ", ".join(sorted(features)),
                )
            self._committer = committer(
                self._table.commit_mode, self.spark, retry=self.options.commit_retry
            )
            if self.validation is not None and self._given_schema is None:
                self.validation.check_columns(self.schema.fieldNames())
            self._journal = self._open_journal(created)
            if self.options.table_name:
                self.spark.sql(
                    f"CREATE TABLE IF NOT EXISTS {quote_name(self.options.table_name)} USING DELTA "
                    f"LOCATION {string_literal(self.path)}"
                )
            self._lock.acquire()

    def _open_journal(self, created: bool) -> Journal:
        """The table's journal; created for an existing table only if it has no history.

        A table with lakesink history but no journal must not silently get a new, empty
        one: the pre-committed transactions recovery needs would be forgotten. One without
        (its creation was cut short, by a crash or by lakesink 0.2, which made the table
        before the journal) has nothing to forget.
        """
        try:
            return Journal(self.journal_path, create=created)
        except TableNotFoundError:
            if has_sink_history(self.path):
                raise
        log.info("%s: the table has no lakesink history yet; creating its journal", self.name)
        return Journal(self.journal_path, create=True)

    def _ready(self) -> None:
        self._post_commit()  # what recovery (or a crash before) left the published table behind
        create_committed_view(self.spark, self.path, self.view_name, self.schema.fieldNames())

    def _release(self) -> None:
        self._lock.release()

    def _log(self) -> TransactionLog[Committable]:
        """This writer's transactions in the journal; ids of every writer of the sink.

        Other writers' ids count when they got past open, so writers started together
        share their checkpoint ids. Each committable carries its row count, for its commit.
        """
        mine: list[LoggedTransaction[Committable]] = []
        last_id = 0
        for status in self.journal.transactions(self.sink_id, table_path=self.path):
            if status.writer_id != self.writer_id:
                if status.state not in (TxnState.OPEN, TxnState.ABORTED):
                    last_id = max(last_id, status.checkpoint_id)
                continue
            last_id = max(last_id, status.checkpoint_id)
            started_ms = int(status.opened_at.timestamp() * 1000)
            holder = TransactionHolder(
                Committable.of(status, self.path), status.checkpoint_id, started_ms
            )
            mine.append(LoggedTransaction(holder, status.state))
            if not status.state.final:
                self._journaled.add(status.txn_id)
        return TransactionLog(tuple(mine), last_id)

    def _begin_transaction(self, checkpoint_id: int) -> Committable:
        # Journaled as open only at its first write: a transaction that never wrote has
        # nothing to recover, and a checkpoint then costs no journal commit for it.
        txn = Committable(
            table=self.path,
            sink_id=self.sink_id,
            checkpoint_id=checkpoint_id,
            txn_id=uuid.uuid4().hex,
            writer_id=self.writer_id,
        )
        self._progress = _Progress(txn.txn_id)
        return txn

    def _invoke(self, transaction: Committable, value: DataFrame) -> None:
        progress = self._live(transaction)
        with translated(self.path):
            self._append(transaction, value, progress)

    def _append(self, transaction: Committable, value: DataFrame, progress: _Progress) -> None:
        check_columns(value.schema, self.schema, what="the DataFrame")
        # No column of its own on any row: the transaction is the partition. Only where a
        # reader needs a row's checkpoint and no commit will write it (a table of a group,
        # committed by metadata: its views cut by checkpoint) does the row carry it.
        stamped = self._group_id is not None and self.sink_table.commit_mode == "metadata"
        frame = value.select(
            *([F.lit(transaction.checkpoint_id).cast("bigint").alias(CHECKPOINT_ID)] * stamped),
            *[F.col(quote_identifier(name)) for name in self.schema.fieldNames()],
        )
        step = progress.appends + 1
        if transaction.txn_id not in self._journaled:  # before any row lands: recovery
            self.journal.record(self._entry(transaction, TxnState.OPEN))  # knows to abort it
            self._journaled.add(transaction.txn_id)
        # The append names its transaction and its step in the transaction in the commit's
        # userMetadata: what finds it in the log if its answer is lost.
        metadata = self._metadata("write", transaction, step=step)
        # Each append is the writer's newest checkpoint, as a Delta txn action any tool reads.
        txn = [(writer_app_id(self.sink_id, self.writer_id), transaction.checkpoint_id)]
        try:
            for attempt in range(1, APPEND_ATTEMPTS + 1):
                sent_ms = time.time_ns() // 1_000_000
                try:
                    self._step("before_append", transaction)
                    with labelled(
                        frame.sparkSession, self.sink_id, transaction.checkpoint_id, "pre-commit"
                    ):
                        rows = self._write(frame, transaction, metadata, txn, first=step == 1)
                    self._step("after_append", transaction)
                    progress.rows = (
                        None if progress.rows is None or rows is None else progress.rows + rows
                    )
                    break
                except Exception as exc:
                    log.warning("%s: append attempt %d failed: %s", self.name, attempt, exc)
                    # It may have landed and its answer been lost: sent again, its rows would be
                    # there twice. Its commit, if any, is among the newest in the log.
                    if find_commit(self.path, metadata, since_ms=sent_ms) is not None:
                        log.info(
                            "%s: append %d of %s landed after all", self.name, step, transaction
                        )
                        progress.rows = None  # counted in the table at the pre-commit
                        break
                    self._through_spark_if_refused(exc)
                    if attempt == APPEND_ATTEMPTS:
                        progress.failure = repr(exc)
                        raise
        finally:  # its files are the table's now, or in no version of it
            remove_staging_log(self.path, transaction.txn_id)
        progress.appends = step

    def _write(
        self,
        frame: DataFrame,
        transaction: Committable,
        metadata: str,
        txn: list[tuple[str, int]],
        *,
        first: bool,
    ) -> int | None:
        """One append of the transaction's rows (``lakesink.delta.writer``); its rows.

        Delta's own idempotent write (through Spark) records the writer's checkpoint at its
        first append only: it would skip a second append of the same version.
        """
        if self._through_spark:
            return append_through_spark(
                frame, self.sink_table, transaction.txn_id, metadata, txn if first else []
            )
        write_staged(frame, self.sink_table, transaction.txn_id)
        return add_staged(self.sink_table, transaction.txn_id, json.loads(metadata), txn).rows

    def _through_spark_if_refused(self, error: Exception) -> None:
        """After delta-rs refused to commit to the table for a feature it cannot write (one
        turned on while the sink ran), append through Spark from then on; a table committed
        by metadata cannot be written at all then: say so, and how to go on."""
        features = unwritable_features(error)
        if not features:
            return
        if self.sink_table.commit_mode == "metadata":
            raise refused_for_metadata(self.path, features) from error
        log.warning(
            "%s: the table now uses %s, which delta-rs cannot commit to; appending through "
            "Spark from now on",
            self.name,
            ", ".join(features),
        )
        self._through_spark = True

    def _pre_commit(self, transaction: Committable) -> PreCommit[Committable]:
        progress = self._live(transaction)
        if progress.rows is None:
            progress.rows = self.transaction_rows(transaction).count()
        rows = progress.rows
        state, report, detail = TxnState.PRE_COMMITTED, None, None
        if self.validation is not None and rows:
            with labelled(self.spark, self.sink_id, transaction.checkpoint_id, "validate"):
                report = self.validation.validate(self.transaction_rows(transaction))
            state, detail = self._verdict(transaction, report)
        self._step("before_pre_commit_record", transaction)
        self._lock.check()  # a writer that lost its lease leaves recovery to the new holder
        self.journal.record(
            self._entry(
                transaction,
                state,
                row_count=rows,
                detail=detail,
                validation=report.to_json() if report else None,
            )
        )
        self._journaled.add(transaction.txn_id)
        log.info(
            "%s: pre-committed checkpoint %d (%d rows)%s",
            self.name,
            transaction.checkpoint_id,
            rows,
            "" if state is TxnState.PRE_COMMITTED else f", {state.value} by validation",
        )
        return PreCommit(replace(transaction, rows=rows), state)

    def _commit(self, transaction: Committable) -> None:
        self._step("before_publish", transaction)
        self._lock.check()
        flipped = 0
        if transaction.rows != 0:

            def journal_retry(attempt: int, error: str) -> None:
                self.journal.record(
                    self._entry(transaction, TxnState.COMMITTING, attempt=attempt, error=error)
                )

            flipped = self.committer.commit(transaction, on_retry=journal_retry)
        self._step("after_publish", transaction)
        try:
            self.journal.record(
                self._entry(
                    transaction,
                    TxnState.COMMITTED,
                    row_count=transaction.rows,
                    detail=f"{flipped} rows made visible by this attempt",
                )
            )
        except Exception as exc:
            raise CommitStateUnknownError(
                f"{self.name}: checkpoint {transaction.checkpoint_id} is visible, but the "
                f"journal could not record it ({exc!r}); the next commit or restart records it"
            ) from exc
        self._journaled.discard(transaction.txn_id)

    def _post_commit(self) -> None:
        """Bring the table's published table up to date (if it keeps one), even when no
        row was made visible just now: a commit that landed before a crash (made again,
        idempotently) may have left it behind. A failure is logged, never raised: the
        table is derived, and the next open, commit or vacuum brings it up."""
        if not self.sink_table.published:
            return
        try:
            with translated(self.path):
                publish(self.path)
        except Exception as exc:
            log.warning("%s: the published table is behind the table: %s", self.name, exc)

    def _abort(self, transaction: Committable, reason: str) -> None:
        # One the journal does not know never wrote: nothing to undo.
        if transaction.txn_id not in self._journaled:
            return
        rows = transaction.rows  # how many rows it leaves masked
        progress = self._progress
        if progress is not None and progress.txn_id == transaction.txn_id:  # the open one
            self._progress = None
            rows = None if progress.failure else progress.rows  # unknown after a failure
        self.journal.record(
            self._entry(
                transaction,
                TxnState.ABORTED,
                row_count=rows,
                detail=f"{reason}; rows kept masked until the vacuum job removes them",
            )
        )
        self._journaled.discard(transaction.txn_id)

    def _hold(self, transaction: Committable, reason: str) -> None:
        self.journal.record(
            self._entry(transaction, TxnState.HELD, row_count=transaction.rows, detail=reason)
        )

    def _decide_commit(self, transaction: Committable, reason: str) -> None:
        # Neither a checkpoint record nor the journal's pre-commit may make this commit
        # recoverable (a held or uncheckpointed transaction): journal the decision.
        self.journal.record(self._entry(transaction, TxnState.COMMITTING, attempt=1, detail=reason))

    # --------------------------------------------------------------- internals

    def _live(self, transaction: Committable) -> _Progress:
        """The open transaction's progress; refused after an append that failed for good."""
        progress = self._progress
        if progress is None or progress.txn_id != transaction.txn_id:
            raise ProtocolError(f"{self.name}: {transaction!r} is not the open transaction")
        if progress.failure is not None:
            # Whether its rows landed is unknown: it can neither take more rows nor be
            # pre-committed.
            raise ProtocolError(
                f"{self.name}: transaction {transaction.txn_id} of checkpoint "
                f"{transaction.checkpoint_id} failed to append ({progress.failure}); "
                "reopen the sink: recovery aborts it and its input must be replayed"
            )
        return progress

    def _verdict(
        self, transaction: Committable, report: ValidationReport
    ) -> tuple[TxnState, str | None]:
        """What a validation report makes of the transaction, under the gate's policy."""
        where = f"{self.name}: checkpoint {transaction.checkpoint_id}"
        if report.success:
            return TxnState.PRE_COMMITTED, None
        if report.error is not None:  # whatever the policy: never commit unaudited rows
            log.error("%s: validation could not run, held: %s", where, report.summary())
            return TxnState.HELD, "validation could not run; held: lakesink commit or abort it"
        log.warning("%s: %s (policy %s)", where, report.summary(), report.policy)
        if report.policy == "warn":
            return TxnState.PRE_COMMITTED, "validation failed; committed anyway (policy warn)"
        if report.policy == "quarantine":
            return TxnState.HELD, "validation failed; held: lakesink commit or abort it"
        return TxnState.ABORTED, "validation failed; aborted, rows stay masked until vacuumed"

    def _entry(self, transaction: Committable, state: TxnState, **extra: Any) -> JournalEntry:
        return JournalEntry(
            **transaction_fields(transaction),
            sink_id=self.sink_id,
            table_path=self.path,
            state=state,
            event_time=datetime.fromtimestamp(self._clock.millis() / 1000, tz=timezone.utc),
            **extra,
        )

    def _metadata(self, operation: str, transaction: Committable, **detail: object) -> str:
        return commit_metadata(operation, self.sink_id, **transaction_fields(transaction), **detail)

    def _step(self, name: str, transaction: Committable) -> None:
        if self._step_hook is not None:
            self._step_hook(name, transaction.checkpoint_id)


def _as_struct(spark: SparkSession, schema: StructType | str | None) -> StructType | None:
    if schema is None or isinstance(schema, StructType):
        return schema
    return spark.createDataFrame([], schema).schema
