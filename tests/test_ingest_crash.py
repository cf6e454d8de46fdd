"""The ingest job as a real process, killed with SIGKILL at each protocol point, restarted.

How the test knows nothing is lost or duplicated: every generated order id must be in the
committed view exactly once after the restart, and the job must really have died by the
signal at the chosen point (exit status -9).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from lakesink import committed

pytestmark = pytest.mark.slow

JOBS = Path(__file__).resolve().parent.parent / "jobs"
ORDERS, FILES = 200, 4


def ingest_command(tmp_path: Path, *extra: str) -> list[str]:
    """The ingest job over ``tmp_path``'s landing folder, two sinks, 2 files a checkpoint."""
    return [
        sys.executable,
        str(JOBS / "ingest.py"),
        "--master",
        "local[2]",
        "--landing",
        str(tmp_path / "landing"),
        "--table",
        str(tmp_path / "orders"),
        "--totals-table",
        str(tmp_path / "totals"),
        "--state",
        str(tmp_path / "state"),
        "--files-per-checkpoint",
        "2",
        *extra,
    ]


def ingest(
    tmp_path: Path, crash_at: str | None = None, *extra: str
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LAKESINK_CRASH_AT"}
    if crash_at:
        env["LAKESINK_CRASH_AT"] = crash_at
    command = ingest_command(tmp_path, *extra)
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


def generate(tmp_path: Path, orders: int = ORDERS, files: int = FILES) -> None:
    subprocess.run(
        [
            sys.executable,
            str(JOBS / "generate_orders.py"),
            "--landing",
            str(tmp_path / "landing"),
            "--orders",
            str(orders),
            "--files",
            str(files),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    "crash_at",
    [
        "before_append@2+300",  # during the write of checkpoint 2's rows
        "after_pre_commit@2",  # between the pre-commits and the checkpoint record
        "after_record@2",  # between the record and the commits
        "before_flip@2+200",  # during the commit's MERGE
    ],
)
def test_killed_ingest_restarts_and_commits_every_order_once(spark, tmp_path, crash_at):
    generate(tmp_path)

    crashed = ingest(tmp_path, crash_at)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    assert "crash injection: SIGKILL" in crashed.stderr

    restarted = ingest(tmp_path)
    assert restarted.returncode == 0, restarted.stderr[-3000:]

    ids = Counter(r.order_id for r in committed(spark, str(tmp_path / "orders")).collect())
    assert set(ids) == set(range(1, ORDERS + 1)), "an order was lost"
    assert max(ids.values()) == 1, "an order was committed twice"
    totals = committed(spark, str(tmp_path / "totals")).groupBy().sum("orders").first()[0]
    assert totals == ORDERS  # the second sink of the same checkpoints, also exactly once
