"""Section 13: peak memory of a whole checkpoint against an idempotent append of its rows.

What a checkpoint of ``rows`` rows (the full run: 10M) needs in memory, in a table of each
commit mode (``sink.write`` + ``sink.prepare_commit()`` + ``sink.notify_checkpoint_complete``,
the sink opened before), against Delta's idempotent append of the same cached rows into a
fresh plain table. Three peaks, each the highest value sampled every 20 ms from a thread
while the action runs, after a ``System.gc()`` in the JVM (and Python's ``gc.collect()``)
and half a second's pause before it (the values then are the base of each growth):

- the JVM's heap in use (``MemoryMXBean.getHeapMemoryUsage().getUsed()``, through py4j);
- the JVM process's resident set (``VmRSS`` of ``/proc/<pid>/status``);
- the Python driver's resident set (delta-rs, which makes lakesink's log commits, runs in
  it), reported as its growth during the action too: its size before is mostly imported
  libraries.

In local mode the driver and the executors are one JVM, so the JVM's figures are both
together; on a cluster they are the driver's alone, and a fourth measure is sampled: the
executors' resident sets summed (``VmRSS`` of each executor JVM of the application on this
machine, a sum of samples taken together, so its peak is never two peaks added). Where the
kernel allows it, each process's high-water mark (``VmHWM``, reset through
``/proc/<pid>/clear_refs`` before the action) stands in for the resident-set peak when it
is higher than every sample (a peak shorter than 20 ms). The heap's peak is what was in
use, garbage included, when sampled: it shows how much an action allocates between
collections as well as what it keeps.

Each repetition does the three actions in alternating order, in fresh tables; every
figure is the median of the repetitions' peaks, and each peak's ratio is to the append's.
The rows of every table are checked after each action.
"""

from __future__ import annotations

import gc
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark import InheritableThread
from pyspark.sql import SparkSession

from benchmarks.harness import (
    Folders,
    Timing,
    alternate,
    cached_rows,
    check_rows,
    create_plain_table,
    idempotent_append,
    open_sink,
    timed,
)
from benchmarks.report import Column, Section
from lakesink.readers.spark import committed
from lakesink.tables.format import COMMIT_MODES

__all__ = ["MemoryPoint", "MemorySampler", "measure", "memory_section"]

MIB = 2**20
EVERY_S = 0.02
SETTLE_S = 0.5
#: What is sampled, by name: the JVM's heap in use, the JVM's and Python's resident sets.
MEASURES = {
    "heap": "JVM heap in use (driver and executors)",
    "jvm_rss": "JVM resident set (driver and executors)",
    "python_rss": "Python driver resident set (delta-rs)",
}
#: The names of the sides: the baseline, then each commit mode's checkpoint.
SIDES = ("append", *COMMIT_MODES)


@dataclass(frozen=True)
class Peaks:
    """What one action used: each measure's value before it and its peak during it."""

    before: dict[str, float]  # bytes, by measure
    peak: dict[str, float]  # bytes, by measure
    seconds: float
    samples: int  # how many times each measure was sampled
    high_water_marks: bool  # whether the kernel's VmHWM could be reset and read


class MemorySampler:
    """Samples the JVM's heap in use and both processes' resident sets while an action runs.

    Args:
        spark: The session (in local mode its driver and executors are one JVM).
        every_s: Seconds between samples.
        executors: The pids of the application's executor JVMs, if they run apart.
    """

    def __init__(
        self, spark: SparkSession, every_s: float = EVERY_S, executors: Sequence[int] = ()
    ) -> None:
        jvm = spark.sparkContext._jvm  # type: ignore[union-attr]
        assert jvm is not None
        self._jvm = jvm
        self._bean = jvm.java.lang.management.ManagementFactory.getMemoryMXBean()
        self.jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
        self._every_s = every_s
        self._executors = tuple(executors)

    def measure(self, action: Callable[[], object]) -> Peaks:
        """Run ``action`` once, collecting garbage first; its peaks and seconds."""
        gc.collect()
        self._jvm.System.gc()
        time.sleep(SETTLE_S)  # the collection's uncommitted heap leaves the resident set
        before = self._sample()
        marks = _reset_high_water_mark(self.jvm_pid) & _reset_high_water_mark(os.getpid())
        # The peaks while the action runs only: a resident set still shrinking from
        # before is no part of them.
        peak = dict.fromkeys(before, 0.0)
        count = [0]
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                for name, value in self._sample().items():
                    peak[name] = max(peak[name], value)
                count[0] += 1
                stop.wait(self._every_s)

        # PySpark's thread: its py4j connection (a JVM thread of its own) ends with it.
        sampler = InheritableThread(target=sample, name="memory-sampler", daemon=True)
        sampler.start()
        try:
            seconds = timed(action)
        finally:
            stop.set()
            sampler.join()
        for name, value in self._sample().items():
            peak[name] = max(peak[name], value)
        if marks:  # a mark above the resident set at its reset was reached during the action
            for name, pid in (("jvm_rss", self.jvm_pid), ("python_rss", os.getpid())):
                mark = _status(pid, "VmHWM")
                if mark > before[name]:
                    peak[name] = max(peak[name], mark)
        return Peaks(
            before=before, peak=peak, seconds=seconds, samples=count[0], high_water_marks=marks
        )

    def _sample(self) -> dict[str, float]:
        found = {
            "heap": float(self._bean.getHeapMemoryUsage().getUsed()),
            "jvm_rss": _status(self.jvm_pid, "VmRSS"),
            "python_rss": _status(os.getpid(), "VmRSS"),
        }
        if self._executors:
            found["executors_rss"] = sum(_status(pid, "VmRSS") for pid in self._executors)
        return found


def _status(pid: int, field: str) -> float:
    """A ``/proc/<pid>/status`` memory field, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            value, unit = line.split(":", 1)[1].split()
            assert unit == "kB", line
            return float(value) * 1024
    raise LookupError(f"no {field} in /proc/{pid}/status")


def _reset_high_water_mark(pid: int) -> bool:
    """Reset the process's ``VmHWM`` to its resident set now (Linux 4.0 and later)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class MemoryPoint:
    """The peaks of each side, at one size: ``timings`` holds, by ``<side>_<what>``, each
    repetition's peak and growth (``peak``: bytes; ``growth``: bytes over the value before;
    ``<side>_seconds``: the action's time)."""

    rows: int
    timings: dict[str, Timing]
    samples: int  # the fewest samples of a measure any action had
    high_water_marks: bool


def measure(
    spark: SparkSession,
    workspace: Folders,
    rows: int,
    repetitions: int,
    executors: Sequence[int] = (),
) -> MemoryPoint:
    """The peaks of an idempotent append and of a checkpoint in each mode, of ``rows`` rows
    (and the executors', given the pids of their JVMs when they run apart)."""
    data = cached_rows(spark, rows)
    sampler = MemorySampler(spark, executors=executors)
    counts: list[int] = []
    marks: list[bool] = []

    def side(name: str) -> Callable[[], dict[str, float]]:
        def run() -> dict[str, float]:
            folder = workspace.folder(f"memory-{name}-{rows}")
            path = f"{folder}/table"
            if name == "append":
                create_plain_table(spark, path, data.schema)
                peaks = sampler.measure(lambda: idempotent_append(data, path))
                check_rows(spark.read.format("delta").load(path), rows, "an idempotent table")
            else:
                sink = open_sink(spark, path, data.schema, commit=name)

                def checkpoint() -> None:
                    sink.write(data)
                    sink.notify_checkpoint_complete(sink.prepare_commit())

                try:
                    peaks = sampler.measure(checkpoint)
                finally:
                    sink.close()
                check_rows(committed(spark, path), rows, f"the committed view of {path}")
            workspace.drop(folder)
            counts.append(peaks.samples)
            marks.append(peaks.high_water_marks)
            figures = {f"{name}_seconds": peaks.seconds}
            for measure in peaks.peak:
                figures[f"{name}_{measure}_peak"] = peaks.peak[measure]
                figures[f"{name}_{measure}_growth"] = peaks.peak[measure] - peaks.before[measure]
            return figures

        return run

    timings = alternate(repetitions, *(side(name) for name in SIDES))
    data.unpersist()
    return MemoryPoint(rows=rows, timings=timings, samples=min(counts), high_water_marks=all(marks))


def memory_section(point: MemoryPoint) -> Section:
    """Section 13: each peak of a checkpoint in both modes against the append's."""
    t = point.timings

    def mib(key: str) -> float:
        return t[key].median / MIB

    rows = []
    for measure, what in MEASURES.items():
        row: dict[str, object] = {
            "measure": measure,
            "what": what,
            "rows": point.rows,
            "samples_per_action": point.samples,
            "high_water_marks": point.high_water_marks,
        }
        for side in SIDES:
            row[f"{side}_peak_mib"] = round(mib(f"{side}_{measure}_peak"))
            row[f"{side}_growth_mib"] = round(mib(f"{side}_{measure}_growth"))
            row[f"{side}_s"] = t[f"{side}_seconds"].median
        for mode in COMMIT_MODES:
            append_peak = t[f"append_{measure}_peak"].median
            row[f"{mode}_ratio"] = t[f"{mode}_{measure}_peak"].median / append_peak
            # A ratio of growths only where the append's is not lost in a page's noise.
            append_growth = t[f"append_{measure}_growth"].median
            row[f"{mode}_growth_ratio"] = (
                t[f"{mode}_{measure}_growth"].median / append_growth
                if append_growth >= MIB
                else None
            )
        row["samples"] = {
            f"{side}_{what}": [value / MIB for value in t[f"{side}_{measure}_{what}"].samples]
            for side in SIDES
            for what in ("peak", "growth")
        } | {f"{side}_seconds": list(t[f"{side}_seconds"].samples) for side in SIDES}
        rows.append(row)
    return Section(
        key="memory",
        title=f"Peak memory of a checkpoint of {point.rows:,} rows",
        baseline="x the peak of Delta's idempotent append of the same rows",
        columns=(
            Column("what", "what", "text"),
            Column("append_peak_mib", "idempotent append: peak (MiB)", "int"),
            Column("append_growth_mib", "growth (MiB)", "int"),
            Column("merge_peak_mib", "checkpoint (MERGE): peak (MiB)", "int"),
            Column("merge_growth_mib", "growth (MiB)", "int"),
            Column("merge_ratio", "peak ratio (MERGE)", "ratio"),
            Column("metadata_peak_mib", "checkpoint (metadata): peak (MiB)", "int"),
            Column("metadata_growth_mib", "growth (MiB)", "int"),
            Column("metadata_ratio", "peak ratio (metadata)", "ratio"),
        ),
        rows=tuple(rows),
    )
