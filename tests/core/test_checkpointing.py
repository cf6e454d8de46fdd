"""Pre-commit and commit of one checkpoint over several sinks, without Spark."""

from __future__ import annotations

import threading

import pytest

from lakesink.core.checkpointing import commit_all, pre_commit_all
from lakesink.errors import CommitError
from lakesink.testing.memory import MemorySink, MemoryStore


class RendezvousSink(MemorySink):
    """Its commit goes on only once every sink of the checkpoint is committing too."""

    def __init__(self, store: MemoryStore, rendezvous: threading.Barrier, **options) -> None:
        super().__init__(store, **options)
        self.rendezvous = rendezvous

    def commit(self, transaction) -> None:
        # Commits run one after the other would leave this waiting alone: BrokenBarrierError.
        self.rendezvous.wait(timeout=5)
        super().commit(transaction)


def started(sinks: dict[str, MemorySink]) -> dict[str, MemorySink]:
    for name, sink in sinks.items():
        sink.initialize_state()
        sink.write(f"row of {name}")
    return sinks


def test_the_sinks_of_a_checkpoint_commit_side_by_side():
    rendezvous = threading.Barrier(2)
    stores = {name: MemoryStore() for name in ("orders", "totals")}
    sinks = started(
        {name: RendezvousSink(store, rendezvous, name=name) for name, store in stores.items()}
    )
    pre_commit_all(sinks, 1)

    commit_all(sinks, 1)

    for name, store in stores.items():
        assert list(store.target.values()) == [[f"row of {name}"]]
    assert not any(sink.pending_checkpoint_ids for sink in sinks.values())


def test_a_failed_commit_leaves_the_other_sinks_committed_and_itself_pending():
    stores = {name: MemoryStore() for name in ("orders", "totals")}
    sinks = started({name: MemorySink(store, name=name) for name, store in stores.items()})
    pre_commit_all(sinks, 1)
    sinks["totals"].fail_commits = True

    with pytest.raises(CommitError, match=r"checkpoint 1 is complete but 1 commit\(s\) failed"):
        commit_all(sinks, 1)

    assert list(stores["orders"].target.values()) == [["row of orders"]]
    assert stores["totals"].target == {}
    assert sinks["totals"].pending_checkpoint_ids == [1]
