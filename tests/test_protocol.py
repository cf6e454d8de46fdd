"""The protocol core without Spark: an in-memory store, a settable clock, failure switches.

Ported from Flink's TwoPhaseCommitSinkFunctionTest (its ContentDump becomes ``MemoryStore``)
plus the notification scenarios from the comment in ``notifyCheckpointComplete``.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import pytest

from lakesink.errors import (
    CheckpointOrderError,
    CommitError,
    ConfigurationError,
    ProtocolError,
    UnknownCheckpointError,
)
from lakesink.protocol import SinkState, TwoPhaseCommitSink


class SettableClock:
    def __init__(self, now_ms: int = 0) -> None:
        self.now_ms = now_ms

    def millis(self) -> int:
        return self.now_ms


@dataclass
class MemoryStore:
    """Staged data per transaction name, and the committed ("target") data."""

    staged: dict[str, list[str]] = field(default_factory=dict)
    target: dict[str, list[str]] = field(default_factory=dict)

    def visible(self) -> list[str]:
        return sorted(v for values in self.target.values() for v in values)


@dataclass(frozen=True)
class Txn:
    name: str


class MemorySink(TwoPhaseCommitSink[Txn, str]):
    def __init__(self, store: MemoryStore, names=None, **options) -> None:
        super().__init__(name="memory", **options)
        self.store = store
        self.names = names or (f"txn-{i}" for i in itertools.count())
        self.fail_writes = False
        self.fail_commits = False

    def begin_transaction(self, checkpoint_id: int) -> Txn:
        txn = Txn(f"{next(self.names)}@{checkpoint_id}")
        self.store.staged.setdefault(txn.name, [])
        return txn

    def invoke(self, transaction: Txn, value: str) -> None:
        if self.fail_writes:
            raise OSError("store not writable")
        self.store.staged[transaction.name].append(value)

    def pre_commit(self, transaction: Txn) -> None:
        if self.fail_writes:
            raise OSError("store not writable")

    def commit(self, transaction: Txn) -> None:
        if self.fail_commits:
            raise RuntimeError("Expected exception")
        if transaction.name in self.store.staged:  # absent: committed before, a no-op
            self.store.target[transaction.name] = self.store.staged.pop(transaction.name)

    def abort(self, transaction: Txn) -> None:
        self.store.staged.pop(transaction.name, None)


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


def started(store: MemoryStore, restored: SinkState | None = None, **options) -> MemorySink:
    sink = MemorySink(store, **options)
    sink.initialize_state(restored)
    return sink


def test_notify_of_completed_checkpoint_commits_up_to_it(store):
    sink = started(store)
    sink.write("42")
    sink.snapshot_state(1)
    sink.write("43")
    sink.snapshot_state(2)
    sink.write("44")
    sink.snapshot_state(3)

    sink.notify_checkpoint_complete(2)

    assert store.visible() == ["42", "43"]
    # one staged for checkpoint 3, one for the open transaction
    assert len(store.staged) == 2
    assert sink.pending_checkpoint_ids == [3]


def test_fail_before_notify_then_restore_commits_once(store):
    sink = started(store)
    sink.write("42")
    sink.snapshot_state(1)
    sink.write("43")
    snapshot = sink.snapshot_state(2)
    sink.fail_writes = True
    with pytest.raises(OSError):
        sink.write("44")
        sink.snapshot_state(3)
    sink.close()

    restored = started(store, SinkState.from_json(snapshot.to_json(), Txn))

    assert store.visible() == ["42", "43"]
    restored.close()
    assert store.staged == {}


def test_ignore_commit_exception_during_recovery_after_timeout(store, clock):
    sink = started(store, clock=clock)
    sink.write("42")
    snapshot = sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    sink.close()

    timeout = 1000
    options = dict(
        clock=clock, transaction_timeout_ms=timeout, ignore_failures_after_transaction_timeout=True
    )
    failing = MemorySink(store, **options)
    failing.fail_commits = True
    with pytest.raises(CommitError, match="Expected exception") as raised:
        failing.initialize_state(snapshot)
    assert raised.value.failures[0][0] == 1

    clock.now_ms = timeout + 1
    failing.initialize_state(snapshot)
    assert store.visible() == ["42"]


def test_recovery_failure_before_timeout_is_raised_even_when_ignoring(store, clock):
    sink = started(store, clock=clock)
    sink.write("42")
    snapshot = sink.snapshot_state(1)
    failing = MemorySink(
        store,
        clock=clock,
        transaction_timeout_ms=1000,
        ignore_failures_after_transaction_timeout=True,
    )
    failing.fail_commits = True
    clock.now_ms = 1000  # exactly the timeout: not past it
    with pytest.raises(CommitError):
        failing.initialize_state(snapshot)
    assert store.visible() == []


def test_skipped_checkpoint_notification_commits_all_earlier(store):
    sink = started(store)
    sink.write("a")
    sink.snapshot_state(1)  # its notification never comes
    sink.write("b")
    sink.snapshot_state(2)

    sink.notify_checkpoint_complete(2)

    assert store.visible() == ["a", "b"]
    assert sink.pending_checkpoint_ids == []


def test_late_notification_commits_only_up_to_its_checkpoint(store):
    sink = started(store)
    sink.write("a")
    sink.snapshot_state(1)
    sink.write("b")
    sink.snapshot_state(2)  # triggered before 1's notification arrived

    sink.notify_checkpoint_complete(1)
    assert store.visible() == ["a"]
    assert sink.pending_checkpoint_ids == [2]

    sink.notify_checkpoint_complete(2)
    assert store.visible() == ["a", "b"]


def test_overlapping_checkpoints_commit_in_ascending_order(store):
    order: list[str] = []

    class Recording(MemorySink):
        def commit(self, transaction: Txn) -> None:
            order.append(transaction.name)
            super().commit(transaction)

    sink = Recording(store)
    sink.initialize_state()
    for value, checkpoint in (("a", 1), ("b", 2), ("c", 3)):
        sink.write(value)
        sink.snapshot_state(checkpoint)

    sink.notify_checkpoint_complete(3)

    assert [name.split("@")[1] for name in order] == ["1", "2", "3"]
    assert store.visible() == ["a", "b", "c"]


def test_every_pending_commit_is_attempted_before_the_first_error(store):
    attempted: list[int] = []

    class FailsFirst(MemorySink):
        def commit(self, transaction: Txn) -> None:
            checkpoint = int(transaction.name.split("@")[1])
            attempted.append(checkpoint)
            if checkpoint in self.broken:
                raise RuntimeError(f"checkpoint {checkpoint} broke")
            super().commit(transaction)

    sink = FailsFirst(store)
    sink.broken = set()
    sink.initialize_state()
    sink.write("a")
    sink.snapshot_state(1)
    sink.write("b")
    sink.snapshot_state(2)
    sink.broken = {1}

    with pytest.raises(CommitError, match="checkpoint 1 broke") as raised:
        sink.notify_checkpoint_complete(2)

    assert attempted == [1, 2]
    assert [cid for cid, _ in raised.value.failures] == [1]
    assert store.visible() == ["b"]
    assert sink.pending_checkpoint_ids == [1]  # kept for a retry
    sink.broken = set()
    sink.notify_checkpoint_complete(2)
    assert store.visible() == ["a", "b"]


def test_timeout_warning_names_the_transaction_during_commit(store, clock, caplog):
    sink = started(store, clock=clock, transaction_timeout_ms=1000, timeout_warning_ratio=0.5)
    sink.write("42")
    sink.snapshot_state(1)
    clock.now_ms = 499
    sink.write("43")
    sink.snapshot_state(2)
    clock.now_ms = 510  # txn of checkpoint 1 began at 0: 510 >= 500; checkpoint 2's at 0 too

    with caplog.at_level(logging.WARNING, logger="lakesink.protocol"):
        sink.notify_checkpoint_complete(1)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "txn-0@1" in warnings[0] and "510 ms" in warnings[0]


def test_no_timeout_warning_below_the_ratio(store, clock, caplog):
    sink = started(store, clock=clock, transaction_timeout_ms=1000, timeout_warning_ratio=0.5)
    sink.write("42")
    sink.snapshot_state(1)
    clock.now_ms = 499
    with caplog.at_level(logging.WARNING, logger="lakesink.protocol"):
        sink.notify_checkpoint_complete(1)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_timeout_warning_during_recovery(store, clock, caplog):
    sink = started(store, clock=clock)
    sink.write("42")
    snapshot = sink.snapshot_state(1)
    clock.now_ms = 900
    with caplog.at_level(logging.WARNING, logger="lakesink.protocol"):
        started(
            store, snapshot, clock=clock, transaction_timeout_ms=1000, timeout_warning_ratio=0.8
        )
    assert any("txn-0@1" in r.getMessage() for r in caplog.records)
    assert store.visible() == ["42"]


def test_recovering_old_transaction_never_commits_a_newer_ones_data(store):
    """FLINK-8132: restoring checkpoint 1 must not publish what checkpoint 2 wrote."""
    sink = started(store)
    sink.write("old")
    snapshot_1 = sink.snapshot_state(1)
    sink.write("new")
    sink.snapshot_state(2)  # pre-committed, but its checkpoint never completed
    # crash: no notification, no close

    restored = started(store, snapshot_1, names=(f"after-restart-{i}" for i in itertools.count()))

    assert store.visible() == ["old"]
    restored.write("replayed")
    restored.snapshot_state(restored.current_checkpoint_id)
    restored.notify_checkpoint_complete(restored.current_checkpoint_id - 1)
    assert store.visible() == ["old", "replayed"]


def test_a_sink_that_reuses_transaction_identities_is_refused(store):
    """The other half of FLINK-8132: recycled handles are what made it possible."""
    pool = itertools.cycle(["producer-0", "producer-1"])

    class Pooled(MemorySink):
        def begin_transaction(self, checkpoint_id: int) -> Txn:
            return Txn(next(pool))

    sink = Pooled(store)
    sink.initialize_state()  # producer-0
    sink.snapshot_state(1)  # producer-1
    with pytest.raises(ProtocolError, match="already used"):
        sink.snapshot_state(2)  # would begin a third transaction named producer-0


def test_restored_handles_cannot_be_reused_after_restart(store):
    sink = started(store)
    snapshot = sink.snapshot_state(1)  # pending txn-0@1, current txn-1@2
    sink.close()

    class Recycling(MemorySink):
        def begin_transaction(self, checkpoint_id: int) -> Txn:
            return Txn("txn-0@1")

    with pytest.raises(ProtocolError, match="already used"):
        Recycling(store).initialize_state(snapshot)


def test_checkpoint_ids_continue_above_every_restored_id(store):
    sink = started(store)
    sink.snapshot_state(1)
    snapshot = sink.snapshot_state(2)  # current is for checkpoint 3
    restored = started(store, snapshot)
    assert restored.current_checkpoint_id == 4  # 3 was aborted and is never reused


def test_snapshot_with_a_backwards_id_is_refused_and_changes_nothing(store):
    sink = started(store)
    sink.write("a")
    sink.snapshot_state(1)
    before = sink.state
    with pytest.raises(CheckpointOrderError, match="checkpoint 1 goes backwards"):
        sink.snapshot_state(1)
    assert sink.state == before


def test_snapshot_that_skips_the_open_checkpoint_is_refused(store):
    sink = started(store)
    with pytest.raises(CheckpointOrderError, match=r"checkpoint 5 skips ahead.*checkpoint 1"):
        sink.snapshot_state(5)


def test_notification_going_backwards_is_refused(store):
    sink = started(store)
    sink.snapshot_state(1)
    sink.snapshot_state(2)
    sink.notify_checkpoint_complete(2)
    sink.snapshot_state(3)
    with pytest.raises(CheckpointOrderError, match="checkpoint 1 goes backwards"):
        sink.notify_checkpoint_complete(1)
    assert sink.pending_checkpoint_ids == [3]


def test_notification_with_nothing_pending_is_refused(store):
    sink = started(store)
    sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    with pytest.raises(UnknownCheckpointError, match="no transaction is pending"):
        sink.notify_checkpoint_complete(1)


def test_notification_of_a_never_snapshotted_checkpoint_is_refused(store):
    sink = started(store)
    sink.snapshot_state(1)
    with pytest.raises(UnknownCheckpointError, match="checkpoint 7 was never snapshotted"):
        sink.notify_checkpoint_complete(7)
    assert sink.pending_checkpoint_ids == [1]


def test_failed_pre_commit_changes_nothing_and_can_be_retried(store):
    sink = started(store)
    sink.write("a")
    sink.fail_writes = True
    with pytest.raises(OSError):
        sink.snapshot_state(1)
    assert sink.pending_checkpoint_ids == []
    assert sink.current_checkpoint_id == 1
    sink.fail_writes = False
    sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    assert store.visible() == ["a"]


def test_close_aborts_the_open_transaction_only(store):
    sink = started(store)
    sink.write("pre-committed")
    snapshot = sink.snapshot_state(1)
    sink.write("open")
    sink.close()
    assert store.visible() == []
    assert [v for values in store.staged.values() for v in values] == ["pre-committed"]
    started(store, snapshot)
    assert store.visible() == ["pre-committed"]


def test_use_before_initialize_and_after_close_is_refused(store):
    sink = MemorySink(store)
    with pytest.raises(ProtocolError, match="not initialized"):
        sink.write("x")
    sink.initialize_state()
    sink.close()
    with pytest.raises(ProtocolError, match="closed"):
        sink.snapshot_state(1)


def test_state_survives_json_round_trip(store, clock):
    clock.now_ms = 1234
    sink = started(store, clock=clock)
    sink.snapshot_state(1)
    state = sink.snapshot_state(2)
    assert SinkState.from_json(state.to_json(), Txn) == state
    assert state.next_checkpoint_id == 4


def test_overriding_a_framework_method_is_refused():
    with pytest.raises(TypeError, match=r"overrides framework method.*notify_checkpoint_complete"):

        class Sneaky(MemorySink):
            def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
                pass


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(transaction_timeout_ms=0), "must be positive"),
        (dict(timeout_warning_ratio=0.5), "need transaction_timeout_ms"),
        (dict(ignore_failures_after_transaction_timeout=True), "need transaction_timeout_ms"),
        (dict(transaction_timeout_ms=10, timeout_warning_ratio=1.5), r"in \(0, 1\]"),
    ],
)
def test_bad_options_are_refused(store, options, message):
    with pytest.raises(ConfigurationError, match=message):
        MemorySink(store, **options)
