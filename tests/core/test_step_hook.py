"""How protocol steps reach a test's hook without being a parameter of user objects."""

from __future__ import annotations

from lakesink.core import STEP_HOOK_ENV, CheckpointCoordinator, step_hook, step_hook_from_env
from lakesink.testing.memory import MemoryCheckpointStore, MemorySink, MemoryStore


def coordinator() -> CheckpointCoordinator:
    sink = MemorySink(MemoryStore(), name="orders", logged=True)
    return CheckpointCoordinator(MemoryCheckpointStore(), job_id="job", sinks={"orders": sink})


def test_a_hook_reaches_the_objects_made_inside_its_block_only(monkeypatch):
    monkeypatch.delenv(STEP_HOOK_ENV, raising=False)
    seen: list[tuple[str, int]] = []
    with step_hook(lambda step, checkpoint: seen.append((step, checkpoint))):
        inside = coordinator()
    outside = coordinator()

    with inside:
        inside.checkpoint(inside.position)
    assert seen == [("after_pre_commit", 1), ("after_record", 1)]
    with outside:
        outside.checkpoint(outside.position)
    assert len(seen) == 2  # made outside the block: no hook


def test_the_environment_names_one_hook_per_process(monkeypatch):
    monkeypatch.setenv(STEP_HOOK_ENV, "itertools:count")  # any module:factory
    first = step_hook_from_env()
    assert first is not None
    assert step_hook_from_env() is first  # every sink of a job shares it
