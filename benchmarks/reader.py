"""Section 4: what reading through the committed view costs over reading plain Delta.

A lakesink table and a plain Delta table get the same checkpoints of distinct rows (the
lakesink one through the sink, committed). Two queries run on the committed view
(``lakesink.readers.spark.committed``) and on the plain table: a full scan of every column
(written to Spark's ``noop`` sink, so every value is decoded) and an aggregate by
customer. Then one checkpoint is left pre-committed but not committed, and a second
writer aborts another, and both queries run again: the committed rows are unchanged, the
lakesink table now also holds masked rows a reader must skip.

Before each round, both tables are checked to hold the same rows (count and sum of ids),
so the comparison is like with like and no pending or aborted row is visible.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from benchmarks.harness import (
    BenchmarkError,
    ScanCounter,
    Timing,
    Workspace,
    alternate,
    batch,
    create_plain_table,
    open_sink,
    plain_append,
    timed,
)
from benchmarks.report import Column, Section
from lakesink.readers.spark import committed

__all__ = ["QUERIES", "ReaderPoint", "aggregate", "measure", "reader_section", "same_rows"]


@dataclass(frozen=True)
class ReaderPoint:
    """One query on one state of the tables."""

    query: str
    table: str  # "committed only" or "+ pending and aborted"
    rows: int  # committed rows, in either table
    masked_rows: int  # pending and aborted rows in the lakesink table
    lakesink: Timing
    plain: Timing
    lakesink_files_read: int | None
    plain_files_read: int | None


def _scan(frame: DataFrame) -> None:
    frame.write.format("noop").mode("overwrite").save()


def aggregate(frame: DataFrame) -> None:
    """The aggregate every read section times: per customer, a count, a sum and a max."""
    frame.groupBy("customer").agg(F.count(F.lit(1)), F.sum("amount"), F.max("ts")).collect()


QUERIES: dict[str, Callable[[DataFrame], None]] = {"scan": _scan, "aggregate": aggregate}


def measure(
    spark: SparkSession,
    workspace: Workspace,
    rows: DataFrame,
    size: int,
    checkpoints: int,
    repetitions: int,
) -> list[ReaderPoint]:
    """Both queries on ``checkpoints`` committed checkpoints of ``size`` rows, then with
    one pending and one aborted checkpoint of the same size added."""
    folder = workspace.folder("reader")
    path, plain = f"{folder}/events", f"{folder}/plain"
    create_plain_table(spark, plain, rows.schema)
    sink = open_sink(spark, path, rows.schema)
    try:
        for index in range(checkpoints):
            sink.write(batch(rows, index, size))
            sink.notify_checkpoint_complete(sink.prepare_commit())
            plain_append(batch(rows, index, size), plain)
        points = _round(spark, path, plain, "committed only", 0, repetitions)
        sink.write(batch(rows, checkpoints, size))
        sink.prepare_commit()  # pre-committed, never committed: pending
        aborter = open_sink(spark, path, rows.schema, writer_id="aborter")
        aborter.write(batch(rows, checkpoints + 1, size))
        aborter.close()  # aborted
        points += _round(spark, path, plain, "+ pending and aborted", 2 * size, repetitions)
    finally:
        sink.close()
    return points


def _round(
    spark: SparkSession, path: str, plain: str, table: str, masked: int, repetitions: int
) -> list[ReaderPoint]:
    def lakesink_rows() -> DataFrame:
        return committed(spark, path)

    def plain_rows() -> DataFrame:
        return spark.read.format("delta").load(plain)

    total = same_rows(lakesink_rows(), plain_rows(), path)
    scans = ScanCounter(spark)
    points = []
    for name, query in QUERIES.items():
        files: dict[str, int | None] = {}

        def run(side: str, rows: Callable[[], DataFrame], query=query, files=files) -> float:
            with scans.counting() as counted:
                seconds = timed(lambda: query(rows()))
            files[side] = counted[0]
            return seconds

        timings = alternate(
            repetitions,
            lambda run=run: {"lakesink": run("lakesink", lakesink_rows)},
            lambda run=run: {"plain": run("plain", plain_rows)},
        )
        points.append(
            ReaderPoint(
                query=name,
                table=table,
                rows=total,
                masked_rows=masked,
                lakesink=timings["lakesink"],
                plain=timings["plain"],
                lakesink_files_read=files["lakesink"],
                plain_files_read=files["plain"],
            )
        )
    return points


def same_rows(lakesink: DataFrame, plain: DataFrame, path: str) -> int:
    """Check that both tables hold the same rows; return how many."""
    summary = [F.count(F.lit(1)).alias("rows"), F.sum("id").alias("ids")]
    ours, theirs = lakesink.agg(*summary).first(), plain.agg(*summary).first()
    if (ours["rows"], ours["ids"]) != (theirs["rows"], theirs["ids"]):
        raise BenchmarkError(
            f"the committed view of {path} holds {ours['rows']} rows (id sum {ours['ids']}), "
            f"the plain table {theirs['rows']} (id sum {theirs['ids']}): a benchmark bug or "
            "a visibility bug; the comparison would be meaningless"
        )
    return int(ours["rows"])


def reader_section(points: list[ReaderPoint]) -> Section:
    """Section 4: each query on the committed view against the same on plain Delta."""
    return Section(
        key="reader",
        title="Reader overhead",
        baseline="x the same query on a plain Delta table holding the same committed rows",
        columns=(
            Column("query", "query", "text"),
            Column("table", "lakesink table holds", "text"),
            Column("rows", "committed rows", "int"),
            Column("plain_s", "plain Delta", "seconds"),
            Column("lakesink_s", "committed view", "seconds"),
            Column("ratio", "ratio", "ratio"),
            Column("plain_files_read", "files read (plain)", "int"),
            Column("lakesink_files_read", "files read (view)", "int"),
        ),
        rows=tuple(
            {
                "query": p.query,
                "table": p.table,
                "rows": p.rows,
                "masked_rows": p.masked_rows,
                "plain_s": p.plain.median,
                "lakesink_s": p.lakesink.median,
                "ratio": p.lakesink.median / p.plain.median,
                "plain_files_read": p.plain_files_read,
                "lakesink_files_read": p.lakesink_files_read,
                "samples": {"plain": list(p.plain.samples), "lakesink": list(p.lakesink.samples)},
            }
            for p in points
        ),
    )
