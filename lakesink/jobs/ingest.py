"""The orders pipeline: a Structured Streaming query whose sink is lakesink, exactly once.

The job behind ``lakesink ingest`` (its options and their meaning: ``lakesink ingest
--help``): order records (``order_id, customer, amount, ordered_at``) from a landing folder
(Spark's file source) or a Kafka topic, typed, without records that have no id, ids
deduplicated within a micro-batch, written through a ``lakesink.streaming.StreamingSink``
into the orders table and, optionally, per-customer totals of the batch, committed
together. The query's checkpoint location is ``<state>/<job id>``: a restart resumes from
it, and every batch Spark recorded there is committed exactly once.
"""

from __future__ import annotations

import argparse
import logging
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from lakesink.errors import ConfigurationError, LakesinkError, StorageAccessError
from lakesink.ops.metrics import MetricsExport
from lakesink.sources.landing import quarantine
from lakesink.storage.files import check_reachable
from lakesink.storage.location import is_uri, join, normalize

if TYPE_CHECKING:
    from lakesink.delta.options import SinkOptions
    from lakesink.delta.sink import DeltaSink
    from lakesink.spark.validation import ValidationGate

__all__ = [
    "ORDERS_SCHEMA",
    "RAW_SCHEMA",
    "TOTALS_SCHEMA",
    "check_broker",
    "check_state_source",
    "run",
    "totals",
    "transform",
]

log = logging.getLogger("lakesink.jobs.ingest")

RAW_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE, ordered_at STRING"
ORDERS_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE, ordered_at TIMESTAMP"
TOTALS_SCHEMA = "customer STRING, orders BIGINT, amount DOUBLE"
CORRUPT = "_corrupt_record"


def transform(raw: DataFrame) -> DataFrame:
    """Type the raw records, drop the ones without an id, dedupe ids within the batch."""
    return (
        raw.where(F.col("order_id").isNotNull())
        .withColumn("ordered_at", F.to_timestamp("ordered_at"))
        .select("order_id", "customer", "amount", "ordered_at")
        .dropDuplicates(["order_id"])
    )


def totals(orders: DataFrame) -> DataFrame:
    """Per-customer order count and amount of one batch's orders."""
    return orders.groupBy("customer").agg(
        F.count("*").alias("orders"), F.sum("amount").alias("amount")
    )


def check_broker(servers: str, *, timeout_s: float = 10.0) -> None:
    """Refuse to start Spark for a Kafka source none of whose bootstrap servers answers:
    Spark's connector would retry, then fail the query with an admin client's trace."""
    failures = []
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
            return
        except OSError as exc:
            failures.append(f"{server.strip()}: {exc.strerror or exc}")
    raise StorageAccessError(
        f"no Kafka broker answers at --kafka {servers} ({'; '.join(failures)}): start it, "
        "or give the address of a running one"
    )


def run(args: argparse.Namespace, stop: threading.Event, jvm_log: Path | None) -> int:
    """Run the query until it is drained or ``stop`` is set; return its batches.

    ``args`` are ``lakesink ingest``'s options; the driver JVM prints into ``jvm_log``
    (None: this terminal).
    """
    if args.kafka and not args.topic:
        raise LakesinkError("--kafka needs --topic: the topic the orders arrive on")
    gate = None
    if args.suite:
        from lakesink.spark.validation import ValidationGate

        gate = ValidationGate.from_file(args.suite, policy=args.on_failure)
    metrics = MetricsExport(
        textfile=args.metrics_file, push_gateway=args.push_gateway, job=f"lakesink_{args.job_id}"
    )
    checkpoint_location = _check_before_spark(args)

    from lakesink.delta.options import SinkOptions
    from lakesink.spark.session import KAFKA_CONNECTOR, spark_session

    spark = spark_session(
        master=args.master,
        app_name=f"lakesink-{args.job_id}",
        packages=[KAFKA_CONNECTOR] if args.kafka else [],
        jvm_output=jvm_log,
        warehouse_in_cache=True,
    )
    query = _Query(
        spark=spark,
        args=args,
        options=SinkOptions(journal_path=args.journal, commit=args.commit),
        stream=_kafka_stream(spark, args) if args.kafka else _landing_stream(spark, args),
        gate=gate,
        metrics=metrics,
        checkpoint_location=checkpoint_location,
        stop=stop,
    )
    try:
        if stop.is_set():  # it came while Spark started
            return 0
        query.run()
    except StreamingQueryException as exc:
        if stop.is_set():  # a batch that was starting as the query stopped: it runs again
            log.warning("the batch in flight when the query stopped failed: %s", _first(exc))
            return len(query.batches)
        # SPARK-55271: Spark's Kafka source (4.1.1-4.1.2) fails its progress report after a
        # restart whose first batch is one it runs again. The batch is in the commit log by
        # then (and committed by the sink's close), so running the query again goes on.
        if not (args.kafka and '"scala.Option.get()" is null' in str(exc)):
            raise
        log.warning("the Kafka source failed its metrics after a restart (SPARK-55271); again")
        query.run()
    finally:
        spark.stop()
    return len(query.batches)


def _check_before_spark(args: argparse.Namespace) -> str:
    """Refuse what would fail once Spark runs; return the query's checkpoint location."""
    # Every store the job writes answers (the landing folder gets the quarantined files).
    for location in (args.table, args.totals_table, args.state, args.journal, args.landing):
        if location:
            check_reachable(normalize(location), write=True, create=True)
    if args.landing and not is_uri(args.landing) and not Path(args.landing).is_dir():
        raise ConfigurationError(
            f"the landing folder {args.landing} does not exist: create it (the job ingests "
            "the files that arrive there), or pass the right --landing"
        )
    checkpoint_location = join(normalize(args.state), args.job_id)
    check_state_source(checkpoint_location, args)
    if args.kafka:  # after the state's check: a wrong state folder is said first
        check_broker(args.kafka)
    return checkpoint_location


@dataclass
class _Query:
    """The job's streaming query: its sinks, and what it does with each micro-batch."""

    spark: SparkSession
    args: argparse.Namespace
    options: SinkOptions
    stream: DataFrame
    gate: ValidationGate | None
    metrics: MetricsExport
    checkpoint_location: str
    stop: threading.Event
    batches: list[int] = field(default_factory=list)  # their checkpoint ids

    def run(self) -> None:
        """Run the query over new sinks until it is drained or ``stop`` is set."""
        from lakesink.delta.sink import DeltaSink
        from lakesink.streaming import StreamingSink

        args = self.args
        sinks = {
            "orders": DeltaSink(
                self.spark,
                args.table,
                schema=ORDERS_SCHEMA,
                options=self.options,
                validation=self.gate,
            )
        }
        if args.totals_table:
            sinks["totals"] = DeltaSink(
                self.spark, args.totals_table, schema=TOTALS_SCHEMA, options=self.options
            )
        with StreamingSink.for_sinks(
            self.spark,
            sinks,
            checkpoint_location=self.checkpoint_location,
            process=self.process,
            metrics=self.metrics,
        ) as sink:
            writer = self.stream.writeStream.foreachBatch(sink).queryName(args.job_id)
            writer = writer.option("checkpointLocation", self.checkpoint_location)
            if args.follow:
                writer = writer.trigger(processingTime=f"{args.checkpoint_seconds} seconds")
            else:
                writer = writer.trigger(availableNow=True)
            query = writer.start()
            # In slices: a signal only sets ``stop``, and the query is stopped from here.
            while not query.awaitTermination(1):
                if self.stop.is_set():
                    _stop_between_batches(query)

    def process(self, batch: DataFrame, writers: Mapping[str, DeltaSink]) -> None:
        """Write one micro-batch's orders (and their totals), and say what it held."""
        self.batches.append(writers["orders"].current_checkpoint_id)
        batch = batch.cache()
        quarantined = _quarantine(batch) if self.args.landing else []
        good = batch.where(~F.col("_file").isin(quarantined)) if quarantined else batch
        orders = transform(good).cache()
        rows = orders.count()
        writers["orders"].write(orders)
        if "totals" in writers:
            writers["totals"].write(totals(orders))
        files = batch.select("_file").distinct().count()
        orders.unpersist()
        batch.unpersist()
        unit = "file" if self.args.landing else "partition"
        print(
            f"batch {self.batches[-1]}: {files} {unit}{'' if files == 1 else 's'}, "
            f"{rows} order{'' if rows == 1 else 's'}"
            + (f", {len(quarantined)} quarantined" if quarantined else ""),
            flush=True,
        )


def check_state_source(checkpoint_location: str, args: argparse.Namespace) -> None:
    """Refuse a checkpoint location whose query read another source than this run's.

    Spark itself finds out only inside the first batch, and fails it with a trace (a Kafka
    source given a file source's offset, or the reverse).
    """
    from lakesink.streaming import recorded_offsets

    offsets = recorded_offsets(checkpoint_location)
    if not offsets:
        return
    (offset,) = offsets  # the job's query reads one source
    if "logOffset" in offset:
        recorded, same = "a landing folder (Spark's file source)", bool(args.landing)
    else:
        topics = ", ".join(sorted(offset))
        recorded, same = f"Kafka topic {topics}", args.kafka and topics == args.topic
    if not same:
        this = f"Kafka topic {args.topic}" if args.kafka else f"the landing folder {args.landing}"
        raise ConfigurationError(
            f"--state {args.state} holds the query {args.job_id!r} of {recorded}, not of "
            f"{this}: give this source its own --state (or --job-id), or run the job with "
            "the source that query reads"
        )


def _stop_between_batches(query: StreamingQuery, wait_s: float = 120.0) -> None:
    """Stop the query once no batch runs (up to ``wait_s``): a stop in the middle of one
    cancels its Spark jobs, and the batch then fails (it runs again next time)."""
    log.info("stopping the query once its batch in flight is done")
    deadline = time.monotonic() + wait_s
    while query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


def _first(error: BaseException) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def _landing_stream(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    reader = (
        spark.readStream.schema(f"{RAW_SCHEMA}, {CORRUPT} STRING")
        .option("mode", "PERMISSIVE")
        .option("columnNameOfCorruptRecord", CORRUPT)
        .option("maxFilesPerTrigger", args.files_per_checkpoint)
    )
    if args.format == "csv":
        reader = reader.option("header", "true")
    if args.format == "parquet":  # Parquet has no corrupt-record column: broken files fail
        reader = spark.readStream.schema(RAW_SCHEMA).option(
            "maxFilesPerTrigger", args.files_per_checkpoint
        )
        return (
            reader.parquet(args.landing)
            .withColumn(CORRUPT, F.lit(None).cast("string"))
            .withColumn("_file", F.col("_metadata.file_path"))
        )
    return (
        reader.format(args.format)
        .load(args.landing)
        .withColumn("_file", F.col("_metadata.file_path"))
    )


def _kafka_stream(spark: SparkSession, args: argparse.Namespace) -> DataFrame:
    messages = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.kafka)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.records_per_checkpoint)
        .load()
    )
    return messages.select(
        F.from_json(F.col("value").cast("string"), RAW_SCHEMA).alias("order"),
        F.col("partition").cast("string").alias("_file"),
    ).select("order.*", "_file")


def _quarantine(batch: DataFrame) -> list[str]:
    """Copy the batch's files that did not parse aside, with the reason; return their paths.

    Copied, not moved: Spark's file source has recorded them, and a replayed batch reads
    them again. Copying again is harmless.
    """
    bad = (
        batch.where(F.col(CORRUPT).isNotNull())
        .groupBy("_file")
        .agg(F.first(CORRUPT).alias("line"))
        .collect()
    )
    for row in bad:
        file = normalize(unquote(row["_file"]))  # Spark's file URI, percent-encoded
        quarantine(file, f"does not parse: {row['line'][:200]!r}", keep=True)
    return [row["_file"] for row in bad]
