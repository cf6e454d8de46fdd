"""Section 8: readers of a table that has accumulated many checkpoints.

Each commit puts its checkpoint's rows into the committed partition as a file or two, so a
long-running job's table holds thousands of small files until lakesink's maintenance (the
vacuum, whose compaction merges them) runs. At each point, a lakesink table holds the same
rows as a plain Delta table written by one append, spread over that many checkpoints:

- written through a sink (the default): one ``DeltaSink`` created in the metadata mode
  (each checkpoint a small append and a commit of milliseconds), one checkpoint after
  another, each checkpoint's rows (the next block of ids of the plain table's rows) as
  one file (``coalesce(1)``); the whole log of a real history, its checkpoints, journal
  and published table included;
- built directly (the points of ``Suite.accumulated_built``): the layout those commits
  leave in format 5, one file per checkpoint in the committed partition
  (``_lakesink_visible`` true, ``_lakesink_pending`` and ``_lakesink_checkpoint_id``
  NULL, as a metadata commit in a table of no group leaves them), written by one Spark
  append. The full run builds its 5,000-checkpoint point so: written through a sink, a
  checkpoint of 1,000 rows takes about 0.5 s (a Spark write, the append's and the
  commit's log entries, the published table's, the journal; 1,000 in a row took 522 s on
  2 cores, 2026-11-29), so 5,000 would take over 40 minutes.
  Its log is one commit of 5,000 files where a real one holds thousands of commits; the
  reader reads as many files, of as many rows each.

The aggregate of section 4 over the committed view (``lakesink.committed``) is timed
against the same query on the plain table as committed, then after
``lakesink.ops.vacuum.vacuum`` (zero retention), which compacts the committed partition;
the vacuum's own time is in the JSON (``maintenance_s``), with the writing's
(``written_s``).

Before each round, both tables are checked to hold the same rows (count and sum of ids).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.harness import (
    BenchmarkError,
    ScanCounter,
    Timing,
    Workspace,
    alternate,
    create_plain_table,
    open_sink,
    plain_append,
    timed,
    versus,
)
from benchmarks.reader import QUERIES, same_rows
from benchmarks.report import Column, Section
from lakesink.delta.table import ensure_sink_table
from lakesink.ops.vacuum import vacuum
from lakesink.readers.spark import committed
from lakesink.tables.format import CHECKPOINT_ID, PENDING, VISIBLE
from lakesink.tables.journal import default_journal_path

__all__ = ["AccumulatedPoint", "accumulated_section", "measure"]

log = logging.getLogger("benchmarks")

THROUGH_SINK = "through the sink"
BUILT = "built directly"


@dataclass(frozen=True)
class AccumulatedPoint:
    """The aggregate over a table of ``checkpoints`` committed checkpoints, in one state."""

    checkpoints: int
    written: str  # THROUGH_SINK or BUILT
    state: str  # "as committed" or "after maintenance"
    rows: int
    files: int  # data files the committed view read
    plain: Timing
    lakesink: Timing
    written_s: float  # the writing of the table's checkpoints (JSON)
    maintenance_s: float | None  # the vacuum's own time (after maintenance only; JSON)


def measure(
    spark: SparkSession,
    workspace: Workspace,
    rows: DataFrame,
    checkpoints: Sequence[int],
    repetitions: int,
    built: Collection[int] = (),
) -> list[AccumulatedPoint]:
    """The aggregate at each number of checkpoints, before and after the vacuum; the
    tables of the points in ``built`` are built directly, the others written through a sink.

    Raises:
        BenchmarkError: The rows do not split evenly into a point's checkpoints.
    """
    total = rows.count()
    folder = workspace.folder("accumulated")
    plain = f"{folder}/plain"
    create_plain_table(spark, plain, rows.schema)
    plain_append(rows, plain)
    points = []
    for count in checkpoints:
        if total % count:
            raise BenchmarkError(f"{total} rows do not split into {count} equal checkpoints")
        path = f"{folder}/events-{count}"
        written = BUILT if count in built else THROUGH_SINK
        log.info("8. %d checkpoints of %d rows, %s", count, total // count, written)
        write = _committed_layout if count in built else _written_through_sink
        written_s = timed(
            lambda path=path, count=count, write=write: write(spark, path, rows, count)
        )
        state = (count, written, written_s)
        points.append(_point(spark, path, plain, state, "as committed", None, repetitions))
        seconds = timed(
            lambda path=path: vacuum(spark, path, retain_hours=0, allow_short_retention=True)
        )
        points.append(_point(spark, path, plain, state, "after maintenance", seconds, repetitions))
        workspace.drop(path)
    return points


def _written_through_sink(
    spark: SparkSession, path: str, rows: DataFrame, checkpoints: int
) -> None:
    """``rows`` committed through one sink (metadata mode) as ``checkpoints`` checkpoints,
    each the next block of ids, written as one file."""
    size = rows.count() // checkpoints
    sink = open_sink(spark, path, rows.schema, commit="metadata")
    try:
        for index in range(checkpoints):
            block = rows.where(F.col("id").between(index * size, (index + 1) * size - 1))
            sink.write(block.coalesce(1))
            sink.notify_checkpoint_complete(sink.prepare_commit())
            if (index + 1) % 100 == 0:
                log.info("8. %d of %d checkpoints committed", index + 1, checkpoints)
    finally:
        sink.close()


def _committed_layout(spark: SparkSession, path: str, rows: DataFrame, checkpoints: int) -> None:
    """A sink table (metadata mode) whose committed partition holds ``rows`` as
    ``checkpoints`` files, as that many metadata commits leave it in format 5."""
    ensure_sink_table(
        spark,
        path,
        sink_id="bench",
        schema=rows.schema,
        journal=default_journal_path(path),
        commit_mode="metadata",
    )
    # One task per checkpoint, each writing its rows as one file, as each commit does.
    (
        rows.repartition(checkpoints)
        .select(
            F.lit(True).alias(VISIBLE),
            F.lit(None).cast("string").alias(PENDING),
            F.lit(None).cast("bigint").alias(CHECKPOINT_ID),
            *rows.columns,
        )
        .write.format("delta")
        .mode("append")
        .save(path)
    )


def _point(
    spark: SparkSession,
    path: str,
    plain: str,
    table: tuple[int, str, float],
    state: str,
    maintenance_s: float | None,
    repetitions: int,
) -> AccumulatedPoint:
    """The aggregate over the table, ``table`` its checkpoints, how and in how long they
    were written."""
    checkpoints, written, written_s = table

    def lakesink_rows() -> DataFrame:
        return committed(spark, path)

    def plain_rows() -> DataFrame:
        return spark.read.format("delta").load(plain)

    total = same_rows(lakesink_rows(), plain_rows(), path)
    aggregate = QUERIES["aggregate"]
    scans = ScanCounter(spark)
    files: list[int | None] = [None]

    def ours() -> dict[str, float]:
        with scans.counting() as counted:
            seconds = timed(lambda: aggregate(lakesink_rows()))
        files[0] = counted[0]
        return {"lakesink": seconds}

    timings = alternate(
        repetitions, ours, lambda: {"plain": timed(lambda: aggregate(plain_rows()))}
    )
    return AccumulatedPoint(
        checkpoints=checkpoints,
        written=written,
        state=state,
        rows=total,
        files=files[0] or 0,
        plain=timings["plain"],
        lakesink=timings["lakesink"],
        written_s=written_s,
        maintenance_s=maintenance_s,
    )


def accumulated_section(points: list[AccumulatedPoint]) -> Section:
    """Section 8: the committed-view aggregate over many checkpoints, before and after the
    vacuum's compaction."""
    return Section(
        key="accumulated",
        title="Readers over many checkpoints",
        baseline="x the same aggregate on a plain Delta table of the same rows in one append",
        columns=(
            Column("checkpoints", "committed checkpoints", "int"),
            Column("written", "written", "text"),
            Column("state", "table", "text"),
            Column("rows", "rows", "int"),
            Column("files", "files the view read", "int"),
            Column("plain_s", "plain Delta", "seconds"),
            Column("lakesink_s", "committed view", "seconds"),
            Column("ratio", "ratio", "ratio"),
        ),
        rows=tuple(
            versus(
                "plain",
                p.plain,
                p.lakesink,
                checkpoints=p.checkpoints,
                written=p.written,
                state=p.state,
                rows=p.rows,
                files=p.files,
                written_s=p.written_s,
                maintenance_s=p.maintenance_s,
            )
            for p in points
        ),
    )
