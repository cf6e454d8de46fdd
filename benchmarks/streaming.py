"""Section 6: a micro-batch through ``StreamingSink`` against Delta's own idempotent
``foreachBatch`` write (``txnAppId`` = the query id, ``txnVersion`` = the batch id), which is
what a Structured Streaming user picks instead.

For each batch size, the same Parquet files (one a batch, ``maxFilesPerTrigger`` 1) feed two
``availableNow`` queries, each into a fresh table with a fresh checkpoint location. Both
tables exist before the clock starts (the plain one created empty, lakesink's by opening
the ``StreamingSink``, which also recovers: once per run of a query, not per batch). A
query's time runs from its start until every batch is visible: for lakesink, that includes
the last batch's commit. The figure is that time per batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from benchmarks.harness import (
    Folders,
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
from lakesink.readers.spark import committed
from lakesink.storage.location import join
from lakesink.streaming import StreamingSink

__all__ = [
    "StreamInput",
    "StreamPoint",
    "foreach_batch_query",
    "foreach_batch_seconds",
    "lakesink_query",
    "lakesink_seconds",
    "measure",
    "streaming_section",
    "write_batches",
]


@dataclass(frozen=True)
class StreamPoint:
    """The per-batch timings of one batch size."""

    rows: int
    batches: int
    foreach_batch: Timing
    lakesink: Timing
    lakesink_metadata: Timing  # the same query, its sink committing by metadata


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
        given = write_batches(workspace, data, rows, batches)
        timings = by_commit_mode(
            repetitions, "foreach_batch", partial(_seconds, spark, workspace, given)
        )
        data.unpersist()
        workspace.drop(given.files)
        points.append(StreamPoint(rows=rows, batches=batches, **timings))
    return points


@dataclass(frozen=True)
class StreamInput:
    """A query's input: ``batches`` Parquet files of ``rows`` distinct rows each."""

    files: str
    schema: StructType
    rows: int
    batches: int

    def stream(self, spark: SparkSession) -> DataFrame:
        """The files as a stream, one file a micro-batch."""
        source = spark.readStream.schema(self.schema).option("maxFilesPerTrigger", 1)
        return source.parquet(self.files)


def write_batches(folders: Folders, data: DataFrame, rows: int, batches: int) -> StreamInput:
    """Write ``batches`` blocks of the cached ``rows`` to a new folder of ``folders``."""
    files = folders.folder(f"stream-input-{rows}")
    for index in range(batches):  # written in order: the file source takes them so
        batch(data, index, rows).coalesce(1).write.mode("append").parquet(files)
    return StreamInput(files=files, schema=data.schema, rows=rows, batches=batches)


def _seconds(
    spark: SparkSession, folders: Folders, given: StreamInput, commit: str | None
) -> float:
    """A batch's seconds: of Delta's own query (``commit`` None), or of lakesink's."""
    if commit is None:
        return foreach_batch_seconds(spark, folders, given)
    return lakesink_seconds(spark, folders, given, commit=commit)


def foreach_batch_seconds(spark: SparkSession, folders: Folders, given: StreamInput) -> float:
    """Seconds a batch of Delta's idempotent ``foreachBatch`` query over ``given``.

    Its table and checkpoint location go in a fresh folder of ``folders``, dropped once
    the table's rows were checked.
    """
    folder = folders.folder(f"stream-plain-{given.rows}")
    create_plain_table(spark, join(folder, "table"), given.schema)
    table, location = join(folder, "table"), join(folder, "checkpoint")
    seconds = timed(lambda: foreach_batch_query(given.stream(spark), table, location))
    check_rows(
        spark.read.format("delta").load(join(folder, "table")),
        given.rows * given.batches,
        "a streaming query table",
    )
    folders.drop(folder)
    return seconds / given.batches


def lakesink_seconds(
    spark: SparkSession, folders: Folders, given: StreamInput, *, commit: str = "merge"
) -> float:
    """Seconds a batch of a ``StreamingSink`` query over ``given``, its last commit included;
    ``commit`` is the sink's commit mode.

    Its table and checkpoint location go in a fresh folder of ``folders`` (local, or on an
    object store), dropped once the committed rows were checked.
    """
    folder = folders.folder(f"stream-lakesink-{given.rows}")
    location = join(folder, "checkpoint")
    sink = StreamingSink(
        spark,
        join(folder, "table"),
        checkpoint_location=location,
        schema=given.schema,
        view_name="lakesink_bench_stream",
        commit=commit,
    )
    try:
        seconds = timed(lambda: lakesink_query(sink, given.stream(spark), location))
    finally:
        sink.close()
    check_rows(
        committed(spark, join(folder, "table")),
        given.rows * given.batches,
        "a streaming query table",
    )
    folders.drop(folder)
    return seconds / given.batches


def streaming_section(points: Sequence[StreamPoint]) -> Section:
    """Section 6: StreamingSink per micro-batch against Delta's idempotent foreachBatch."""
    rows = [
        {
            **versus("foreach_batch", p.foreach_batch, p.lakesink, rows=p.rows, batches=p.batches),
            "metadata_s": p.lakesink_metadata.median,
            "metadata_ratio": p.lakesink_metadata.median / p.foreach_batch.median,
        }
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
            Column("lakesink_s", "StreamingSink (MERGE), a batch", "seconds"),
            Column("ratio", "ratio (MERGE)", "ratio"),
            Column("metadata_s", "StreamingSink (metadata), a batch", "seconds"),
            Column("metadata_ratio", "ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )


def foreach_batch_query(stream: DataFrame, table: str, location: str) -> None:
    """Run Delta's exactly-once ``foreachBatch`` query over ``stream`` into ``table``."""

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


def lakesink_query(sink: StreamingSink, stream: DataFrame, location: str) -> None:
    """Run a ``StreamingSink`` query over ``stream``, until its last batch is committed."""
    query = stream.writeStream.foreachBatch(sink).option("checkpointLocation", location)
    query.trigger(availableNow=True).start().awaitTermination()
    sink.commit()  # the last batch, if the listener has not committed it yet
