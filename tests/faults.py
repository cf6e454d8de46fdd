"""Fault injection for crash tests, cluster fault tests and the demo: a job run with faults.

    python tests/faults.py jobs/ingest.py --landing ... --table ... --state ...
    spark-submit ... tests/faults.py jobs/ingest.py --landing ... (on a cluster)

runs the job (any script) as ``__main__`` with the step hook the variables below ask for,
entered with ``lakesink.core.step_hook`` around the whole job: every sink and coordinator
the job makes reports its steps to that one hook (a fault counted across sinks, "the
second sink's flip", counts them all). Without the variables the job runs as it would
alone. lakesink reads none of them: a job run by itself takes no faults.

- ``LAKESINK_CRASH_AT=STEP@CHECKPOINT[+MS]`` kills the process with SIGKILL at that protocol
  step of that checkpoint, or MS milliseconds later (to die in the middle of the next
  operation).
- ``LAKESINK_STEP_MARKERS=DIR`` creates a file ``DIR/STEP@CHECKPOINT.N`` at every step,
  N counting the step's occurrences in that checkpoint (one per sink: the first is the
  first sink opened), holding the time. A test watching from outside then knows what the
  job is doing, e.g. to kill an executor while a given write runs.
- ``LAKESINK_HOLD_AT=STEP@CHECKPOINT[,STEP@CHECKPOINT...]`` (with the markers) makes the
  job wait at each of those steps until the file ``DIR/STEP@CHECKPOINT.go`` exists (at
  most ten minutes), so a test can get ready (freeze the executors, say) before it goes on.

Steps: ``before_append``, ``after_append``, ``before_pre_commit_record``, ``before_publish``,
``after_publish`` from ``DeltaSink``; ``after_recovery``, ``after_pre_commit``,
``after_record`` from the checkpoint coordinator. CHECKPOINT is the checkpoint id, the one
id every sink, the job's checkpoint table and the journal share (a recovery commit runs
under its own id).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import runpy
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lakesink.cli.exits import EXIT_BAD_INPUT, EXIT_OK, exit_status
from lakesink.core import StepHook, step_hook
from lakesink.errors import ConfigurationError

__all__ = ["CRASH_ENV", "HOLD_ENV", "MARKERS_ENV", "StepPoint", "hook_from_env", "run_job"]

log = logging.getLogger("faults")  # its name when run as a script too

CRASH_ENV = "LAKESINK_CRASH_AT"
MARKERS_ENV = "LAKESINK_STEP_MARKERS"
HOLD_ENV = "LAKESINK_HOLD_AT"
HOLD_LIMIT_S = 600.0


@dataclass(frozen=True, kw_only=True)
class StepPoint:
    """A protocol step of one checkpoint, maybe plus a delay: where a fault is injected."""

    step: str
    checkpoint_id: int
    delay_ms: int = 0

    @classmethod
    def parse(cls, spec: str, variable: str = CRASH_ENV) -> StepPoint:
        """Read ``STEP@CHECKPOINT[+MS]``, the value of ``variable``.

        Raises:
            ConfigurationError: The spec is not of that form.
        """
        match = re.fullmatch(r"(\w+)@(\d+)(?:\+(\d+))?", spec.strip())
        if not match:
            raise ConfigurationError(
                f"{variable}={spec!r} is not STEP@CHECKPOINT[+MS], e.g. after_record@2 or "
                "before_append@2+300"
            )
        step, checkpoint, delay = match.groups()
        return cls(step=step, checkpoint_id=int(checkpoint), delay_ms=int(delay or 0))

    def __str__(self) -> str:
        return f"{self.step}@{self.checkpoint_id}"


def hook_from_env(environ: Mapping[str, str] | None = None) -> StepHook | None:
    """The step hook the fault-injection variables ask for, or None when none is set.

    Raises:
        ConfigurationError: A spec is malformed, or a hold is asked without markers.
    """
    environ = os.environ if environ is None else environ
    crash_spec, markers, hold_spec = (environ.get(v) for v in (CRASH_ENV, MARKERS_ENV, HOLD_ENV))
    if not (crash_spec or markers or hold_spec):
        return None
    if hold_spec and not markers:
        raise ConfigurationError(
            f"{HOLD_ENV} needs {MARKERS_ENV}: the job waits for a file in that folder"
        )
    crash = StepPoint.parse(crash_spec, CRASH_ENV) if crash_spec else None
    holds = {
        (point.step, point.checkpoint_id): point
        for point in (
            StepPoint.parse(spec, HOLD_ENV) for spec in (hold_spec or "").split(",") if spec
        )
    }
    marker_dir = Path(markers).resolve() if markers else None
    if marker_dir is not None:
        marker_dir.mkdir(parents=True, exist_ok=True)

    def hook(step: str, checkpoint: int) -> None:
        here = (step, checkpoint)
        if marker_dir is not None:  # first, so a watcher sees the step the process died at
            _mark(marker_dir, f"{step}@{checkpoint}")
        if here in holds and marker_dir is not None:
            _hold(marker_dir / f"{holds[here]}.go", holds[here])
        if crash is not None and here == (crash.step, crash.checkpoint_id):
            _kill_self(crash)

    return hook


def _mark(folder: Path, name: str) -> None:
    for occurrence in range(1, 1000):
        try:
            fd = os.open(folder / f"{name}.{occurrence}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w") as marker:
            marker.write(f"{time.time():.6f}\n")
        return


def _hold(go: Path, point: StepPoint) -> None:
    log.warning("fault injection: holding at %s until %s exists", point, go)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not go.exists():
        if time.monotonic() > deadline:
            log.warning(
                "fault injection: nobody released %s in %.0fs; going on", point, HOLD_LIMIT_S
            )
            return
        time.sleep(0.01)


def _kill_self(crash: StepPoint) -> None:
    log.warning(
        "crash injection: SIGKILL at %s of checkpoint %s +%s ms",
        crash.step,
        crash.checkpoint_id,
        crash.delay_ms,
    )
    if crash.delay_ms:
        threading.Timer(crash.delay_ms / 1000, os.kill, (os.getpid(), signal.SIGKILL)).start()
    else:
        os.kill(os.getpid(), signal.SIGKILL)


def run_job(argv: Sequence[str]) -> int:
    """Run the job ``argv[0]`` with arguments ``argv[1:]`` as ``python JOB ARGS`` would,
    inside ``step_hook`` with the hook the variables ask for. A job that exits ends the
    process with its status; one whose script just ends returns 0.

    A malformed variable stops it before the job starts, with the status and the one line
    on stderr a job gives for a bad option.
    """
    if not argv:
        print("usage: python tests/faults.py JOB [ARGS...]", file=sys.stderr)
        return EXIT_BAD_INPUT
    job = Path(argv[0])
    try:
        hook = hook_from_env()
    except ConfigurationError as error:
        print(f"{job.stem}: {error}", file=sys.stderr)
        return exit_status(error)
    sys.argv = [str(job), *argv[1:]]
    sys.path[0] = str(job.resolve().parent)  # where ``python JOB`` imports its neighbours from
    with step_hook(hook) if hook is not None else contextlib.nullcontext():
        runpy.run_path(str(job), run_name="__main__")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(run_job(sys.argv[1:]))
