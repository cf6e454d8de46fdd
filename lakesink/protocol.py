"""The two-phase-commit protocol, engine-agnostic and in pure Python.

This is Apache Flink's ``TwoPhaseCommitSinkFunction`` carried over: a template-method base
class whose *hooks* an implementation writes (``begin_transaction``, ``invoke``,
``pre_commit``, ``commit``, ``abort`` and the two ``recover_and_*``) and whose *framework
methods* (``initialize_state``, ``write``, ``snapshot_state``, ``notify_checkpoint_complete``,
``close``) drive them in the right order and must not be overridden.

The contract an implementation signs:

- ``commit`` and ``recover_and_commit`` must be idempotent and must eventually succeed for
  every pre-committed transaction, or data is lost.
- ``pre_commit`` must be idempotent too: a failed snapshot may be retried with the same id.
- A transaction handle is an identity that is never reused. Committing a recovered handle
  must only ever publish that transaction's own data (the FLINK-8132 bug was a recovered
  handle that committed a newer transaction's data because identities were recycled).

Checkpoint ids only grow. A transaction is begun *for* the next checkpoint id, so rows can
carry their checkpoint id from the moment they are written.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar

from lakesink.errors import (
    CheckpointOrderError,
    CommitError,
    ConfigurationError,
    ProtocolError,
    UnknownCheckpointError,
)

__all__ = [
    "Clock",
    "SinkState",
    "SystemClock",
    "TransactionHolder",
    "TwoPhaseCommitSink",
]

log = logging.getLogger(__name__)

TxnT = TypeVar("TxnT", bound=Hashable)
InT = TypeVar("InT")
SinkT = TypeVar("SinkT", bound="TwoPhaseCommitSink")


class Clock(Protocol):
    """Where the protocol reads the time; tests inject one they can set."""

    def millis(self) -> int: ...


class SystemClock:
    """The wall clock, in milliseconds since the epoch."""

    def millis(self) -> int:
        return time.time_ns() // 1_000_000


@dataclass(frozen=True)
class TransactionHolder(Generic[TxnT]):
    """A transaction handle with the checkpoint it belongs to and when it began."""

    handle: TxnT
    checkpoint_id: int
    started_at_ms: int


@dataclass(frozen=True)
class SinkState(Generic[TxnT]):
    """What a snapshot holds: pre-committed transactions (ascending) and the open one.

    Handles must be JSON scalars or dataclasses of JSON scalars to survive ``to_json``.
    """

    pending_commit: tuple[TransactionHolder[TxnT], ...] = ()
    current: TransactionHolder[TxnT] | None = None
    last_checkpoint_id: int = 0  # the highest id used, whatever became of it

    @property
    def next_checkpoint_id(self) -> int:
        """The first checkpoint id above every id this state has used."""
        holders = [*self.pending_commit, *([self.current] if self.current else [])]
        return max([self.last_checkpoint_id, *(h.checkpoint_id for h in holders)]) + 1

    def to_json(self) -> str:
        def holder(h: TransactionHolder[TxnT]) -> dict[str, Any]:
            handle = (
                dataclasses.asdict(h.handle) if dataclasses.is_dataclass(h.handle) else h.handle
            )
            return {
                "handle": handle,
                "checkpoint_id": h.checkpoint_id,
                "started_at_ms": h.started_at_ms,
            }

        return json.dumps(
            {
                "pending_commit": [holder(h) for h in self.pending_commit],
                "current": holder(self.current) if self.current else None,
                "last_checkpoint_id": self.last_checkpoint_id,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, handle_type: type[TxnT]) -> SinkState[TxnT]:
        """Rebuild a state written by ``to_json``; ``handle_type`` rebuilds each handle."""
        data = json.loads(text)

        def holder(d: dict[str, Any]) -> TransactionHolder[TxnT]:
            raw = d["handle"]
            handle = handle_type(**raw) if isinstance(raw, dict) else handle_type(raw)
            return TransactionHolder(handle, int(d["checkpoint_id"]), int(d["started_at_ms"]))

        current = data.get("current")
        return cls(
            pending_commit=tuple(holder(d) for d in data["pending_commit"]),
            current=holder(current) if current else None,
            last_checkpoint_id=int(data.get("last_checkpoint_id", 0)),
        )


class TwoPhaseCommitSink(ABC, Generic[TxnT, InT]):
    """Template for an exactly-once sink that commits in two phases, driven by checkpoints.

    Lifecycle: ``initialize_state(restored)`` once, then any number of ``write(value)``,
    ``snapshot_state(checkpoint_id)`` (pre-commit) and
    ``notify_checkpoint_complete(checkpoint_id)`` (commit), then ``close()``.

    Args:
        name: Shown in logs and errors.
        clock: Source of time for transaction ages; the system clock by default.
        transaction_timeout_ms: How long the external system keeps a transaction; needed
            for the two options below.
        ignore_failures_after_transaction_timeout: During recovery, log instead of raise
            when committing a transaction older than the timeout fails (it is gone anyway).
        timeout_warning_ratio: Warn when a transaction being committed has been open for
            at least this fraction of the timeout, naming the transaction.
    """

    _FRAMEWORK_METHODS: ClassVar[tuple[str, ...]] = (
        "initialize_state",
        "write",
        "snapshot_state",
        "notify_checkpoint_complete",
        "close",
        "state",
        "__enter__",
        "__exit__",
    )

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        overridden = [name for name in cls._FRAMEWORK_METHODS if name in vars(cls)]
        if overridden:
            raise TypeError(
                f"{cls.__name__} overrides framework method(s) {', '.join(overridden)}; "
                "implement the hooks (begin_transaction, invoke, pre_commit, commit, abort, "
                "recover_and_commit, recover_and_abort) instead"
            )

    def __init__(
        self,
        *,
        name: str,
        clock: Clock | None = None,
        transaction_timeout_ms: int | None = None,
        ignore_failures_after_transaction_timeout: bool = False,
        timeout_warning_ratio: float | None = None,
    ) -> None:
        if transaction_timeout_ms is not None and transaction_timeout_ms <= 0:
            raise ConfigurationError(
                f"transaction_timeout_ms must be positive, got {transaction_timeout_ms}"
            )
        needs_timeout = ignore_failures_after_transaction_timeout or timeout_warning_ratio
        if needs_timeout and transaction_timeout_ms is None:
            raise ConfigurationError(
                "ignore_failures_after_transaction_timeout and timeout_warning_ratio need "
                "transaction_timeout_ms; set it to how long the system keeps a transaction"
            )
        if timeout_warning_ratio is not None and not 0 < timeout_warning_ratio <= 1:
            raise ConfigurationError(
                f"timeout_warning_ratio must be in (0, 1], got {timeout_warning_ratio}"
            )
        self.name = name
        self._clock: Clock = clock or SystemClock()
        self._timeout_ms = transaction_timeout_ms
        self._ignore_failures_after_timeout = ignore_failures_after_transaction_timeout
        self._warning_ratio = timeout_warning_ratio
        self._pending: list[TransactionHolder[TxnT]] = []
        self._current: TransactionHolder[TxnT] | None = None
        self._last_notified = 0
        self._last_snapshot = 0
        self._used_handles: set[TxnT] = set()
        self._initialized = False
        self._closed = False

    # ----------------------------------------------------------------- hooks

    @abstractmethod
    def begin_transaction(self, checkpoint_id: int) -> TxnT:
        """Open a new transaction for ``checkpoint_id`` and return its unique handle."""

    @abstractmethod
    def invoke(self, transaction: TxnT, value: InT) -> None:
        """Write ``value`` into the open transaction, invisible to readers."""

    @abstractmethod
    def pre_commit(self, transaction: TxnT) -> None:
        """Make the transaction durable so that a later ``commit`` cannot fail on data."""

    @abstractmethod
    def commit(self, transaction: TxnT) -> None:
        """Publish a pre-committed transaction. Idempotent; must eventually succeed."""

    @abstractmethod
    def abort(self, transaction: TxnT) -> None:
        """Make sure the transaction's data is never published."""

    def recover_and_commit(self, transaction: TxnT) -> None:
        """Commit a transaction restored from a snapshot; it may already be committed."""
        self.commit(transaction)

    def recover_and_abort(self, transaction: TxnT) -> None:
        """Abort a transaction restored from a snapshot; it was never pre-committed."""
        self.abort(transaction)

    def release(self) -> None:
        """Free what the sink holds (locks, connections); called last by ``close``."""

    def explain_unknown_checkpoint(self, checkpoint_id: int) -> str:
        """Say what became of a checkpoint that has nothing pending, for error messages."""
        return "it was committed before, or never pre-committed"

    # ------------------------------------------------------- framework methods

    @property
    def state(self) -> SinkState[TxnT]:
        """The state a snapshot taken now would hold."""
        return SinkState(tuple(self._pending), self._current, self._last_snapshot)

    def initialize_state(self, restored: SinkState[TxnT] | None = None) -> None:
        """Start the sink, first finishing what a restored snapshot left behind.

        Recovery handles these failure scenarios:

        1. A pre-committed transaction whose checkpoint completed, but the notification
           was lost (crash between the coordinator recording it and the sink committing):
           commit it. Commit is idempotent, so it is re-committed when in doubt.
        2. A pre-committed transaction already committed before the crash: the same
           idempotent commit changes nothing.
        3. The transaction that was open at the snapshot: never pre-committed, so abort it.
        4. A recovered commit that fails: raise (data would be lost) unless the transaction
           is older than the timeout and failures after the timeout are to be ignored.
        5. Transactions begun after the snapshot are not in it: their handles are unknown
           here, so nothing in this method can publish them (see FLINK-8132).

        Every recovered transaction is attempted before the first error is raised; a
        failed recovery leaves the sink uninitialized, so it can be retried as a whole.
        """
        if self._initialized:
            raise ProtocolError(f"sink {self.name!r} is already initialized")
        failures: list[tuple[int, BaseException]] = []
        if restored is not None:
            log.info(
                "%s: restoring %d pre-committed transaction(s)",
                self.name,
                len(restored.pending_commit),
            )
            for holder in sorted(restored.pending_commit, key=lambda h: h.checkpoint_id):
                self._used_handles.add(holder.handle)
                error = self._recover_and_commit(holder)
                if error is not None:
                    failures.append((holder.checkpoint_id, error))
            if restored.current is not None:
                self._used_handles.add(restored.current.handle)
                try:
                    self.recover_and_abort(restored.current.handle)
                    log.info("%s: aborted recovered transaction %r", self.name, restored.current)
                except Exception as exc:  # keep going: the rest must still be attempted
                    failures.append((restored.current.checkpoint_id, exc))
        if failures:
            self._raise_commit_error("recovery", failures)
        next_id = restored.next_checkpoint_id if restored else 1
        self._last_notified = self._last_snapshot = next_id - 1
        self._current = self._begin(next_id)
        self._initialized = True

    def write(self, value: InT) -> None:
        """Write a value into the open transaction."""
        self._check_running()
        assert self._current is not None
        self.invoke(self._current.handle, value)

    def snapshot_state(self, checkpoint_id: int) -> SinkState[TxnT]:
        """Pre-commit the open transaction as ``checkpoint_id`` and begin the next one.

        ``checkpoint_id`` must be the open transaction's (``current_checkpoint_id``). If the
        pre-commit raises, nothing changes and the same id may be retried.
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
        self.pre_commit(current.handle)
        self._pending.append(current)
        self._last_snapshot = checkpoint_id
        self._current = self._begin(checkpoint_id + 1)
        return self.state

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit every pending transaction with a checkpoint id up to ``checkpoint_id``.

        Scenarios this handles (from Flink's own notes):

        1. One pending transaction, the one just notified: the common case.
        2. Several pending because an earlier checkpoint's notification never came (its
           record failed, a later one succeeded): the later checkpoint subsumes the earlier,
           so all of them are committed, ascending.
        3. A late notification, arriving after newer checkpoints were snapshotted: only the
           transactions up to the notified id are committed; newer ones wait for theirs.

        Every transaction is attempted before the first failure is raised as
        ``CommitError``; failed ones stay pending so the next notification retries them.
        """
        self._check_running()
        last_snapshot = self._last_snapshot
        if checkpoint_id < self._last_notified:
            raise CheckpointOrderError(
                f"{self.name}: notification for checkpoint {checkpoint_id} goes backwards: "
                f"checkpoint {self._last_notified} was already notified"
            )
        if checkpoint_id > last_snapshot:
            raise UnknownCheckpointError(
                f"{self.name}: checkpoint {checkpoint_id} was never snapshotted "
                f"(the last snapshot is {last_snapshot or 'none'}); "
                f"{self.explain_unknown_checkpoint(checkpoint_id)}"
            )
        due = [h for h in self._pending if h.checkpoint_id <= checkpoint_id]
        if not due:
            raise UnknownCheckpointError(
                f"{self.name}: checkpoint {checkpoint_id} complete, but no transaction is "
                f"pending at or below it (pending: {self.pending_checkpoint_ids or 'none'}); "
                f"{self.explain_unknown_checkpoint(checkpoint_id)}"
            )
        failures: list[tuple[int, BaseException]] = []
        for holder in due:
            log.info("%s: checkpoint %d complete, committing %r", self.name, checkpoint_id, holder)
            self._warn_if_timeout_near(holder)
            try:
                self.commit(holder.handle)
            except Exception as exc:  # keep going: the rest must still be committed
                failures.append((holder.checkpoint_id, exc))
                continue
            self._pending.remove(holder)
        self._last_notified = checkpoint_id
        if failures:
            self._raise_commit_error(f"checkpoint {checkpoint_id}", failures)

    def __enter__(self: SinkT) -> SinkT:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Abort the open transaction; pre-committed ones stay for recovery to commit."""
        if self._closed:
            return
        self._closed = True
        current, self._current = self._current, None
        try:
            if current is not None:
                log.info("%s: closing, aborting open transaction %r", self.name, current)
                self.abort(current.handle)
        finally:
            self.release()

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

    # --------------------------------------------------------------- internals

    def _check_running(self) -> None:
        if self._closed:
            raise ProtocolError(f"sink {self.name!r} is closed; create a new one")
        if not self._initialized:
            raise ProtocolError(f"sink {self.name!r} is not initialized; call initialize_state")

    def _begin(self, checkpoint_id: int) -> TransactionHolder[TxnT]:
        handle = self.begin_transaction(checkpoint_id)
        if handle in self._used_handles:
            raise ProtocolError(
                f"{self.name}: begin_transaction returned {handle!r}, a handle already used; "
                "transaction identities must never be reused or a recovered commit may "
                "publish another transaction's data"
            )
        self._used_handles.add(handle)
        holder = TransactionHolder(handle, checkpoint_id, self._clock.millis())
        log.debug("%s: began %r", self.name, holder)
        return holder

    def _recover_and_commit(self, holder: TransactionHolder[TxnT]) -> BaseException | None:
        self._warn_if_timeout_near(holder)
        try:
            self.recover_and_commit(holder.handle)
        except Exception as exc:
            elapsed = self._clock.millis() - holder.started_at_ms
            timed_out = self._timeout_ms is not None and elapsed > self._timeout_ms
            if self._ignore_failures_after_timeout and timed_out:
                log.error(
                    "%s: committing recovered transaction %r failed after it had been open "
                    "%d ms, longer than the timeout of %d ms; not retrying, data may be lost",
                    self.name,
                    holder,
                    elapsed,
                    self._timeout_ms,
                    exc_info=exc,
                )
                return None
            return exc
        log.info("%s: committed recovered transaction %r", self.name, holder)
        return None

    def _warn_if_timeout_near(self, holder: TransactionHolder[TxnT]) -> None:
        if self._warning_ratio is None or self._timeout_ms is None:
            return
        elapsed = self._clock.millis() - holder.started_at_ms
        if elapsed >= self._timeout_ms * self._warning_ratio:
            log.warning(
                "%s: transaction %r of checkpoint %d has been open for %d ms, close to or "
                "past the transaction timeout of %d ms",
                self.name,
                holder.handle,
                holder.checkpoint_id,
                elapsed,
                self._timeout_ms,
            )

    def _raise_commit_error(self, what: str, failures: list[tuple[int, BaseException]]) -> None:
        ids = ", ".join(str(cid) for cid, _ in failures)
        first = failures[0][1]
        raise CommitError(
            f"{self.name}: {what}: {len(failures)} transaction(s) failed (checkpoints {ids}); "
            f"first error: {first!r}. They stay pending; retry once the cause is fixed",
            failures,
        ) from first
