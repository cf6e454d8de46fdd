"""The step hook: how a test watches, holds or kills the protocol steps of the sinks and
drivers it makes, without a parameter on the objects users make.

A test enters ``step_hook(hook)``; every sink and coordinator made inside the block keeps
``hook`` and calls it at each step it reaches. Nothing here reads the environment: a job
run by the crash and cluster tests takes its faults from the test tooling that wraps it
(``tests/faults.py``), which enters this block around the job's ``main``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

__all__ = ["StepHook", "current_step_hook", "step_hook"]

#: Called with the name of a protocol step a sink or driver reaches and the checkpoint id
#: (observability, and the fault injection of the crash tests).
StepHook = Callable[[str, int], None]

# The hook a test set for the sinks and coordinators made inside ``step_hook(...)``.
_given_hook: ContextVar[StepHook | None] = ContextVar("lakesink_step_hook", default=None)


def current_step_hook() -> StepHook | None:
    """The hook a sink or coordinator made now reports its protocol steps to: the one of
    the ``step_hook(...)`` block it is made in, else None."""
    return _given_hook.get()


@contextmanager
def step_hook(hook: StepHook) -> Iterator[None]:
    """Make the sinks and coordinators created inside the block report their steps to
    ``hook`` (observability and fault-injection tests); they keep it after the block."""
    token = _given_hook.set(hook)
    try:
        yield
    finally:
        _given_hook.reset(token)
