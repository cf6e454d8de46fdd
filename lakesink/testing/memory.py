"""In-memory parts for testing the core without any engine: a sink with its own log, a
source, a checkpoint store and a clock you set. Also the smallest example of each
interface: a new sink engine or source is one module like these.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from lakesink.core.coordinator import CheckpointRecord, CheckpointStore
from lakesink.core.cut import Cut, CutStore, CutTable
from lakesink.core.protocol import Clock, TransactionTimeout, TwoPhaseCommitSink
from lakesink.core.source import Batch, Quarantined, Source
from lakesink.core.state import (
    LoggedTransaction,
    PreCommit,
    TransactionHolder,
    TransactionLog,
    TxnState,
)
from lakesink.errors import AlreadyRunningError, LeaseLostError

__all__ = [
    "MemoryCheckpointStore",
    "MemoryCutStore",
    "MemoryLock",
    "MemorySink",
    "MemorySource",
    "MemoryStore",
    "MemoryTxn",
    "SettableClock",
]


class SettableClock:
    """A clock that only moves when a test sets ``now_ms``."""

    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def millis(self) -> int:
        return self.now_ms


@dataclass
class MemoryStore:
    """Staged values per transaction, the committed ("target") ones, and the sink's log.

    The log maps a transaction name to its checkpoint id and state, like the journal.
    """

    staged: dict[str, list[object]] = field(default_factory=dict)
    target: dict[str, list[object]] = field(default_factory=dict)
    log: dict[str, tuple[int, TxnState]] = field(default_factory=dict)
    cuts: list[Cut] = field(default_factory=list)  # what a group of its sinks recorded
    # Each post-commit step: the transactions visible then, and the newest cut's checkpoint.
    post_commits: list[tuple[int, int | None]] = field(default_factory=list)

    def visible(self) -> list[object]:
        return sorted((v for values in self.target.values() for v in values), key=str)


@dataclass(frozen=True)
class MemoryTxn:
    name: str


class MemorySink(TwoPhaseCommitSink[MemoryTxn, object]):
    """A sink over a ``MemoryStore``, with switches to make its writes or commits fail.

    Args:
        store: Where it writes.
        logged: Keep a log in the store (like the journal); without it, recovery knows
            only the restored state, as for Flink's sinks.
        names: Transaction names to use, in order (default ``txn-0``, ``txn-1``, ...);
            each is suffixed with ``@checkpoint``.
        verdicts: Per checkpoint id, the verdict ``_pre_commit`` returns (default
            pre-committed), as a validation gate would.
    """

    handle_type = MemoryTxn

    def __init__(
        self,
        store: MemoryStore,
        *,
        name: str = "memory",
        logged: bool = False,
        names: Iterator[str] | None = None,
        verdicts: dict[int, TxnState] | None = None,
        clock: Clock | None = None,
        timeout: TransactionTimeout | None = None,
    ) -> None:
        super().__init__(name=name, clock=clock, timeout=timeout)
        self.store = store
        self.logged = logged
        self.names = names or (f"txn-{i}" for i in itertools.count())
        self.verdicts = verdicts or {}
        self.fail_writes = False
        self.fail_commits = False
        self.reasons: dict[str, str] = {}  # why each aborted or held transaction was
        self.shown: Cut | None = None  # the cut its readers by name see
        self.group_id: str | None = None  # the group a driver told it it is one of

    def _begin_transaction(self, checkpoint_id: int) -> MemoryTxn:
        txn = MemoryTxn(f"{next(self.names)}@{checkpoint_id}")
        self.store.staged.setdefault(txn.name, [])
        return txn

    def _invoke(self, transaction: MemoryTxn, value: object) -> None:
        if self.fail_writes:
            raise OSError("store not writable")
        if transaction.name not in self.store.log:  # logged at its first write, like the journal
            self._record(transaction, TxnState.OPEN)
        self.store.staged[transaction.name].append(value)

    def _pre_commit(self, transaction: MemoryTxn) -> PreCommit[MemoryTxn]:
        if self.fail_writes:
            raise OSError("store not writable")
        verdict = TxnState.PRE_COMMITTED
        if self.verdicts:
            verdict = self.verdicts.get(_checkpoint(transaction), verdict)
        self._record(transaction, verdict)
        return PreCommit(transaction, verdict)

    def _commit(self, transaction: MemoryTxn) -> None:
        if self.fail_commits:
            raise RuntimeError("Expected exception")
        if transaction.name in self.store.staged:  # absent: committed before, a no-op
            self.store.target[transaction.name] = self.store.staged.pop(transaction.name)
        self._record(transaction, TxnState.COMMITTED)

    def _abort(self, transaction: MemoryTxn, reason: str) -> None:
        self.store.staged.pop(transaction.name, None)
        self.reasons[transaction.name] = reason
        if transaction.name in self.store.log:  # one that never wrote left nothing to undo
            self._record(transaction, TxnState.ABORTED)

    def _hold(self, transaction: MemoryTxn, reason: str) -> None:
        self.reasons[transaction.name] = reason
        self._record(transaction, TxnState.HELD)

    def _decide_commit(self, transaction: MemoryTxn, reason: str) -> None:
        self._record(transaction, TxnState.COMMITTING)

    def _log(self) -> TransactionLog[MemoryTxn]:
        if not self.logged:
            return TransactionLog()
        found = tuple(
            LoggedTransaction(TransactionHolder(MemoryTxn(name), checkpoint_id, 0), state)
            for name, (checkpoint_id, state) in self.store.log.items()
        )
        return TransactionLog(found, max((t.holder.checkpoint_id for t in found), default=0))

    def _post_commit(self) -> None:
        cut = self.store.cuts[-1].checkpoint_id if self.store.cuts else None
        self.store.post_commits.append((len(self.store.target), cut))

    def _record(self, transaction: MemoryTxn, state: TxnState) -> None:
        if self.logged:
            self.store.log[transaction.name] = (_checkpoint(transaction), state)

    # A member of a group's cut (each sink of a group over a store of its own): its
    # version is how many transactions its store shows.

    @property
    def cut_key(self) -> str:
        return self.name

    def cut_table(self) -> CutTable:
        return CutTable(len(self.store.target), f"memory:{self.name}", "0")

    def cut_store(self) -> MemoryCutStore:
        return MemoryCutStore(self.store)

    def show_cut(self, cut: Cut) -> None:
        self.shown = cut

    def join_group(self, group_id: str) -> None:
        self.group_id = group_id


class MemoryCutStore(CutStore):
    """The cuts of a ``MemoryStore``, in a list."""

    def __init__(self, store: MemoryStore) -> None:
        self.store = store
        self.location = f"memory:{id(store)}"

    def record(self, cut: Cut) -> None:
        self.store.cuts.append(cut)

    def latest(self, group_id: str) -> Cut | None:
        found = [c for c in self.store.cuts if c.group_id == group_id]
        return found[-1] if found else None


def _checkpoint(transaction: MemoryTxn) -> int:
    return int(transaction.name.rsplit("@", 1)[1])


class MemorySource(Source[list[str]]):
    """A list of items read in order; its position is how many were consumed (JSON).

    Items named in ``unreadable`` are quarantined when read, the others become the data.
    New items may be appended to ``items`` while a job runs.
    """

    def __init__(self, items: Sequence[str], *, unreadable: Sequence[str] = ()) -> None:
        self.items = list(items)
        self.unreadable = set(unreadable)

    def next_batch(self, position: str | None, *, limit: int) -> Batch | None:
        start = json.loads(position) if position else 0
        taken = self.items[start : start + limit]
        if not taken:
            return None
        end = start + len(taken)
        return Batch(tuple(taken), json.dumps(end), remaining=len(self.items) - end)

    def read(self, batch: Batch) -> tuple[list[str], tuple[Quarantined, ...]]:
        bad = tuple(Quarantined(i, "unreadable") for i in batch.items if i in self.unreadable)
        return [i for i in batch.items if i not in self.unreadable], bad


class MemoryLock:
    """A job lock for one process: a second holder is refused until the first releases.

    ``lost = True`` plays a lease another host took over: ``check`` then raises.
    """

    def __init__(self, what: str) -> None:
        self.what = what
        self.held = False
        self.lost = False

    def check(self) -> None:
        if self.lost:
            raise LeaseLostError(f"{self.what} lost its lease")

    def acquire(self) -> None:
        if self.held:
            raise AlreadyRunningError(f"{self.what} is already running")
        self.held = True

    def release(self) -> None:
        self.held = False


class MemoryCheckpointStore(CheckpointStore):
    """Completed checkpoints in a list; ``fail_appends`` makes recording them fail."""

    def __init__(self) -> None:
        self.records: list[CheckpointRecord] = []
        self.locks: dict[str, MemoryLock] = {}
        self.fail_appends = False

    def append(self, record: CheckpointRecord) -> None:
        if self.fail_appends:
            raise OSError("checkpoint store not writable")
        self.records.append(record)

    def history(self, job_id: str) -> list[CheckpointRecord]:
        return [r for r in self.records if r.job_id == job_id]

    def job_lock(self, job_id: str) -> MemoryLock:
        return self.locks.setdefault(job_id, MemoryLock(f"job {job_id!r}"))
