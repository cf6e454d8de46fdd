"""The micro-batch driver without Spark: in-memory sinks, and an "engine" whose commit log is
a number the test moves, as Spark moves ``commits/``.

How the tests know nothing is lost or duplicated: every batch the engine recorded ends up
committed exactly once in every sink, whatever the crash, and a replayed batch's first
attempt never shows.
"""

from __future__ import annotations

from collections import Counter

import pytest

from lakesink.core import TxnState
from lakesink.core.microbatch import MicroBatchDriver
from lakesink.errors import CheckpointOrderError, CommitRoundError, ConfigurationError
from lakesink.testing.memory import MemorySink, MemoryStore

SINKS = ("orders", "totals")


class Crash(BaseException):
    """A process death."""


class Engine:
    """The durable part of a streaming query: its commit log and the sinks' stores."""

    def __init__(self) -> None:
        self.recorded = -1  # the last batch in commits/
        self.tables = {name: MemoryStore() for name in SINKS}

    def start(self, *, verdicts=None, step_hook=None) -> MicroBatchDriver:
        sinks = {
            name: MemorySink(
                self.tables[name], name=name, logged=True, verdicts=(verdicts or {}).get(name)
            )
            for name in SINKS
        }
        return MicroBatchDriver(
            sinks, recorded=lambda: self.recorded, where="/chk", step_hook=step_hook
        )

    def run(self, driver: MicroBatchDriver, batch_id: int, values: list[str]) -> None:
        """Spark runs batch ``batch_id`` through foreachBatch, then records it."""
        with driver.batch(batch_id) as sinks:
            for sink in sinks.values():
                for value in values:
                    sink.write(value)
        self.recorded = batch_id

    def visible(self, name: str = "orders") -> Counter[object]:
        return Counter(self.tables[name].visible())

    def logged(self, name: str, state: TxnState) -> list[int]:
        return sorted(c for c, s in self.tables[name].log.values() if s is state)


def test_a_batch_is_committed_once_the_engine_recorded_it():
    engine = Engine()
    driver = engine.start()
    assert driver.next_batch_id == 0  # Spark's first batch id

    engine.run(driver, 0, ["a"])
    assert engine.visible() == Counter()  # pre-committed: the engine recorded it just now
    engine.run(driver, 1, ["b"])  # batch 1 starts: 0 was recorded, so it is committed
    assert engine.visible() == Counter("a")
    assert driver.commit_recorded() == [1]  # what a listener does once 1 is recorded
    driver.close()

    for name in SINKS:
        assert engine.visible(name) == Counter("ab")
        assert engine.logged(name, TxnState.COMMITTED) == [0, 1]


def test_a_crash_before_the_record_replays_the_batch_as_a_new_transaction():
    engine = Engine()
    driver = engine.start(step_hook=_crash_at("after_pre_commit", 1))
    engine.run(driver, 0, ["a"])
    with pytest.raises(Crash):
        engine.run(driver, 1, ["b, first attempt"])
    assert engine.recorded == 0

    restarted = engine.start()  # Spark runs batch 1 again with the same input
    assert restarted.recovered == []  # batch 1 was not recorded: aborted, not committed
    engine.run(restarted, 1, ["b"])
    restarted.close()

    for name in SINKS:
        assert engine.visible(name) == Counter(["a", "b"])
        assert engine.logged(name, TxnState.ABORTED) == [1]
        assert engine.logged(name, TxnState.COMMITTED) == [0, 1]


def test_a_crash_after_the_record_is_committed_by_a_restart_with_no_new_input():
    engine = Engine()
    driver = engine.start(step_hook=_crash_at("after_record", 0))
    engine.run(driver, 0, ["a"])
    with pytest.raises(Crash):
        driver.commit_recorded()
    assert engine.visible() == Counter()

    restarted = engine.start()  # the restarted query has nothing to run
    assert restarted.recovered == [0]
    restarted.close()

    for name in SINKS:
        assert engine.visible(name) == Counter("a")
    assert engine.start().recovered == []  # committed: nothing left for the next one


def test_a_validation_failure_in_one_sink_withholds_the_batch_in_every_sink():
    engine = Engine()
    driver = engine.start(verdicts={"orders": {1: TxnState.ABORTED}})
    for batch_id, value in enumerate(["a", "bad", "c"]):
        engine.run(driver, batch_id, [value])
    driver.close()

    for name in SINKS:
        assert engine.visible(name) == Counter("ac")
        assert engine.logged(name, TxnState.ABORTED) == [1]


def test_a_failed_commit_stops_the_next_batch_and_is_finished_by_the_restart():
    engine = Engine()
    driver = engine.start()
    engine.run(driver, 0, ["a"])
    driver.sinks["totals"].fail_commits = True
    with pytest.raises(CommitRoundError, match="1 commit"):
        engine.run(driver, 1, ["b"])
    assert engine.visible("orders") == Counter("a") and engine.visible("totals") == Counter()

    engine.start().close()

    assert engine.visible("totals") == Counter("a")


def test_a_checkpoint_location_behind_the_journal_is_refused():
    engine = Engine()
    driver = engine.start()
    for batch_id in range(3):
        engine.run(driver, batch_id, [str(batch_id)])
    driver.close()
    engine.recorded = -1  # the checkpoint location was deleted: Spark starts at batch 0

    with pytest.raises(ConfigurationError, match=r"batch 2 .*only up to -1.*new writer_id"):
        engine.start()
    assert engine.visible() == Counter("012")


def test_a_batch_id_the_sinks_do_not_expect_is_refused():
    engine = Engine()
    driver = engine.start()
    with (
        pytest.raises(
            CheckpointOrderError, match="micro-batch 5 came, but the sinks expect batch 0"
        ),
        driver.batch(5),
    ):
        pass
    engine.run(driver, 0, ["a"])
    driver.close()
    assert engine.visible() == Counter("a")


def _crash_at(step: str, batch_id: int):
    def hook(name: str, checkpoint_id: int) -> None:
        if (name, checkpoint_id) == (step, batch_id):
            raise Crash(f"{step}@{batch_id}")

    return hook
