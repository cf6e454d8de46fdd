"""How protocol steps reach a test's hook without being a parameter of user objects."""

from __future__ import annotations

from lakesink.core import CheckpointCoordinator, StepHook, current_step_hook, step_hook
from lakesink.testing.memory import MemoryCheckpointStore, MemorySink, MemoryStore


def coordinator() -> CheckpointCoordinator:
    sink = MemorySink(MemoryStore(), name="orders", logged=True)
    return CheckpointCoordinator(MemoryCheckpointStore(), job_id="job", sinks={"orders": sink})


def test_a_hook_reaches_the_objects_made_inside_its_block_only():
    seen: list[tuple[str, int]] = []
    with step_hook(lambda step, checkpoint: seen.append((step, checkpoint))):
        inside = coordinator()
    outside = coordinator()

    with inside:
        inside.trigger_checkpoint(inside.position)
    assert seen == [("after_recovery", 0), ("after_pre_commit", 1), ("after_record", 1)]
    with outside:
        outside.trigger_checkpoint(outside.position)
    assert len(seen) == 3  # made outside the block: no hook


# What a job's hook was once named by, in $LAKESINK_STEP_HOOK.
RECORDED: list[tuple[str, int]] = []


def recording_hook() -> StepHook:
    return lambda step, checkpoint: RECORDED.append((step, checkpoint))


def test_no_hook_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("LAKESINK_STEP_HOOK", f"{__name__}:recording_hook")

    made = coordinator()
    with made:
        made.trigger_checkpoint(made.position)

    assert current_step_hook() is None
    assert RECORDED == []  # a job takes a hook from whoever runs it, never from a variable
