"""Section 14: a table whose committed files carry deletion vectors (a GDPR ``DELETE`` on a
table with ``delta.enableDeletionVectors``), what lakesink's handling of them costs.

A ``DELETE`` on such a table marks the deleted rows of each file it reaches in a vector;
the published table names a purged copy of each such file instead (the file without its
deleted rows: ``lakesink.tables.published``, scenario 5), so every engine reads it right,
and a MERGE-mode commit then releases pending files by a Spark ``DELETE`` (delta-rs' removal
carries no vector). Per commit mode, a sink table made with deletion vectors on (the
session's default) and a plain Delta table with them on hold the same ``reader_checkpoints``
checkpoints of ``reader_rows`` rows; each repetition deletes a different 1% of the rows
from both, spread over every committed file, then:

- **bringing the published table up** after the ``DELETE`` (``lakesink publish``: every
  file the ``DELETE`` reached copied without its deleted rows), against what Delta itself
  does to get rid of the same vectors in the plain table, ``REORG TABLE ... APPLY (PURGE)``
  (every such file rewritten without its deleted rows);
- **reading** the published table by path (``count``/aggregate of section 4, Spark), against
  the plain table, whose vectors Delta applies as it reads;
- **a checkpoint** of ``reader_rows`` rows into the sink table with vectors, against the same
  checkpoint into a sink table without them (the MERGE mode's release by a Spark
  ``DELETE``, the metadata mode's look for vectors in the pending files).

Before timing, each published table is checked to hold the plain table's rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from pyspark.sql import DataFrame, SparkSession

from benchmarks.harness import (
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
from benchmarks.reader import QUERIES, same_rows
from benchmarks.report import Column, Section
from lakesink.delta.publish import SESSION_DEFAULTS
from lakesink.delta.sink import DeltaSink
from lakesink.spark.settings import session_conf
from lakesink.tables.format import COMMIT_MODES, published_path
from lakesink.tables.published import publish

__all__ = ["VectorPoint", "measure", "vectors_section"]

VECTORS_ON = {f"{SESSION_DEFAULTS}enableDeletionVectors": "true"}


@dataclass(frozen=True)
class VectorPoint:
    """One measured action: each commit mode's side against its baseline."""

    what: str
    baseline: str
    rows: int
    timings: dict[str, Timing]  # per mode: its side, and "<mode>_baseline"


def measure(
    spark: SparkSession,
    workspace: Workspace,
    rows: DataFrame,
    size: int,
    checkpoints: int,
    repetitions: int,
) -> list[VectorPoint]:
    """The three comparisons of the section, in tables of ``checkpoints`` checkpoints of
    ``size`` rows."""
    folder = workspace.folder("vectors")
    plain = f"{folder}/plain"
    with session_conf(spark, VECTORS_ON):
        create_plain_table(spark, plain, rows.schema)
        sinks = {m: open_sink(spark, f"{folder}/{m}", rows.schema, commit=m) for m in COMMIT_MODES}
    bare = {m: open_sink(spark, f"{folder}/{m}-bare", rows.schema, commit=m) for m in COMMIT_MODES}
    paths = {mode: sink.path for mode, sink in sinks.items()}
    try:
        for index in range(checkpoints):
            plain_append(batch(rows, index, size), plain)
            for sink in (*sinks.values(), *bare.values()):
                sink.write(batch(rows, index, size))
                sink.notify_checkpoint_complete(sink.prepare_commit())
        total = size * checkpoints
        points = [
            _purge(spark, plain, paths, total, repetitions),
            _read(spark, plain, paths, total, repetitions),
            _checkpoint(rows, size, checkpoints, sinks, bare, repetitions),
        ]
    finally:
        for sink in (*sinks.values(), *bare.values()):
            sink.close()
    workspace.drop(folder)
    return points


def _delete(spark: SparkSession, path: str, rep: int) -> None:
    """Delete a new 1% of the rows, from every committed file (ids ending in ``rep``)."""
    spark.sql(f"DELETE FROM delta.`{path}` WHERE id % 100 = {rep}")


def _purge(
    spark: SparkSession, plain: str, paths: dict[str, str], rows: int, repetitions: int
) -> VectorPoint:
    """Each repetition: the same DELETE in every table (untimed), then each side's way of
    getting rid of the vectors it left, timed, in alternating order."""
    samples: dict[str, list[float]] = {}
    reorg = f"REORG TABLE delta.`{plain}` APPLY (PURGE)"
    sides: list[tuple[str, Callable[[], object]]] = [
        ("baseline", lambda: spark.sql(reorg).collect()),
        *((mode, partial(publish, path)) for mode, path in paths.items()),
    ]
    for rep in range(repetitions):
        for path in (plain, *paths.values()):
            _delete(spark, path, rep)
        for name, action in sides if rep % 2 == 0 else reversed(sides):
            samples.setdefault(name, []).append(timed(action))
    for path in paths.values():
        same_rows(published_rows(spark, path), spark.read.format("delta").load(plain), path)
    return _point("bring the published table up after a DELETE", "REORG ... PURGE", rows, samples)


def _read(
    spark: SparkSession, plain: str, paths: dict[str, str], rows: int, repetitions: int
) -> VectorPoint:
    """The aggregate over each published table by path, against the plain table with the
    vectors a last DELETE left in it (Delta applies them as it reads)."""
    for path in (plain, *paths.values()):
        _delete(spark, path, 99)
    for path in paths.values():
        publish(path)
    locations = {"baseline": plain, **{m: published_path(p) for m, p in paths.items()}}
    query = QUERIES["aggregate"]

    def side(name: str, location: str) -> Callable[[], dict[str, float]]:
        return lambda: {name: timed(lambda: query(spark.read.format("delta").load(location)))}

    timings = alternate(repetitions, *(side(n, location) for n, location in locations.items()))
    samples = {name: list(t.samples) for name, t in timings.items()}
    return _point("aggregate, Spark by path", "the table, vectors applied", rows, samples)


def _checkpoint(
    rows: DataFrame,
    size: int,
    checkpoints: int,
    sinks: dict[str, DeltaSink],
    bare: dict[str, DeltaSink],
    repetitions: int,
) -> VectorPoint:
    """A checkpoint into each sink table with vectors, against one into the same mode's
    table without."""
    state = {"index": checkpoints}

    def side(name: str, sink: DeltaSink) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            frame = batch(rows, state["index"], size)
            state["index"] += 1
            return {name: timed(lambda: sink.notify_checkpoint_complete(_pre_commit(sink, frame)))}

        return run

    actions = [side(f"{m}_baseline", bare[m]) for m in COMMIT_MODES]
    actions += [side(m, sinks[m]) for m in COMMIT_MODES]
    timings = alternate(repetitions, *actions)
    samples = {name: list(t.samples) for name, t in timings.items()}
    return VectorPoint(
        f"a checkpoint of {size:,} rows",
        "the same mode, no vectors",
        size,
        {name: Timing(tuple(s)) for name, s in samples.items()},
    )


def _pre_commit(sink: DeltaSink, frame: DataFrame) -> int:
    sink.write(frame)
    return sink.prepare_commit()


def _point(what: str, baseline: str, rows: int, samples: dict[str, list[float]]) -> VectorPoint:
    """A point whose baseline is one for every mode."""
    shared = Timing(tuple(samples.pop("baseline")))
    timings = {name: Timing(tuple(s)) for name, s in samples.items()}
    timings |= {f"{mode}_baseline": shared for mode in COMMIT_MODES}
    return VectorPoint(what, baseline, rows, timings)


def vectors_section(points: list[VectorPoint]) -> Section:
    """Section 14: a table whose committed files carry deletion vectors."""
    return Section(
        key="vectors",
        title="Deletion vectors in committed files: the published table's copies, reads, commits",
        baseline="x the row's baseline, timed beside it in the same run",
        columns=(
            Column("what", "what", "text"),
            Column("point", "rows", "text"),
            Column("baseline", "baseline", "text"),
            Column("merge_baseline_s", "baseline (MERGE)", "ms"),
            Column("merge_s", "MERGE table", "ms"),
            Column("merge_ratio", "ratio (MERGE)", "ratio"),
            Column("metadata_baseline_s", "baseline (metadata)", "ms"),
            Column("metadata_s", "metadata table", "ms"),
            Column("metadata_ratio", "ratio (metadata)", "ratio"),
        ),
        rows=tuple(_row(p) for p in points),
    )


def _row(p: VectorPoint) -> dict[str, object]:
    t = p.timings
    row: dict[str, object] = {"what": p.what, "point": f"{p.rows:,}", "baseline": p.baseline}
    for mode in COMMIT_MODES:
        base, ours = t[f"{mode}_baseline"], t[mode]
        row[f"{mode}_baseline_s"] = base.median
        row[f"{mode}_s"] = ours.median
        row[f"{mode}_ratio"] = ours.median / base.median
    row["samples"] = {name: list(timing.samples) for name, timing in t.items()}
    return row
