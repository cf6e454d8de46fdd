"""Sections 3 and 5: commit and vacuum cost as the table's history grows.

One lakesink table and a plain Delta twin grow together, one small checkpoint (the same
rows, appended to the twin) at a time. At each history point (1, 10, 100 committed
checkpoints in the full run):

- vacuum: a second writer of the sink writes one checkpoint and closes without
  checkpointing, which aborts it; ``lakesink.ops.vacuum.vacuum`` (zero retention, so the files
  go too) removes it. A vacuum run beforehand, untimed, clears what earlier commits left,
  so each timed run garbage-collects exactly one aborted checkpoint.
- commit: one small checkpoint is written and pre-committed (untimed), then committed;
  the plain twin gets the same rows appended (the baseline of both sections). The files
  the commit's MERGE reads are counted: constant means it is pruned to its transaction.
  A third table, created in the metadata mode, grows with them and has its commit timed
  the same way. The update of each table's published table inside the measured commits
  is timed too (section 12: its cost should stay flat as the history grows), and each
  table's committed view and published table are checked to hold every committed row at
  each point.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    BenchmarkError,
    ScanCounter,
    Timing,
    Workspace,
    alternate,
    batch,
    check_rows,
    create_plain_table,
    delta_files,
    open_sink,
    plain_append,
    published_rows,
    timed,
    timing_publish,
)
from benchmarks.report import Column, Section
from lakesink.delta.sink import DeltaSink
from lakesink.ops.vacuum import vacuum
from lakesink.ops.vacuum_report import VacuumReport
from lakesink.readers.spark import committed

__all__ = ["HistoryPoint", "commit_history_section", "measure", "vacuum_section"]


@dataclass(frozen=True)
class HistoryPoint:
    """Timings at one history point."""

    history: int  # committed checkpoints in the table before the measured commits
    table_rows: int  # committed rows then
    table_files: int  # data files in the table's current version then
    commit: Timing
    metadata_commit: Timing  # the same checkpoint's commit in the table committed by metadata
    publish: Timing  # the update of the published table inside ``commit``
    metadata_publish: Timing  # and inside ``metadata_commit``
    plain_append: Timing
    vacuum: Timing
    commit_files_read: int | None  # data files the measured commit's scans read
    vacuum_rows_removed: int
    vacuum_files_removed: int


class _GrowingTables:
    """A lakesink table and its plain twin, fed the same checkpoints."""

    def __init__(self, spark: SparkSession, folder: str, rows: DataFrame, size: int) -> None:
        self.spark = spark
        self.rows = rows
        self.size = size
        self.path = f"{folder}/events"
        self.plain = f"{folder}/plain"
        self.sink = open_sink(spark, self.path, rows.schema)
        self.metadata_path = f"{folder}/events-metadata"
        self.metadata_sink = open_sink(spark, self.metadata_path, rows.schema, commit="metadata")
        create_plain_table(spark, self.plain, rows.schema)
        self.committed = 0  # checkpoints committed by the sink
        self.metadata_committed = 0  # and by the metadata sink
        self.blocks = 0  # batches handed out, so every batch has distinct ids
        self.scans = ScanCounter(spark)

    def next_batch(self) -> DataFrame:
        self.blocks += 1
        return batch(self.rows, self.blocks, self.size)

    def grow_to(self, checkpoints: int) -> None:
        while self.committed < checkpoints:
            rows = self.next_batch()
            for sink in (self.sink, self.metadata_sink):
                sink.write(rows)
                sink.notify_checkpoint_complete(sink.prepare_commit())
            plain_append(rows, self.plain)
            self.committed += 1
            self.metadata_committed += 1

    def time_commit(self, files_read: list[int | None]) -> dict[str, float]:
        seconds, publish = self._time_commit(self.sink, files_read)
        self.committed += 1
        return {"commit": seconds, "publish": publish}

    def time_metadata_commit(self) -> dict[str, float]:
        """The commit of the same size into the table committed by metadata, as old."""
        seconds, publish = self._time_commit(self.metadata_sink, [])
        self.metadata_committed += 1
        return {"metadata_commit": seconds, "metadata_publish": publish}

    def _time_commit(self, sink: DeltaSink, files_read: list[int | None]) -> tuple[float, float]:
        """Seconds of a small checkpoint's commit (written and pre-committed untimed), and
        of the published table's update inside it; the files the commit's scans read go
        into ``files_read``."""
        sink.write(self.next_batch())
        checkpoint = sink.prepare_commit()
        with self.scans.counting() as counted, timing_publish() as published:
            seconds = timed(lambda: sink.notify_checkpoint_complete(checkpoint))
        files_read.append(counted[0])
        if len(published) != 1:
            raise BenchmarkError(f"a commit of {sink.path} updated its published table {published}")
        return seconds, published[0]

    def check(self) -> None:
        """Both tables' committed views and published tables hold every committed row."""
        for path, checkpoints in (
            (self.path, self.committed),
            (self.metadata_path, self.metadata_committed),
        ):
            rows = checkpoints * self.size
            check_rows(committed(self.spark, path), rows, f"the committed view of {path}")
            check_rows(published_rows(self.spark, path), rows, f"the published table of {path}")

    def time_plain_append(self) -> dict[str, float]:
        rows = self.next_batch()
        return {"plain_append": timed(lambda: plain_append(rows, self.plain))}

    def time_vacuum(self, removed: list[tuple[int, int]]) -> float:
        aborter = open_sink(self.spark, self.path, self.rows.schema, writer_id="aborter")
        aborter.write(self.next_batch())
        aborter.close()  # aborts the open transaction: its rows stay masked
        reports = []
        seconds = timed(lambda: reports.append(self.clean()))
        report = reports[0]
        if report.rows_removed != self.size:
            raise BenchmarkError(
                f"vacuum removed {report.rows_removed} rows of {self.path}, expected the "
                f"{self.size} rows of the one aborted checkpoint"
            )
        removed.append((report.rows_removed, report.files_removed))
        return seconds

    def clean(self) -> VacuumReport:
        return vacuum(self.spark, self.path, retain_hours=0, allow_short_retention=True)

    def close(self) -> None:
        self.sink.close()
        self.metadata_sink.close()


def measure(
    spark: SparkSession,
    workspace: Workspace,
    rows: DataFrame,
    size: int,
    points: Sequence[int],
    repetitions: int,
) -> list[HistoryPoint]:
    """Grow the tables through ``points`` committed checkpoints of ``size`` rows each."""
    tables = _GrowingTables(spark, workspace.folder("history"), rows, size)
    results = []
    try:
        for point in points:
            tables.grow_to(point)
            table_rows, table_files = tables.committed * size, delta_files(spark, tables.path)
            tables.clean()  # untimed: the files earlier commits replaced
            removed: list[tuple[int, int]] = []
            vacuums = Timing(tuple(tables.time_vacuum(removed) for _ in range(repetitions)))
            files_read: list[int | None] = []
            timings = alternate(
                repetitions,
                lambda files_read=files_read: tables.time_commit(files_read),
                tables.time_metadata_commit,
                tables.time_plain_append,
            )
            tables.check()
            results.append(
                HistoryPoint(
                    history=point,
                    table_rows=table_rows,
                    table_files=table_files,
                    commit=timings["commit"],
                    metadata_commit=timings["metadata_commit"],
                    publish=timings["publish"],
                    metadata_publish=timings["metadata_publish"],
                    plain_append=timings["plain_append"],
                    vacuum=vacuums,
                    commit_files_read=files_read[-1],
                    vacuum_rows_removed=int(statistics.median(r for r, _ in removed)),
                    vacuum_files_removed=int(statistics.median(f for _, f in removed)),
                )
            )
    finally:
        tables.close()
    return results


def commit_history_section(points: Sequence[HistoryPoint], size: int) -> Section:
    """Section 3: one small checkpoint's commit as the history grows; it should stay flat."""
    first = points[0].commit.median
    return Section(
        key="commit_vs_history",
        title=f"Commit cost vs table history (checkpoints of {size:,} rows)",
        baseline="x a plain Delta append of the same rows into a plain table as old",
        columns=(
            Column("history", "committed checkpoints", "int"),
            Column("table_files", "files in table", "int"),
            Column("plain_append_s", "plain append", "seconds"),
            Column("commit_s", "commit (MERGE)", "seconds"),
            Column("ratio", "ratio (MERGE)", "ratio"),
            Column("growth", "vs first point", "ratio"),
            Column("files_read", "files the MERGE read", "int"),
            Column("metadata_commit_s", "commit (metadata)", "seconds"),
            Column("metadata_growth", "vs first point (metadata)", "ratio"),
        ),
        rows=tuple(
            {
                "history": p.history,
                "table_rows": p.table_rows,
                "table_files": p.table_files,
                "plain_append_s": p.plain_append.median,
                "commit_s": p.commit.median,
                "ratio": p.commit.median / p.plain_append.median,
                "growth": p.commit.median / first,
                "files_read": p.commit_files_read,
                "metadata_commit_s": p.metadata_commit.median,
                "metadata_growth": p.metadata_commit.median / points[0].metadata_commit.median,
                "samples": {
                    "commit": list(p.commit.samples),
                    "metadata_commit": list(p.metadata_commit.samples),
                    "publish": list(p.publish.samples),
                    "metadata_publish": list(p.metadata_publish.samples),
                    "plain_append": list(p.plain_append.samples),
                },
            }
            for p in points
        ),
    )


def vacuum_section(points: Sequence[HistoryPoint], size: int) -> Section:
    """Section 5: garbage-collecting one aborted checkpoint as the table grows."""
    first = points[0].vacuum.median
    return Section(
        key="vacuum",
        title=f"Vacuum cost (one aborted checkpoint of {size:,} rows)",
        baseline="x a plain Delta append of the aborted rows",
        columns=(
            Column("history", "committed checkpoints", "int"),
            Column("table_rows", "committed rows", "int"),
            Column("table_files", "files in table", "int"),
            Column("plain_append_s", "plain append", "seconds"),
            Column("vacuum_s", "vacuum", "seconds"),
            Column("ratio", "ratio", "ratio"),
            Column("growth", "vs first point", "ratio"),
            Column("files_removed", "files removed", "int"),
        ),
        rows=tuple(
            {
                "history": p.history,
                "table_rows": p.table_rows,
                "table_files": p.table_files,
                "plain_append_s": p.plain_append.median,
                "vacuum_s": p.vacuum.median,
                "ratio": p.vacuum.median / p.plain_append.median,
                "growth": p.vacuum.median / first,
                "rows_removed": p.vacuum_rows_removed,
                "files_removed": p.vacuum_files_removed,
                "samples": {"vacuum": list(p.vacuum.samples)},
            }
            for p in points
        ),
    )
