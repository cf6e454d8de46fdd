"""The checkpoint coordinator without Spark: in-memory sinks, source and checkpoint store.

A "crash" is an exception from a step hook, after which the test drops the coordinator
without closing it and lets its lock go, as a dead process's would; the restart is a new
coordinator over the same store and sinks' stores. How the tests know nothing is lost or
duplicated: after the restart, every item the source offered is committed exactly once in
every sink, and the ids in the records, the sinks' logs and the restored sinks agree.
"""

from __future__ import annotations

from collections import Counter
from contextlib import nullcontext

import pytest

from lakesink.core import CheckpointCoordinator, Pacing, TxnState, step_hook
from lakesink.errors import (
    AlreadyRunningError,
    CommitRoundError,
    ConfigurationError,
    LeaseLostError,
    ProtocolError,
)
from lakesink.testing.memory import (
    MemoryCheckpointStore,
    MemorySink,
    MemorySource,
    MemoryStore,
    SettableClock,
)

SINKS = ("orders", "totals")


class Crash(BaseException):
    """A simulated process death: not an Exception, so nothing on the way catches it."""


def crash_at(step: str, checkpoint_id: int):
    def hook(name: str, checkpoint: int) -> None:
        if (name, checkpoint) == (step, checkpoint_id):
            raise Crash(f"{step}@{checkpoint_id}")

    return hook


class Job:
    """One job's durable parts (checkpoint store, the sinks' stores) across restarts."""

    def __init__(self) -> None:
        self.store = MemoryCheckpointStore()
        self.tables = {key: MemoryStore() for key in SINKS}

    def start(self, *, verdicts=None, hook=None, clock=None) -> CheckpointCoordinator:
        sinks = {
            key: MemorySink(
                self.tables[key], name=key, logged=True, verdicts=(verdicts or {}).get(key)
            )
            for key in SINKS
        }
        with step_hook(hook) if hook else nullcontext():
            return CheckpointCoordinator(self.store, job_id="job", sinks=sinks, clock=clock)

    def die(self, coordinator: CheckpointCoordinator) -> None:
        """The process is gone: nothing is closed, its lock is free."""
        coordinator._lock.release()

    def visible(self, key: str = "orders") -> Counter[object]:
        return Counter(self.tables[key].visible())

    def logged_ids(self, key: str, state: TxnState) -> list[int]:
        return sorted(c for c, s in self.tables[key].log.values() if s is state)


def write_all(coordinator: CheckpointCoordinator, items: list[str]) -> int:
    for sink in coordinator.sinks.values():
        for item in items:
            sink.write(item)
    return len(items)


def test_one_checkpoint_id_in_every_sink_the_record_and_the_logs():
    job = Job()
    with job.start() as coordinator:
        for batch in (["a", "b"], ["c"]):
            write_all(coordinator, batch)
            coordinator.trigger_checkpoint(None, items=tuple(batch))

    assert [r.checkpoint_id for r in job.store.records] == [1, 2]
    for key in SINKS:
        assert job.visible(key) == Counter("abc")
        assert job.logged_ids(key, TxnState.COMMITTED) == [1, 2]
        state = job.store.records[-1].sink_states[key]
        assert '"last_checkpoint_id": 2' in state


def test_a_crash_before_the_record_aborts_the_attempt_and_never_reuses_its_id():
    job = Job()
    source = MemorySource(["a", "b", "c", "d"])
    coordinator = job.start(hook=crash_at("after_pre_commit", 2))
    with pytest.raises(Crash):
        coordinator.run(
            source, lambda items: write_all(coordinator, items), pacing=Pacing(max_items=2)
        )
    job.die(coordinator)

    with job.start() as restarted:
        assert restarted.next_checkpoint_id == 3  # 2 was used by the aborted attempt
        assert restarted.position == "2"  # the source replays c, d
        taken = restarted.run(
            source, lambda items: write_all(restarted, items), pacing=Pacing(max_items=2)
        )

    assert taken == 1
    assert [r.checkpoint_id for r in job.store.records] == [1, 3]
    for key in SINKS:
        assert job.visible(key) == Counter("abcd")  # each item once
        assert job.logged_ids(key, TxnState.ABORTED) == [2]  # 4 was open, never written
        assert job.logged_ids(key, TxnState.COMMITTED) == [1, 3]


def test_a_crash_between_the_record_and_the_commits_is_committed_on_restart():
    job = Job()
    coordinator = job.start(hook=crash_at("after_record", 1))
    write_all(coordinator, ["a"])
    with pytest.raises(Crash):
        coordinator.trigger_checkpoint('"after a"', items=("a",))
    job.die(coordinator)
    assert job.visible() == Counter()

    with job.start() as restarted:
        assert restarted.position == '"after a"'  # recorded: not replayed
        assert restarted.next_checkpoint_id == 2

    for key in SINKS:
        assert job.visible(key) == Counter("a")
        assert job.logged_ids(key, TxnState.COMMITTED) == [1]


def test_a_crash_after_one_sinks_commit_finishes_the_other_on_restart():
    job = Job()
    coordinator = job.start()
    write_all(coordinator, ["a"])
    coordinator.sinks["totals"].fail_commits = True
    with pytest.raises(CommitRoundError, match="1 commit"):
        coordinator.trigger_checkpoint(None)
    assert job.visible("orders") == Counter("a") and job.visible("totals") == Counter()
    job.die(coordinator)

    job.start().close()

    assert job.visible("totals") == Counter("a") and job.visible("orders") == Counter("a")


def test_a_validation_failure_in_one_sink_withholds_the_checkpoint_in_all():
    job = Job()
    with job.start(verdicts={"orders": {1: TxnState.HELD}, "totals": {2: TxnState.ABORTED}}) as c:
        for item in ("held", "aborted", "fine"):
            write_all(c, [item])
            c.trigger_checkpoint(None)
        assert c.sinks["totals"].held_checkpoint_ids == [1]  # held with the orders

    for key in SINKS:
        assert job.visible(key) == Counter(["fine"])
        assert job.logged_ids(key, TxnState.HELD) == [1]
        assert job.logged_ids(key, TxnState.ABORTED) == [2]
    reason = job.store.records[0].sink_states["totals"]
    assert '"held": [{' in reason  # the record names the held transaction


def test_held_checkpoints_survive_a_restart_and_an_operator_commits_them():
    job = Job()
    with job.start(verdicts={"orders": {1: TxnState.HELD}}) as c:
        write_all(c, ["held"])
        c.trigger_checkpoint(None)
    with job.start() as restarted:
        assert restarted.sinks["orders"].held_checkpoint_ids == [1]

    for key in SINKS:
        MemorySink(job.tables[key], logged=True).resolve(1, commit=True, reason="checked")
        assert job.visible(key) == Counter(["held"])


def test_run_consumes_the_source_once_and_records_quarantined_items():
    job = Job()
    source = MemorySource(["a", "b", "broken", "c", "d"], unreadable=["broken"])
    seen = []
    with job.start() as c:
        taken = c.run(
            source,
            lambda items: write_all(c, items),
            pacing=Pacing(max_items=2),
            on_checkpoint=lambda record, batch: seen.append(
                (record.checkpoint_id, batch.remaining)
            ),
        )

    assert taken == 3 and seen == [(1, 3), (2, 1), (3, 0)]
    records = job.store.records
    assert [r.items for r in records] == [("a", "b"), ("broken", "c"), ("d",)]
    assert [r.rows for r in records] == [2, 1, 1]
    assert [q.item for q in records[1].quarantined] == ["broken"]
    assert job.visible() == Counter("abcd")


def test_following_checkpoints_a_full_batch_at_once_and_a_partial_one_after_the_interval():
    job = Job()
    clock = SettableClock()
    source = MemorySource(["a", "b", "c"])
    waits = []

    def sleep(seconds: float) -> None:  # time passes only while the job waits
        waits.append(seconds)
        clock.now_ms += int(seconds * 1000)

    pacing = Pacing(max_items=2, follow=True, interval_s=5, poll_s=1, max_checkpoints=2)
    with job.start(clock=clock) as c:
        c.run(source, lambda items: write_all(c, items), pacing=pacing, sleep=sleep)

    assert [r.items for r in job.store.records] == [("a", "b"), ("c",)]
    assert waits == [1, 1, 1, 1, 1]  # "c" alone waited for the 5 s interval


def test_a_second_live_run_of_the_job_is_refused_and_changes_nothing():
    job = Job()
    with job.start() as first:
        with pytest.raises(AlreadyRunningError, match="job 'job' is already running"):
            job.start()
        write_all(first, ["a"])
        first.trigger_checkpoint(None)
    assert [r.checkpoint_id for r in job.store.records] == [1]


def test_a_sink_new_to_the_job_starts_at_the_jobs_next_checkpoint():
    job = Job()
    store = MemoryStore()
    only_orders = {"orders": MemorySink(job.tables["orders"], logged=True)}
    with CheckpointCoordinator(job.store, job_id="job", sinks=only_orders) as c:
        for _ in range(3):
            c.trigger_checkpoint(None)
    sinks = {
        "orders": MemorySink(job.tables["orders"], logged=True),
        "audit": MemorySink(store, logged=True),
    }
    with CheckpointCoordinator(job.store, job_id="job", sinks=sinks) as c:
        assert sinks["audit"].current_checkpoint_id == 4 == c.next_checkpoint_id
        sinks["audit"].write("x")
        c.trigger_checkpoint(None)
    assert store.visible() == ["x"]


def test_a_failed_pre_commit_records_nothing_and_stops_the_job():
    job = Job()
    with job.start() as c:
        write_all(c, ["a"])
        c.sinks["totals"].fail_writes = True
        with pytest.raises(OSError):
            c.trigger_checkpoint(None)
        with pytest.raises(ProtocolError, match="pre-commit of checkpoint 1 failed"):
            c.trigger_checkpoint(None)
    assert job.store.records == []
    with job.start() as restarted:
        assert restarted.next_checkpoint_id == 2  # 1 was pre-committed in orders: not reused
    assert job.visible() == Counter()


def test_bad_jobs_are_refused():
    job = Job()
    with pytest.raises(ConfigurationError, match="no sinks"):
        CheckpointCoordinator(job.store, job_id="job", sinks={})
    with pytest.raises(ConfigurationError, match="job_id must not be empty"):
        CheckpointCoordinator(job.store, job_id="", sinks={"a": MemorySink(MemoryStore())})
    with pytest.raises(ConfigurationError, match="max_items must be at least 1"):
        Pacing(max_items=0)


def test_a_run_that_lost_its_lease_records_nothing_and_the_new_holder_replays_it():
    job = Job()
    coordinator = job.start()
    write_all(coordinator, ["a"])
    coordinator._lock.lost = True  # another host took the job's lease over
    with pytest.raises(LeaseLostError, match="job 'job' lost its lease"):
        coordinator.trigger_checkpoint('"after a"', items=("a",))
    with pytest.raises(ProtocolError, match="lost its lease before recording checkpoint 1"):
        coordinator.trigger_checkpoint('"after a"', items=("a",))
    assert job.store.records == []
    assert job.visible() == Counter()
    job.die(coordinator)
    job.store.locks["job"].lost = False

    with job.start() as restarted:
        assert restarted.position is None  # nothing recorded: the source replays "a"
        write_all(restarted, ["a"])
        restarted.trigger_checkpoint('"after a"', items=("a",))
    for key in SINKS:
        assert job.visible(key) == Counter("a")
        assert job.logged_ids(key, TxnState.ABORTED) == [1]
        assert job.logged_ids(key, TxnState.COMMITTED) == [2]
