"""The two-phase-commit protocol, engine-agnostic and in pure Python.

This is Apache Flink's ``TwoPhaseCommitSinkFunction`` carried over: a template-method base
class whose *hooks* an implementation writes and whose *framework methods* drive them in
the right order and must not be overridden. The hooks are protected (a leading underscore,
Flink's ``protected``): the object a user writes with shows the framework methods only, so
nobody commits a transaction behind the protocol's back.

Hooks (what an implementation writes):

===========================  ===============================================================
``_begin_transaction``       open a transaction for a checkpoint id; return a fresh handle
``_invoke``                  write a value into the open transaction, invisible to readers
``_pre_commit``              make it durable; hand over its committable and the verdict
``_commit``                  publish a committable (idempotent)
``_abort``                   make sure a transaction is never published
``_hold``                    record that a pre-committed transaction waits for an operator
``_decide_commit``           make an operator's decision to commit durable before the commit
``_recover_and_commit``      commit a recovered transaction (default: ``_commit``)
``_recover_and_abort``       abort a recovered transaction (default: ``_abort``)
``_log``                     what the sink's own durable log knows of its transactions
``_post_commit``             bring up what derives from the committed rows (a published table)
``_acquire`` / ``_ready``    before recovery (locks, tables) / after it (views, connections)
``_release``                 free what ``_acquire`` took
===========================  ===============================================================

Framework methods: ``initialize_state``, ``initialize_from_log``, ``read_log``, ``write``,
``snapshot_state``, ``verdict``, ``withhold``, ``notify_checkpoint_complete``,
``run_post_commit``, ``resolve``, ``close``, ``state``.

The contract an implementation signs:

- From its pre-commit on, a transaction is its *committable* (Flink sink2's): what
  ``_pre_commit`` handed over is what the snapshot holds, what ``_commit`` publishes and
  what recovery commits again, in this process or another.
- ``_commit`` and ``_recover_and_commit`` must be idempotent and must eventually succeed for
  every pre-committed transaction, or data is lost.
- ``_pre_commit`` must be idempotent too: a failed snapshot may be retried with the same id.
  A verdict other than pre-committed must be durable when it returns: recovery must never
  commit a transaction its validation held or aborted.
- A transaction handle is an identity that is never reused. Committing a recovered handle
  must only ever publish that transaction's own data (the FLINK-8132 bug was a recovered
  handle that committed a newer transaction's data because identities were recycled).
  Nothing may be keyed on the checkpoint id alone: a driver may replay an id after a crash
  (Spark runs micro-batch N again), and the replay is a new transaction under that id.

Checkpoint ids come from whoever drives the checkpoints (a coordinator, a streaming
query's batch id, or the sink itself when used standalone) and only grow. A transaction is
begun *for* the driver's next checkpoint id, so rows carry it from the moment they land.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from lakesink.core.recovery import check_resolvable, plan
from lakesink.core.state import (
    LoggedTransaction,
    PreCommit,
    SinkState,
    TransactionHolder,
    TransactionLog,
    TxnState,
)
from lakesink.errors import (
    CheckpointOrderError,
    CommitRoundError,
    ConfigurationError,
    ProtocolError,
    UnknownCheckpointError,
)

__all__ = ["Clock", "SystemClock", "TransactionTimeout", "TwoPhaseCommitSink"]

log = logging.getLogger(__name__)

TxnT = TypeVar("TxnT", bound=Hashable)
InT = TypeVar("InT")
SinkT = TypeVar("SinkT", bound="TwoPhaseCommitSink[Any, Any]")


class Clock(Protocol):
    """Where the protocol reads the time; tests inject one they can set."""

    def millis(self) -> int: ...


class SystemClock:
    """The wall clock, in milliseconds since the epoch."""

    def millis(self) -> int:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True, kw_only=True)
class TransactionTimeout:
    """How long the external system keeps a transaction, and what follows from it.

    Attributes:
        timeout_ms: The transaction timeout.
        ignore_failures_after_timeout: During recovery, log instead of raise when
            committing a transaction older than the timeout fails (it is gone anyway).
        warning_ratio: Warn when a transaction being committed has been open for at least
            this fraction of the timeout, naming the transaction.
    """

    timeout_ms: int
    ignore_failures_after_timeout: bool = False
    warning_ratio: float | None = None

    def __post_init__(self) -> None:
        if self.timeout_ms <= 0:
            raise ConfigurationError(f"timeout_ms must be positive, got {self.timeout_ms}")
        if self.warning_ratio is not None and not 0 < self.warning_ratio <= 1:
            raise ConfigurationError(f"warning_ratio must be in (0, 1], got {self.warning_ratio}")


class TwoPhaseCommitSink(ABC, Generic[TxnT, InT]):
    """Template for an exactly-once sink that commits in two phases, driven by checkpoints.

    Lifecycle: ``initialize_state(restored)`` (or ``initialize_from_log()``) once, then
    any number of ``write(value)``, ``snapshot_state(checkpoint_id)`` (pre-commit) and
    ``notify_checkpoint_complete(checkpoint_id)`` (commit), then ``close()``. An operator
    acts on a stopped sink with ``resolve``.

    Args:
        name: Shown in logs and errors.
        clock: Source of time for transaction ages; the system clock by default.
        timeout: The external system's transaction timeout, if it has one.
    """

    #: Rebuilds a handle from its JSON form (``SinkState.from_json``); None: JSON scalars.
    handle_type: ClassVar[type | None] = None

    _FRAMEWORK_METHODS: ClassVar[tuple[str, ...]] = (
        "initialize_state",
        "initialize_from_log",
        "read_log",
        "write",
        "snapshot_state",
        "verdict",
        "withhold",
        "notify_checkpoint_complete",
        "run_post_commit",
        "resolve",
        "close",
        "state",
        "__enter__",
        "__exit__",
    )

    _HOOKS: ClassVar[tuple[str, ...]] = (
        "begin_transaction",
        "invoke",
        "pre_commit",
        "commit",
        "abort",
        "hold",
        "decide_commit",
        "recover_and_commit",
        "recover_and_abort",
        "log",
        "post_commit",
        "acquire",
        "ready",
        "release",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        hooks = ", ".join(f"_{name}" for name in cls._HOOKS)
        overridden = [name for name in cls._FRAMEWORK_METHODS if name in vars(cls)]
        if overridden:
            raise TypeError(
                f"{cls.__name__} overrides framework method(s) {', '.join(overridden)}; "
                f"implement the hooks ({hooks}) instead"
            )
        # A hook under its public name would never be called: the protocol would go on
        # without it (say, never committing), so it is refused rather than ignored.
        public = [name for name in cls._HOOKS if name in vars(cls)]
        if public:
            raise TypeError(
                f"{cls.__name__} defines {', '.join(public)}: the protocol's hooks are "
                f"protected; name them {', '.join(f'_{name}' for name in public)}"
            )

    def __init__(
        self,
        *,
        name: str,
        clock: Clock | None = None,
        timeout: TransactionTimeout | None = None,
    ) -> None:
        self.name = name
        self._clock: Clock = clock or SystemClock()
        self._timeout = timeout
        self._current: TransactionHolder[TxnT] | None = None
        self._written = False  # whether anything was written into the open transaction
        self._pending: list[TransactionHolder[TxnT]] = []
        self._held: list[TransactionHolder[TxnT]] = []
        # Verdicts other than pre-committed of checkpoints not notified yet, so that their
        # notification is understood rather than refused; pruned by every notification.
        self._withheld: dict[int, TxnState] = {}
        self._last_notified = 0
        self._last_snapshot = 0
        self._recovered: set[TxnT] = set()  # restored handles: never to be begun again
        self._acquired = False
        self._initialized = False
        self._closed = False

    # ----------------------------------------------------------------- hooks

    @abstractmethod
    def _begin_transaction(self, checkpoint_id: int) -> TxnT:
        """Open a new transaction for ``checkpoint_id`` and return its unique handle."""

    @abstractmethod
    def _invoke(self, transaction: TxnT, value: InT) -> None:
        """Write ``value`` into the open transaction, invisible to readers."""

    @abstractmethod
    def _pre_commit(self, transaction: TxnT) -> PreCommit[TxnT]:
        """Make the transaction durable so that a later ``_commit`` cannot fail on data.

        Returns its committable (equal to the handle) and the verdict: ``PRE_COMMITTED``
        to commit it at its checkpoint's completion, ``HELD`` to keep it for an operator,
        ``ABORTED`` to never publish it. A held or aborted verdict must be durable when
        this returns.
        """

    @abstractmethod
    def _commit(self, transaction: TxnT) -> None:
        """Publish a committable. Idempotent; must eventually succeed."""

    @abstractmethod
    def _abort(self, transaction: TxnT, reason: str) -> None:
        """Make sure the transaction's data is never published; ``reason`` says why."""

    def _hold(self, transaction: TxnT, reason: str) -> None:
        """Record durably that a pre-committed transaction waits for an operator."""
        raise ProtocolError(f"{self.name} cannot hold a transaction ({reason})")

    def _decide_commit(self, transaction: TxnT, reason: str) -> None:
        """Make an operator's decision to commit durable, so recovery finishes it.

        The default does nothing: enough for a sink whose recovery commits every
        transaction it holds pre-committed.
        """

    def _recover_and_commit(self, transaction: TxnT) -> None:
        """Commit a transaction restored from a snapshot; it may already be committed."""
        self._commit(transaction)

    def _recover_and_abort(self, transaction: TxnT, reason: str) -> None:
        """Abort a transaction restored from a snapshot or the log; never pre-committed."""
        self._abort(transaction, reason)

    def _log(self) -> TransactionLog[TxnT]:
        """What the sink's own durable log knows: its transactions and the ids used.

        Recovery aborts the unfinished transactions in it that the restored state does not
        list (begun or pre-committed after the snapshot) and finishes decided ones. The
        default, an empty log, suits a sink that keeps none (Flink's sinks).
        """
        return TransactionLog()

    def _post_commit(self) -> None:
        """Bring up what derives from the committed rows (a published table): Flink sink2's
        post-commit step, run once a checkpoint is published (in a group, once its cut is
        recorded). Derived state only: a failure is the sink's to log, and the next call
        brings it up. The default does nothing."""

    def _acquire(self) -> None:
        """Take what the sink needs before anything else (locks, tables); called once."""

    def _ready(self) -> None:
        """Called last by ``initialize_state``, once recovery is done (register views...)."""

    def _release(self) -> None:
        """Free what ``_acquire`` took; called last by ``close`` and ``resolve``."""

    # ------------------------------------------------------- framework methods

    @property
    def state(self) -> SinkState[TxnT]:
        """The state a snapshot taken now would hold."""
        return SinkState(
            tuple(self._pending), tuple(self._held), self._current, self._last_snapshot
        )

    def read_log(self) -> TransactionLog[TxnT]:
        """What the sink's log knows now; acquires the sink first.

        A driver that never reuses ids starts above its ``last_checkpoint_id``; one that
        replays ids checks its own record against it.
        """
        self._acquire_once()
        return self._log()

    def initialize_state(
        self, restored: SinkState[TxnT] | None = None, *, next_checkpoint_id: int | None = None
    ) -> None:
        """Start the sink, first finishing what a restored snapshot left behind.

        ``restored`` is the sink's state in the driver's last *completed* checkpoint
        (None: none completed yet). The open transaction is begun for
        ``next_checkpoint_id`` (default: the checkpoint after the restored one); a driver
        that never reuses ids passes one above every id used (``read_log``).
        What recovery does in which case is listed in ``lakesink.core.recovery``.

        Every recovered transaction is attempted before the first error is raised; a
        failed recovery leaves the sink uninitialized, so it can be retried as a whole.
        """
        if self._initialized:
            raise ProtocolError(f"sink {self.name!r} is already initialized")
        self._acquire_once()
        restored = restored or SinkState()
        self._recover(restored, self._log())
        first = (
            restored.last_checkpoint_id + 1 if next_checkpoint_id is None else next_checkpoint_id
        )
        if first <= restored.last_checkpoint_id:
            raise CheckpointOrderError(
                f"{self.name}: next checkpoint {first} is not above the restored checkpoint "
                f"{restored.last_checkpoint_id}"
            )
        self._finish_initialization(first)

    def initialize_from_log(self, completed_through: int | None = None) -> None:
        """Start a sink whose driver records no sink state, recovering from its log.

        ``completed_through`` is the last checkpoint the driver completed (a micro-batch
        engine's commit log says which; -1 for none): the log's pre-committed or decided
        transactions up to it are committed, held ones stay held, later ones are aborted
        (their input is replayed), and the open transaction is begun for the next id.

        None (a sink that is its own driver, standalone): its pre-commit is its
        checkpoint's completion, so every pre-committed transaction is committed, and ids
        continue above every id the log knows, never reused.
        """
        if self._initialized:
            raise ProtocolError(f"sink {self.name!r} is already initialized")
        self._acquire_once()
        logged = self._log()
        restored: SinkState[TxnT] = logged.completed_through(completed_through)
        self._recover(restored, logged)
        self._finish_initialization(restored.last_checkpoint_id + 1)

    def write(self, value: InT) -> None:
        """Write a value into the open transaction."""
        self._check_running()
        assert self._current is not None
        self._written = True  # before: a write that fails may have left rows
        self._invoke(self._current.handle, value)

    def snapshot_state(self, checkpoint_id: int) -> SinkState[TxnT]:
        """Pre-commit the open transaction as ``checkpoint_id`` and begin the next one.

        ``checkpoint_id`` must be the open transaction's (``current_checkpoint_id``). If the
        pre-commit raises, nothing changes and the same id may be retried. The pre-commit's
        verdict files the transaction: pending (committed at the notification), held (for
        an operator) or gone (aborted); ``verdict`` tells which.
        """
        self._check_running()
        current = self._current
        assert current is not None
        if checkpoint_id != current.checkpoint_id:
            verb = "goes backwards" if checkpoint_id < current.checkpoint_id else "skips ahead"
            raise CheckpointOrderError(
                f"{self.name}: checkpoint {checkpoint_id} {verb}: the open transaction "
                f"belongs to checkpoint {current.checkpoint_id}; snapshot that id"
            )
        log.debug("%s: checkpoint %d, pre-committing %r", self.name, checkpoint_id, current)
        prepared = self._pre_commit(current.handle)
        if prepared.committable != current.handle:
            raise ProtocolError(
                f"{self.name}: pre_commit of {current.handle!r} handed over "
                f"{prepared.committable!r}, another transaction's committable"
            )
        current = dataclasses.replace(current, handle=prepared.committable)
        verdict = prepared.verdict
        if verdict is TxnState.PRE_COMMITTED:
            self._pending.append(current)
        elif verdict is TxnState.HELD:
            self._held.append(current)
            self._withheld[checkpoint_id] = verdict
        elif verdict is TxnState.ABORTED:
            self._withheld[checkpoint_id] = verdict
        else:
            raise ProtocolError(
                f"{self.name}: pre_commit returned {verdict!r}; a pre-commit verdict is "
                "PRE_COMMITTED, HELD or ABORTED"
            )
        self._last_snapshot = checkpoint_id
        self._current = self._begin(checkpoint_id + 1)
        return self.state

    def verdict(self, checkpoint_id: int) -> TxnState:
        """What became of this sink's transaction of a snapshotted, un-notified checkpoint.

        ``PRE_COMMITTED`` (pending its commit), ``HELD`` or ``ABORTED``.
        """
        self._check_running()
        if checkpoint_id in self._withheld:
            return self._withheld[checkpoint_id]
        if any(h.checkpoint_id == checkpoint_id for h in self._pending):
            return TxnState.PRE_COMMITTED
        raise UnknownCheckpointError(
            f"{self.name}: checkpoint {checkpoint_id} is neither pending nor withheld here"
        )

    def withhold(self, checkpoint_id: int, state: TxnState, reason: str) -> None:
        """Keep a pre-committed checkpoint from its commit: hold it, or abort it.

        A driver calls this before the notification, when the checkpoint must not be
        published in this sink because it failed elsewhere (another sink's validation), so
        that tables written together are published together. A held one may still be
        aborted; an aborted one stays aborted.
        """
        self._check_running()
        if state not in (TxnState.HELD, TxnState.ABORTED):
            raise ProtocolError(f"{self.name}: can only hold or abort, not {state.value}")
        holder = next((h for h in self._pending if h.checkpoint_id == checkpoint_id), None)
        if holder is not None:
            self._pending.remove(holder)
        elif state is TxnState.ABORTED:
            holder = next((h for h in self._held if h.checkpoint_id == checkpoint_id), None)
            if holder is not None:
                self._held.remove(holder)
        if holder is None:
            if self._withheld.get(checkpoint_id) in (state, TxnState.ABORTED):
                return  # already so
            raise UnknownCheckpointError(
                f"{self.name}: checkpoint {checkpoint_id} has no pre-committed transaction "
                "to withhold"
            )
        if state is TxnState.HELD:
            self._hold(holder.handle, reason)
            self._held.append(holder)
        else:
            self._abort(holder.handle, reason)
        self._withheld[checkpoint_id] = state
        log.info("%s: checkpoint %d %s: %s", self.name, checkpoint_id, state.value, reason)

    def notify_checkpoint_complete(self, checkpoint_id: int, *, post_commit: bool = True) -> None:
        """Commit every pending transaction with a checkpoint id up to ``checkpoint_id``,
        then run the post-commit step (``post_commit=False``: the caller runs it, as a
        global committer does once the group's cut is recorded).

        Scenarios this handles (from Flink's own notes):

        1. One pending transaction, the one just notified: the common case.
        2. Several pending because an earlier checkpoint's notification never came (its
           record failed, a later one succeeded): the later checkpoint subsumes the earlier,
           so all of them are committed, ascending.
        3. A late notification, arriving after newer checkpoints were snapshotted: only the
           transactions up to the notified id are committed; newer ones wait for theirs.
        4. The notified checkpoint was held or aborted by its verdict: nothing of it is
           committed (held ones wait for ``resolve``), earlier pending ones still are.

        Every transaction is attempted before the first failure is raised as
        ``CommitRoundError``; failed ones stay pending so the next notification retries them.
        """
        self._check_running()
        if checkpoint_id < self._last_notified:
            raise CheckpointOrderError(
                f"{self.name}: notification for checkpoint {checkpoint_id} goes backwards: "
                f"checkpoint {self._last_notified} was already notified"
            )
        if checkpoint_id > self._last_snapshot:
            raise UnknownCheckpointError(
                f"{self.name}: checkpoint {checkpoint_id} was never snapshotted "
                f"(the last snapshot is {self._last_snapshot or 'none'}); "
                f"{self._explain(checkpoint_id)}"
            )
        due = [h for h in self._pending if h.checkpoint_id <= checkpoint_id]
        withheld = self._withheld.get(checkpoint_id)
        self._withheld = {k: v for k, v in self._withheld.items() if k > checkpoint_id}
        if not due:
            if withheld is not None:
                log.warning(
                    "%s: checkpoint %d is not committed: it was %s by its verdict",
                    self.name,
                    checkpoint_id,
                    withheld.value,
                )
                self._last_notified = checkpoint_id
                return
            raise UnknownCheckpointError(
                f"{self.name}: checkpoint {checkpoint_id} complete, but no transaction is "
                f"pending at or below it (pending: {self.pending_checkpoint_ids or 'none'}); "
                f"{self._explain(checkpoint_id)}"
            )
        failures: list[tuple[int, BaseException]] = []
        for holder in due:
            log.info("%s: checkpoint %d complete, committing %r", self.name, checkpoint_id, holder)
            self._warn_if_timeout_near(holder)
            try:
                self._commit(holder.handle)
            except Exception as exc:  # keep going: the rest must still be committed
                failures.append((holder.checkpoint_id, exc))
                continue
            self._pending.remove(holder)
        self._last_notified = checkpoint_id
        if post_commit and len(failures) < len(due):
            self._post_commit()
        if failures:
            self._raise_commit_error(f"checkpoint {checkpoint_id}", failures)

    def run_post_commit(self) -> None:
        """Run the post-commit step (``_post_commit``) of checkpoints committed with it
        deferred; a stopped sink an operator committed in runs it too."""
        self._post_commit()

    def resolve(
        self, checkpoint_id: int, *, commit: bool, reason: str
    ) -> list[LoggedTransaction[TxnT]]:
        """Operator recovery: commit or abort the unfinished transactions of a checkpoint.

        For a sink whose driver is stopped (its locks are taken here): a held checkpoint,
        or a pending one whose driver cannot be restarted. A commit is first made durable
        as a decision (``decide_commit``), so a crash half-way is finished by recovery.

        Raises:
            UnknownCheckpointError: The log shows nothing unfinished in that checkpoint.
            ProtocolError: The sink is running; or a commit of a transaction never
                pre-committed, or an abort of one whose commit was decided.
        """
        if self._initialized and not self._closed:
            raise ProtocolError(
                f"{self.name} is running: resolve checkpoints of a stopped sink, or let the "
                "running one commit them"
            )
        self._acquire_once()
        try:
            logged = self._log()
            found = [
                t
                for t in logged.transactions
                if t.holder.checkpoint_id == checkpoint_id and not t.state.final
            ]
            if not found:
                unfinished = sorted({t.holder.checkpoint_id for t in logged.unfinished()})
                raise UnknownCheckpointError(
                    f"{self.name} has nothing pending in checkpoint {checkpoint_id} "
                    f"(pending checkpoints: {unfinished or 'none'})"
                )
            check_resolvable(found, commit=commit)
            for txn in found:
                if commit:
                    self._decide_commit(txn.holder.handle, reason)
                    self._recover_and_commit(txn.holder.handle)
                else:
                    self._recover_and_abort(txn.holder.handle, reason)
                log.info(
                    "%s: %s checkpoint %d (%r) by hand: %s",
                    self.name,
                    "committed" if commit else "aborted",
                    checkpoint_id,
                    txn.holder.handle,
                    reason,
                )
        finally:
            self._release_once()
        return found

    def __enter__(self: SinkT) -> SinkT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Abort the open transaction; pre-committed and held ones stay for recovery."""
        if self._closed:
            return
        self._closed = True
        current, self._current = self._current, None
        try:
            if current is not None:
                # An open transaction nothing was written into has nothing to undo: no news.
                log.log(
                    logging.INFO if self._written else logging.DEBUG,
                    "%s: closing; the open transaction of checkpoint %d %s",
                    self.name,
                    current.checkpoint_id,
                    "is aborted" if self._written else "wrote nothing: nothing to abort",
                )
                self._abort(current.handle, "the sink closed before its checkpoint")
        finally:
            self._release_once()

    @property
    def current_checkpoint_id(self) -> int:
        """The checkpoint id the open transaction was begun for."""
        self._check_running()
        assert self._current is not None
        return self._current.checkpoint_id

    @property
    def pending_checkpoint_ids(self) -> list[int]:
        """Checkpoint ids of the pre-committed, not yet committed transactions, ascending."""
        return [h.checkpoint_id for h in self._pending]

    @property
    def held_checkpoint_ids(self) -> list[int]:
        """Checkpoint ids of the transactions held for an operator, ascending."""
        return sorted(h.checkpoint_id for h in self._held)

    # --------------------------------------------------------------- internals

    def _acquire_once(self) -> None:
        if not self._acquired:
            self._acquire()
            self._acquired = True

    def _release_once(self) -> None:
        if self._acquired:
            self._acquired = False
            self._release()

    def _check_running(self) -> None:
        if self._closed:
            raise ProtocolError(f"sink {self.name!r} is closed; create a new one")
        if not self._initialized:
            raise ProtocolError(f"sink {self.name!r} is not initialized; call initialize_state")

    def _recover(self, restored: SinkState[TxnT], logged: TransactionLog[TxnT]) -> None:
        steps = plan(restored, logged)
        self._recovered = {h.handle for h in steps.known}
        log.info("%s: recovery: %s", self.name, steps.summary())
        failures: list[tuple[int, BaseException]] = []
        for holder in steps.commit:
            error = self._commit_recovered(holder)
            if error is not None:
                failures.append((holder.checkpoint_id, error))
        for holder, reason in steps.abort:
            try:
                self._recover_and_abort(holder.handle, reason)
                log.info("%s: aborted recovered transaction %r: %s", self.name, holder, reason)
            except Exception as exc:  # keep going: the rest must still be attempted
                failures.append((holder.checkpoint_id, exc))
        if failures:
            self._raise_commit_error("recovery", failures)
        self._held = list(steps.hold)

    def _finish_initialization(self, first_checkpoint_id: int) -> None:
        self._last_notified = self._last_snapshot = first_checkpoint_id - 1
        self._current = self._begin(first_checkpoint_id)
        self._initialized = True
        self._ready()

    def _begin(self, checkpoint_id: int) -> TransactionHolder[TxnT]:
        handle = self._begin_transaction(checkpoint_id)
        live = {h.handle for h in (*self._pending, *self._held)}
        if handle in self._recovered or handle in live:
            raise ProtocolError(
                f"{self.name}: begin_transaction returned {handle!r}, a handle already used; "
                "transaction identities must never be reused or a recovered commit may "
                "publish another transaction's data"
            )
        holder = TransactionHolder(handle, checkpoint_id, self._clock.millis())
        self._written = False
        log.debug("%s: began %r", self.name, holder)
        return holder

    def _explain(self, checkpoint_id: int) -> str:
        """What the sink's log says of a checkpoint, for error messages."""
        states = sorted(
            {
                t.state.value
                for t in self._log().transactions
                if t.holder.checkpoint_id == checkpoint_id
            }
        )
        if states:
            return f"the sink's journal says: {', '.join(states)}"
        return "it was committed before, or never pre-committed"

    def _commit_recovered(self, holder: TransactionHolder[TxnT]) -> BaseException | None:
        self._warn_if_timeout_near(holder)
        try:
            self._recover_and_commit(holder.handle)
        except Exception as exc:
            elapsed = self._clock.millis() - holder.started_at_ms
            timeout = self._timeout
            if timeout and timeout.ignore_failures_after_timeout and elapsed > timeout.timeout_ms:
                log.error(
                    "%s: committing recovered transaction %r failed after it had been open "
                    "%d ms, longer than the timeout of %d ms; not retrying, data may be lost",
                    self.name,
                    holder,
                    elapsed,
                    timeout.timeout_ms,
                    exc_info=exc,
                )
                return None
            return exc
        log.info("%s: committed recovered transaction %r", self.name, holder)
        return None

    def _warn_if_timeout_near(self, holder: TransactionHolder[TxnT]) -> None:
        timeout = self._timeout
        if timeout is None or timeout.warning_ratio is None:
            return
        elapsed = self._clock.millis() - holder.started_at_ms
        if elapsed >= timeout.timeout_ms * timeout.warning_ratio:
            log.warning(
                "%s: transaction %r of checkpoint %d has been open for %d ms, close to or "
                "past the transaction timeout of %d ms",
                self.name,
                holder.handle,
                holder.checkpoint_id,
                elapsed,
                timeout.timeout_ms,
            )

    def _raise_commit_error(self, what: str, failures: Sequence[tuple[int, BaseException]]) -> None:
        ids = ", ".join(str(cid) for cid, _ in failures)
        first = failures[0][1]
        raise CommitRoundError(
            f"{self.name}: {what}: {len(failures)} transaction(s) failed (checkpoints {ids}); "
            f"first error: {first!r}. They stay pending; retry once the cause is fixed",
            failures,
        ) from first
