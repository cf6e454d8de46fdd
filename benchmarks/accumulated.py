"""Section 8: readers of a table that has accumulated many checkpoints.

Each commit writes its checkpoint's rows into the committed partition as a file or two, so
a long-running job's table holds thousands of small files until lakesink's maintenance
(the vacuum job's compaction) merges them. The lakesink table is built directly in the
layout its commits leave: the same rows as a plain Delta table of one append, spread over
one file per checkpoint in the committed partition (running thousands of real commits
would take hours and measure the same layout). The committed-view aggregate is timed
against the same query on the plain table, before and after ``lakesink.ops.compact``.

Before each round, both tables are checked to hold the same rows (count and sum of ids).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.harness import (
    ScanCounter,
    Timing,
    Workspace,
    alternate,
    create_plain_table,
    plain_append,
    timed,
    versus,
)
from benchmarks.reader import QUERIES, same_rows
from benchmarks.report import Column, Section
from lakesink.ops.compact import compact, plan_compaction
from lakesink.readers.spark import committed
from lakesink.tables.format import CHECKPOINT_ID, PENDING, TXN_ID, VISIBLE, ensure_sink_table
from lakesink.tables.journal import default_journal_path

__all__ = ["AccumulatedPoint", "accumulated_section", "measure"]


@dataclass(frozen=True)
class AccumulatedPoint:
    """The aggregate over a table of ``checkpoints`` committed checkpoints, in one state."""

    checkpoints: int
    state: str  # "as committed" or "after maintenance"
    rows: int
    files: int  # data files the committed view read
    plain: Timing
    lakesink: Timing
    maintenance_s: float | None  # the compaction's own time (after maintenance only; JSON)


def measure(
    spark: SparkSession,
    workspace: Workspace,
    rows: DataFrame,
    checkpoints: Sequence[int],
    repetitions: int,
) -> list[AccumulatedPoint]:
    """The aggregate at each number of checkpoints, before and after compaction."""
    folder = workspace.folder("accumulated")
    plain = f"{folder}/plain"
    create_plain_table(spark, plain, rows.schema)
    plain_append(rows, plain)
    points = []
    for count in checkpoints:
        path = f"{folder}/events-{count}"
        _committed_layout(spark, path, rows, count)
        points.append(_point(spark, path, plain, count, "as committed", None, repetitions))
        plan = plan_compaction(path, None)
        seconds = timed(lambda plan=plan: compact(spark, plan, sink_id="bench"))
        points.append(_point(spark, path, plain, count, "after maintenance", seconds, repetitions))
        workspace.drop(path)
    return points


def _committed_layout(spark: SparkSession, path: str, rows: DataFrame, checkpoints: int) -> None:
    """A sink table whose committed partition holds ``rows`` as ``checkpoints`` files."""
    ensure_sink_table(
        spark, path, sink_id="bench", schema=rows.schema, journal=default_journal_path(path)
    )
    # One task per checkpoint, each writing its rows as one file, as each commit does.
    checkpoint = (F.spark_partition_id() + 1).cast("bigint")
    (
        rows.repartition(checkpoints)
        .select(
            F.lit(True).alias(VISIBLE),
            F.lit(None).cast("string").alias(PENDING),
            checkpoint.alias(CHECKPOINT_ID),
            F.concat(F.lit("txn-"), checkpoint.cast("string")).alias(TXN_ID),
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
    checkpoints: int,
    state: str,
    maintenance_s: float | None,
    repetitions: int,
) -> AccumulatedPoint:
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
        state=state,
        rows=total,
        files=files[0] or 0,
        plain=timings["plain"],
        lakesink=timings["lakesink"],
        maintenance_s=maintenance_s,
    )


def accumulated_section(points: list[AccumulatedPoint]) -> Section:
    """Section 8: the committed-view aggregate over many checkpoints, before and after."""
    return Section(
        key="accumulated",
        title="Readers over many checkpoints",
        baseline="x the same aggregate on a plain Delta table of the same rows in one append",
        columns=(
            Column("checkpoints", "committed checkpoints", "int"),
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
                state=p.state,
                rows=p.rows,
                files=p.files,
                maintenance_s=p.maintenance_s,
            )
            for p in points
        ),
    )
