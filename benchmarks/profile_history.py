"""Where the time of bench-scale's curve 1 goes: a profile at each number of checkpoints.

    python -m benchmarks.profile_history --mode metadata --history 10 1000

A table of the mode grows through its sink as curve 1 grows it (a checkpoint of 1,000
rows at a time). At each point: ``cProfile`` of three checkpoints (the commit is the
``notify_checkpoint_complete`` line of the profile), three ``lakesink status``
and three openings of the sink (each list the slowest calls by cumulative time), then
``lakesink vacuum`` and the aggregate over the committed view, the published table and a
plain table of the same rows, with the time of Delta's snapshot of the table and of the
plain table, and the snapshot's files and tombstones. What the page's "Where this stands"
says of the misses comes from this.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import logging
import os
import pstats
import statistics
import time
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import Workspace, cached_rows, published_rows
from benchmarks.reader import aggregate
from benchmarks.run import warm_up
from benchmarks.scale import MODES, GrowingTable
from lakesink.ops.vacuum import vacuum
from lakesink.readers.spark import committed
from lakesink.spark.session import spark_session

CALLS, READS, TOP = 3, 5, 25


def profiled(name: str, action: Callable[[], object]) -> None:
    """Print the median of ``CALLS`` calls of ``action`` (after one untimed) and their
    profile's slowest calls."""
    action()
    profile, seconds = cProfile.Profile(), []
    for _ in range(CALLS):
        start = time.perf_counter()
        profile.enable()
        action()
        profile.disable()
        seconds.append(time.perf_counter() - start)
    report = io.StringIO()
    pstats.Stats(profile, stream=report).sort_stats("cumulative").print_stats(TOP)
    print(f"===== {name}: median {statistics.median(seconds) * 1000:.0f} ms (profiled)")
    print(report.getvalue())


def median_ms(action: Callable[[], object]) -> float:
    action()
    seconds = []
    for _ in range(READS):
        start = time.perf_counter()
        action()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds) * 1000


def snapshot(spark: SparkSession, path: str) -> object:
    """Delta's snapshot of the table at ``path``, brought up to date (what a read starts
    with)."""
    jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
    assert jvm is not None
    none = jvm.scala.Option.empty()
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    return log.update(False, none, none)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=MODES, default="metadata", help="default: metadata")
    parser.add_argument(
        "--history", type=int, nargs="+", default=[10, 1000], help="default: 10 1000"
    )
    parser.add_argument("--work-dir", help="where the tables go (default: system temp)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    spark = spark_session(
        app_name="lakesink-profile-history",
        conf={"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"},
        ivy_dir=os.environ.get("LAKESINK_IVY_DIR"),
    )
    spark.sparkContext.setLogLevel("ERROR")
    workspace = Workspace(args.work_dir)
    try:
        warm_up(spark, workspace)
        folder = workspace.folder(f"profile-{args.mode}")
        table = GrowingTable(spark, f"{folder}/events", cached_rows(spark, 1_000), args.mode)
        try:
            for count in args.history:
                table.grow_to(count)
                print(f"######## {args.mode} table, {count} checkpoints")
                # Its write and pre-commit too: the commit is notify_checkpoint_complete.
                profiled("a checkpoint", table.time_commit)
                profiled("status", table.time_status)
                profiled("opening", table.time_opening)
                vacuum(spark, table.path, retain_hours=0, allow_short_retention=True)
                plain = f"{folder}/plain-{count}"
                committed(spark, table.path).write.format("delta").save(plain)
                sides: dict[str, Callable[[], DataFrame]] = {
                    "plain": lambda plain=plain: spark.read.format("delta").load(plain),
                    "view": lambda: committed(spark, table.path),
                    "published": lambda: published_rows(spark, table.path),
                }
                for name, rows in sides.items():
                    print(f"read {name}: {median_ms(lambda rows=rows: aggregate(rows())):.0f} ms")
                for name, path in (("plain table", plain), ("table", table.path)):
                    state = snapshot(spark, path)
                    print(
                        f"snapshot of the {name}: "
                        f"{median_ms(lambda path=path: snapshot(spark, path)):.0f} ms, version "
                        f"{state.version()}, {state.numOfFiles()} files, "  # type: ignore[attr-defined]
                        f"{state.numOfRemoves()} tombstones"  # type: ignore[attr-defined]
                    )
        finally:
            table.close()
    finally:
        workspace.close()
        spark.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
