"""Sections 1 and 2: the write path, and what a commit costs by checkpoint size.

One measurement serves both. For each size, every repetition appends the rows to a fresh
plain Delta table, once plainly and once as Delta's own idempotent append (``txnAppId`` /
``txnVersion``, the baseline an exactly-once pipeline has without lakesink) and, into a
fresh lakesink table, writes and pre-commits
them (``sink.write`` + ``sink.prepare_commit()``: the masked append and its journal records),
then commits them (``sink.notify_checkpoint_complete``: the MERGE flip and its record); and
the same again into a third table whose sink commits by metadata (``commit="metadata"``: the
files added again as visible).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    Folders,
    Timing,
    Workspace,
    alternate,
    cached_rows,
    create_plain_table,
    idempotent_append,
    last_operation_metrics,
    open_sink,
    plain_append,
    timed,
)
from benchmarks.report import Column, Section
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
    metadata_pre_commit: Timing
    metadata_commit: Timing
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
            idempotent = timed(lambda: idempotent_append(data, f"{folder}/idempotent"))
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
    (``sink.notify_checkpoint_complete``) of ``data``; opening the sink is not timed. Puts
    the commit's MERGE metrics into ``merge_metrics`` when given, then drops the table.
    ``commit`` is the sink's commit mode.

    Returns:
        The seconds of ``pre_commit`` and of ``commit``.
    """
    folder = folders.folder(f"sink-{rows}")
    path = join(folder, "orders")
    sink = open_sink(spark, path, data.schema, commit=commit)
    checkpoints: list[int] = []

    def pre_commit_rows() -> None:
        sink.write(data)
        checkpoints.append(sink.prepare_commit())

    try:
        pre_commit = timed(pre_commit_rows)
        commit = timed(lambda: sink.notify_checkpoint_complete(checkpoints[0]))
    finally:
        sink.close()
    if merge_metrics is not None:
        merge_metrics.update(last_operation_metrics(spark, path))
    folders.drop(folder)
    return {"pre_commit": pre_commit, "commit": commit}


def write_path_section(points: Sequence[WritePoint]) -> Section:
    """Section 1: pre-commit and commit against Delta's idempotent append of the same rows."""
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
            Column("pre_commit_s", "pre-commit", "seconds"),
            Column("commit_s", "commit (MERGE)", "seconds"),
            Column("metadata_commit_s", "commit (metadata)", "seconds"),
            Column("pre_commit_ratio", "pre-commit ratio", "ratio"),
            Column("total_ratio", "checkpoint ratio (MERGE)", "ratio"),
            Column("metadata_total_ratio", "checkpoint ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )


def commit_section(points: Sequence[WritePoint]) -> Section:
    """Section 2: the commit of a checkpoint against appending its rows, by size."""
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
            Column("files_removed", "files rewritten", "int"),
            Column("files_added", "files written", "int"),
        ),
        rows=tuple(rows),
    )


def _samples(point: WritePoint) -> dict[str, list[float]]:
    return {
        "plain_append": list(point.plain_append.samples),
        "idempotent_append": list(point.idempotent_append.samples),
        "pre_commit": list(point.pre_commit.samples),
        "commit": list(point.commit.samples),
        "metadata_pre_commit": list(point.metadata_pre_commit.samples),
        "metadata_commit": list(point.metadata_commit.samples),
    }


def _seconds(milliseconds: str | None) -> float | None:
    return int(milliseconds) / 1000 if milliseconds is not None else None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None
