"""The demo: sample orders -> streaming ingest killed mid-batch -> restart -> vacuum -> proof.

    python jobs/demo.py [--out demo-output] [--orders 3000]

Each step runs as its own process, as a scheduler would run it. The ingest job (a
Structured Streaming query, ``availableNow``) is killed with SIGKILL in micro-batch 1,
after its rows were pre-committed and before Spark recorded the batch in its commit log
(by the crash tests' fault injection, ``tests/faults.py``, which runs it that first time);
the restart aborts those rows, Spark runs batch 1 again from the same files, and the
vacuum job removes the aborted rows from both tables. Exits 0 only if every order is
committed exactly once in the orders table and counted once in the totals.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

JOBS = Path(__file__).resolve().parent
# The crash tests' fault injection, which runs a job and kills it at a protocol step.
FAULTS = JOBS.parent / "tests" / "faults.py"


def step(title: str, command: list[str], log: Path, *, env: dict[str, str] | None = None) -> int:
    """Run one job as a scheduler would; its logs (stderr) go to ``log``."""
    print(f"\n=== {title}\n$ {' '.join(command)}\n  (logs: {log})", flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stderr:
        return subprocess.run(command, env=env, stderr=stderr).returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="demo-output", help="folder for all demo data")
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--files", type=int, default=12)
    args = parser.parse_args()
    out = Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    python = sys.executable
    landing, orders, totals = out / "landing", out / "orders", out / "totals"
    ingest = [
        python,
        str(JOBS / "ingest.py"),
        "--landing",
        str(landing),
        "--table",
        str(orders),
        "--totals-table",
        str(totals),
        "--state",
        str(out / "state"),
        "--files-per-checkpoint",
        "4",
        "--verbose",  # Spark's own output goes to the step's log, with the job's
    ]
    logs = out / "logs"
    generate = [
        python,
        str(JOBS / "generate_orders.py"),
        "--landing",
        str(landing),
        "--orders",
        str(args.orders),
        "--files",
        str(args.files),
    ]
    if step("generate sample orders", generate, logs / "generate.log") != 0:
        return 1
    crash_env = {**os.environ, "LAKESINK_CRASH_AT": "after_pre_commit@1"}
    title = "ingest, killed with SIGKILL in batch 1 (pre-committed, not in Spark's commit log)"
    killed_ingest = [python, str(FAULTS), *ingest[1:]]
    code = step(title, killed_ingest, logs / "ingest-killed.log", env=crash_env)
    killed = code == -signal.SIGKILL
    print(f"ingest exited with {code}: " + ("killed by SIGKILL" if killed else "expected SIGKILL"))
    if not killed:
        return 1
    title = "ingest again: aborts batch 1's first attempt, Spark runs batch 1 again, goes on"
    if step(title, ingest, logs / "ingest-restart.log") != 0:
        return 1
    for table in (orders, totals):
        vacuum = [python, str(JOBS / "vacuum.py"), str(table), "--verbose"]
        title = f"vacuum {table.name}: remove the rows of aborted transactions"
        if step(title, vacuum, logs / f"vacuum-{table.name}.log") != 0:
            return 1

    from lakesink import Table, TxnState
    from lakesink.cli import main as cli

    ids = Table(orders).arrow(columns=["order_id"]).column("order_id").to_pylist()
    summed = sum(Table(totals).arrow(columns=["orders"]).column("orders").to_pylist())
    duplicates = len(ids) - len(set(ids))
    print("\n=== lakesink status")
    cli(["status", str(orders), str(totals)])
    print("\n=== result")
    print(f"committed orders: {len(ids)}   expected: {args.orders}   duplicates: {duplicates}")
    print(f"orders the totals table counts: {summed}")
    for table in (orders, totals):
        checkpoints = Table(table).checkpoints()
        done = [c.checkpoint_id for c in checkpoints if c.state is TxnState.COMMITTED]
        gone = [c.checkpoint_id for c in checkpoints for t in c.transactions if t.vacuumed]
        print(
            f"{table.name}: checkpoints {', '.join(map(str, done))} committed; the killed "
            f"attempt of checkpoint {', '.join(map(str, gone)) or '-'} aborted and vacuumed"
        )
    ok = len(ids) == len(set(ids)) == summed == args.orders
    print("exactly once: every order committed once" if ok else "NOT exactly once")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
