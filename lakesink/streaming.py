"""Structured Streaming: lakesink as the exactly-once, audited sink of a streaming query.

    from lakesink.streaming import StreamingSink

    with StreamingSink(spark, "/data/orders", checkpoint_location="/chk/orders",
                       schema="order_id BIGINT, customer STRING, amount DOUBLE") as sink:
        query = (stream_df.writeStream.foreachBatch(sink)
                 .option("checkpointLocation", "/chk/orders")
                 .trigger(availableNow=True).start())
        query.awaitTermination()
    # here every micro-batch that Spark recorded as done is committed and visible

The micro-batch id is the checkpoint id. Batch N is written and pre-committed inside
``foreachBatch``; Spark then writes it to the query's commit log (``commits/N`` in the
checkpoint location), and lakesink commits it: when batch N+1 starts, as soon as a
``StreamingQueryListener`` reports the batch (a thread of the sink's own does the commit,
not the listener), on leaving the ``with`` block, and on restart. What happens in which
failure is listed in ``lakesink.core.microbatch``, which holds the engine-free logic; this
module is the Spark side: the commit log, the listener, the ``foreachBatch`` callable.

Through Spark Connect, Spark pickles the ``foreachBatch`` function and runs it in a Python
worker on the server, with a Connect session of its own: the sink hands Spark a small
picklable function (``_WorkerBatches``) that opens the sinks for each batch in that worker
(recovering them, which commits batch N-1), writes and pre-commits the batch, and closes
them again, so the client, which committed nothing while the query ran, can take them over
on leaving the ``with`` block and commit the last batch.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from pyspark.sql import DataFrame, SparkSession

# pyspark.sql.streaming re-exports it without listing it in __all__.
from pyspark.sql.streaming import StreamingQueryListener  # type: ignore[attr-defined]
from pyspark.sql.types import StructType

from lakesink.core import current_step_hook
from lakesink.core.microbatch import MicroBatchDriver
from lakesink.delta.options import SinkOptions
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError
from lakesink.jvm import session_jvm
from lakesink.ops.metrics import MetricsExport, sink_registry
from lakesink.storage.files import entry_names, read_bytes
from lakesink.storage.hadoop import delete_tree, folder_listing

__all__ = ["Process", "StreamingSink", "recorded_batch", "recorded_offsets"]

log = logging.getLogger(__name__)

#: Writes one micro-batch into the sinks (by name); the default writes it into the only one.
Process = Callable[[DataFrame, Mapping[str, DeltaSink]], None]


class StreamingSink:
    """An exactly-once ``foreachBatch`` sink into one lakesink table, or several at once.

    One table: ``StreamingSink(spark, path, checkpoint_location=..., schema=...)``, with
    ``DeltaSink`` options (``validation``, ``timeout``, ``writer_id``, ...) as keywords or
    ``options``. Several tables committed together per batch:
    ``StreamingSink.for_sinks(spark, sinks, process=..., checkpoint_location=...)``.

    Creating it recovers every sink from the query's commit log: batches Spark recorded
    are committed, others aborted (Spark runs them again).

    Args:
        spark: A Delta-ready session (``lakesink.spark_session()``).
        path: The table's folder.
        checkpoint_location: The query's ``checkpointLocation``, the same string.
        schema: The table's user columns (required to create it).
        listen: Commit a batch as soon as Spark reports it done (a listener); without it,
            a batch is committed when the next one starts or the ``with`` block ends.
        metrics: Where to send the sinks' metrics (``lakesink.ops.metrics``) after each
            batch's pre-commit and each commit; a failure to send is logged, never raised.
        options: The table's ``SinkOptions``; ``**fields`` set them one by one.

    Through Spark Connect (``SparkSession.builder.remote(...)``) each batch is written in
    the server's Python worker, which needs lakesink installed; a batch is committed when
    the next one starts or when the sink closes (``listen`` does not apply), and
    ``options`` and ``process`` must pickle.

    Raises:
        ConfigurationError: A bad sink option, or a checkpoint location that is behind the
            sinks' journals (deleted or replaced: its batch ids would be used twice).
    """

    def __init__(
        self,
        spark: SparkSession,
        path: str,
        *,
        checkpoint_location: str,
        schema: StructType | str | None = None,
        listen: bool = True,
        metrics: MetricsExport | None = None,
        options: SinkOptions | None = None,
        **fields: Any,
    ) -> None:
        if "sinks" in fields or "process" in fields:
            raise ConfigurationError(
                "sinks= and process= make a sink of several tables: use "
                "StreamingSink.for_sinks(spark, sinks, process=..., checkpoint_location=...)"
            )
        one = DeltaSink(spark, path, schema=schema, options=options, **fields)
        self._start(spark, {one.sink_id: one}, checkpoint_location, None, listen, metrics)

    @classmethod
    def for_sinks(
        cls,
        spark: SparkSession,
        sinks: Mapping[str, DeltaSink],
        *,
        checkpoint_location: str,
        process: Process | None = None,
        listen: bool = True,
        metrics: MetricsExport | None = None,
    ) -> StreamingSink:
        """A sink that writes each batch into several tables and commits them together.

        A validation failure in one holds or aborts the batch in all.

        Args:
            spark: A Delta-ready session.
            sinks: The tables' ``DeltaSink`` objects, not started, by name.
            checkpoint_location: The query's ``checkpointLocation``, the same string.
            process: Writes a batch into them: ``process(batch_df, sinks)``; required
                with more than one sink.
            listen: As for one table.
            metrics: As for one table.

        Raises:
            ConfigurationError: No sinks, several without ``process``, or a checkpoint
                location behind the sinks' journals.
        """
        if not sinks:
            raise ConfigurationError("StreamingSink.for_sinks needs at least one sink")
        if process is None and len(sinks) > 1:
            raise ConfigurationError(
                f"{len(sinks)} sinks ({', '.join(sinks)}) need process=, a function that "
                "writes each batch into them"
            )
        self = cls.__new__(cls)
        self._start(spark, sinks, checkpoint_location, process, listen, metrics)
        return self

    def _start(
        self,
        spark: SparkSession,
        sinks: Mapping[str, DeltaSink],
        checkpoint_location: str,
        process: Process | None,
        listen: bool,
        metrics: MetricsExport | None,
    ) -> None:
        """What both constructors do: recover the sinks from the query's commit log."""
        self.spark = spark
        self.checkpoint_location = checkpoint_location
        _drop_unfinished_first_entries(spark, checkpoint_location)
        self._process = process or _write_to_the_only_sink
        self._driver = _driver(spark, sinks, checkpoint_location)
        self._metrics = metrics if metrics is not None and metrics.enabled else None
        self._listener: _CommitListener | None = None
        self._worker: _WorkerBatches | None = None
        if session_jvm(spark) is None:
            # The server's worker opens the sinks for each batch: this process lets go.
            self._driver.close(commit=False)
            specs = {name: _SinkSpec.of(sink) for name, sink in sinks.items()}
            self._worker = _WorkerBatches(specs, checkpoint_location, self._process, self._metrics)
            log.info(
                "%s: a Spark Connect session; each batch is written in the server's Python "
                "worker and committed when the next one starts or this sink closes",
                checkpoint_location,
            )
        elif listen:
            self._listener = _CommitListener(self)

    @property
    def sinks(self) -> Mapping[str, DeltaSink]:
        """The sinks, by name."""
        return self._driver.sinks

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        """``foreachBatch``: write batch ``batch_id`` into the sinks and pre-commit it."""
        if self._worker is not None:
            return self._worker(batch, batch_id)
        batch_id = int(batch_id)
        _check_is_the_querys(self.spark, self.checkpoint_location, batch_id)
        with self._driver.batch(batch_id) as sinks:
            self._process(batch, sinks)
        _export_metrics(self._metrics, self.sinks)

    def __reduce__(self) -> tuple[Any, ...]:
        """What Spark Connect sends the server for ``foreachBatch``: the worker's function."""
        if self._worker is None:
            raise TypeError(
                "a StreamingSink of a classic Spark session runs in this process and is not "
                "pickled; give foreachBatch the sink itself"
            )
        worker = self._worker
        return _WorkerBatches, tuple(getattr(worker, f.name) for f in fields(worker))

    def commit(self) -> list[int]:
        """Commit the batches Spark has recorded in the commit log; return their ids."""
        if self._worker is not None:
            committed = self._worker.commit_recorded(self.spark)
        else:
            committed = self._driver.commit_recorded()
        if committed:
            _export_metrics(self._metrics, self.sinks)
        return committed

    def close(self) -> None:
        """Commit what Spark recorded, stop listening, close the sinks (releasing them)."""
        if self._worker is not None:
            self.commit()
            return
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.stop()
        self._driver.close()
        _export_metrics(self._metrics, self.sinks)

    def __enter__(self) -> StreamingSink:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True)
class _SinkSpec:
    """What opens a sink again in another process: its table, columns and options."""

    path: str
    schema: StructType
    options: SinkOptions

    @classmethod
    def of(cls, sink: DeltaSink) -> _SinkSpec:
        return cls(sink.path, sink.schema, sink.options)

    def open(self, spark: SparkSession) -> DeltaSink:
        return DeltaSink(spark, self.path, schema=self.schema, options=self.options)


@dataclass(frozen=True)
class _WorkerBatches:
    """A Spark Connect query's ``foreachBatch`` function, run in the server's Python worker.

    Each batch opens the sinks with the worker's session (their recovery commits what
    Spark recorded, batch N-1 among it), writes and pre-commits the batch, and closes them:
    a sink's writer lock is held only while a batch is written, so the client can take the
    sinks over once the query has stopped.
    """

    sinks: Mapping[str, _SinkSpec]
    checkpoint_location: str
    process: Process
    metrics: MetricsExport | None

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        batch_id = int(batch_id)
        _check_is_the_querys(spark, self.checkpoint_location, batch_id)
        driver = self._open(spark)
        try:
            with driver.batch(batch_id) as sinks:
                self.process(batch, sinks)
        finally:
            driver.close(commit=False)  # the next batch, or the client's close, commits it
        _export_metrics(self.metrics, driver.sinks)

    def commit_recorded(self, spark: SparkSession) -> list[int]:
        """Commit what Spark recorded (opening the sinks recovers them); return the ids."""
        driver = self._open(spark)
        driver.close(commit=False)
        return driver.recovered

    def _open(self, spark: SparkSession) -> MicroBatchDriver[DeltaSink]:
        sinks = {name: spec.open(spark) for name, spec in self.sinks.items()}
        return _driver(spark, sinks, self.checkpoint_location)


def _driver(
    spark: SparkSession, sinks: Mapping[str, DeltaSink], checkpoint_location: str
) -> MicroBatchDriver[DeltaSink]:
    """The sinks recovered from the query's commit log, driven by its micro-batches."""
    return MicroBatchDriver(
        sinks,
        recorded=lambda: recorded_batch(spark, checkpoint_location),
        where=checkpoint_location,
        step_hook=current_step_hook(),
    )


def _export_metrics(metrics: MetricsExport | None, sinks: Mapping[str, DeltaSink]) -> None:
    if metrics is not None:
        metrics.send_quietly(sink_registry([sink.path for sink in sinks.values()]))


def recorded_batch(spark: SparkSession, checkpoint_location: str) -> int:
    """The last batch id in a query's commit log (``commits/``), -1 before the first."""
    names = folder_listing(spark, f"{checkpoint_location.rstrip('/')}/commits")
    return max((int(n) for n in names if n.isdigit()), default=-1)


def recorded_offsets(checkpoint_location: str) -> list[dict[str, Any]] | None:
    """Each source's offset in a query's last offsets entry (``offsets/N``), in the query's
    source order; None before its first batch. Read without Spark.

    Spark writes the entry as a version line, a metadata line, then one line per source:
    its offset as JSON (a file source's ``{"logOffset": N}``, Kafka's ``{topic: {partition:
    offset}}``), or ``-`` for a source with none yet.
    """
    folder = f"{checkpoint_location.rstrip('/')}/offsets"
    batches = [int(n) for n in entry_names(folder) if n.isdigit()]
    if not batches:
        return None
    lines = read_bytes(f"{folder}/{max(batches)}").decode().splitlines()[2:]
    return [json.loads(line) if line.strip() != "-" else {} for line in lines]


# Spark writes each entry of a query's offsets and commit logs to a hidden file beside it,
# then renames it into place (``CheckpointFileManager.createAtomic``); on a local file
# system the temporary file may have a checksum file of its own.
_UNFINISHED_ENTRY = re.compile(r"\.{1,2}\d+\.[0-9a-f-]{36}\.tmp(\.crc)?")


def _drop_unfinished_first_entries(spark: SparkSession, checkpoint_location: str) -> None:
    """Remove what a run killed while Spark wrote its very first log entry left behind.

    Before its first offsets entry, Spark refuses a checkpoint location whose ``offsets``
    or ``commits`` folder holds any file at all (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY``,
    spark.sql.streaming.verifyCheckpointDirectoryEmptyOnStart), so such a leftover stopped
    every later run of the query. A temporary entry is never read; once an offsets entry
    exists, Spark resumes from it and leftovers do not matter, so nothing is touched then.
    """
    root = checkpoint_location.rstrip("/")
    listed = {f: folder_listing(spark, f"{root}/{f}") for f in ("offsets", "commits")}
    if any(name.isdigit() for name in listed["offsets"]):
        return
    for folder, names in listed.items():
        for name in names:
            if _UNFINISHED_ENTRY.fullmatch(name):
                delete_tree(spark, f"{root}/{folder}/{name}")
                log.warning(
                    "%s/%s: removed %s, left by a run killed while Spark wrote its first "
                    "entry (Spark refuses to start a query on it)",
                    root,
                    folder,
                    name,
                )


def _write_to_the_only_sink(batch: DataFrame, sinks: Mapping[str, DeltaSink]) -> None:
    (sink,) = sinks.values()
    sink.write(batch)


def _check_is_the_querys(spark: SparkSession, checkpoint_location: str, batch_id: int) -> None:
    """Spark logs a batch's offsets before running it: without them, not the query's location."""
    if str(batch_id) not in folder_listing(spark, f"{checkpoint_location.rstrip('/')}/offsets"):
        raise ConfigurationError(
            f"micro-batch {batch_id} runs, but {checkpoint_location} has no offsets of it: "
            "give the StreamingSink the query's checkpointLocation"
        )


class _CommitListener(StreamingQueryListener):
    """Commits what Spark recorded, in a thread of its own, each time a batch is reported.

    ``onQueryProgress`` comes after the batch's commit log entry, on Spark's listener
    thread; the commit (a Delta MERGE, seconds) must not hold that thread, so the listener
    only wakes this thread up.
    """

    def __init__(self, sink: StreamingSink) -> None:
        self._sink = sink
        self._wake = threading.Event()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="lakesink-committer", daemon=True)
        self._thread.start()
        sink.spark.streams.addListener(self)

    def onQueryStarted(self, event: Any) -> None:
        pass

    def onQueryProgress(self, event: Any) -> None:
        self._wake.set()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._sink.spark.streams.removeListener(self)
        self._stopping = True
        self._wake.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            try:
                self._sink.commit()
            except Exception:  # the next batch, the close or the restart commits it
                log.exception("committing recorded micro-batches failed; retried later")
