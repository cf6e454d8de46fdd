"""What every benchmark section shares: data, timing, tables, scan evidence, the machine.

Every figure is the median of several timed repetitions. Plain Delta work and lakesink
work are interleaved (and their order alternates between repetitions) so that a change
of load on a shared machine hits both sides alike.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Protocol

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from lakesink.delta import sink as sink_module
from lakesink.delta.sink import DeltaSink
from lakesink.errors import LakesinkError
from lakesink.spark.sql import delta_path
from lakesink.storage.files import object_store
from lakesink.storage.location import join, normalize
from lakesink.storage.options import StorageOptions
from lakesink.tables.format import HIDDEN_PREFIX, VISIBLE
from lakesink.tables.published import PublishedTable, published_table

__all__ = [
    "BenchmarkError",
    "Folders",
    "LoadSampler",
    "ObjectStoreWorkspace",
    "ScanCounter",
    "Timing",
    "Workspace",
    "alternate",
    "batch",
    "cached_rows",
    "check_rows",
    "create_plain_table",
    "delta_files",
    "last_operation_metrics",
    "latest_committed",
    "machine",
    "open_sink",
    "plain_append",
    "published_rows",
    "timed",
    "timing_publish",
    "versus",
]

log = logging.getLogger("benchmarks")

REPO = Path(__file__).resolve().parent.parent


class BenchmarkError(LakesinkError):
    """Raised when a benchmark's own sanity check fails (the compared tables disagree)."""


@dataclass(frozen=True)
class Timing:
    """The seconds each repetition of one measured action took (or another figure each
    repetition gave, where its name says so: bytes of memory in section 13)."""

    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def timed(action: Callable[[], object]) -> float:
    """Seconds ``action`` took, wall clock."""
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def versus(baseline: str, theirs: Timing, ours: Timing, **fields: object) -> dict[str, object]:
    """A report row: ``fields``, both medians, lakesink's ratio to ``baseline``, every sample."""
    return {
        **fields,
        f"{baseline}_s": theirs.median,
        "lakesink_s": ours.median,
        "ratio": ours.median / theirs.median,
        "samples": {baseline: list(theirs.samples), "lakesink": list(ours.samples)},
    }


def alternate(repetitions: int, *actions: Callable[[], dict[str, float]]) -> dict[str, Timing]:
    """Run every action once per repetition, in reverse order every other repetition.

    An action runs one repetition and returns the seconds of what it timed, by name.
    """
    samples: dict[str, list[float]] = {}
    for rep in range(repetitions):
        for action in actions if rep % 2 == 0 else reversed(actions):
            for name, seconds in action().items():
                samples.setdefault(name, []).append(seconds)
    return {name: Timing(tuple(values)) for name, values in samples.items()}


#: The names the points of sections 6, 7 and 11 give lakesink's timings, by commit mode.
LAKESINK_TIMINGS = {"merge": "lakesink", "metadata": "lakesink_metadata"}


def by_commit_mode(
    repetitions: int, baseline: str, seconds: Callable[[str | None], float]
) -> dict[str, Timing]:
    """The baseline (``seconds(None)``, named ``baseline``) and lakesink committing by MERGE
    and by metadata (``seconds(mode)``), alternated as ``alternate`` does."""

    def action(mode: str | None, name: str) -> Callable[[], dict[str, float]]:
        return lambda: {name: seconds(mode)}

    names = {None: baseline, **LAKESINK_TIMINGS}
    return alternate(repetitions, *(action(mode, name) for mode, name in names.items()))


class Folders(Protocol):
    """Where a measurement puts its tables: a ``Workspace`` or an ``ObjectStoreWorkspace``."""

    def folder(self, name: str) -> str: ...

    def drop(self, folder: str) -> None: ...

    def close(self) -> None: ...


class Workspace:
    """Fresh folders for the tables of one run, all removed at the end.

    Args:
        parent: Where to put the run's folder; default: the system's temporary folder.
    """

    def __init__(self, parent: str | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="lakesink-bench-", dir=parent))
        self._count = 0

    def folder(self, name: str) -> str:
        """A new, empty folder (its own journal goes beside its tables)."""
        self._count += 1
        folder = self.root / f"{self._count:04d}-{name}"
        folder.mkdir()
        return str(folder)

    @staticmethod
    def drop(folder: str) -> None:
        shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


class ObjectStoreWorkspace:
    """Fresh folders under an object-store URI (``s3a://bucket/prefix``), as ``Workspace``.

    An object store has no folders: a folder is a key prefix, made by its first object,
    and dropping it deletes every object under it.

    Args:
        root: The URI the run's folders go under; it should hold nothing yet.
        options: How to reach the store (the same as the Spark session's).
    """

    def __init__(self, root: str, options: StorageOptions) -> None:
        self.root = normalize(root)
        self._options = options
        self._count = 0

    def folder(self, name: str) -> str:
        """A new folder's URI (its own journal goes beside its tables)."""
        self._count += 1
        return join(self.root, f"{self._count:04d}-{name}")

    def drop(self, folder: str) -> None:
        """Delete every object under ``folder``."""
        import obstore

        store, key = object_store(folder, self._options)
        listed = [meta["path"] for chunk in obstore.list(store, prefix=f"{key}/") for meta in chunk]
        if listed:
            obstore.delete(store, listed)  # DeleteObjects, 1,000 keys a request

    def close(self) -> None:
        self.drop(self.root)


def cached_rows(spark: SparkSession, rows: int) -> DataFrame:
    """``rows`` generated rows, cached and counted, so generating them is never measured.

    The columns of a typical event: a long key, a string, a double and a timestamp.
    """
    frame = spark.range(0, rows, 1, spark.sparkContext.defaultParallelism).select(
        F.col("id"),
        F.concat(F.lit("customer-"), (F.col("id") % 1000).cast("string")).alias("customer"),
        (F.rand(seed=42) * 100).alias("amount"),
        F.timestamp_seconds(F.lit(1_700_000_000) + F.col("id")).alias("ts"),
    )
    frame.cache()
    frame.count()
    return frame


def batch(frame: DataFrame, index: int, rows: int) -> DataFrame:
    """The cached rows with their ids moved to the ``index``-th block: distinct rows, no cost."""
    return frame.withColumn("id", F.col("id") + index * rows)


def check_rows(frame: DataFrame, expected: int, what: str) -> None:
    """Raise unless ``frame`` holds ``expected`` rows (a run that lost or doubled rows)."""
    found = frame.count()
    if found != expected:
        raise BenchmarkError(f"{what} has {found} rows, expected {expected}")


def latest_committed(spark: SparkSession, path: str) -> DataFrame:
    """A sink table's committed rows at its latest version, as read before cuts: the
    committed partition, the user's columns."""
    table = spark.read.format("delta").load(path)
    user = [c for c in table.columns if not c.startswith(HIDDEN_PREFIX)]
    return table.where(F.col(VISIBLE)).select(*user)


def create_plain_table(spark: SparkSession, path: str, schema: StructType) -> None:
    """An empty plain Delta table with the user columns (created untimed, like a sink's)."""
    spark.createDataFrame([], schema).write.format("delta").save(path)


def plain_append(frame: DataFrame, path: str) -> None:
    """The baseline: what a pipeline writing to Delta directly does with the same rows."""
    frame.write.format("delta").mode("append").save(path)


def idempotent_append(frame: DataFrame, path: str, version: int = 1) -> None:
    """Delta's own exactly-once append: skipped if ``version`` of its app id is in the log
    (what a ``foreachBatch`` user writes with the batch id as ``version``)."""
    writer = frame.write.format("delta").mode("append").option("txnAppId", "lakesink-bench")
    writer.option("txnVersion", str(version)).save(path)


def open_sink(spark: SparkSession, path: str, schema: StructType, **options: object) -> DeltaSink:
    """A sink on ``path``; every sink of a run shares one view name, replaced each time."""
    return DeltaSink.open(spark, path, schema=schema, view_name="lakesink_bench", **options)


def delta_files(spark: SparkSession, path: str) -> int:
    """Data files in the table's current version."""
    return int(spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first()["numFiles"])


def last_operation_metrics(
    spark: SparkSession, path: str, operation: str | None = None
) -> dict[str, str]:
    """The operation metrics of the table's latest Delta commit, or of its latest commit of
    ``operation`` (``"MERGE"``: its rows, files and times; a MERGE commit is followed by
    lakesink's release, a delta-rs commit of no metrics)."""
    history = spark.sql(f"DESCRIBE HISTORY {delta_path(path)}")
    if operation is not None:
        history = history.where(F.col("operation") == operation)
    row = history.orderBy(F.col("version").desc()).first()
    return dict(row["operationMetrics"] or {}) if row else {}


@contextmanager
def timing_publish() -> Iterator[list[float]]:
    """Yield a list that gets the seconds of each update of a published table
    (``lakesink.tables.published.publish``) a sink makes inside the block.

    A sink brings its table's published table up to date right after each commit that
    made rows visible, and swallows a failure (the table is derived; the next commit
    brings it up): the sink's own call is timed as it is, so what a commit costs stays
    the same; ``published_rows`` then checks that the update happened.
    """
    real = sink_module.publish
    seconds: list[float] = []

    def publish(path: str) -> PublishedTable:
        start = time.perf_counter()
        try:
            return real(path)
        finally:
            seconds.append(time.perf_counter() - start)

    sink_module.publish = publish
    try:
        yield seconds
    finally:
        sink_module.publish = real


def published_rows(spark: SparkSession, path: str) -> DataFrame:
    """The published table of the sink table at ``path``, read by path as any Delta
    reader does, after checking that it shows the table's newest version."""
    published = published_table(path)
    if published.behind:
        raise BenchmarkError(
            f"the published table of {path} is {published.behind} version(s) behind the "
            "table: an update failed (the sink logged why)"
        )
    return spark.read.format("delta").load(published.path)


class ScanCounter:
    """Counts the data files Delta table scans read, from Spark's SQL status store.

    The evidence behind a timing: whether a commit's MERGE was pruned to its own
    transaction's files, how many pending or aborted files a reader opened. Reads
    Spark's internal status store (kept even with the UI off), so it answers None
    when that is unavailable rather than failing a benchmark.
    """

    def __init__(self, spark: SparkSession) -> None:
        self._spark = spark
        self._store = spark._jsparkSession.sharedState().statusStore()  # type: ignore[union-attr]

    @contextmanager
    def counting(self) -> Iterator[list[int | None]]:
        """Yield a one-item list that holds, after the block, the files read inside it."""
        result: list[int | None] = [None]
        mark = self._last_execution_id()
        yield result
        try:
            self._drain()
            result[0] = sum(self._files_read(eid) for eid in self._execution_ids_after(mark))
        except Exception as exc:  # evidence only: never fail a run over it
            log.warning("cannot count the files scanned: %s", exc)

    def _drain(self) -> None:
        # The status store is fed by the listener bus, asynchronously.
        self._spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty()  # type: ignore[union-attr]

    def _last_execution_id(self) -> int:
        ids = self._execution_ids_after(-1)
        return max(ids) if ids else -1

    def _execution_ids_after(self, mark: int) -> list[int]:
        # The store keeps the latest spark.sql.ui.retainedExecutions (1000) executions.
        executions = self._store.executionsList()
        iterator = executions.iterator()
        ids = []
        while iterator.hasNext():
            execution_id = iterator.next().executionId()
            if execution_id > mark:
                ids.append(execution_id)
        return ids

    def _files_read(self, execution_id: int) -> int:
        values = self._store.executionMetrics(execution_id)
        nodes = self._store.planGraph(execution_id).allNodes()
        total = 0
        for i in range(nodes.size()):
            node = nodes.apply(i)
            # Data files are Parquet; Delta reads its own log through a DeltaLogFileIndex.
            if not node.name().startswith("Scan parquet") or "DeltaLogFileIndex" in node.desc():
                continue
            metrics = node.metrics()
            for j in range(metrics.size()):
                metric = metrics.apply(j)
                value = values.get(metric.accumulatorId())
                if metric.name() == "number of files read" and value.isDefined():
                    total += int(str(value.get()).replace(",", ""))
        return total


class LoadSampler:
    """Samples the 1-minute load average every few seconds while a run goes on.

    The machine may be shared: the report says how busy it was during the measurements.
    """

    def __init__(self, every_s: float = 5.0) -> None:
        self.samples: list[float] = []
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)

    def _sample(self) -> None:
        while True:
            self.samples.append(round(os.getloadavg()[0], 2))
            if self._stop.wait(self._every_s):
                return

    def __enter__(self) -> LoadSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, float]:
        """Minimum, median and maximum of the 1-minute load average over the run."""
        return {
            "min_1m": min(self.samples),
            "median_1m": statistics.median(self.samples),
            "max_1m": max(self.samples),
            "samples": len(self.samples),
        }


def machine(spark: SparkSession) -> dict[str, object]:
    """The header of a report: where, when and with what the figures were measured."""
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(_memory_bytes() / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "java": spark.sparkContext._jvm.System.getProperty("java.version"),  # type: ignore[union-attr]
        "pyspark": version("pyspark"),
        "delta_spark": version("delta-spark"),
        "spark_master": spark.sparkContext.master,
        "lakesink_commit": _git_commit(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _git_commit() -> str:
    """The commit measured, and whether lakesink/ had uncommitted changes then."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--", "lakesink")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    return f"{commit} + uncommitted changes in lakesink/" if dirty else commit
