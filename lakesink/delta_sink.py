"""The Delta Lake implementation of the two-phase-commit hooks.

- ``invoke`` appends a DataFrame's rows to the target table, masked
  (``_lakesink_visible = false``) and tagged with the checkpoint and transaction id; each
  append carries ``txnAppId``/``txnVersion`` so a retried append is skipped by Delta.
- ``pre_commit`` records the transaction pre-committed in the journal, with its row count
  (observed while the rows were written, so the rows are not read back).
- ``commit`` flips the mask with one MERGE keyed on checkpoint id and transaction id
  (retried on write conflicts), then records it committed. The decision to commit is
  durable before that: the coordinator's checkpoint record, or (standalone) the
  pre-commit itself, which recovery always commits; an operator's commit journals it.
- ``abort`` records the transaction aborted; its rows stay masked until the vacuum job.

The table is partitioned by checkpoint id and transaction id. A commit's MERGE pins the
partition of its own transaction, so Delta prunes it to that transaction's files and
appends by other transactions (other writers, later checkpoints) never conflict with it:
open-source Delta checks conflicts per partition, and a MERGE on an unpartitioned table
fails whenever any file was added concurrently, which would starve commits under load.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Literal, TypeVar

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from lakesink.errors import (
    ConfigurationError,
    ProtocolError,
    ReservedColumnError,
    SchemaMismatchError,
    TableNotFoundError,
)
from lakesink.journal import (
    Journal,
    JournalEntry,
    TransactionStatus,
    TxnState,
    default_journal_path,
)
from lakesink.lock import ProcessLock
from lakesink.protocol import Clock, SinkState, TransactionHolder, TwoPhaseCommitSink
from lakesink.readers import VISIBLE, create_committed_view
from lakesink.sql import (
    check_column_names,
    check_file_name_part,
    check_path,
    delta_path,
    quote_identifier,
    quote_name,
    string_literal,
)

if TYPE_CHECKING:
    from lakesink.validation import ValidationGate, ValidationReport

__all__ = [
    "CHECKPOINT_ID",
    "HIDDEN_PREFIX",
    "SINGLE_PARTITION_WRITES",
    "TXN_ID",
    "VISIBLE",
    "CommitRetry",
    "DeltaSink",
    "DeltaTransaction",
    "commit_metadata",
    "retry_on_conflict",
    "session_commit_metadata",
    "session_conf",
    "writer_lock",
]

log = logging.getLogger(__name__)

HIDDEN_PREFIX = "_lakesink_"
CHECKPOINT_ID = "_lakesink_checkpoint_id"
TXN_ID = "_lakesink_txn_id"
# First in the schema, and the first two are the partition columns: the commit and the
# vacuum filter on them, so they prune whole files however wide the user schema is.
HIDDEN_FIELDS = (
    StructField(CHECKPOINT_ID, LongType(), False),
    StructField(TXN_ID, StringType(), False),
    StructField(VISIBLE, BooleanType(), False),
)
SINK_ID_PROPERTY = "lakesink.sinkId"
JOURNAL_PROPERTY = "lakesink.journal"
# txnVersion = checkpoint id * STEPS + step: grows with every append of a writer, because a
# writer's checkpoint ids only grow and are never reused (not even after an abort).
STEPS_PER_CHECKPOINT = 1_000_000
APPEND_ATTEMPTS = 3

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"

StepHook = Callable[[str, "DeltaTransaction"], None]
T = TypeVar("T")


def commit_metadata(operation: str, sink_id: str, **detail: object) -> str:
    """The ``userMetadata`` lakesink puts on its Delta commits, so history names them.

    ``DESCRIBE HISTORY`` then shows, per table version, which lakesink operation made it
    and for which checkpoint and transaction: the audit lines history up with the journal.
    """
    return json.dumps({"lakesink": operation, "sink_id": sink_id, **detail}, sort_keys=True)


# Every lakesink append and MERGE writes into a single (checkpoint id, transaction id)
# partition. Without these, Spark sorts a partitioned write's rows by partition before
# writing them, and Delta's MERGE first shuffles its output into one task per partition:
# a pass over all the rows each, and the shuffle leaves one task to write them all. With
# them, each task writes its rows straight into the one partition (the benchmark's
# pre-commit and commit of 5M rows: README, "Benchmarks").
SINGLE_PARTITION_WRITES = {
    "spark.sql.maxConcurrentOutputFileWriters": "1",
    "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "false",
}


# A session's SQL conf is shared by every thread that uses the session: two sinks writing
# at once in two threads would tag each other's commits (the audit would then pin a commit
# on the wrong checkpoint) and one could put back a setting the other still needs. So the
# blocks that set the conf take turns per session; a thread with its own
# ``spark.newSession()`` has its own conf and lock, and runs alongside.
_CONF_LOCKS: weakref.WeakKeyDictionary[SparkSession, threading.RLock] = weakref.WeakKeyDictionary()
_CONF_LOCKS_GUARD = threading.Lock()


@contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Run the block with ``settings`` on the session, then put back what was there.

    Blocks on the same session, in any thread, run one at a time.
    """
    with _CONF_LOCKS_GUARD:
        lock = _CONF_LOCKS.setdefault(spark, threading.RLock())
    with lock:
        previous = {key: spark.conf.get(key, None) for key in settings}
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in previous.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


def session_commit_metadata(spark: SparkSession, metadata: str) -> AbstractContextManager[None]:
    """Tag the SQL commands run inside with ``metadata`` (MERGE and DELETE take no option)."""
    return session_conf(spark, {USER_METADATA_CONF: metadata})


@dataclass(frozen=True)
class DeltaTransaction:
    """A transaction handle: a fresh id, never reused, and the checkpoint it belongs to."""

    txn_id: str
    checkpoint_id: int
    writer_id: str


@dataclass(frozen=True, kw_only=True)
class CommitRetry:
    """How a commit retries Delta write conflicts: exponential backoff with jitter."""

    max_attempts: int = 20
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0


def retry_on_conflict(
    command: Callable[[], T],
    *,
    retry: CommitRetry,
    what: str,
    on_retry: Callable[[int, str], None] | None = None,
) -> T:
    """Run an idempotent Delta command, retrying write conflicts with backoff and jitter.

    ``on_retry`` gets the number of the attempt about to start and the conflict.
    """
    conflicts = _conflict_exceptions()
    backoff = retry.initial_backoff_s
    for attempt in range(1, retry.max_attempts + 1):
        try:
            return command()
        except conflicts as exc:
            if attempt == retry.max_attempts:
                raise
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            log.info("%s conflicted (attempt %d), retrying: %s", what, attempt, error)
            if on_retry is not None:
                on_retry(attempt + 1, error)
            time.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, retry.max_backoff_s)
    raise AssertionError("unreachable")


def _conflict_exceptions() -> tuple[type[BaseException], ...]:
    import delta.exceptions.captured  # noqa: F401  (makes PySpark raise the classes below)
    from delta.exceptions import (
        ConcurrentAppendException,
        ConcurrentDeleteDeleteException,
        ConcurrentDeleteReadException,
        ConcurrentWriteException,
        MetadataChangedException,
        ProtocolChangedException,
    )

    return (
        ConcurrentAppendException,
        ConcurrentDeleteReadException,
        ConcurrentDeleteDeleteException,
        ConcurrentWriteException,
        MetadataChangedException,
        ProtocolChangedException,
    )


class DeltaSink(TwoPhaseCommitSink[DeltaTransaction, DataFrame]):
    """An exactly-once sink into one Delta table; open it with ``DeltaSink.open``.

    Args:
        spark: A Delta-ready session (``lakesink.spark_session()``).
        path: The target table's folder; created if missing.
        schema: The user columns. Required to create the table; checked against an
            existing one (a DDL string or a ``StructType``).
        sink_id: Names the sink in the journal and the table; default: the folder's name.
            A table belongs to one sink id.
        writer_id: Identifies this writer among the sink's concurrent writers; a restarted
            writer must reuse its id to recover its transactions.
        journal_path: The journal table; default ``$LAKESINK_JOURNAL`` or
            ``_lakesink_journal`` beside the table's folder.
        view_name: Catalog name of the committed view; default: the sink id.
        table_name: Also register the raw table under this catalog name.
        validation: Audit each checkpoint's pending rows with this Great Expectations
            gate before they can be committed (see ``lakesink.validation``). Its suite
            must only name columns the table has.
        commit_retry: Retry policy for commit conflicts.
        step_hook: Called with a step name and the transaction at each protocol step
            (for observability and fault-injection tests).
        clock, transaction_timeout_ms, ignore_failures_after_transaction_timeout,
        timeout_warning_ratio: As for ``TwoPhaseCommitSink``.
    """

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        *,
        schema: StructType | str | None = None,
        sink_id: str | None = None,
        writer_id: str = "0",
        journal_path: str | None = None,
        view_name: str | None = None,
        table_name: str | None = None,
        validation: ValidationGate | None = None,
        commit_retry: CommitRetry | None = None,
        step_hook: StepHook | None = None,
        clock: Clock | None = None,
        transaction_timeout_ms: int | None = None,
        ignore_failures_after_transaction_timeout: bool = False,
        timeout_warning_ratio: float | None = None,
    ) -> None:
        # Every name is checked before anything is written: a name Spark, Delta or a file
        # name cannot take fails here, named, not half-way through creating the table.
        self.path = check_path(str(Path(path).resolve()))
        self.sink_id = self.default_sink_id(path, sink_id)
        self.writer_id = check_file_name_part(writer_id, what="writer id")
        if not self.sink_id:
            raise ConfigurationError("sink_id must not be empty")
        super().__init__(
            name=f"lakesink[{self.sink_id}/{writer_id}]",
            clock=clock,
            transaction_timeout_ms=transaction_timeout_ms,
            ignore_failures_after_transaction_timeout=ignore_failures_after_transaction_timeout,
            timeout_warning_ratio=timeout_warning_ratio,
        )
        self.spark = spark
        self.view_name = _view_name(view_name, self.sink_id)
        self.table_name = table_name
        if table_name:
            quote_name(table_name, what="table name")
        if table_name and table_name == self.view_name:
            raise ConfigurationError(
                f"table_name and view_name are both {table_name!r}; give them different names"
            )
        self.commit_retry = commit_retry or CommitRetry()
        self._step_hook = step_hook
        self._app_id = f"lakesink:{self.sink_id}:{writer_id}"
        # Two live processes as one writer would reuse txnVersions: Delta would silently
        # skip one's appends. The lock file is hidden from Delta (leading underscore).
        self._lock = writer_lock(self.path, self.sink_id, writer_id)
        self._steps: dict[str, int] = {}  # appends so far, per live transaction
        # Rows appended per live transaction, as observed; None once an append's count is
        # unknown (a retried or skipped write): then pre-commit counts them in the table.
        self._written: dict[str, int | None] = {}
        self._rows: dict[str, int | None] = {}  # pre-committed row counts, for the journal
        self._failed: dict[str, str] = {}
        # Pre-committed, then held or aborted by the validation gate: commit skips them.
        self._withheld: dict[str, TxnState] = {}
        journal_path = str(Path(journal_path or default_journal_path(self.path)).resolve())
        check_path(journal_path, what="journal path")
        given = _as_struct(spark, schema)
        if given is not None:
            check_column_names(given.fieldNames())
        self.validation = validation
        if validation is not None and given is not None:  # refused before a table is made
            validation.check_columns(given.fieldNames())
        self.schema, created = _ensure_table(spark, self.path, self.sink_id, given, journal_path)
        if validation is not None and given is None:
            validation.check_columns(self.schema.fieldNames())
        # A table with history but no journal must not silently get a new, empty one:
        # the pre-committed transactions recovery needs would be forgotten.
        self.journal = Journal(spark, journal_path, create=created)
        if table_name:
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {quote_name(table_name)} USING DELTA "
                f"LOCATION {string_literal(self.path)}"
            )

    @staticmethod
    def default_sink_id(path: str, sink_id: str | None = None) -> str:
        """The sink id a sink at ``path`` gets: ``sink_id`` if given, else the folder name."""
        return sink_id or Path(path).resolve().name

    @classmethod
    def open(
        cls,
        spark: SparkSession,
        path: str,
        *,
        restore: SinkState[DeltaTransaction] | Literal["journal"] | None = "journal",
        **options: object,
    ) -> DeltaSink:
        """Create or open the table, recover, register the committed view.

        Args:
            restore: ``"journal"`` (standalone use): every transaction this writer
                pre-committed is committed. Otherwise the state of the last *completed*
                checkpoint as a checkpoint coordinator recorded it (``None``: none completed
                yet): only its pre-committed transactions are committed, and ones
                pre-committed after it are aborted, because their input is replayed.
            **options: The constructor's keyword options.
        """
        sink = cls(spark, path, **options)  # type: ignore[arg-type]
        sink._lock.acquire()
        sink.initialize_state(sink.restored_state(restore))
        create_committed_view(spark, sink.path, sink.view_name, sink.schema.fieldNames())
        return sink

    def restored_state(
        self, restore: SinkState[DeltaTransaction] | Literal["journal"] | None = "journal"
    ) -> SinkState[DeltaTransaction]:
        """Rebuild this writer's protocol state from the journal, aborting the leftovers.

        ``restore`` is as for ``open``. Failure scenarios it handles, for this writer's
        transactions:

        1. Decided (``committing``): an operator decided to commit it, or its commit was
           under way and retrying conflicts: it is committed whatever else is known.
        2. Pre-committed: committed if restoring from the journal (it is the checkpoint
           record) or if the restored checkpoint lists it; otherwise its checkpoint never
           completed, its input is replayed, so it is aborted (Flink's lingering
           transaction).
        3. Held by the validation gate: left for an operator if its checkpoint completed;
           otherwise its input is replayed, and committing it later would duplicate rows,
           so it is aborted.
        4. Open: never pre-committed, so aborted.
        5. Checkpoint ids go on above every id this writer used and every id any writer of
           the sink pre-committed, so no id is reused and writers started together share.
        """
        from_journal = restore == "journal"
        committable = set() if from_journal else _txn_ids(restore)
        completed_through = 0 if from_journal or restore is None else restore.last_checkpoint_id
        pending: list[TransactionHolder[DeltaTransaction]] = []
        last_id = 0
        for status in self.journal.transactions(self.sink_id):
            if status.writer_id != self.writer_id:
                if status.state not in (TxnState.OPEN, TxnState.ABORTED):
                    last_id = max(last_id, status.checkpoint_id)
                continue
            last_id = max(last_id, status.checkpoint_id)
            txn = DeltaTransaction(status.txn_id, status.checkpoint_id, status.writer_id)
            decided = status.state is TxnState.COMMITTING
            checkpointed = status.state is TxnState.PRE_COMMITTED and (
                from_journal or status.txn_id in committable
            )
            replayed_hold = (
                status.state is TxnState.HELD
                and not from_journal
                and status.checkpoint_id > completed_through
            )
            if decided or checkpointed:
                started_ms = int(status.opened_at.timestamp() * 1000)
                pending.append(TransactionHolder(txn, status.checkpoint_id, started_ms))
                self._rows[status.txn_id] = status.row_count
            elif status.state in (TxnState.OPEN, TxnState.PRE_COMMITTED) or replayed_hold:
                self.recover_and_abort(txn)
                log.info(
                    "%s: aborted leftover %s transaction %s", self.name, status.state.value, txn
                )
        return SinkState(pending_commit=tuple(pending), last_checkpoint_id=last_id)

    def resolve_by_hand(self, status: TransactionStatus, *, commit: bool) -> None:
        """Commit or abort one journaled transaction of this writer (operator recovery).

        Takes the writer's lock, so it refuses while the writer runs.
        """
        txn = DeltaTransaction(status.txn_id, status.checkpoint_id, status.writer_id)
        self._lock.acquire()
        try:
            if commit:
                self._rows[txn.txn_id] = status.row_count
                # Neither a checkpoint record nor the journal's pre-commit may make this
                # commit recoverable (a held or uncheckpointed transaction): journal it.
                self.journal.record(
                    self._entry(txn, TxnState.COMMITTING, attempt=1, detail="operator commit")
                )
                self.recover_and_commit(txn)
            else:
                self.recover_and_abort(txn)
        finally:
            self.release()

    def withheld(self, transaction: DeltaTransaction) -> TxnState | None:
        """``held`` or ``aborted`` if validation kept this pre-committed one from commit."""
        return self._withheld.get(transaction.txn_id)

    def withhold(self, transaction: DeltaTransaction, state: TxnState, reason: str) -> None:
        """Keep a pre-committed transaction from its commit: hold or abort it, journaled."""
        if state not in (TxnState.HELD, TxnState.ABORTED):
            raise ProtocolError(f"{self.name}: can only hold or abort, not {state.value}")
        self.journal.record(
            self._entry(
                transaction, state, row_count=self._rows.get(transaction.txn_id), detail=reason
            )
        )
        self._withheld[transaction.txn_id] = state

    def checkpoint(self) -> int:
        """Pre-commit the open transaction; return its checkpoint id for the commit."""
        checkpoint_id = self.current_checkpoint_id
        self.snapshot_state(checkpoint_id)
        return checkpoint_id

    # ----------------------------------------------------------------- hooks

    def begin_transaction(self, checkpoint_id: int) -> DeltaTransaction:
        # Journaled as open only at its first write: a transaction that never wrote has
        # nothing to recover, and a checkpoint then costs no journal commit for it.
        txn = DeltaTransaction(uuid.uuid4().hex, checkpoint_id, self.writer_id)
        self._steps[txn.txn_id] = 0
        self._written[txn.txn_id] = 0
        return txn

    def invoke(self, transaction: DeltaTransaction, value: DataFrame) -> None:
        self._check_not_failed(transaction)
        frame = self._masked(transaction, value)
        step = self._steps[transaction.txn_id] + 1
        if step >= STEPS_PER_CHECKPOINT:
            raise ProtocolError(
                f"{self.name}: more than {STEPS_PER_CHECKPOINT - 1} writes into checkpoint "
                f"{transaction.checkpoint_id}; checkpoint more often"
            )
        version = transaction.checkpoint_id * STEPS_PER_CHECKPOINT + step
        if step == 1:  # before any row lands, so recovery knows to abort it
            self.journal.record(self._entry(transaction, TxnState.OPEN))
        for attempt in range(1, APPEND_ATTEMPTS + 1):
            observation = Observation(f"lakesink_rows_{uuid.uuid4().hex}")
            try:
                self._step("before_append", transaction)
                with session_conf(self.spark, SINGLE_PARTITION_WRITES):
                    (
                        frame.observe(observation, F.count(F.lit(1)).alias("rows"))
                        .write.format("delta")
                        .mode("append")
                        .option("txnAppId", self._app_id)
                        .option("txnVersion", str(version))
                        .option("userMetadata", self._metadata("write", transaction, step=step))
                        .save(self.path)
                    )
                self._step("after_append", transaction)
                self._count_written(transaction, observation if attempt == 1 else None)
                break
            except Exception as exc:
                # Same appId and version on retry: if the failed attempt did commit, Delta
                # skips this one instead of duplicating the rows.
                log.warning("%s: append attempt %d failed: %s", self.name, attempt, exc)
                if attempt == APPEND_ATTEMPTS:
                    self._failed[transaction.txn_id] = repr(exc)
                    raise
        self._steps[transaction.txn_id] = step

    def pre_commit(self, transaction: DeltaTransaction) -> None:
        self._check_not_failed(transaction)
        rows = self._written.pop(transaction.txn_id, None)
        if rows is None:
            rows = self._rows_of(transaction).count()
        self._rows[transaction.txn_id] = rows
        state, report, detail = TxnState.PRE_COMMITTED, None, None
        if self.validation is not None and rows:
            report = self.validation.validate(self.pending_rows(transaction))
            state, detail = self._verdict(transaction, report)
        self._step("before_pre_commit_record", transaction)
        self.journal.record(
            self._entry(
                transaction,
                state,
                row_count=rows,
                detail=detail,
                validation=report.to_json() if report else None,
            )
        )
        if state is not TxnState.PRE_COMMITTED:
            self._withheld[transaction.txn_id] = state
        log.info(
            "%s: pre-committed checkpoint %d (%d rows)%s",
            self.name,
            transaction.checkpoint_id,
            rows,
            "" if state is TxnState.PRE_COMMITTED else f", {state.value} by validation",
        )

    def commit(self, transaction: DeltaTransaction) -> None:
        withheld = self._withheld.pop(transaction.txn_id, None)
        if withheld is not None:
            log.warning(
                "%s: checkpoint %d is not committed: validation %s it",
                self.name,
                transaction.checkpoint_id,
                withheld.value,
            )
            return
        rows = self._rows.get(transaction.txn_id)
        self._step("before_flip", transaction)
        flipped = self._flip(transaction) if rows != 0 else 0
        self._step("after_flip", transaction)
        self.journal.record(
            self._entry(
                transaction,
                TxnState.COMMITTED,
                row_count=rows,
                detail=f"{flipped} rows made visible by this attempt",
            )
        )
        self._rows.pop(transaction.txn_id, None)

    def abort(self, transaction: DeltaTransaction) -> None:
        self._written.pop(transaction.txn_id, None)
        if self._steps.get(transaction.txn_id) == 0:
            del self._steps[transaction.txn_id]  # never wrote, never journaled: nothing to undo
            return
        self.journal.record(
            self._entry(
                transaction,
                TxnState.ABORTED,
                detail="rows kept masked; the vacuum job removes them",
            )
        )
        self._steps.pop(transaction.txn_id, None)

    def release(self) -> None:
        self._lock.release()

    def explain_unknown_checkpoint(self, checkpoint_id: int) -> str:
        states = sorted(
            {
                s.state.value
                for s in self.journal.transactions(self.sink_id, writer_id=self.writer_id)
                if s.checkpoint_id == checkpoint_id
            }
        )
        return (
            f"the journal says: {', '.join(states)}"
            if states
            else "the journal has no record of it"
        )

    # --------------------------------------------------------------- internals

    def _check_not_failed(self, transaction: DeltaTransaction) -> None:
        # After an append that failed for good, whether its rows landed is unknown: the
        # transaction can neither take more rows nor be pre-committed.
        if transaction.txn_id in self._failed:
            raise ProtocolError(
                f"{self.name}: transaction {transaction.txn_id} of checkpoint "
                f"{transaction.checkpoint_id} failed to append "
                f"({self._failed[transaction.txn_id]}); reopen the sink: recovery aborts it "
                "and its input must be replayed"
            )

    def _masked(self, transaction: DeltaTransaction, frame: DataFrame) -> DataFrame:
        _check_columns(frame.schema, self.schema, what="the DataFrame")
        return frame.select(
            F.lit(transaction.checkpoint_id).cast("bigint").alias(CHECKPOINT_ID),
            F.lit(transaction.txn_id).alias(TXN_ID),
            F.lit(False).alias(VISIBLE),
            *[F.col(quote_identifier(name)) for name in self.schema.fieldNames()],
        )

    def _count_written(
        self, transaction: DeltaTransaction, observation: Observation | None
    ) -> None:
        """Add an append's observed row count to the transaction's, or mark it unknown."""
        known = self._written.get(transaction.txn_id)
        rows = _observed_rows(observation) if observation is not None else None
        self._written[transaction.txn_id] = None if known is None or rows is None else known + rows

    def _verdict(
        self, transaction: DeltaTransaction, report: ValidationReport
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

    def pending_rows(self, transaction: DeltaTransaction) -> DataFrame:
        """The transaction's rows in the table, user columns only (what a suite audits)."""
        return self._rows_of(transaction).select(
            *[F.col(quote_identifier(name)) for name in self.schema.fieldNames()]
        )

    def revalidate(self, status: TransactionStatus, gate: ValidationGate) -> ValidationReport:
        """Run ``gate`` again on a pending transaction's rows; journal the report.

        The transaction keeps its state: an operator reads the report, then commits or
        aborts the checkpoint.
        """
        txn = DeltaTransaction(status.txn_id, status.checkpoint_id, status.writer_id)
        report = gate.validate(self.pending_rows(txn))
        self.journal.record(
            self._entry(
                txn,
                status.state,
                row_count=status.row_count,
                detail="validated again by an operator",
                validation=report.to_json(),
            )
        )
        return report

    def _rows_of(self, transaction: DeltaTransaction) -> DataFrame:
        return (
            self.spark.read.format("delta")
            .load(self.path)
            .where(
                (F.col(CHECKPOINT_ID) == transaction.checkpoint_id)
                & (F.col(TXN_ID) == transaction.txn_id)
            )
        )

    def _flip(self, transaction: DeltaTransaction) -> int:
        """One idempotent MERGE: only masked rows of exactly this transaction match."""
        key = (
            f"t.{CHECKPOINT_ID} = {transaction.checkpoint_id} "
            f"AND t.{TXN_ID} = {string_literal(transaction.txn_id)}"
        )
        statement = (
            f"MERGE INTO {delta_path(self.path)} AS t "
            f"USING (SELECT {transaction.checkpoint_id} AS checkpoint_id, "
            f"{string_literal(transaction.txn_id)} AS txn_id) AS s "
            f"ON {key} AND t.{CHECKPOINT_ID} = s.checkpoint_id AND t.{TXN_ID} = s.txn_id "
            f"AND NOT t.{VISIBLE} "
            f"WHEN MATCHED THEN UPDATE SET t.{VISIBLE} = true"
        )

        def run() -> int:
            metadata = {USER_METADATA_CONF: self._metadata("commit", transaction)}
            with session_conf(self.spark, {**SINGLE_PARTITION_WRITES, **metadata}):
                metrics = self.spark.sql(statement).first()
            return int(metrics["num_updated_rows"]) if metrics else 0

        def journal_retry(attempt: int, error: str) -> None:
            self.journal.record(
                self._entry(transaction, TxnState.COMMITTING, attempt=attempt, error=error)
            )

        return retry_on_conflict(
            run,
            retry=self.commit_retry,
            what=f"{self.name}: commit of checkpoint {transaction.checkpoint_id}",
            on_retry=journal_retry,
        )

    def _entry(
        self, transaction: DeltaTransaction, state: TxnState, **extra: object
    ) -> JournalEntry:
        return JournalEntry(
            sink_id=self.sink_id,
            table_path=self.path,
            checkpoint_id=transaction.checkpoint_id,
            txn_id=transaction.txn_id,
            writer_id=transaction.writer_id,
            state=state,
            event_time=datetime.fromtimestamp(self._clock.millis() / 1000, tz=timezone.utc),
            **extra,  # type: ignore[arg-type]
        )

    def _metadata(self, operation: str, transaction: DeltaTransaction, **detail: object) -> str:
        return commit_metadata(
            operation,
            self.sink_id,
            checkpoint_id=transaction.checkpoint_id,
            txn_id=transaction.txn_id,
            writer_id=transaction.writer_id,
            **detail,
        )

    def _step(self, name: str, transaction: DeltaTransaction) -> None:
        if self._step_hook is not None:
            self._step_hook(name, transaction)


def _txn_ids(state: SinkState[DeltaTransaction] | None) -> set[str]:
    return {h.handle.txn_id for h in (state.pending_commit if state else ())}


def _view_name(view_name: str | None, sink_id: str) -> str:
    """The committed view's catalog name, checked: ``view_name``, else the sink id."""
    if view_name is not None:
        quote_name(view_name, what="view name")
        return view_name
    if "." in sink_id:  # would name a view in another database, created on the fly
        raise ConfigurationError(
            f"the sink id {sink_id!r} (the view name by default) holds a dot; "
            "pass view_name= with a name of letters, digits and _"
        )
    quote_name(sink_id, what="view name (by default the sink id)")
    return sink_id


def writer_lock(path: str, sink_id: str, writer_id: str) -> ProcessLock:
    """The lock a live writer of the table at ``path`` holds (hidden from Delta by its ``_``)."""
    return ProcessLock(
        Path(path) / f"_lakesink_writer_{writer_id}.lock",
        f"writer {writer_id!r} of sink {sink_id!r}",
    )


def _observed_rows(observation: Observation) -> int | None:
    """The rows an append wrote, or None if Delta skipped it (nothing was observed).

    ``Observation.get`` would wait forever for a write that never ran, so the JVM side's
    future is asked first; any surprise there just means "unknown" (then the rows are
    counted in the table).
    """
    try:
        if not observation._jo.future().isCompleted():  # type: ignore[union-attr]
            return None
        return int(observation.get["rows"])
    except Exception as exc:  # a private API: never let it fail a write
        log.debug("observed row count unavailable: %s", exc)
        return None


def _as_struct(spark: SparkSession, schema: StructType | str | None) -> StructType | None:
    if schema is None or isinstance(schema, StructType):
        return schema
    return spark.createDataFrame([], schema).schema


def _user_fields(schema: StructType) -> StructType:
    return StructType([f for f in schema.fields if not f.name.startswith(HIDDEN_PREFIX)])


def _check_reserved(schema: StructType, what: str) -> None:
    reserved = [f.name for f in schema.fields if f.name.lower().startswith(HIDDEN_PREFIX)]
    if reserved:
        raise ReservedColumnError(
            f"{what} has column(s) {', '.join(reserved)}: names starting with "
            f"{HIDDEN_PREFIX!r} are reserved for lakesink's hidden columns; rename them"
        )


def _check_columns(actual: StructType, expected: StructType, *, what: str) -> None:
    """Raise naming every missing, extra and wrongly typed column (nullability aside)."""
    _check_reserved(actual, what)
    have = {f.name: f.dataType for f in actual.fields}
    want = {f.name: f.dataType for f in expected.fields}
    problems = []
    missing = [name for name in want if name not in have]
    extra = [name for name in have if name not in want]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if extra:
        problems.append(f"extra {', '.join(extra)}")
    for name in want:
        if name in have and have[name] != want[name]:
            problems.append(
                f"{name} is {have[name].simpleString()}, expected {want[name].simpleString()}"
            )
    if problems:
        raise SchemaMismatchError(
            f"{what} does not match the sink's schema: {'; '.join(problems)} "
            f"(expected: {expected.simpleString()})"
        )


def _ensure_table(
    spark: SparkSession, path: str, sink_id: str, schema: StructType | None, journal: str
) -> tuple[StructType, bool]:
    """Create the table or check the existing one; return the user schema and if created."""
    from delta.tables import DeltaTable

    if schema is not None:
        _check_reserved(schema, "the schema")
    if DeltaTable.isDeltaTable(spark, path):
        detail = spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first()
        properties = detail["properties"] or {}
        owner = properties.get(SINK_ID_PROPERTY)
        if owner != sink_id:
            raise ConfigurationError(
                f"the table at {path} belongs to sink id {owner!r}, not {sink_id!r}"
                if owner
                else f"the Delta table at {path} was not created by lakesink; "
                "give the sink a new path"
            )
        table_schema = spark.read.format("delta").load(path).schema
        missing_hidden = [f.name for f in HIDDEN_FIELDS if f.name not in table_schema.fieldNames()]
        if missing_hidden:
            raise SchemaMismatchError(
                f"the table at {path} lacks hidden column(s) {', '.join(missing_hidden)}"
            )
        recorded_journal = properties.get(JOURNAL_PROPERTY)
        if recorded_journal != journal:
            raise ConfigurationError(
                f"the table at {path} is journaled in {recorded_journal}, not {journal}; "
                "pass journal_path= with the recorded journal"
            )
        user = _user_fields(table_schema)
        if schema is not None:
            _check_columns(schema, user, what="the given schema")
        return user, False
    if schema is None:
        raise TableNotFoundError(f"no Delta table at {path}: pass schema= to create one there")
    if Path(path).exists() and any(Path(path).iterdir()):
        raise TableNotFoundError(
            f"{path} exists and holds no Delta table; give the sink an empty or new folder"
        )
    (
        DeltaTable.createIfNotExists(spark)
        .location(path)
        .addColumns(StructType([*HIDDEN_FIELDS, *schema.fields]))
        .partitionedBy(CHECKPOINT_ID, TXN_ID)
        .property(SINK_ID_PROPERTY, sink_id)
        .property(JOURNAL_PROPERTY, journal)
        .execute()
    )
    log.info("created lakesink table %s for sink %r", path, sink_id)
    return schema, True
