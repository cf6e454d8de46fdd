"""Section 11: a scheduled ``availableNow`` run into an existing table, opening included.

What a scheduled job pays every time it runs: a query resumes from its checkpoint over the
files that arrived since its last run, into a table that already holds that run's batches.
For lakesink the clock includes opening the ``StreamingSink`` (checking the table and
journal, recovery, the writer's lock, the view) and closing it (the last batch's commit);
the baseline is Delta's own exactly-once ``foreachBatch`` write (``txnAppId`` = the query,
``txnVersion`` = the batch id) into its existing table. Each repetition builds both tables
with a first, untimed run over ``batches`` files, then adds ``batches`` more and times the
second run; the figure is that run's time per batch.
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
    timed,
    versus,
)
from benchmarks.report import Column, Section
from benchmarks.streaming import foreach_batch_query, lakesink_query
from lakesink.readers.spark import committed
from lakesink.storage.location import join
from lakesink.streaming import StreamingSink

__all__ = ["ScheduledPoint", "measure", "scheduled_section"]


@dataclass(frozen=True)
class ScheduledPoint:
    """The per-batch timings of one batch size."""

    rows: int
    batches: int
    foreach_batch: Timing
    lakesink: Timing
    lakesink_metadata: Timing


def measure(
    spark: SparkSession,
    workspace: Workspace,
    sizes: Sequence[int],
    batches: int,
    repetitions: int,
) -> list[ScheduledPoint]:
    """Time the second run of both jobs for each batch size."""
    points = []
    for rows in sizes:
        data = cached_rows(spark, rows)
        timings = by_commit_mode(
            repetitions,
            "foreach_batch",
            partial(_run, spark, workspace, data, rows, batches),
        )
        data.unpersist()
        points.append(ScheduledPoint(rows=rows, batches=batches, **timings))
    return points


def _run(
    spark: SparkSession,
    workspace: Workspace,
    data: DataFrame,
    rows: int,
    batches: int,
    commit: str | None,
) -> float:
    """Seconds a batch of the second run of a job (``commit`` None: the baseline's); the
    first builds its table."""
    folder = workspace.folder(f"scheduled-{commit or 'plain'}-{rows}")
    files, table, location = (join(folder, name) for name in ("input", "table", "checkpoint"))
    if commit is None:
        create_plain_table(spark, table, data.schema)
    seconds = 0.0
    for run in range(2):
        for index in range(run * batches, (run + 1) * batches):  # the files of this run
            batch(data, index, rows).coalesce(1).write.mode("append").parquet(files)
        stream = spark.readStream.schema(data.schema).option("maxFilesPerTrigger", 1).parquet(files)
        seconds = timed(partial(_job, spark, stream, table, location, commit))
    read = committed(spark, table) if commit else spark.read.format("delta").load(table)
    check_rows(read, rows * batches * 2, "a scheduled job's table")
    workspace.drop(folder)
    return seconds / batches


def _job(
    spark: SparkSession, stream: DataFrame, table: str, location: str, commit: str | None
) -> None:
    """One run of the job: the baseline's query, or lakesink's sink opened, run and closed."""
    if commit is None:
        foreach_batch_query(stream, table, location)
        return
    sink = StreamingSink(
        spark,
        table,
        checkpoint_location=location,
        schema=stream.schema,
        view_name="lakesink_bench_scheduled",
        commit=commit,
    )
    try:
        lakesink_query(sink, stream, location)
    finally:
        sink.close()


def scheduled_section(points: Sequence[ScheduledPoint]) -> Section:
    """Section 11: a scheduled run into an existing table against Delta's foreachBatch."""
    rows = [
        {
            **versus("foreach_batch", p.foreach_batch, p.lakesink, rows=p.rows, batches=p.batches),
            "metadata_s": p.lakesink_metadata.median,
            "metadata_ratio": p.lakesink_metadata.median / p.foreach_batch.median,
            "samples": {
                "foreach_batch": list(p.foreach_batch.samples),
                "lakesink": list(p.lakesink.samples),
                "lakesink_metadata": list(p.lakesink_metadata.samples),
            },
        }
        for p in points
    ]
    return Section(
        key="scheduled",
        title="A scheduled availableNow run into an existing table, opening included",
        baseline="x Delta's idempotent foreachBatch write, its existing table",
        columns=(
            Column("rows", "rows a batch", "int"),
            Column("batches", "batches a run", "int"),
            Column("foreach_batch_s", "foreachBatch + txnVersion, a batch", "seconds"),
            Column("lakesink_s", "StreamingSink (MERGE), a batch", "seconds"),
            Column("ratio", "ratio (MERGE)", "ratio"),
            Column("metadata_s", "StreamingSink (metadata), a batch", "seconds"),
            Column("metadata_ratio", "ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )
