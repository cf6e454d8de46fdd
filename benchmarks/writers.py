"""Curve 4 of ``make bench-scale``: writers of one table, each a process of its own.

For each commit mode and each number of writers, a fresh lakesink table gets that many
writer processes (``python -m benchmarks.writers ...``, each its own Spark driver on
``local[1]``, what jobs on separate machines are), each with its own writer id and its own
range of ids, each committing ``checkpoints`` checkpoints of ``rows`` rows one after the
other. The writers start their sessions and open their sinks first; the clock starts when
every one of them is ready (a file each) and the parent lets them go (a file), and stops
at the last commit of the last writer. Its figure is the rows committed a second, against
one writer's in the same run; with it, the conflicts the commits retried (the journal's
attempts), how busy the machine's cores were (``/proc/stat``, from the go to the writers'
exit: what more writers can still use) and a check that every row is in the committed
view once.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from benchmarks.harness import REPO, BenchmarkError, Folders
from benchmarks.report import Column, Row, Section
from lakesink.delta.sink import DeltaSink
from lakesink.ops.status import sink_status
from lakesink.readers.spark import committed

__all__ = ["WritersPoint", "measure", "writers_section"]

log = logging.getLogger("benchmarks")

SCHEMA = "id BIGINT, writer STRING"
#: How long writers may take to get ready, and to finish once let go.
READY_S, RUN_S = 600.0, 3_600.0


@dataclass(frozen=True)
class WritersPoint:
    """Curve 4 at one number of writers, of one commit mode."""

    mode: str
    writers: int
    rows: int  # committed by all of them
    seconds: float  # from the go to the last commit
    conflicts_retried: int
    cpu_busy: float  # of all the machine's cores, from the go to the writers' exit

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


def measure(
    spark: SparkSession,
    folders: Folders,
    counts: Sequence[int],
    checkpoints: int,
    rows: int,
    modes: Sequence[str],
) -> list[WritersPoint]:
    """Curve 4 for each mode and number of writers."""
    return [
        _run(spark, folders, count, checkpoints, rows, mode) for mode in modes for count in counts
    ]


def _run(
    spark: SparkSession, folders: Folders, count: int, checkpoints: int, rows: int, mode: str
) -> WritersPoint:
    log.info("writers: %d writer(s) of one %s table", count, mode)
    folder = folders.folder(f"writers-{mode}-{count}")
    table = f"{folder}/events"
    DeltaSink.open(spark, table, schema=SCHEMA, commit=mode, view_name="bench_writers").close()
    with tempfile.TemporaryDirectory(prefix="lakesink-writers-") as signals:
        names = [f"w{index}" for index in range(count)]
        logs = {name: Path(signals, f"{name}.log").open("w") for name in names}  # noqa: SIM115
        processes = {
            name: subprocess.Popen(
                [
                    *(sys.executable, "-m", "benchmarks.writers", table, name),
                    *(str(index * checkpoints * rows), str(checkpoints), str(rows), mode, signals),
                ],
                stdout=subprocess.PIPE,
                stderr=logs[name],
                text=True,
                cwd=REPO,
            )
            for index, name in enumerate(names)
        }
        try:
            _await(processes, lambda: all(Path(signals, f"ready-{n}").exists() for n in names))
            started, cpu = time.time(), _cpu_times()
            Path(signals, "go").touch()
            outputs = {name: p.communicate(timeout=RUN_S)[0] for name, p in processes.items()}
            busy, total = (now - then for now, then in zip(_cpu_times(), cpu, strict=True))
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.kill()
                process.wait()
            for handle in logs.values():
                handle.close()
        for name, process in processes.items():
            if process.returncode != 0:
                tail = Path(signals, f"{name}.log").read_text()[-3000:]
                raise BenchmarkError(f"writer {name} of {table} failed:\n{tail}")
    expected: Counter[int] = Counter()
    ended = started
    for output in outputs.values():
        for line in output.splitlines():
            if line.startswith("committed "):
                _, start, stop, at = line.split()
                expected.update(range(int(start), int(stop)))
                ended = max(ended, float(at))
    if sum(expected.values()) != count * checkpoints * rows:
        raise BenchmarkError(f"the writers of {table} reported {sum(expected.values())} rows")
    visible = Counter(row.id for row in committed(spark, table).select("id").collect())
    if visible != expected:
        raise BenchmarkError(f"the committed view of {table} lost or duplicated a row")
    status = sink_status(table)
    folders.drop(folder)
    return WritersPoint(
        mode=mode,
        writers=count,
        rows=count * checkpoints * rows,
        seconds=ended - started,
        conflicts_retried=sum(t.attempts for t in status.committed),
        cpu_busy=busy / total,
    )


def _cpu_times() -> tuple[int, int]:
    """The machine's busy and total CPU time so far (``/proc/stat``, in clock ticks)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle and waiting for I/O
    return sum(ticks) - idle, sum(ticks)


def _await(processes: dict[str, subprocess.Popen[str]], ready: Callable[[], bool]) -> None:
    """Wait until ``ready()`` holds; a writer that exits first, or the time running out,
    is an error."""
    deadline = time.monotonic() + READY_S
    while not ready():
        for name, process in processes.items():
            if process.poll() is not None:
                raise BenchmarkError(f"writer {name} exited before it was ready")
        if time.monotonic() > deadline:
            raise BenchmarkError(f"the writers were not ready within {READY_S:.0f} s")
        time.sleep(0.1)


def writers_section(points: Sequence[WritersPoint]) -> Section:
    """Curve 4 as a table: rows committed a second by each number of writers."""
    one = {p.mode: p.rows_per_s for p in points if p.writers == 1}
    rows: list[Row] = [
        {
            "mode": p.mode,
            "writers": p.writers,
            "rows": p.rows,
            "seconds": p.seconds,
            "rows_per_s": round(p.rows_per_s),
            "speedup": p.rows_per_s / one[p.mode] if p.mode in one else None,
            "conflicts_retried": p.conflicts_retried,
            "cpu_busy": p.cpu_busy,
        }
        for p in points
    ]
    return Section(
        key="writers",
        title="Writers of one table",
        baseline="x one writer's rows committed a second, the same run",
        columns=(
            Column("mode", "commit mode", "text"),
            Column("writers", "writer processes", "int"),
            Column("rows", "rows committed", "int"),
            Column("seconds", "from go to the last commit", "seconds"),
            Column("rows_per_s", "rows a second", "int"),
            Column("speedup", "x one writer", "ratio"),
            Column("conflicts_retried", "conflicts retried", "int"),
            Column("cpu_busy", "CPU busy (all cores)", "percent"),
        ),
        rows=tuple(rows),
    )


def _writer(argv: list[str]) -> None:
    """One writer process: ready, then ``checkpoints`` checkpoints once let go."""
    parser = argparse.ArgumentParser(description="one writer of bench-scale's curve 4")
    for name in ("table", "writer", "first", "checkpoints", "rows", "mode", "signals"):
        parser.add_argument(name)
    args = parser.parse_args(argv)
    from pyspark.sql import functions as F

    from lakesink.spark.session import spark_session

    spark = spark_session(
        master="local[1]",
        app_name=f"lakesink-bench-writer-{args.writer}",
        conf={"spark.ui.enabled": "false"},
        ivy_dir=os.environ.get("LAKESINK_IVY_DIR"),
    )
    spark.sparkContext.setLogLevel("ERROR")
    sink = DeltaSink.open(
        spark, args.table, writer_id=args.writer, view_name=f"v_{args.writer}", commit=args.mode
    )
    first, rows = int(args.first), int(args.rows)
    Path(args.signals, f"ready-{args.writer}").touch()
    while not Path(args.signals, "go").exists():
        time.sleep(0.02)
    for k in range(int(args.checkpoints)):
        start = first + k * rows
        sink.write(
            spark.range(start, start + rows, 1, 1).select("id", F.lit(args.writer).alias("writer"))
        )
        sink.notify_checkpoint_complete(sink.prepare_commit())
        print("committed", start, start + rows, time.time(), flush=True)
    sink.close()
    spark.stop()


if __name__ == "__main__":
    _writer(sys.argv[1:])
