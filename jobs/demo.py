"""The demo: sample orders -> streaming ingest killed mid-batch -> restart -> vacuum -> proof.

    python jobs/demo.py [--out demo-output] [--orders 3000]

Each step runs as its own process, as a scheduler would run it. The ingest job (a
Structured Streaming query, ``availableNow``) is killed with SIGKILL in micro-batch 1,
after its rows were pre-committed and before Spark recorded the batch in its commit log;
the restart aborts those rows, Spark runs batch 1 again from the same files, and the
vacuum job removes the aborted rows. Exits 0 only if every order is committed exactly once.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from lakesink.core import STEP_HOOK_ENV
from lakesink.testing.faults import CRASH_ENV, STEP_HOOK

JOBS = Path(__file__).resolve().parent


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
    crash_env = {**os.environ, STEP_HOOK_ENV: STEP_HOOK, CRASH_ENV: "after_pre_commit@1"}
    title = "ingest, killed with SIGKILL in batch 1 (pre-committed, not in Spark's commit log)"
    code = step(title, ingest, logs / "ingest-killed.log", env=crash_env)
    killed = code == -signal.SIGKILL
    print(f"ingest exited with {code}: " + ("killed by SIGKILL" if killed else "expected SIGKILL"))
    if not killed:
        return 1
    title = "ingest again: aborts batch 1's first attempt, Spark runs batch 1 again, goes on"
    if step(title, ingest, logs / "ingest-restart.log") != 0:
        return 1
    vacuum = [python, str(JOBS / "vacuum.py"), "--table", str(orders)]
    if step("vacuum: remove the rows of aborted transactions", vacuum, logs / "vacuum.log") != 0:
        return 1

    from lakesink import committed
    from lakesink.cli import main as cli
    from lakesink.spark.session import spark_session

    spark = spark_session(app_name="lakesink-demo")
    spark.sparkContext.setLogLevel("ERROR")
    view = committed(spark, str(orders))
    count, distinct = view.count(), view.select("order_id").distinct().count()
    print("\n=== result")
    print(f"committed orders: {count}   expected: {args.orders}")
    print(f"duplicates:       {count - distinct}")
    print("\n=== lakesink status")
    cli(["status", str(orders), str(totals)])
    spark.stop()
    return 0 if count == distinct == args.orders else 1


if __name__ == "__main__":
    sys.exit(main())
