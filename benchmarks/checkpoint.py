"""Section 7: a whole checkpoint of a job with two sinks, through the checkpoint coordinator.

What a job pays per checkpoint however small it is: each sink appends its rows, the
coordinator pre-commits both (journal, validation off), records the checkpoint in its
Delta checkpoint table, then commits both (a MERGE each, or a metadata commit each, and the
journal). The baseline appends the same rows to two plain Delta tables. Each repetition
runs ``checkpoints`` checkpoints into fresh tables; the figure is the time of one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    Timing,
    Workspace,
    batch,
    by_commit_mode,
    cached_rows,
    check_rows,
    create_plain_table,
    plain_append,
    timed,
    versus,
)
from benchmarks.report import Column, Section
from lakesink.core import CheckpointCoordinator
from lakesink.delta.sink import DeltaSink
from lakesink.readers.spark import committed
from lakesink.tables.checkpoints import DeltaCheckpointStore

__all__ = ["CheckpointPoint", "checkpoint_section", "measure"]

SINKS = ("orders", "copies")


@dataclass(frozen=True)
class CheckpointPoint:
    """The per-checkpoint timings of one checkpoint size."""

    rows: int
    checkpoints: int
    plain: Timing
    lakesink: Timing
    lakesink_metadata: Timing  # the same, the sinks committing by metadata


def measure(
    spark: SparkSession,
    workspace: Workspace,
    sizes: Sequence[int],
    checkpoints: int,
    repetitions: int,
) -> list[CheckpointPoint]:
    """Time ``checkpoints`` checkpoints of each size, two tables each, both ways."""
    points = []
    for rows in sizes:
        data = cached_rows(spark, rows)
        batches = [batch(data, index, rows) for index in range(checkpoints)]
        timings = by_commit_mode(
            repetitions, "plain", partial(_seconds, spark, workspace, rows, batches)
        )
        data.unpersist()
        points.append(CheckpointPoint(rows=rows, checkpoints=checkpoints, **timings))
    return points


def _seconds(
    spark: SparkSession,
    workspace: Workspace,
    rows: int,
    batches: Sequence[DataFrame],
    commit: str | None,
) -> float:
    """A checkpoint's seconds: two plain appends (``commit`` None), or the coordinator's
    checkpoint of two sinks committing by ``commit``."""
    folder = workspace.folder(f"checkpoint-{commit or 'plain'}-{rows}")
    paths = [f"{folder}/{name}" for name in SINKS]
    schema = batches[0].schema
    if commit is None:
        for path in paths:
            create_plain_table(spark, path, schema)

        def work() -> None:
            for frame in batches:
                for path in paths:
                    plain_append(frame, path)

        seconds = timed(work)
        reads = [spark.read.format("delta").load(path) for path in paths]
    else:
        sinks = {
            name: DeltaSink(spark, path, schema=schema, view_name=f"bench_{name}", commit=commit)
            for name, path in zip(SINKS, paths, strict=True)
        }
        job = CheckpointCoordinator(
            DeltaCheckpointStore(f"{folder}/state"), job_id="bench", sinks=sinks
        )

        def work() -> None:
            for index, frame in enumerate(batches):
                for sink in sinks.values():
                    sink.write(frame)
                job.trigger_checkpoint(str(index))

        try:
            seconds = timed(work)
        finally:
            job.close()
        reads = [committed(spark, path) for path in paths]
    for read in reads:
        check_rows(read, rows * len(batches), "a checkpoint benchmark table")
    workspace.drop(folder)
    return seconds / len(batches)


def checkpoint_section(points: Sequence[CheckpointPoint]) -> Section:
    """Section 7: a coordinator checkpoint into two sinks against two plain appends."""
    rows = [
        _with_metadata(
            versus("plain", p.plain, p.lakesink, rows=p.rows, checkpoints=p.checkpoints), p
        )
        for p in points
    ]
    return Section(
        key="checkpoint",
        title="A whole checkpoint of a job with two sinks (coordinator)",
        baseline="x plain Delta appends of the same rows to two tables",
        columns=(
            Column("rows", "rows a sink", "int"),
            Column("checkpoints", "checkpoints", "int"),
            Column("plain_s", "two plain appends", "seconds"),
            Column("lakesink_s", "lakesink checkpoint (MERGE)", "seconds"),
            Column("ratio", "ratio (MERGE)", "ratio"),
            Column("metadata_s", "lakesink checkpoint (metadata)", "seconds"),
            Column("metadata_ratio", "ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )


def _with_metadata(row: dict[str, object], point: CheckpointPoint) -> dict[str, object]:
    """The row with the metadata commit's median, ratio and samples."""
    samples = {**row["samples"], "lakesink_metadata": list(point.lakesink_metadata.samples)}  # type: ignore[dict-item]
    return {
        **row,
        "metadata_s": point.lakesink_metadata.median,
        "metadata_ratio": point.lakesink_metadata.median / point.plain.median,
        "samples": samples,
    }
