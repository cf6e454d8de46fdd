"""Section 10: what reading a group's tables at one cut costs, and what recording it costs.

A job's two tables (orders and a copy) get ``checkpoints`` checkpoints through the
checkpoint coordinator, which records the group's cut after each. Then, in one run:

- one table: the aggregate of section 4 on ``lakesink.committed(spark, path)``, which looks
  the group's newest cut up and reads the table at its version, against the same query on
  the table's committed rows at its latest version (what a reader did before cuts);
- two tables: both aggregates through one call, ``lakesink.committed(spark, a, b)`` (one
  cut), against the two tables read apart at their latest versions;
- the publish: a checkpoint's two commits with the cut recorded, against recording the cut
  alone, and how many commits the cut adds (versions of the cuts table per checkpoint).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    BenchmarkError,
    Timing,
    Workspace,
    alternate,
    batch,
    cached_rows,
    latest_committed,
    timed,
)
from benchmarks.reader import aggregate
from benchmarks.report import Column, Section
from lakesink.core import CheckpointCoordinator, GlobalCommitter
from lakesink.delta.sink import DeltaSink
from lakesink.readers.spark import committed
from lakesink.tables.checkpoints import DeltaCheckpointStore
from lakesink.tables.cuts import cuts_path
from lakesink.tables.history import table_version

__all__ = ["CutPoint", "cut_section", "measure"]

SINKS = ("orders", "copies")


@dataclass(frozen=True)
class CutPoint:
    """The timings of one table size."""

    rows: int  # committed rows in each table
    checkpoints: int
    one_latest: Timing
    one_cut: Timing
    two_apart: Timing
    two_cut: Timing
    checkpoint: Timing  # a checkpoint of both tables, the cut recorded
    record: Timing  # recording the cut alone
    cut_commits: float  # commits to the cuts table per checkpoint


def measure(
    spark: SparkSession,
    workspace: Workspace,
    sizes: Sequence[int],
    checkpoints: int,
    repetitions: int,
) -> list[CutPoint]:
    """Measure each size: ``checkpoints`` checkpoints of that many rows a table."""
    points = []
    for rows in sizes:
        data = cached_rows(spark, rows)
        points.append(_measure(spark, workspace, data, rows, checkpoints, repetitions))
        data.unpersist()
    return points


def _measure(
    spark: SparkSession,
    workspace: Workspace,
    data: DataFrame,
    rows: int,
    checkpoints: int,
    repetitions: int,
) -> CutPoint:
    folder = workspace.folder(f"cut-{rows}")
    paths = {name: f"{folder}/{name}" for name in SINKS}
    sinks = {
        name: DeltaSink(spark, path, schema=data.schema, view_name=f"bench_cut_{name}")
        for name, path in paths.items()
    }
    job = CheckpointCoordinator(
        DeltaCheckpointStore(f"{folder}/state"), job_id="bench-cut", sinks=sinks
    )
    cuts = cuts_path(sinks["orders"].journal_path)
    before = table_version(cuts)
    checkpoint_seconds = []
    for index in range(checkpoints):
        for sink in sinks.values():
            sink.write(batch(data, index, rows))
        checkpoint_seconds.append(timed(partial(job.trigger_checkpoint, str(index))))
    cut_commits = (table_version(cuts) - before) / checkpoints
    a, b = paths["orders"], paths["copies"]
    both = committed(spark, a, b)
    if any(frame.count() != rows * checkpoints for frame in both):
        raise BenchmarkError("the cut benchmark's tables do not hold every row once")

    def one() -> dict[str, float]:
        return {
            "one_latest": timed(lambda: aggregate(latest_committed(spark, a))),
            "one_cut": timed(lambda: aggregate(committed(spark, a))),
        }

    def at_one_cut() -> None:
        for frame in committed(spark, a, b):
            aggregate(frame)

    def apart() -> None:
        for path in (a, b):
            aggregate(latest_committed(spark, path))

    def two() -> dict[str, float]:
        return {"two_apart": timed(apart), "two_cut": timed(at_one_cut)}

    def record() -> dict[str, float]:
        last = job.last.checkpoint_id if job.last else 0
        return {"record": timed(lambda: GlobalCommitter(sinks, group_id="bench-cut").record(last))}

    timings = alternate(repetitions, one, two, record)
    job.close()
    workspace.drop(folder)
    return CutPoint(
        rows=rows * checkpoints,
        checkpoints=checkpoints,
        checkpoint=Timing(tuple(checkpoint_seconds)),
        cut_commits=cut_commits,
        **timings,
    )


def cut_section(points: Sequence[CutPoint]) -> Section:
    """Section 10: reads at one cut against reads of the latest versions; the cut's cost."""
    rows = []
    for p in points:
        rows.append(
            {
                "rows": p.rows,
                "one_latest_s": p.one_latest.median,
                "one_cut_s": p.one_cut.median,
                "one_ratio": p.one_cut.median / p.one_latest.median,
                "two_apart_s": p.two_apart.median,
                "two_cut_s": p.two_cut.median,
                "two_ratio": p.two_cut.median / p.two_apart.median,
                "checkpoint_s": p.checkpoint.median,
                "record_s": p.record.median,
                "cut_commits": p.cut_commits,
                "samples": {
                    name: list(getattr(p, name).samples)
                    for name in (
                        "one_latest",
                        "one_cut",
                        "two_apart",
                        "two_cut",
                        "checkpoint",
                        "record",
                    )
                },
            }
        )
    return Section(
        key="cut",
        title="Reading a group's tables at one cut, and recording the cut",
        baseline="x reading the tables' latest versions (one table; two tables apart)",
        columns=(
            Column("rows", "rows a table", "int"),
            Column("one_latest_s", "one table, latest", "seconds"),
            Column("one_cut_s", "one table, at its cut", "seconds"),
            Column("one_ratio", "ratio", "ratio"),
            Column("two_apart_s", "two tables apart", "seconds"),
            Column("two_cut_s", "two tables at one cut", "seconds"),
            Column("two_ratio", "ratio", "ratio"),
            Column("checkpoint_s", "two-table checkpoint (cut included)", "seconds"),
            Column("record_s", "recording the cut", "seconds"),
            Column("cut_commits", "commits the cut adds", "text"),
        ),
        rows=tuple(rows),
    )
