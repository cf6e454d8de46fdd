"""The cut of a group of sinks, engine-free: in-memory sinks under the checkpoint coordinator
and the micro-batch driver.

A cut names, for each sink of a group, the version at which it shows exactly the group's
checkpoints up to one; readers read the group at one cut. How the tests know a cut is
right: it is recorded only once every sink published the checkpoint, and each version it
names is what that sink's store showed then (an in-memory sink's version is how many
transactions it published).
"""

from __future__ import annotations

import pytest

from lakesink.core import CheckpointCoordinator, step_hook
from lakesink.core.microbatch import MicroBatchDriver
from lakesink.errors import CommitRoundError
from lakesink.testing.memory import MemoryCheckpointStore, MemorySink, MemoryStore

SINKS = ("orders", "totals")


class Crash(BaseException):
    """A simulated process death."""


def versions(store: MemoryStore) -> list[tuple[int, dict[str, int]]]:
    return [(c.checkpoint_id, dict(c.versions)) for c in store.cuts]


class Group:
    """Two sinks, each over a store of its own, and the job's checkpoint store."""

    def __init__(self) -> None:
        self.checkpoints = MemoryCheckpointStore()
        self.stores = {key: MemoryStore() for key in SINKS}

    def sinks(self) -> dict[str, MemorySink]:
        return {k: MemorySink(self.stores[k], name=k, logged=True) for k in SINKS}

    def start(self, sinks=None, hook=None) -> CheckpointCoordinator:
        with step_hook(hook) if hook else step_hook(None):
            return CheckpointCoordinator(
                self.checkpoints, job_id="job", sinks=sinks or self.sinks()
            )

    def cuts(self) -> list[tuple[int, dict[str, int]]]:
        return versions(self.stores["orders"])


def checkpoint(job: CheckpointCoordinator, item: str) -> None:
    for sink in job.sinks.values():
        sink.write(item)
    job.trigger_checkpoint(None)


def test_each_checkpoint_of_a_group_records_its_cut_once_every_sink_published():
    group = Group()
    with group.start() as job:
        checkpoint(job, "a")
        checkpoint(job, "b")
    zero = {"orders": 0, "totals": 0}
    assert group.cuts() == [
        (-1, zero),  # the group, before any sink opened
        (0, zero),  # recovered: where its tables stand
        (1, {"orders": 1, "totals": 1}),
        (2, {"orders": 2, "totals": 2}),
    ]
    assert group.stores["totals"].cuts == group.stores["orders"].cuts  # each store has it
    assert all(sink.shown == group.stores["orders"].cuts[-1] for sink in job.sinks.values())


def test_a_failed_commit_records_no_cut_until_every_sink_published():
    group = Group()
    sinks = group.sinks()
    job = group.start(sinks)
    sinks["totals"].fail_commits = True
    with pytest.raises(CommitRoundError):
        checkpoint(job, "a")  # orders published 1, totals did not: no cut of 1
    assert [c for c, _ in group.cuts()] == [-1, 0]
    sinks["totals"].fail_commits = False
    checkpoint(job, "b")  # totals publishes 1 and 2 now: the cut of 2 holds both
    assert group.cuts()[-1] == (2, {"orders": 2, "totals": 2})
    job.close()


def test_a_crash_between_the_publishes_keeps_the_previous_cut_until_the_restart():
    group = Group()
    published = []

    def hook(step: str, checkpoint_id: int) -> None:
        if step == "after_record":
            published.append(checkpoint_id)
        if step == "after_record" and checkpoint_id == 2:
            raise Crash("after the record of 2, before any publish")

    job = group.start(hook=hook)
    checkpoint(job, "a")
    with pytest.raises(Crash):
        checkpoint(job, "b")
    job._lock.release()  # the process is gone
    assert group.cuts()[-1] == (1, {"orders": 1, "totals": 1})  # readers keep cut 1
    with group.start() as restarted:  # recovery publishes 2 in both, then its cut
        assert restarted.next_checkpoint_id == 3
    assert group.cuts()[-1] == (2, {"orders": 2, "totals": 2})


def test_a_groups_sinks_run_their_post_commit_step_once_its_cut_is_recorded():
    group = Group()
    with group.start() as job:
        checkpoint(job, "a")
        checkpoint(job, "b")
    for store in group.stores.values():  # (transactions visible, the newest cut) each time
        assert store.post_commits == [(1, 1), (2, 2)]


def test_a_sink_alone_runs_its_post_commit_step_at_its_commit():
    store = MemoryStore()
    sink = MemorySink(store)
    sink.initialize_state()
    sink.write("a")
    sink.snapshot_state(1)
    assert store.post_commits == []
    sink.notify_checkpoint_complete(1)
    assert store.post_commits == [(1, None)]


def test_a_sink_alone_records_no_cut():
    store = MemoryStore()
    with CheckpointCoordinator(
        MemoryCheckpointStore(), job_id="job", sinks={"orders": MemorySink(store, name="o")}
    ) as job:
        job.sinks["orders"].write("a")
        job.trigger_checkpoint(None)
    assert store.cuts == []


def test_micro_batches_record_a_cut_of_what_the_engine_recorded():
    stores = {key: MemoryStore() for key in SINKS}
    recorded = [-1]
    sinks = {k: MemorySink(stores[k], name=k, logged=True) for k in SINKS}
    driver = MicroBatchDriver(sinks, recorded=lambda: recorded[0], where="chk")
    with driver.batch(0) as writers:
        for sink in writers.values():
            sink.write("a")
    assert versions(stores["orders"]) == [(-1, {"orders": 0, "totals": 0})] * 2  # joined, opened
    recorded[0] = 0  # the engine wrote batch 0 to its commit log
    driver.commit_recorded()
    assert versions(stores["orders"])[-1] == (0, {"orders": 1, "totals": 1})
    assert stores["orders"].cuts[-1].group_id == "chk"
    driver.close()


class FirstLook(MemorySink):
    """A sink that notes the cuts its store held when it first looked at its own state."""

    seen: list | None = None

    def _log(self):
        if self.seen is None:
            self.seen = list(self.store.cuts)
        return super()._log()


@pytest.mark.parametrize("driver", ["coordinator", "micro-batch"])
def test_a_groups_membership_is_durable_before_any_sink_opens(driver):
    stores = {key: MemoryStore() for key in SINKS}
    sinks = {k: FirstLook(stores[k], name=k, logged=True) for k in SINKS}
    if driver == "coordinator":
        CheckpointCoordinator(MemoryCheckpointStore(), job_id="g", sinks=sinks).close()
    else:
        MicroBatchDriver(sinks, recorded=lambda: -1, where="g").close()
    for sink in sinks.values():  # a reader then already reads both at one cut
        assert [(c.group_id, c.checkpoint_id, dict(c.versions)) for c in sink.seen] == [
            ("g", -1, {"orders": 0, "totals": 0})
        ]


def test_a_sink_added_to_a_group_joins_its_newest_cut_where_it_stands():
    group = Group()
    with group.start() as job:
        checkpoint(job, "a")
    newcomer = MemoryStore()
    newcomer.target["old"] = ["x"]  # a table written before it joined: version 1
    sinks = {**group.sinks(), "returns": MemorySink(newcomer, name="returns", logged=True)}
    group.start(sinks).close()
    joined = group.cuts()[-2]  # then the restart's own cut
    assert joined == (1, {"orders": 1, "totals": 1, "returns": 1})


def test_only_the_global_committer_records_cuts():
    """One path publishes a group's checkpoint and records its cut: a second caller of
    record_cut would be a second global committer, with its own order of steps."""
    import ast
    from pathlib import Path

    package = Path(__file__).resolve().parents[2] / "lakesink"
    callers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", getattr(node.func, "attr", None)) == "record_cut"
    )
    assert callers == ["core/checkpointing.py"]
