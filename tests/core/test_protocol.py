"""The protocol core without Spark: an in-memory store, a settable clock, failure switches.

Ported from Flink's TwoPhaseCommitSinkFunctionTest (its ContentDump becomes ``MemoryStore``)
plus the notification scenarios from the comment in ``notifyCheckpointComplete``, then
lakesink's own: verdicts (held, aborted), withholding, operator resolution, recovery from
the sink's log (lingering and decided transactions) and replayed checkpoint ids. No
pyspark here: ``pytest -m "not spark"`` runs these where pyspark is not installed.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging

import pytest

from lakesink.core import (
    PreCommit,
    SinkState,
    TransactionTimeout,
    TwoPhaseCommitSink,
    TxnState,
)
from lakesink.errors import (
    CheckpointOrderError,
    CommitRoundError,
    ConfigurationError,
    ProtocolError,
    UnknownCheckpointError,
)
from lakesink.testing.memory import MemorySink, MemoryStore, SettableClock
from lakesink.testing.memory import MemoryTxn as Txn


@pytest.fixture
def store() -> MemoryStore:
    return MemoryStore()


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock()


def started(
    store: MemoryStore,
    restored: SinkState | None = None,
    *,
    next_checkpoint_id: int | None = None,
    **options,
) -> MemorySink:
    sink = MemorySink(store, **options)
    sink.initialize_state(restored, next_checkpoint_id=next_checkpoint_id)
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
    with pytest.raises(OSError):  # the pre-commit of checkpoint 3 fails as well
        sink.snapshot_state(3)
    assert sink.pending_checkpoint_ids == [1, 2]  # the failed one was never pre-committed
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
    failing = MemorySink(
        store,
        clock=clock,
        timeout=TransactionTimeout(timeout_ms=timeout, ignore_failures_after_timeout=True),
    )
    failing.fail_commits = True
    with pytest.raises(CommitRoundError, match="Expected exception") as raised:
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
        timeout=TransactionTimeout(timeout_ms=1000, ignore_failures_after_timeout=True),
    )
    failing.fail_commits = True
    clock.now_ms = 1000  # exactly the timeout: not past it
    with pytest.raises(CommitRoundError):
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
        def _commit(self, transaction: Txn) -> None:
            order.append(transaction.name)
            super()._commit(transaction)

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
        def _commit(self, transaction: Txn) -> None:
            checkpoint = int(transaction.name.split("@")[1])
            attempted.append(checkpoint)
            if checkpoint in self.broken:
                raise RuntimeError(f"checkpoint {checkpoint} broke")
            super()._commit(transaction)

    sink = FailsFirst(store)
    sink.broken = set()
    sink.initialize_state()
    sink.write("a")
    sink.snapshot_state(1)
    sink.write("b")
    sink.snapshot_state(2)
    sink.broken = {1}

    with pytest.raises(CommitRoundError, match="checkpoint 1 broke") as raised:
        sink.notify_checkpoint_complete(2)

    assert attempted == [1, 2]
    assert [cid for cid, _ in raised.value.failures] == [1]
    assert store.visible() == ["b"]
    assert sink.pending_checkpoint_ids == [1]  # kept for a retry
    sink.broken = set()
    sink.notify_checkpoint_complete(2)
    assert store.visible() == ["a", "b"]


def test_timeout_warning_names_the_transaction_during_commit(store, clock, caplog):
    sink = started(
        store, clock=clock, timeout=TransactionTimeout(timeout_ms=1000, warning_ratio=0.5)
    )
    sink.write("42")
    sink.snapshot_state(1)
    clock.now_ms = 499
    sink.write("43")
    sink.snapshot_state(2)
    clock.now_ms = 510  # txn of checkpoint 1 began at 0: 510 >= 500; checkpoint 2's at 0 too

    with caplog.at_level(logging.WARNING, logger="lakesink.core.protocol"):
        sink.notify_checkpoint_complete(1)

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "txn-0@1" in warnings[0] and "510 ms" in warnings[0]


def test_no_timeout_warning_below_the_ratio(store, clock, caplog):
    sink = started(
        store, clock=clock, timeout=TransactionTimeout(timeout_ms=1000, warning_ratio=0.5)
    )
    sink.write("42")
    sink.snapshot_state(1)
    clock.now_ms = 499
    with caplog.at_level(logging.WARNING, logger="lakesink.core.protocol"):
        sink.notify_checkpoint_complete(1)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_timeout_warning_during_recovery(store, clock, caplog):
    sink = started(store, clock=clock)
    sink.write("42")
    snapshot = sink.snapshot_state(1)
    clock.now_ms = 900
    with caplog.at_level(logging.WARNING, logger="lakesink.core.protocol"):
        started(
            store,
            snapshot,
            clock=clock,
            timeout=TransactionTimeout(timeout_ms=1000, warning_ratio=0.8),
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
        def _begin_transaction(self, checkpoint_id: int) -> Txn:
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
        def _begin_transaction(self, checkpoint_id: int) -> Txn:
            return Txn("txn-0@1")

    with pytest.raises(ProtocolError, match="already used"):
        Recycling(store).initialize_state(snapshot)


def test_restored_sink_begins_the_drivers_next_checkpoint_with_a_new_transaction(store):
    sink = started(store)
    sink.snapshot_state(1)
    snapshot = sink.snapshot_state(2)  # current: txn-2@3, for checkpoint 3
    sink.write("lost with the crash")

    replaying = started(store, snapshot)  # a driver that replays checkpoint 3 (Spark)
    assert replaying.current_checkpoint_id == 3
    assert replaying.state.current.handle != snapshot.current.handle
    replaying.close()

    skipping = started(store, snapshot, next_checkpoint_id=5)  # one that never reuses ids
    assert skipping.current_checkpoint_id == 5
    with pytest.raises(CheckpointOrderError, match="next checkpoint 2 is not above"):
        started(store, snapshot, next_checkpoint_id=2)


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
    assert state.last_checkpoint_id == 2 and state.current.checkpoint_id == 3


def test_overriding_a_framework_method_is_refused():
    with pytest.raises(TypeError, match=r"overrides framework method.*notify_checkpoint_complete"):

        class Sneaky(MemorySink):
            def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
                pass


def test_a_hook_under_its_public_name_is_refused_rather_than_never_called():
    with pytest.raises(TypeError, match=r"defines commit: the protocol's hooks are protected; "):

        class Public(MemorySink):
            def commit(self, transaction: Txn) -> None:
                pass


def test_the_object_a_user_writes_with_shows_no_hook():
    public = {name for name in dir(MemorySink) if not name.startswith("_")}
    assert not public & set(TwoPhaseCommitSink._HOOKS)
    assert {"write", "snapshot_state", "notify_checkpoint_complete", "close"} <= public


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(timeout_ms=0), "must be positive"),
        (dict(timeout_ms=-5, warning_ratio=0.5), "must be positive"),
        (dict(timeout_ms=10, warning_ratio=1.5), r"in \(0, 1\]"),
        (dict(timeout_ms=10, warning_ratio=0), r"in \(0, 1\]"),
    ],
)
def test_bad_timeouts_are_refused(options, message):
    with pytest.raises(ConfigurationError, match=message):
        TransactionTimeout(**options)


# ------------------------------------------------- verdicts, withholding, operators


def test_a_held_verdict_is_not_committed_by_the_notification(store):
    sink = started(store, verdicts={2: TxnState.HELD})
    for value, checkpoint in (("a", 1), ("b", 2), ("c", 3)):
        sink.write(value)
        sink.snapshot_state(checkpoint)
    assert sink.verdict(2) is TxnState.HELD and sink.verdict(3) is TxnState.PRE_COMMITTED

    sink.notify_checkpoint_complete(3)

    assert store.visible() == ["a", "c"]
    assert sink.pending_checkpoint_ids == [] and sink.held_checkpoint_ids == [2]
    assert [h.checkpoint_id for h in sink.state.held] == [2]  # recorded with the snapshot


def test_the_notification_of_a_withheld_checkpoint_commits_nothing_and_is_no_error(store):
    sink = started(store, verdicts={1: TxnState.ABORTED})
    sink.write("bad")
    sink.snapshot_state(1)

    sink.notify_checkpoint_complete(1)

    assert store.visible() == [] and sink.pending_checkpoint_ids == []
    with pytest.raises(UnknownCheckpointError, match="no transaction is pending"):
        sink.notify_checkpoint_complete(1)  # notified once: a second one is unexpected


def test_a_pre_commit_verdict_outside_the_three_is_refused(store):
    sink = started(store, verdicts={1: TxnState.COMMITTED})
    with pytest.raises(ProtocolError, match="PRE_COMMITTED, HELD or ABORTED"):
        sink.snapshot_state(1)


def test_withhold_holds_or_aborts_a_pre_committed_checkpoint(store):
    sink = started(store)
    sink.write("a")
    sink.snapshot_state(1)
    sink.write("b")
    sink.snapshot_state(2)

    sink.withhold(1, TxnState.HELD, "another sink's validation failed")
    sink.withhold(2, TxnState.ABORTED, "another sink's validation failed")
    sink.withhold(1, TxnState.ABORTED, "worse elsewhere")  # a held one may still be aborted

    assert sink.verdict(1) is TxnState.ABORTED and sink.verdict(2) is TxnState.ABORTED
    assert sink.pending_checkpoint_ids == [] and sink.held_checkpoint_ids == []
    assert set(sink.reasons.values()) == {"another sink's validation failed", "worse elsewhere"}
    sink.notify_checkpoint_complete(2)
    assert store.visible() == [] and store.staged == {"txn-2@3": []}
    with pytest.raises(ProtocolError, match="can only hold or abort"):
        sink.withhold(3, TxnState.COMMITTED, "no")


def test_an_operator_commits_a_held_checkpoint_once_the_sink_stopped(store):
    sink = started(store, logged=True, verdicts={1: TxnState.HELD})
    sink.write("held")
    sink.snapshot_state(1)
    with pytest.raises(ProtocolError, match="is running"):
        sink.resolve(1, commit=True, reason="looked fine")
    sink.close()

    operator = MemorySink(store, logged=True)
    (resolved,) = operator.resolve(1, commit=True, reason="looked fine")

    assert resolved.state is TxnState.HELD and store.visible() == ["held"]
    assert store.log["txn-0@1"] == (1, TxnState.COMMITTED)
    with pytest.raises(UnknownCheckpointError, match="nothing pending in checkpoint 1"):
        MemorySink(store, logged=True).resolve(1, commit=True, reason="again")


def test_an_operator_may_not_commit_an_open_one_nor_abort_a_decided_one(store):
    sink = started(store, logged=True)
    sink.write("open")  # checkpoint 1, never pre-committed
    sink.snapshot_state(1)
    sink.write("decided")
    del sink  # the process dies
    store.log["txn-0@1"] = (1, TxnState.COMMITTING)  # its commit was decided, not done
    operator = MemorySink(store, logged=True)

    with pytest.raises(ProtocolError, match="never pre-committed"):
        operator.resolve(2, commit=True, reason="no")
    with pytest.raises(ProtocolError, match="already decided"):
        operator.resolve(1, commit=False, reason="no")
    operator.resolve(2, commit=False, reason="replayed elsewhere")
    assert store.log["txn-1@2"] == (2, TxnState.ABORTED)


# ----------------------------------------------------- recovery from the sink's log


def test_recovery_aborts_lingering_transactions_of_its_log_and_finishes_decided_ones(store):
    sink = started(store, logged=True)
    sink.write("completed")
    snapshot = sink.snapshot_state(1)  # the driver records checkpoint 1...
    sink.write("lingering")
    sink.snapshot_state(2)  # ...but not 2: the crash came before its record
    sink.write("open")
    del sink
    store.staged["decided@0"] = ["decided"]
    store.log["decided@0"] = (0, TxnState.COMMITTING)  # an operator's decision, not done

    restored = started(store, snapshot, logged=True, names=iter(["new"]))

    assert store.visible() == ["completed", "decided"]
    assert store.log["txn-1@2"] == (2, TxnState.ABORTED)  # lingering: input is replayed
    assert store.log["txn-2@3"] == (3, TxnState.ABORTED)  # open at the crash
    assert "replayed" in restored.reasons["txn-1@2"]
    assert "never pre-committed" in restored.reasons["txn-2@3"]


def test_a_replayed_checkpoint_id_is_a_new_transaction_that_commits_alone(store):
    """A driver replays checkpoint 2 after a crash: the aborted attempt is never published."""
    sink = started(store, logged=True)
    sink.write("one")
    snapshot = sink.snapshot_state(1)
    sink.notify_checkpoint_complete(1)
    sink.write("two, first attempt")
    sink.snapshot_state(2)
    del sink

    replay = started(store, snapshot, logged=True, names=iter(["replay-0", "replay-1"]))
    assert replay.current_checkpoint_id == 2
    replay.write("two, replayed")
    replay.snapshot_state(2)
    replay.notify_checkpoint_complete(2)

    assert store.visible() == ["one", "two, replayed"]
    assert store.log["txn-1@2"] == (2, TxnState.ABORTED)
    assert store.log["replay-0@2"] == (2, TxnState.COMMITTED)


def test_an_operators_abort_of_a_recorded_pending_transaction_is_respected(store):
    sink = started(store, logged=True)
    sink.write("withdrawn")
    snapshot = sink.snapshot_state(1)  # recorded, its commit never happened
    del sink
    MemorySink(store, logged=True).resolve(1, commit=False, reason="bad data")

    started(store, snapshot, logged=True)

    assert store.visible() == []
    assert store.log["txn-0@1"] == (1, TxnState.ABORTED)


def test_a_held_transaction_of_a_completed_checkpoint_stays_held(store):
    sink = started(store, logged=True, verdicts={1: TxnState.HELD})
    sink.write("held")
    snapshot = sink.snapshot_state(1)
    del sink

    restored = started(store, snapshot, logged=True)

    assert restored.held_checkpoint_ids == [1] and store.visible() == []
    assert store.log["txn-0@1"] == (1, TxnState.HELD)


def test_a_standalone_sink_recovers_from_its_log_alone(store):
    sink = MemorySink(store, logged=True, verdicts={2: TxnState.HELD})
    sink.initialize_from_log()
    for value, checkpoint in (("a", 1), ("b", 2), ("c", 3)):
        sink.write(value)
        sink.snapshot_state(checkpoint)
    sink.write("open")
    del sink  # crashed before any notification

    restored = MemorySink(store, logged=True)
    restored.initialize_from_log()

    assert store.visible() == ["a", "c"]  # its pre-commit was its checkpoint's completion
    assert restored.held_checkpoint_ids == [2]
    assert store.log["txn-3@4"] == (4, TxnState.ABORTED)
    assert restored.current_checkpoint_id == 5  # above every id its log knows


@dataclasses.dataclass(frozen=True)
class Counted:
    """A handle whose committable adds what its commit needs: the values written."""

    name: str
    values: int | None = dataclasses.field(default=None, compare=False)


class Committables(TwoPhaseCommitSink[Counted, object]):
    """A sink whose pre-commit hands over a committable that carries its row count."""

    handle_type = Counted

    def __init__(self, *, swap: bool = False) -> None:
        super().__init__(name="committables")
        self.swap = swap  # hand over another transaction's committable
        self.written: dict[str, int] = {}
        self.committed: list[Counted] = []
        self.names = (f"t{i}" for i in itertools.count())

    def _begin_transaction(self, checkpoint_id: int) -> Counted:
        return Counted(f"{next(self.names)}@{checkpoint_id}")

    def _invoke(self, transaction: Counted, value: object) -> None:
        self.written[transaction.name] = self.written.get(transaction.name, 0) + 1

    def _pre_commit(self, transaction: Counted) -> PreCommit[Counted]:
        name = "someone-else" if self.swap else transaction.name
        return PreCommit(Counted(name, self.written.get(transaction.name, 0)))

    def _commit(self, transaction: Counted) -> None:
        self.committed.append(transaction)

    def _abort(self, transaction: Counted, reason: str) -> None:
        pass


def test_the_committable_a_pre_commit_hands_over_is_what_is_snapshotted_and_committed():
    sink = Committables()
    sink.initialize_state()
    sink.write("a")
    sink.write("b")
    state = sink.snapshot_state(1)

    assert [h.handle.values for h in state.pending_commit] == [2]
    restored = SinkState.from_json(state.to_json(), Counted)
    assert restored.pending_commit[0].handle.values == 2  # survives the driver's record
    sink.notify_checkpoint_complete(1)
    assert [(c.name, c.values) for c in sink.committed] == [("t0@1", 2)]

    again = Committables()  # recovery commits the restored committable, as handed over
    again.initialize_state(restored)
    assert [(c.name, c.values) for c in again.committed] == [("t0@1", 2)]


def test_a_pre_commit_that_hands_over_another_transaction_is_refused_and_changes_nothing():
    sink = Committables(swap=True)
    sink.initialize_state()
    sink.write("a")

    with pytest.raises(ProtocolError, match="another transaction's committable"):
        sink.snapshot_state(1)

    assert sink.pending_checkpoint_ids == [] and sink.current_checkpoint_id == 1
