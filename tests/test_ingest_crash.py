"""The ingest job as a real process, killed with SIGKILL at each protocol point, restarted.

One chain of runs over one landing folder: each run restarts from what the previous one
left and is itself killed at the next point; a last run finishes. So each restart recovers
from a kill at another point, with five job processes where a run and a restart per point
would take eight.

How the tests know nothing is lost or duplicated: each run really died by the signal at
its point (exit status -9, the crash log line); right after each kill the committed view
holds whole checkpoints only (a prefix of the order ids, each once, since every
checkpoint takes the next two files in name order); after the last run every generated
order is committed exactly once, in both sinks. And every tool names the same checkpoint
ids: the job's records, ``lakesink status`` and both sinks' journals.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from lakesink import committed
from lakesink.core import TxnState
from lakesink.delta.journal import Journal

pytestmark = pytest.mark.slow

JOBS = Path(__file__).resolve().parent.parent / "jobs"
ORDERS, FILES = 150, 6  # 25 orders a file, 2 files a checkpoint: 3 checkpoints of 50
PER_CHECKPOINT = 50
# The kills, in the order the chain makes them (each run's restart recovers the one before),
# and how many whole checkpoints the committed view may hold right after each. A checkpoint
# id is never used twice: input of an attempt that died before its record is read again
# under the next id.
CRASH_POINTS = {
    "before_append@2+300": {1},  # during the write of checkpoint 2's rows
    "after_pre_commit@3": {1},  # between the pre-commits and the record: aborted, redone
    "after_record@4": {1},  # between the record and the commits
    # During the commit's MERGE of checkpoint 5, after the restart committed 4; the MERGE
    # is one Delta commit, so 5 is either all there or not at all.
    "before_flip@5+200": {2, 3},
}
RECORDED = [1, 4, 5]
# Aborted attempts, by sink: the kill in checkpoint 2 came during the orders' append, before
# the totals sink wrote anything (so its journal has nothing of 2).
ABORTED = {"orders": [2, 3], "totals": [3]}


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


@dataclass(frozen=True)
class Kill:
    """One run of the chain, killed at ``point``, and the committed order ids it left."""

    point: str
    run: subprocess.CompletedProcess[str]
    committed_ids: Counter[int]


@dataclass(frozen=True)
class Chain:
    work: Path
    kills: dict[str, Kill]
    last_run: subprocess.CompletedProcess[str]
    committed_ids: Counter[int]
    committed_totals: int


def committed_ids(spark, tmp_path: Path) -> Counter[int]:
    return Counter(r.order_id for r in committed(spark, str(tmp_path / "orders")).collect())


# Session scope with one xdist group: the chain runs once even if xdist interleaves other
# modules' tests on this worker.
@pytest.fixture(scope="session")
def chain(spark, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    tmp_path = tmp_path_factory.mktemp("ingest-crash")
    generate(tmp_path)
    kills = {}
    for point in CRASH_POINTS:
        run = ingest(tmp_path, point)
        kills[point] = Kill(point=point, run=run, committed_ids=committed_ids(spark, tmp_path))
    last_run = ingest(tmp_path)
    totals = committed(spark, str(tmp_path / "totals")).groupBy().sum("orders").first()[0]
    return Chain(
        work=tmp_path,
        kills=kills,
        last_run=last_run,
        committed_ids=committed_ids(spark, tmp_path),
        committed_totals=totals,
    )


@pytest.mark.xdist_group("ingest_crash")
@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_killed_ingest_restarts_and_commits_every_order_once(chain: Chain, point: str) -> None:
    kill = chain.kills[point]
    assert kill.run.returncode == -signal.SIGKILL, kill.run.stderr[-3000:]
    step, checkpoint = point.split("+")[0].split("@")
    assert f"crash injection: SIGKILL at {step} of checkpoint {checkpoint}" in kill.run.stderr

    # Right after the kill: whole checkpoints only, each order once, nothing of a
    # checkpoint whose commit had not finished.
    assert max(kill.committed_ids.values(), default=1) == 1, "an order was committed twice"
    whole = len(kill.committed_ids) // PER_CHECKPOINT
    assert set(kill.committed_ids) == set(range(1, whole * PER_CHECKPOINT + 1)), (
        f"the kill at {point} left part of a checkpoint visible"
    )
    assert whole in CRASH_POINTS[point], f"{whole} checkpoints committed after the kill"

    # After the restarts that followed: every order exactly once, in both sinks.
    assert chain.last_run.returncode == 0, chain.last_run.stderr[-3000:]
    assert set(chain.committed_ids) == set(range(1, ORDERS + 1)), "an order was lost"
    assert max(chain.committed_ids.values()) == 1, "an order was committed twice"
    assert chain.committed_totals == ORDERS  # the second sink of the same checkpoints


@pytest.mark.xdist_group("ingest_crash")
def test_the_records_the_status_and_the_journals_name_the_same_checkpoint_ids(
    spark, chain: Chain, capsys
) -> None:
    from lakesink.cli import main

    assert main(["checkpoints", "--state", str(chain.work / "state"), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert [r["checkpoint_id"] for r in records] == RECORDED
    assert [len(r["items"]) for r in records] == [2, 2, 2]

    for sink in ("orders", "totals"):
        assert main(["status", str(chain.work / sink), "--json"]) == 0
        (status,) = json.loads(capsys.readouterr().out)["sinks"]
        assert status["last_committed_checkpoint"] == RECORDED[-1]
        assert status["pending"] == [] and status["held"] == []
        assert sorted({t["checkpoint_id"] for t in status["aborted"]}) == ABORTED[sink]
        journal = Journal(spark, str(chain.work / "_lakesink_journal"), create=False)
        committed_ids = [
            t.checkpoint_id for t in journal.transactions(sink) if t.state is TxnState.COMMITTED
        ]
        assert committed_ids == RECORDED
