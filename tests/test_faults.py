"""``tests/faults.py``: a job run with faults at its protocol steps, as the crash tests, the
cluster tests and the demo run ``jobs/ingest.py``; here a job of in-memory parts (no Spark).

How the tests know the faults reach the job and nothing else does: the job sees a hook only
when a variable asks for one, runs as ``__main__`` with its own arguments and exit status,
leaves a marker at each step it passes, dies by SIGKILL at the step asked (not a line
later), and a malformed variable stops it before it starts.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

FAULTS = Path(__file__).resolve().parent / "faults.py"
JOB = """\
import sys
from lakesink.core import CheckpointCoordinator, current_step_hook
from lakesink.testing.memory import MemoryCheckpointStore, MemorySink, MemoryStore

print(__name__, sys.argv[1:], "hooked" if current_step_hook() else "alone", flush=True)
sinks = {name: MemorySink(MemoryStore(), name=name, logged=True) for name in ("a", "b")}
job = CheckpointCoordinator(MemoryCheckpointStore(), job_id="job", sinks=sinks)
with job:
    job.trigger_checkpoint(job.position)
print("checkpoint 1 recorded", flush=True)
sys.exit(int(sys.argv[1]))
"""


def run(tmp_path: Path, **variables: str) -> subprocess.CompletedProcess[str]:
    job = tmp_path / "job.py"
    job.write_text(JOB)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_")} | variables
    command = [sys.executable, str(FAULTS), str(job), "3", "--flag"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize("marked", [False, True], ids=["no variables", "markers"])
def test_the_job_runs_as_its_own_main_hooked_only_when_asked(tmp_path, marked):
    markers = tmp_path / "markers"
    variables = {"LAKESINK_STEP_MARKERS": str(markers)} if marked else {}

    result = run(tmp_path, **variables)

    assert result.returncode == 3, result.stderr  # the job's own exit status
    assert result.stdout.splitlines() == [
        f"__main__ ['3', '--flag'] {'hooked' if marked else 'alone'}",
        "checkpoint 1 recorded",
    ]
    found = sorted(p.name for p in markers.iterdir()) if marked else []
    steps = ["after_pre_commit@1.1", "after_record@1.1", "after_recovery@0.1"]
    assert found == (steps if marked else [])


def test_the_job_dies_at_the_step_asked(tmp_path):
    result = run(tmp_path, LAKESINK_CRASH_AT="after_record@1")

    assert result.returncode == -signal.SIGKILL, result.stderr
    assert "crash injection: SIGKILL at after_record of checkpoint 1" in result.stderr
    assert "checkpoint 1 recorded" not in result.stdout


def test_a_malformed_variable_stops_the_job_before_it_starts(tmp_path):
    result = run(tmp_path, LAKESINK_CRASH_AT="after_record-1")

    assert result.returncode == 2  # a bad option's status, as the jobs give it
    assert "job: LAKESINK_CRASH_AT='after_record-1' is not STEP@CHECKPOINT" in result.stderr
    assert result.stdout == ""
