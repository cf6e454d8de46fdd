"""Section 12: the published table, what keeping it costs a checkpoint and what reading it
costs.

The published table of a sink table (``lakesink.tables.published``) is a plain Delta table
over the committed partition's files, which any engine reads by path. A sink brings it up
to date right after each commit that made rows visible (``publish(path)``): one delta-rs
commit naming the files the sink commit added to, or removed from, the committed
partition.

- Its cost per checkpoint, by size: the ``publish`` after one commit of each size of
  section 1, timed inside the commits section 1 measures (``harness.timing_publish``, the
  sink's own call timed as it is), in a table of each commit mode, against the idempotent
  append of the same rows section 1 times beside it. Its target: at most 0.05 s at 1M
  rows.
- Its cost per checkpoint, by history: the same after a small checkpoint's commit into
  section 3's tables as they grow (1, 10, 100 committed checkpoints in the full run),
  against section 3's plain append of the same rows into a plain table as old: it should
  stay flat.
- Reading it: the scan and the aggregate of section 4 over the published table read by
  path with Spark (``spark.read.format("delta").load(published)``, no filter, no lakesink
  code), against the same on a plain Delta table of the same rows. Tables of each commit
  mode get the same checkpoints (``reader_checkpoints`` of ``reader_rows`` rows) through a
  sink, the plain table the same rows by plain appends; then one checkpoint is left
  pre-committed and a second writer aborts another, so that the sink tables hold masked
  rows too, which the published table must not show. Its target: at most 1.02x.

Before the reads are timed, each published table is checked to be up to date and to hold
the plain table's rows (count and sum of ids).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
    ScanCounter,
    Timing,
    Workspace,
    alternate,
    batch,
    create_plain_table,
    open_sink,
    plain_append,
    published_rows,
    timed,
)
from benchmarks.history import HistoryPoint
from benchmarks.reader import QUERIES, same_rows
from benchmarks.report import Column, Section
from benchmarks.write_path import WritePoint
from lakesink.tables.format import COMMIT_MODES, published_path

__all__ = ["ReadPoint", "measure", "published_section"]

#: The names of the sides of a read: the plain table, then each commit mode's published table.
SIDES = ("plain", *COMMIT_MODES)


@dataclass(frozen=True)
class ReadPoint:
    """One query over the plain table and each mode's published table."""

    query: str
    rows: int  # committed rows, in every table
    masked_rows: int  # pending and aborted rows in each sink table, never in its published table
    timings: dict[str, Timing]  # by side (SIDES)
    files_read: dict[str, int | None]  # data files the last repetition read, by side


def measure(
    spark: SparkSession,
    workspace: Workspace,
    rows: DataFrame,
    size: int,
    checkpoints: int,
    repetitions: int,
) -> list[ReadPoint]:
    """Both queries over the published tables of ``checkpoints`` committed checkpoints of
    ``size`` rows (one pending and one aborted checkpoint beside them) and over the plain
    table of the same rows."""
    folder = workspace.folder("published")
    plain = f"{folder}/plain"
    paths = {mode: f"{folder}/events-{mode}" for mode in COMMIT_MODES}
    create_plain_table(spark, plain, rows.schema)
    for index in range(checkpoints):
        plain_append(batch(rows, index, size), plain)
    for mode, path in paths.items():
        _write(spark, path, rows, size, checkpoints, mode)
    # Read by path with no lakesink code, as any Spark job would (its up-to-dateness
    # checked once, before, by published_rows).
    locations = {"plain": plain, **{mode: published_path(path) for mode, path in paths.items()}}
    tables = {name: partial(_load, spark, location) for name, location in locations.items()}
    total = 0
    for path in paths.values():
        total = same_rows(published_rows(spark, path), tables["plain"](), path)
    scans = ScanCounter(spark)
    points = []
    for name, query in QUERIES.items():
        files: dict[str, int | None] = {}

        def side(
            name: str, read: Callable[[], DataFrame], query=query, files=files
        ) -> Callable[[], dict[str, float]]:
            def run() -> dict[str, float]:
                with scans.counting() as counted:
                    seconds = timed(lambda: query(read()))
                files[name] = counted[0]
                return {name: seconds}

            return run

        timings = alternate(repetitions, *(side(name, tables[name]) for name in SIDES))
        points.append(
            ReadPoint(
                query=name,
                rows=total,
                masked_rows=2 * size,
                timings=timings,
                files_read=files,
            )
        )
    workspace.drop(folder)
    return points


def _load(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def _write(
    spark: SparkSession, path: str, rows: DataFrame, size: int, checkpoints: int, mode: str
) -> None:
    """``checkpoints`` committed checkpoints through a sink of ``mode``, then a pending one
    and an aborted one (the next two blocks of rows, which no reader of it may see)."""
    sink = open_sink(spark, path, rows.schema, commit=mode)
    try:
        for index in range(checkpoints):
            sink.write(batch(rows, index, size))
            sink.notify_checkpoint_complete(sink.prepare_commit())
        sink.write(batch(rows, checkpoints, size))
        sink.prepare_commit()  # pre-committed, never committed: pending
        aborter = open_sink(spark, path, rows.schema, writer_id="aborter")
        aborter.write(batch(rows, checkpoints + 1, size))
        aborter.close()  # aborted
    finally:
        sink.close()


def published_section(
    writes: Sequence[WritePoint],
    history: Sequence[HistoryPoint],
    reads: Sequence[ReadPoint],
    history_rows: int,
) -> Section:
    """Section 12: the published table's update after a commit, by size and by history,
    and reading it, each against its baseline, in a table of each commit mode."""
    rows = [_by_size(p) for p in writes]
    rows += [_by_history(p, history[0], history_rows) for p in history]
    rows += [_read(p) for p in reads]
    return Section(
        key="published",
        title="The published table: its update after a commit, and reads by path",
        baseline="x the row's baseline, timed beside it in the same run",
        columns=(
            Column("what", "what", "text"),
            Column("point", "at", "text"),
            Column("baseline", "baseline", "text"),
            Column("baseline_s", "baseline's time", "ms"),
            Column("merge_s", "MERGE table", "ms"),
            Column("merge_ratio", "ratio (MERGE)", "ratio"),
            Column("metadata_s", "metadata table", "ms"),
            Column("metadata_ratio", "ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )


def _row(
    kind: str,
    what: str,
    point: str,
    baseline: str,
    base: Timing,
    merge: Timing,
    metadata: Timing,
    **fields: object,
) -> dict[str, object]:
    return {
        "kind": kind,
        "what": what,
        "point": point,
        "baseline": baseline,
        "baseline_s": base.median,
        "merge_s": merge.median,
        "merge_ratio": merge.median / base.median,
        "metadata_s": metadata.median,
        "metadata_ratio": metadata.median / base.median,
        **fields,
        "samples": {
            "baseline": list(base.samples),
            "merge": list(merge.samples),
            "metadata": list(metadata.samples),
        },
    }


def _by_size(p: WritePoint) -> dict[str, object]:
    return _row(
        "size",
        "publish after a commit",
        f"{p.rows:,} rows",
        "idempotent append",
        p.idempotent_append,
        p.publish,
        p.metadata_publish,
        rows=p.rows,
        # What share of the commit it is, median of the repetitions' own shares.
        merge_share=_share(p.publish, p.commit),
        metadata_share=_share(p.metadata_publish, p.metadata_commit),
    )


def _by_history(p: HistoryPoint, first: HistoryPoint, size: int) -> dict[str, object]:
    return _row(
        "history",
        "publish after a commit",
        f"{p.history:,} committed checkpoint{'s' * (p.history != 1)} of {size:,} rows",
        "plain append, table as old",
        p.plain_append,
        p.publish,
        p.metadata_publish,
        history=p.history,
        rows=size,
        merge_growth=p.publish.median / first.publish.median,
        metadata_growth=p.metadata_publish.median / first.metadata_publish.median,
        merge_share=_share(p.publish, p.commit),
        metadata_share=_share(p.metadata_publish, p.metadata_commit),
    )


def _read(p: ReadPoint) -> dict[str, object]:
    return _row(
        "read",
        f"{p.query}, Spark by path",
        f"{p.rows:,} rows (+ {p.masked_rows:,} masked)",
        "plain Delta table",
        p.timings["plain"],
        p.timings["merge"],
        p.timings["metadata"],
        query=p.query,
        rows=p.rows,
        masked_rows=p.masked_rows,
        files_read=p.files_read,
    )


def _share(part: Timing, whole: Timing) -> float:
    return statistics.median(a / b for a, b in zip(part.samples, whole.samples, strict=True))
