"""Sections 1 and 2: the write path, and what a commit costs by checkpoint size.

One measurement serves both (and the cost by size of section 12's published table). For
each size, every repetition appends the rows to a fresh plain Delta table, once plainly
and once as Delta's own idempotent append (``txnAppId`` / ``txnVersion``, the baseline an
exactly-once pipeline has without lakesink) and, into a fresh lakesink table created in
the MERGE mode, writes and pre-commits them (``sink.write`` + ``sink.prepare_commit()``:
the masked append, its ``txn`` action and its journal record), then commits them
(``sink.notify_checkpoint_complete``: the insert-only MERGE, the release of the pending
files, the journal record and the update of the published table); and the same again into
a third table created in the metadata mode (``commit="metadata"``: one delta-rs commit
moves the files into the committed partition). The commit mode is a table property, so
each mode has its own tables, and each pre-commit is timed in both.

After each measured action its rows are checked: the plain tables hold them, the
committed view and the published table of each lakesink table hold them, and the MERGE
inserted them all (its ``numTargetRowsInserted``).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    BenchmarkError,
    Folders,
    Timing,
    Workspace,
    alternate,
    cached_rows,
    check_rows,
    create_plain_table,
    idempotent_append,
    last_operation_metrics,
    open_sink,
    plain_append,
    published_rows,
    timed,
    timing_publish,
)
from benchmarks.report import Column, Section
from lakesink.readers.spark import committed
from lakesink.storage.location import join

__all__ = [
    "WritePoint",
    "commit_section",
    "measure",
    "pre_commit_and_commit",
    "write_path_section",
]


@dataclass(frozen=True)
class WritePoint:
    """The timings of one size, and the operation metrics of its last MERGE."""

    rows: int
    plain_append: Timing
    idempotent_append: Timing
    pre_commit: Timing
    commit: Timing
    publish: Timing  # the update of the published table inside ``commit``
    metadata_pre_commit: Timing
    metadata_commit: Timing
    metadata_publish: Timing
    merge_metrics: dict[str, str]

    @property
    def total(self) -> float:
        """Median of pre-commit + commit, repetition by repetition."""
        pairs = zip(self.pre_commit.samples, self.commit.samples, strict=True)
        return statistics.median(p + c for p, c in pairs)

    @property
    def metadata_total(self) -> float:
        """The same with the metadata commit."""
        pairs = zip(self.metadata_pre_commit.samples, self.metadata_commit.samples, strict=True)
        return statistics.median(p + c for p, c in pairs)


def measure(
    spark: SparkSession, workspace: Workspace, sizes: Sequence[int], repetitions: int
) -> dict[int, WritePoint]:
    """Time a plain and an idempotent append, a pre-commit and a commit of the same rows,
    for each size."""
    points = {}
    for rows in sorted(set(sizes)):
        data = cached_rows(spark, rows)
        merge_metrics: dict[str, str] = {}

        def plain(data=data, rows=rows) -> dict[str, float]:
            folder = workspace.folder(f"plain-{rows}")
            create_plain_table(spark, f"{folder}/plain", data.schema)
            create_plain_table(spark, f"{folder}/idempotent", data.schema)
            seconds = timed(lambda: plain_append(data, f"{folder}/plain"))
            check_rows(spark.read.format("delta").load(f"{folder}/plain"), rows, "a plain table")
            idempotent = timed(lambda: idempotent_append(data, f"{folder}/idempotent"))
            check_rows(
                spark.read.format("delta").load(f"{folder}/idempotent"), rows, "an idempotent table"
            )
            workspace.drop(folder)
            return {"plain_append": seconds, "idempotent_append": idempotent}

        def lakesink(data=data, rows=rows, merge_metrics=merge_metrics) -> dict[str, float]:
            return pre_commit_and_commit(spark, workspace, data, rows, merge_metrics)

        def metadata(data=data, rows=rows) -> dict[str, float]:
            timed = pre_commit_and_commit(spark, workspace, data, rows, commit="metadata")
            return {f"metadata_{name}": seconds for name, seconds in timed.items()}

        timings = alternate(repetitions, plain, lakesink, metadata)
        data.unpersist()
        points[rows] = WritePoint(rows=rows, merge_metrics=merge_metrics, **timings)
    return points


def pre_commit_and_commit(
    spark: SparkSession,
    folders: Folders,
    data: DataFrame,
    rows: int,
    merge_metrics: dict[str, str] | None = None,
    *,
    commit: str = "merge",
) -> dict[str, float]:
    """One repetition of lakesink's side, into a fresh table in one of ``folders``.

    Times the pre-commit (``sink.write`` + ``sink.prepare_commit()``) and the commit
    (``sink.notify_checkpoint_complete``) of ``data``, and the update of the published
    table inside the commit; opening the sink is not timed. Checks that the committed view
    and the published table hold the ``rows`` (and a MERGE inserted them all), puts the
    commit's MERGE metrics into ``merge_metrics`` when given, then drops the table.
    ``commit`` is the commit mode the table is created with.

    Returns:
        The seconds of ``pre_commit``, of ``commit`` and of the ``publish`` inside it.
    """
    folder = folders.folder(f"sink-{commit}-{rows}")
    path = join(folder, "orders")
    sink = open_sink(spark, path, data.schema, commit=commit)
    checkpoints: list[int] = []

    def pre_commit_rows() -> None:
        sink.write(data)
        checkpoints.append(sink.prepare_commit())

    try:
        pre_commit = timed(pre_commit_rows)
        with timing_publish() as published:
            seconds = timed(lambda: sink.notify_checkpoint_complete(checkpoints[0]))
    finally:
        sink.close()
    if len(published) != 1:
        raise BenchmarkError(f"the commit of {path} updated its published table {published}")
    check_rows(committed(spark, path), rows, f"the committed view of {path}")
    check_rows(published_rows(spark, path), rows, f"the published table of {path}")
    if commit == "merge":
        metrics = last_operation_metrics(spark, path, "MERGE")
        if int(metrics.get("numTargetRowsInserted", -1)) != rows:
            raise BenchmarkError(f"the MERGE of {path} inserted not {rows} rows: {metrics}")
        if merge_metrics is not None:
            merge_metrics.update(metrics)
    folders.drop(folder)
    return {"pre_commit": pre_commit, "commit": seconds, "publish": published[0]}


def write_path_section(points: Sequence[WritePoint]) -> Section:
    """Section 1: pre-commit and commit against Delta's idempotent append of the same rows,
    in a table of each commit mode."""
    rows = []
    for p in points:
        base = p.idempotent_append.median
        rows.append(
            {
                "rows": p.rows,
                "plain_append_s": p.plain_append.median,
                "idempotent_append_s": base,
                "pre_commit_s": p.pre_commit.median,
                "commit_s": p.commit.median,
                "metadata_pre_commit_s": p.metadata_pre_commit.median,
                "metadata_commit_s": p.metadata_commit.median,
                "pre_commit_ratio": p.pre_commit.median / base,
                "metadata_pre_commit_ratio": p.metadata_pre_commit.median / base,
                "total_ratio": p.total / base,
                "metadata_total_ratio": p.metadata_total / base,
                "samples": _samples(p),
            }
        )
    return Section(
        key="write_path",
        title="Write path",
        baseline="x Delta's idempotent append (txnAppId, txnVersion) of the same rows",
        columns=(
            Column("rows", "rows", "int"),
            Column("plain_append_s", "plain append", "seconds"),
            Column("idempotent_append_s", "idempotent append", "seconds"),
            Column("pre_commit_s", "pre-commit (MERGE table)", "seconds"),
            Column("metadata_pre_commit_s", "pre-commit (metadata table)", "seconds"),
            Column("pre_commit_ratio", "pre-commit ratio (MERGE)", "ratio"),
            Column("metadata_pre_commit_ratio", "pre-commit ratio (metadata)", "ratio"),
            Column("commit_s", "commit (MERGE)", "seconds"),
            Column("metadata_commit_s", "commit (metadata)", "seconds"),
            Column("total_ratio", "checkpoint ratio (MERGE)", "ratio"),
            Column("metadata_total_ratio", "checkpoint ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )


def commit_section(points: Sequence[WritePoint]) -> Section:
    """Section 2: the commit of a checkpoint against appending its rows, by size, with the
    MERGE's own metrics (``DESCRIBE HISTORY``) of the last repetition: an insert-only
    MERGE scans no committed file (its ``scanTimeMs`` should be about 0) and rewrites none;
    the release of the pending files that follows it is not in them."""
    rows = []
    for p in points:
        m = p.merge_metrics
        rows.append(
            {
                "rows": p.rows,
                "commit_s": p.commit.median,
                "plain_append_s": p.plain_append.median,
                "ratio": p.commit.median / p.plain_append.median,
                "metadata_commit_s": p.metadata_commit.median,
                "metadata_ratio": p.metadata_commit.median / p.plain_append.median,
                "merge_s": _seconds(m.get("executionTimeMs")),
                "merge_scan_s": _seconds(m.get("scanTimeMs")),
                "merge_rewrite_s": _seconds(m.get("rewriteTimeMs")),
                "rows_inserted": _int(m.get("numTargetRowsInserted")),
                "rows_copied": _int(m.get("numTargetRowsCopied")),
                "files_removed": _int(m.get("numTargetFilesRemoved")),
                "files_added": _int(m.get("numTargetFilesAdded")),
                "samples": _samples(p),
            }
        )
    return Section(
        key="commit_vs_size",
        title="Commit cost vs checkpoint size",
        baseline="x a plain Delta append of the checkpoint's rows",
        columns=(
            Column("rows", "rows", "int"),
            Column("plain_append_s", "plain append", "seconds"),
            Column("commit_s", "commit (MERGE)", "seconds"),
            Column("ratio", "ratio (MERGE)", "ratio"),
            Column("metadata_commit_s", "commit (metadata)", "seconds"),
            Column("metadata_ratio", "ratio (metadata)", "ratio"),
            Column("merge_s", "of which MERGE", "seconds"),
            Column("merge_scan_s", "MERGE scan", "seconds"),
            Column("merge_rewrite_s", "MERGE rewrite", "seconds"),
            Column("rows_inserted", "rows the MERGE inserted", "int"),
            Column("files_removed", "files the MERGE rewrote", "int"),
            Column("files_added", "files the MERGE wrote", "int"),
        ),
        rows=tuple(rows),
    )


def _samples(point: WritePoint) -> dict[str, list[float]]:
    return {
        "plain_append": list(point.plain_append.samples),
        "idempotent_append": list(point.idempotent_append.samples),
        "pre_commit": list(point.pre_commit.samples),
        "commit": list(point.commit.samples),
        "publish": list(point.publish.samples),
        "metadata_pre_commit": list(point.metadata_pre_commit.samples),
        "metadata_commit": list(point.metadata_commit.samples),
        "metadata_publish": list(point.metadata_publish.samples),
    }


def _seconds(milliseconds: str | None) -> float | None:
    return int(milliseconds) / 1000 if milliseconds is not None else None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None
