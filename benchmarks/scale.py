"""Growth: how lakesink's costs grow with the work (``make bench-scale``; never in ``make test``).

    python -m benchmarks.scale                           # every curve at its full sizes
    python -m benchmarks.scale --history 10 100 --tables 2 5 --out DIR

Each curve is measured in a Spark session on ``local[*]`` (curve ``cluster_rows``: on a
cluster) and each figure against a baseline timed in the same run, medians of
``--repetitions``:

1. **Checkpoints of history** (``--history``): a table of each commit mode grows through
   its sink, one checkpoint of ``--history-rows`` rows (one file) at a time. At each
   point, before any maintenance: a checkpoint's commit and the published table's update
   inside it, ``lakesink status`` (``sink_status``, read without Spark), and opening the
   sink (its recovery: the table's and journal's checks, the writer's lease, the view,
   the published table), each against its own figure at the first point (flat: within
   1.5x); then the aggregate of section 4 over the committed view and over the published
   table (Spark, by path) against the same rows in a plain Delta table written in one
   append, before and after ``lakesink vacuum`` (zero retention: its compaction merges the
   checkpoints' files). The table then grows on from where the vacuum left it, as a
   table vacuumed on a schedule does.
2. **Tables a group** (``--tables``): one job (``CheckpointCoordinator``) over that many
   sinks, each checkpoint ``--group-rows`` rows a table. The checkpoint's global commit
   (from the checkpoint's record to the last sink's commit and the cut) and the whole
   checkpoint (the sinks' writes of its rows included), against as many plain Delta
   appends of the same rows (what the job does without exactly-once); then an aggregate
   over every table read at the group's one cut (``lakesink.committed(spark, *paths)``)
   against the same aggregates on each table's latest version, read apart. Linear growth
   is a flat commit time per table.
3. **Rows a checkpoint** (``--rows``, and ``--cluster-rows`` for curve ``cluster_rows``):
   section 13's measurement of ``make bench`` (``benchmarks.memory``) at each size: a whole
   checkpoint in each mode against Delta's idempotent append of the same cached rows, with
   the peak resident sets while each ran. ``cluster_rows`` runs it on a Spark standalone
   cluster started here (two workers, an executor of one core each) with its tables on the
   S3 server started here, and samples the executors' resident sets too; its JVM must start
   with that master and the S3 connector, so it runs in a process of its own.
4. **Writers of one table** (``--writers``): that many writer processes, each its own Spark
   driver, commit ``--writer-checkpoints`` checkpoints of ``--writer-rows`` rows each into
   one table (``benchmarks.writers``): rows committed a second against one writer's, the
   conflicts retried, and every row once.

Each curve's report goes to ``OUT/scale-<curve>.json`` with its own run's header, and its
figure to ``OUT/scale-<curve>.png``; a run of some ``--curves`` leaves the others'.
``--page`` writes every curve found in ``OUT`` into the section of ``docs/benchmarks.md``
between its ``bench-scale`` markers.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from servers.cluster import executor_pids, free_port, start_cluster, stop_cluster

from benchmarks import memory, object_store, writers
from benchmarks.harness import (
    REPO,
    BenchmarkError,
    Folders,
    LoadSampler,
    ObjectStoreWorkspace,
    Timing,
    Workspace,
    alternate,
    batch,
    cached_rows,
    create_plain_table,
    latest_committed,
    machine,
    open_sink,
    plain_append,
    published_rows,
    timed,
    timing_publish,
)
from benchmarks.memory import MemoryPoint
from benchmarks.reader import aggregate, same_rows
from benchmarks.report import Column, Row, Section, read_json, render_text, write_json
from benchmarks.run import warm_up
from lakesink.core import CheckpointCoordinator
from lakesink.core.hook import step_hook
from lakesink.delta.sink import DeltaSink
from lakesink.jvm import delta_jars
from lakesink.ops.status import sink_status
from lakesink.ops.vacuum import vacuum
from lakesink.readers.spark import committed
from lakesink.spark.session import spark_session
from lakesink.tables.checkpoints import DeltaCheckpointStore

__all__ = [
    "CURVES",
    "FULL",
    "GrowingTable",
    "Scale",
    "group_section",
    "history_section",
    "main",
    "measure_group",
    "measure_history",
    "measure_rows",
    "page_text",
    "rows_section",
    "write_figure",
    "write_page",
]

log = logging.getLogger("benchmarks")

MODES = ("merge", "metadata")
PAGE = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- bench-scale: begin -->", "<!-- bench-scale: end -->"


@dataclass(frozen=True, kw_only=True)
class Scale:
    """The sizes of one run.

    Attributes:
        history: Committed checkpoints at each point of curve 1.
        history_rows: Rows a checkpoint in curve 1.
        tables: Tables of the group at each point of curve 2.
        group_rows: Rows a table and checkpoint in curve 2.
        rows: Rows a checkpoint at each point of curve 3, local.
        cluster_rows: The same, on the cluster with its tables on the S3 server.
        cluster_repetitions: Repetitions behind each median on the cluster.
        writers: Writer processes of one table at each point of curve 4.
        writer_checkpoints: Checkpoints each writer commits.
        writer_rows: Rows a writer's checkpoint.
        modes: The commit modes each curve is measured in.
        repetitions: Timed repetitions behind each median.
    """

    history: tuple[int, ...]
    history_rows: int
    tables: tuple[int, ...]
    group_rows: int
    rows: tuple[int, ...]
    cluster_rows: tuple[int, ...]
    cluster_repetitions: int
    writers: tuple[int, ...]
    writer_checkpoints: int
    writer_rows: int
    modes: tuple[str, ...]
    repetitions: int


FULL = Scale(
    history=(10, 100, 1_000, 10_000),
    history_rows=1_000,
    tables=(2, 5, 20),
    group_rows=100_000,
    rows=(10_000, 100_000, 1_000_000, 10_000_000),
    cluster_rows=(100_000_000,),
    cluster_repetitions=3,
    writers=(1, 2, 4, 8),
    writer_checkpoints=5,
    writer_rows=100_000,
    modes=MODES,
    repetitions=3,
)
#: The sizes each curve's report names.
SIZES = {
    "history": ("history", "history_rows", "modes", "repetitions"),
    "group": ("tables", "group_rows", "modes", "repetitions"),
    "rows": ("rows", "repetitions"),
    "cluster_rows": ("cluster_rows", "cluster_repetitions"),
    "writers": ("writers", "writer_checkpoints", "writer_rows", "modes"),
}
# The executors of the cluster's point: 100M rows of four columns, cached, spill to disk.
CLUSTER_MEMORY, EXECUTOR_MEMORY = "6g", "5g"


@dataclass(frozen=True)
class HistoryPoint:
    """Curve 1 at one number of checkpoints, in a table of one commit mode."""

    mode: str
    checkpoints: int  # committed checkpoints when the point was measured
    commit: Timing
    publish: Timing  # the published table's update inside ``commit``
    status: Timing
    opening: Timing
    reads: dict[str, Timing]  # "plain", "view", "published"; and each "... vacuumed"
    vacuum_s: float


@dataclass(frozen=True)
class GroupPoint:
    """Curve 2 at one number of tables, of one commit mode."""

    mode: str
    tables: int
    rows: int  # a table's committed rows when its reads were timed
    commit: Timing  # the global commit: after the record to the checkpoint's end
    checkpoint: Timing
    appends: Timing  # the same rows appended to as many plain tables
    apart: Timing  # every table's latest version, read apart
    at_cut: Timing  # every table at the group's one cut


class GrowingTable:
    """One sink table of ``mode`` grown one checkpoint at a time."""

    def __init__(self, spark: SparkSession, path: str, rows: DataFrame, mode: str) -> None:
        self.spark, self.path, self.rows, self.mode = spark, path, rows, mode
        self.size = rows.count()
        self.committed = 0
        self.sink = self._open()

    def _open(self) -> DeltaSink:
        return open_sink(self.spark, self.path, self.rows.schema, commit=self.mode)

    def _write(self) -> int:
        """The next checkpoint, written and pre-committed; its id."""
        self.sink.write(batch(self.rows, self.committed, self.size).coalesce(1))
        return self.sink.prepare_commit()

    def grow_to(self, checkpoints: int) -> None:
        while self.committed < checkpoints:
            self.sink.notify_checkpoint_complete(self._write())
            self.committed += 1
            if self.committed % 500 == 0:
                log.info("history: %s table at %d checkpoints", self.mode, self.committed)

    def time_commit(self) -> dict[str, float]:
        checkpoint = self._write()
        with timing_publish() as published:
            seconds = timed(lambda: self.sink.notify_checkpoint_complete(checkpoint))
        self.committed += 1
        if len(published) != 1:
            raise BenchmarkError(f"a commit of {self.path} updated its published table {published}")
        return {"commit": seconds, "publish": published[0]}

    def time_status(self) -> dict[str, float]:
        status: list[object] = []
        seconds = timed(lambda: status.append(sink_status(self.path).as_dict(_now())))
        return {"status": seconds}

    def time_opening(self) -> dict[str, float]:
        self.sink.close()
        opened: list[DeltaSink] = []
        seconds = timed(lambda: opened.append(self._open()))
        self.sink = opened[0]
        return {"opening": seconds}

    def close(self) -> None:
        self.sink.close()


def _now() -> datetime:
    return datetime.now(timezone.utc)


def measure_history(spark: SparkSession, workspace: Folders, scale: Scale) -> list[HistoryPoint]:
    """Curve 1, for a table of each commit mode."""
    rows = cached_rows(spark, scale.history_rows)
    points = []
    for mode in scale.modes:
        folder = workspace.folder(f"history-{mode}")
        table = GrowingTable(spark, f"{folder}/events", rows, mode)
        try:
            for count in scale.history:
                log.info("history: %s table, %d checkpoints", mode, count)
                table.grow_to(count)
                timings = alternate(
                    scale.repetitions, table.time_commit, table.time_status, table.time_opening
                )
                reads = _reads(spark, folder, table.path, scale.repetitions, "")
                vacuum_s = timed(
                    lambda path=table.path: vacuum(
                        spark, path, retain_hours=0, allow_short_retention=True
                    )
                )
                reads |= _reads(spark, folder, table.path, scale.repetitions, " vacuumed")
                points.append(
                    HistoryPoint(
                        mode=mode,
                        checkpoints=count,
                        commit=timings["commit"],
                        publish=timings["publish"],
                        status=timings["status"],
                        opening=timings["opening"],
                        reads=reads,
                        vacuum_s=vacuum_s,
                    )
                )
        finally:
            table.close()
        workspace.drop(folder)
    rows.unpersist()
    return points


def _reads(
    spark: SparkSession, folder: str, path: str, repetitions: int, state: str
) -> dict[str, Timing]:
    """The aggregate over the committed view and the published table of ``path``, against
    a plain table of the same rows written now in one append; named with ``state``."""
    plain = f"{folder}/plain"
    Workspace.drop(plain)
    view = committed(spark, path)
    view.write.format("delta").save(plain)
    same_rows(view, spark.read.format("delta").load(plain), path)
    same_rows(published_rows(spark, path), spark.read.format("delta").load(plain), path)
    sides: dict[str, Callable[[], DataFrame]] = {
        "plain": lambda: spark.read.format("delta").load(plain),
        "view": lambda: committed(spark, path),
        "published": lambda: published_rows(spark, path),
    }
    timings = alternate(
        repetitions,
        *(
            (lambda name=name, rows=rows: {name + state: timed(lambda: aggregate(rows()))})
            for name, rows in sides.items()
        ),
    )
    return timings


@contextmanager
def _commit_phase() -> Iterator[list[float]]:
    """Yield a list that gets, for each checkpoint of a coordinator made inside the
    block, the ``perf_counter`` at which its record was written (its global commit
    starts there)."""
    marks: list[float] = []

    def hook(step: str, _checkpoint_id: int) -> None:
        if step == "after_record":
            marks.append(time.perf_counter())

    with step_hook(hook):
        yield marks


def measure_group(spark: SparkSession, workspace: Folders, scale: Scale) -> list[GroupPoint]:
    """Curve 2, for groups of each commit mode."""
    rows = cached_rows(spark, scale.group_rows)
    points = []
    for mode in scale.modes:
        for count in scale.tables:
            log.info("group: %d tables, %s", count, mode)
            points.append(_group(spark, workspace, rows, count, mode, scale.repetitions))
    rows.unpersist()
    return points


def _group(
    spark: SparkSession,
    workspace: Folders,
    rows: DataFrame,
    count: int,
    mode: str,
    repetitions: int,
) -> GroupPoint:
    folder = workspace.folder(f"group-{mode}-{count}")
    size = rows.count()
    paths = [f"{folder}/t{index:02d}" for index in range(count)]
    plains = [f"{folder}/plain{index:02d}" for index in range(count)]
    for plain in plains:
        create_plain_table(spark, plain, rows.schema)
    with _commit_phase() as marks:
        # Not opened: the coordinator restores each sink (its recovery) as it starts.
        sinks = {
            path.rsplit("/", 1)[1]: DeltaSink(
                spark, path, schema=rows.schema, commit=mode, view_name=f"bench_{index:02d}"
            )
            for index, path in enumerate(paths)
        }
        job = CheckpointCoordinator(
            DeltaCheckpointStore(f"{folder}/state"), job_id="bench-scale", sinks=sinks
        )
    checkpoints = 0

    def checkpoint() -> dict[str, float]:
        nonlocal checkpoints
        start = time.perf_counter()  # a sink writes its rows as it is given them
        for sink in sinks.values():
            sink.write(batch(rows, checkpoints, size))
        job.trigger_checkpoint(str(checkpoints))
        end = time.perf_counter()
        checkpoints += 1
        return {"checkpoint": end - start, "commit": end - marks[-1]}

    def appends() -> dict[str, float]:
        frame = batch(rows, checkpoints, size)
        return {"appends": timed(lambda: [plain_append(frame, plain) for plain in plains])}

    try:
        timings = alternate(repetitions, checkpoint, appends)
        if len(marks) != checkpoints:
            raise BenchmarkError(f"{checkpoints} checkpoints of {folder} recorded {len(marks)}")
        for path in paths:
            same_rows(
                committed(spark, path),
                spark.range(0, size * checkpoints).select("id"),
                path,
            )

        def apart() -> dict[str, float]:
            return {"apart": timed(lambda: [aggregate(latest_committed(spark, p)) for p in paths])}

        def at_cut() -> dict[str, float]:
            return {"at_cut": timed(lambda: [aggregate(f) for f in committed(spark, *paths)])}

        timings |= alternate(repetitions, apart, at_cut)
    finally:
        job.close()
        for sink in sinks.values():
            sink.close()
    workspace.drop(folder)
    return GroupPoint(mode=mode, tables=count, rows=size * checkpoints, **timings)


def history_section(points: Sequence[HistoryPoint]) -> Section:
    """Curve 1 as a table: each cost at each point, against its first point or a plain
    table."""
    first = {p.mode: p for p in reversed(points)}
    rows: list[Row] = []
    for p in points:
        base = first[p.mode]
        reads = {name: t.median for name, t in p.reads.items()}
        rows.append(
            {
                "mode": p.mode,
                "checkpoints": p.checkpoints,
                "commit_s": p.commit.median,
                "commit_growth": p.commit.median / base.commit.median,
                "publish_s": p.publish.median,
                "publish_growth": p.publish.median / base.publish.median,
                "status_s": p.status.median,
                "status_growth": p.status.median / base.status.median,
                "opening_s": p.opening.median,
                "opening_growth": p.opening.median / base.opening.median,
                "plain_s": reads["plain"],
                "view_ratio": reads["view"] / reads["plain"],
                "published_ratio": reads["published"] / reads["plain"],
                "view_vacuumed_ratio": reads["view vacuumed"] / reads["plain vacuumed"],
                "published_vacuumed_ratio": (reads["published vacuumed"] / reads["plain vacuumed"]),
                "vacuum_s": p.vacuum_s,
                "samples": {
                    "commit": list(p.commit.samples),
                    "publish": list(p.publish.samples),
                    "status": list(p.status.samples),
                    "opening": list(p.opening.samples),
                    **{name: list(t.samples) for name, t in p.reads.items()},
                },
            }
        )
    return Section(
        key="history",
        title="Checkpoints of history",
        baseline="growth: x the same figure at the first point; reads: x the same rows in "
        "a plain Delta table written in one append",
        columns=(
            Column("mode", "commit mode", "text"),
            Column("checkpoints", "checkpoints", "int"),
            Column("commit_s", "commit", "ms"),
            Column("commit_growth", "growth", "ratio"),
            Column("publish_s", "published table's update", "ms"),
            Column("publish_growth", "growth", "ratio"),
            Column("status_s", "lakesink status", "ms"),
            Column("status_growth", "growth", "ratio"),
            Column("opening_s", "opening the sink", "seconds"),
            Column("opening_growth", "growth", "ratio"),
            Column("plain_s", "aggregate, plain table", "seconds"),
            Column("view_ratio", "committed view", "ratio"),
            Column("published_ratio", "published table", "ratio"),
            Column("vacuum_s", "lakesink vacuum", "seconds"),
            Column("view_vacuumed_ratio", "committed view, vacuumed", "ratio"),
            Column("published_vacuumed_ratio", "published table, vacuumed", "ratio"),
        ),
        rows=tuple(rows),
    )


def group_section(points: Sequence[GroupPoint]) -> Section:
    """Curve 2 as a table: the global commit by tables, and a read of all at one cut."""
    rows: list[Row] = [
        {
            "mode": p.mode,
            "tables": p.tables,
            "rows": p.rows,
            "commit_s": p.commit.median,
            "commit_per_table_s": p.commit.median / p.tables,
            "checkpoint_s": p.checkpoint.median,
            "appends_s": p.appends.median,
            "checkpoint_ratio": p.checkpoint.median / p.appends.median,
            "apart_s": p.apart.median,
            "at_cut_s": p.at_cut.median,
            "cut_ratio": p.at_cut.median / p.apart.median,
            "samples": {
                name: list(getattr(p, name).samples)
                for name in ("commit", "checkpoint", "appends", "apart", "at_cut")
            },
        }
        for p in points
    ]
    return Section(
        key="group",
        title="Tables a group",
        baseline="checkpoint: x as many plain Delta appends of the same rows; cut read: x "
        "every table's latest version read apart",
        columns=(
            Column("mode", "commit mode", "text"),
            Column("tables", "tables", "int"),
            Column("rows", "rows a table", "int"),
            Column("commit_s", "global commit", "seconds"),
            Column("commit_per_table_s", "a table", "seconds"),
            Column("checkpoint_s", "whole checkpoint", "seconds"),
            Column("appends_s", "plain appends", "seconds"),
            Column("checkpoint_ratio", "ratio", "ratio"),
            Column("apart_s", "aggregates, latest versions", "seconds"),
            Column("at_cut_s", "aggregates at one cut", "seconds"),
            Column("cut_ratio", "ratio", "ratio"),
        ),
        rows=tuple(rows),
    )


@dataclass(frozen=True)
class RowsPoint:
    """Curve 3 at one size: a checkpoint in each mode against Delta's idempotent append of
    the same rows, with each side's peak memory (``benchmarks.memory``)."""

    place: str  # where it ran: the master and the store
    point: MemoryPoint


def measure_rows(
    spark: SparkSession, folders: Folders, sizes: Sequence[int], repetitions: int, place: str
) -> list[RowsPoint]:
    """Curve 3 at each size, in ``spark`` (its executors sampled when they run apart)."""
    app_id = spark.sparkContext.applicationId
    executors = sorted(executor_pids(app_id).values()) if place != LOCAL else []
    points = []
    for rows in sizes:
        log.info("rows: %d rows a checkpoint (%s)", rows, place)
        point = memory.measure(spark, folders, rows, repetitions, executors)
        points.append(RowsPoint(place, point))
    return points


def rows_section(points: Sequence[RowsPoint], key: str = "rows") -> Section:
    """Curve 3 as a table: each checkpoint's time and peaks against the append's."""

    def mib(t: dict[str, Timing], name: str) -> float | None:
        return round(t[name].median / memory.MIB) if name in t else None

    rows: list[Row] = []
    for p in points:
        t = p.point.timings
        append = t["append_seconds"].median
        rows.append(
            {
                "place": p.place,
                "rows": p.point.rows,
                "append_s": append,
                "merge_s": t["merge_seconds"].median,
                "merge_ratio": t["merge_seconds"].median / append,
                "metadata_s": t["metadata_seconds"].median,
                "metadata_ratio": t["metadata_seconds"].median / append,
                **{
                    f"{side}_{measure}_mib": mib(t, f"{side}_{measure}_peak")
                    for side in memory.SIDES
                    for measure in ("jvm_rss", "executors_rss")
                },
                "samples": {name: list(timing.samples) for name, timing in t.items()},
            }
        )
    return Section(
        key=key,
        title="Rows a checkpoint" + (" on the cluster" if key != "rows" else ""),
        baseline="x Delta's idempotent append (txnAppId/txnVersion) of the same rows; "
        "peaks: resident sets (MiB) while each ran",
        columns=(
            Column("place", "where", "text"),
            Column("rows", "rows", "int"),
            Column("append_s", "idempotent append", "seconds"),
            Column("merge_s", "checkpoint, MERGE", "seconds"),
            Column("merge_ratio", "ratio", "ratio"),
            Column("metadata_s", "checkpoint, metadata", "seconds"),
            Column("metadata_ratio", "ratio", "ratio"),
            Column("append_jvm_rss_mib", "driver JVM peak, append (MiB)", "int"),
            Column("merge_jvm_rss_mib", "driver JVM peak, MERGE", "int"),
            Column("metadata_jvm_rss_mib", "driver JVM peak, metadata", "int"),
            Column("append_executors_rss_mib", "executors' peak, append", "int"),
            Column("merge_executors_rss_mib", "executors' peak, MERGE", "int"),
            Column("metadata_executors_rss_mib", "executors' peak, metadata", "int"),
        ),
        rows=tuple(rows),
    )


#: Each curve's figure: its x axis, and its two panels' lines (column keys) and y labels.
FIGURES: dict[str, tuple[str, tuple[tuple[tuple[str, ...], str], ...]]] = {
    "history": (
        "checkpoints",
        (
            (
                ("commit_growth", "publish_growth", "status_growth", "opening_growth"),
                "x its figure at the first point",
            ),
            (
                (
                    "view_ratio",
                    "published_ratio",
                    "view_vacuumed_ratio",
                    "published_vacuumed_ratio",
                ),
                "x a plain table of the same rows",
            ),
        ),
    ),
    "group": (
        "tables",
        (
            (("commit_per_table_s",), "seconds a table"),
            (("checkpoint_ratio", "cut_ratio"), "x the baseline"),
        ),
    ),
    "rows": (
        "rows",
        (
            (("merge_ratio", "metadata_ratio"), "x Delta's idempotent append"),
            (
                ("append_jvm_rss_mib", "merge_jvm_rss_mib", "metadata_jvm_rss_mib"),
                "driver JVM peak resident set (MiB)",
            ),
        ),
    ),
    "writers": (
        "writers",
        (
            (("speedup",), "x one writer's rows a second"),
            (("cpu_busy",), "CPU busy, share of all cores"),
        ),
    ),
}
FIGURES["cluster_rows"] = (
    "rows",
    (
        FIGURES["rows"][1][0],
        (
            ("merge_jvm_rss_mib", "merge_executors_rss_mib", "append_executors_rss_mib"),
            "peak resident set (MiB)",
        ),
    ),
)


#: Legends where a column's header alone would not say which line it is.
LEGENDS = {
    "merge_ratio": "checkpoint, MERGE",
    "metadata_ratio": "checkpoint, metadata",
    "append_jvm_rss_mib": "driver JVM peak, append",
    "append_executors_rss_mib": "executors' peak, append",
}
#: The issue's targets, drawn dashed: by curve, a tuple of values for each panel.
TARGETS: dict[str, tuple[tuple[float, ...], ...]] = {
    "history": ((1.5,), (1.1,)),
    "rows": ((1.2, 2.5), ()),
    "cluster_rows": ((1.2, 2.5), ()),
}


def write_figure(out: Path, section: Section) -> Path:
    """The curve's figure: each line against the curve's x axis, one per commit mode where
    the section has a mode column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axis, panels = FIGURES[section.key]
    headers = {c.key: c.header for c in section.columns}
    modes = sorted({r["mode"] for r in section.rows}) if "mode" in headers else [None]
    figure, axes = plt.subplots(1, len(panels), figsize=(14, 5))
    targets = TARGETS.get(section.key, ((),) * len(panels))
    for ax, (keys, label), marks in zip(axes, panels, targets, strict=True):
        for mark in marks:
            ax.axhline(mark, color="grey", linestyle="--", linewidth=1, label=f"target {mark}x")
        for mode in modes:
            points = [r for r in section.rows if mode is None or r["mode"] == mode]
            for key in keys:
                ax.plot(
                    [r[axis] for r in points],
                    [r[key] for r in points],
                    marker="o",
                    label=LEGENDS.get(key, _header(headers, key)) + (f" ({mode})" if mode else ""),
                )
        ax.set_xscale("log")
        ticks = sorted({r[axis] for r in section.rows})
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel(axis)
        ax.set_ylabel(label)
        ax.legend(fontsize=8)
        ax.grid(True, alpha=0.3)
    figure.suptitle(f"lakesink: {section.title.lower()} ({section.baseline})", fontsize=10)
    figure.tight_layout()
    path = out / f"scale-{section.key}.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path


def _header(headers: dict[str, str], key: str) -> str:
    """A line's name: its column's header, the growth columns named by the figure."""
    stem = key.removesuffix("_growth")
    return headers.get(f"{stem}_s", headers[key]) if key.endswith("_growth") else headers[key]


def write_page(page: Path, text: str) -> None:
    """Put ``text`` between the page's ``bench-scale`` markers.

    Raises:
        BenchmarkError: The page has no such markers.
    """
    content = page.read_text()
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.DOTALL)
    if not pattern.search(content):
        raise BenchmarkError(f"{page} has no {BEGIN} ... {END} section to write into")
    page.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", content))


def page_text(out: Path, page: Path) -> str:
    """Every curve measured into ``out`` (its ``scale-<curve>.json``), in the curves'
    order, each with its run's machine and date, then its figure (linked from ``page``)."""
    blocks: list[str] = []
    for key in CURVES:
        report = out / f"scale-{key}.json"
        if not report.is_file():
            continue
        header, section = read_json(report)
        figure = os.path.relpath(out / f"scale-{key}.png", page.parent)
        number = len(blocks) + 1
        blocks.append(f"{render_text(header, [section], first=number)}\n\n![scale-{key}]({figure})")
    return "\n\n".join(blocks)


@dataclass(frozen=True)
class Place:
    """Where a curve runs: its session and its tables' folders."""

    spark: SparkSession
    folders: Folders
    name: str


Curve = Callable[[Place, Scale], Section]

CURVES: dict[str, Curve] = {
    "history": lambda at, scale: history_section(measure_history(at.spark, at.folders, scale)),
    "group": lambda at, scale: group_section(measure_group(at.spark, at.folders, scale)),
    "rows": lambda at, scale: rows_section(
        measure_rows(at.spark, at.folders, scale.rows, scale.repetitions, at.name)
    ),
    "cluster_rows": lambda at, scale: rows_section(
        measure_rows(at.spark, at.folders, scale.cluster_rows, scale.cluster_repetitions, at.name),
        key="cluster_rows",
    ),
    "writers": lambda at, scale: writers.writers_section(
        writers.measure(
            at.spark,
            at.folders,
            scale.writers,
            scale.writer_checkpoints,
            scale.writer_rows,
            scale.modes,
        )
    ),
}
#: The curves that run on the standalone cluster, its tables on the S3 server.
ON_CLUSTER = ("cluster_rows",)
LOCAL = "local[*], local disk"


@contextmanager
def _place(on_cluster: bool, workspace: Workspace, work: Path) -> Iterator[Place]:
    """A session of its own for the curves: ``local[*]`` with tables on local disk, or the
    standalone cluster (two workers, each an executor of one core) with tables on the S3
    server, both started here and stopped after."""
    with ExitStack() as stack:
        server, master, conf = None, None, {"spark.ui.enabled": "false"}
        if on_cluster:
            server = stack.enter_context(object_store.s3_server(workspace))
            stack.enter_context(server.exported())  # for delta-rs: lakesink's log commits
            cluster = start_cluster(work / "cluster", port=free_port(), memory=CLUSTER_MEMORY)
            stack.callback(stop_cluster, cluster.directory)
            master = cluster.master_url
            # Every node is this machine: the executors read Delta's and S3's jars in place
            # from their class path, as the clusters guide's spark-submit line has them.
            jars = [str(jar) for jar in delta_jars()] + server.storage_options().spark_class_path()
            conf |= {
                "spark.executor.memory": EXECUTOR_MEMORY,
                "spark.driver.memory": "4g",
                "spark.executor.extraClassPath": os.pathsep.join(jars),
            }
        spark = spark_session(
            master=master,
            app_name="lakesink-bench-scale",
            conf={**conf, "spark.sql.session.timeZone": "UTC"},
            ivy_dir=os.environ.get("LAKESINK_IVY_DIR"),
            storage=server.storage_options() if server else None,
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        if server is None:
            yield Place(spark, workspace, LOCAL)
        else:
            root = f"s3a://{object_store.BUCKET}/bench-scale"
            folders = ObjectStoreWorkspace(root, server.storage_options())
            yield Place(
                spark,
                folders,
                f"Spark standalone cluster (2 workers, an executor of 1 core and "
                f"{EXECUTOR_MEMORY} each), tables on the S3 server (SeaweedFS)",
            )


def _spelled(values: Sequence[int]) -> str:
    return " ".join(str(v) for v in values)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--curves",
        nargs="+",
        choices=sorted(CURVES),
        default=list(CURVES),
        metavar="CURVE",
        help=f"measure only these ({', '.join(CURVES)}; default: all)",
    )
    sizes = {
        "history": "checkpoints at each point",
        "history_rows": "rows a checkpoint in the history",
        "tables": "tables of each group",
        "group_rows": "rows a table and checkpoint of a group",
        "rows": "rows a checkpoint, local",
        "cluster_rows": "rows a checkpoint on the cluster",
        "cluster_repetitions": "repetitions on the cluster",
        "writers": "writer processes at each point",
        "writer_checkpoints": "checkpoints each writer commits",
        "writer_rows": "rows a writer's checkpoint",
        "repetitions": "timed repetitions behind a median",
    }
    for name, what in sizes.items():
        default = getattr(FULL, name)
        many = isinstance(default, tuple)
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=int,
            nargs="+" if many else None,
            help=f"{what} (default: {_spelled(default) if many else f'{default:,}'})",
        )
    parser.add_argument("--modes", nargs="+", choices=MODES, help="commit modes (default: both)")
    parser.add_argument("--out", type=Path, default=REPO / "docs", help="default: docs/")
    parser.add_argument(
        "--page",
        action="store_true",
        help=f"also write every curve in --out into {PAGE.relative_to(REPO)} (its "
        "bench-scale section)",
    )
    parser.add_argument("--work-dir", help="where the tables go (default: system temp)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("lakesink").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    given = {name: getattr(args, name) for name in (*sizes, "modes")}
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in given.items() if v is not None}
    scale = Scale(**{**asdict(FULL), **given})
    args.out.mkdir(parents=True, exist_ok=True)
    here = [c for c in args.curves if c not in ON_CLUSTER]
    there = [c for c in args.curves if c in ON_CLUSTER]
    if here and there:
        # A session's JVM starts once a process, with its master and the S3 connector: the
        # cluster's curves run in a process of their own (the last --curves wins).
        subprocess.run(
            [sys.executable, "-m", "benchmarks.scale", *argv, "--curves", *there], check=True
        )
        there = []
    workspace = Workspace(args.work_dir)
    try:
        for curves in (c for c in (here, there) if c):
            with _place(curves is there, workspace, Path(workspace.root)) as at:
                about = machine(at.spark)
                warm_up(at.spark, at.folders)
                for name in curves:
                    started = time.perf_counter()
                    with LoadSampler() as load:
                        section = CURVES[name](at, scale)
                    header = {
                        "mode": f"scale ({name})",
                        "machine": about,
                        "repetitions": {
                            "cluster_rows": scale.cluster_repetitions,
                            "writers": 1,  # each point one run of many checkpoints
                        }.get(name, scale.repetitions),
                        "suite": {k: v for k, v in asdict(scale).items() if k in SIZES[name]},
                        "place": at.name,
                        "load": load.summary(),
                        "duration_s": round(time.perf_counter() - started, 1),
                    }
                    write_json(args.out / f"scale-{name}.json", header, [section])
                    write_figure(args.out, section)
                    print(render_text(header, [section]))
    finally:
        workspace.close()
    if args.page:
        write_page(PAGE, page_text(args.out, PAGE))
        print(f"\nwritten: {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
