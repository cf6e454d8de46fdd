"""Section 6: a micro-batch through ``StreamingSink`` against Delta's own idempotent
``foreachBatch`` write (``txnAppId`` = the query id, ``txnVersion`` = the batch id), which is
what a Structured Streaming user picks instead.

For each batch size, the same Parquet files (one a batch, ``maxFilesPerTrigger`` 1) feed two
``availableNow`` queries, each into a fresh table with a fresh checkpoint location. A
query's time runs from its start until every batch is visible: for lakesink, that includes
the last batch's commit when the ``with`` block ends. The figure is that time per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    Timing,
    Workspace,
    alternate,
    batch,
    cached_rows,
    check_rows,
    timed,
    versus,
)
from benchmarks.report import Column, Section
from lakesink.delta.readers import committed
from lakesink.streaming import StreamingSink

__all__ = ["StreamPoint", "measure", "streaming_section"]


@dataclass(frozen=True)
class StreamPoint:
    """The per-batch timings of one batch size."""

    rows: int
    batches: int
    foreach_batch: Timing
    lakesink: Timing


def measure(
    spark: SparkSession,
    workspace: Workspace,
    sizes: Sequence[int],
    batches: int,
    repetitions: int,
) -> list[StreamPoint]:
    """Time both queries over the same ``batches`` files of each size."""
    points = []
    for rows in sizes:
        data = cached_rows(spark, rows)
        files = workspace.folder(f"stream-input-{rows}")
        for index in range(batches):  # written in order: the file source takes them so
            batch(data, index, rows).coalesce(1).write.mode("append").parquet(files)
        source = spark.readStream.schema(data.schema).option("maxFilesPerTrigger", 1)

        def plain(rows=rows, files=files, source=source) -> dict[str, float]:
            folder = workspace.folder(f"stream-plain-{rows}")
            seconds = timed(lambda: _foreach_batch_query(source.parquet(files), folder))
            check_rows(
                spark.read.format("delta").load(f"{folder}/table"),
                rows * batches,
                "a streaming query table",
            )
            workspace.drop(folder)
            return {"foreach_batch": seconds / batches}

        def lakesink(rows=rows, files=files, source=source) -> dict[str, float]:
            folder = workspace.folder(f"stream-lakesink-{rows}")
            seconds = timed(lambda: _lakesink_query(spark, source.parquet(files), folder))
            check_rows(
                committed(spark, f"{folder}/table"), rows * batches, "a streaming query table"
            )
            workspace.drop(folder)
            return {"lakesink": seconds / batches}

        timings = alternate(repetitions, plain, lakesink)
        data.unpersist()
        workspace.drop(files)
        points.append(StreamPoint(rows=rows, batches=batches, **timings))
    return points


def streaming_section(points: Sequence[StreamPoint]) -> Section:
    """Section 6: StreamingSink per micro-batch against Delta's idempotent foreachBatch."""
    rows = [
        versus("foreach_batch", p.foreach_batch, p.lakesink, rows=p.rows, batches=p.batches)
        for p in points
    ]
    return Section(
        key="streaming",
        title="Micro-batch cost: StreamingSink vs idempotent foreachBatch",
        baseline="x Delta's idempotent foreachBatch write of the same batches",
        columns=(
            Column("rows", "rows a batch", "int"),
            Column("batches", "batches", "int"),
            Column("foreach_batch_s", "foreachBatch + txnVersion, a batch", "seconds"),
            Column("lakesink_s", "StreamingSink, a batch", "seconds"),
            Column("ratio", "ratio", "ratio"),
        ),
        rows=tuple(rows),
    )


def _foreach_batch_query(stream: DataFrame, folder: str) -> None:
    table, location = f"{folder}/table", f"{folder}/checkpoint"

    def write(frame: DataFrame, batch_id: int) -> None:
        # Delta's documented exactly-once foreachBatch: a replayed batch is skipped.
        (
            frame.write.format("delta")
            .mode("append")
            .option("txnAppId", "lakesink-bench")
            .option("txnVersion", batch_id)
            .save(table)
        )

    query = stream.writeStream.foreachBatch(write).option("checkpointLocation", location)
    query.trigger(availableNow=True).start().awaitTermination()


def _lakesink_query(spark: SparkSession, stream: DataFrame, folder: str) -> None:
    location = f"{folder}/checkpoint"
    with StreamingSink(
        spark,
        f"{folder}/table",
        checkpoint_location=location,
        schema=stream.schema,
        view_name="lakesink_bench_stream",
    ) as sink:
        query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", location)
        query.trigger(availableNow=True).start().awaitTermination()
