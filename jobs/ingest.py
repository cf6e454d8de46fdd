"""The orders pipeline: a Structured Streaming query whose sink is lakesink, exactly once.

    python jobs/ingest.py --landing /data/landing --table /data/orders --state /data/_state
    python jobs/ingest.py --kafka 127.0.0.1:9092 --topic orders --table ... --state ...
    spark-submit --packages "$(lakesink jars)" jobs/ingest.py --landing ... --table ... --state ...

Reads order records (``order_id, customer, amount, ordered_at``) from a landing folder with
Spark's file source (JSON lines, CSV with a header, or Parquet), or as JSON messages from a
Kafka topic; types them, drops records without an id, dedupes ids within a micro-batch, and
writes each micro-batch through a ``lakesink.streaming.StreamingSink`` into the orders table
and, optionally, per-customer totals of the batch, committed together. By default it runs
``availableNow``: it processes what has arrived, in batches of up to
``--files-per-checkpoint`` files (or ``--records-per-checkpoint`` Kafka records), and
exits; with ``--follow`` it keeps running, a batch every ``--checkpoint-seconds``, until
SIGINT or SIGTERM stops it cleanly. A landing file that does not parse is copied to
``<landing>/_quarantine/`` with a ``.reason.txt``, and its rows are left out.

The query's checkpoint location is ``<state>/<job id>``: a restart resumes from it, and
every batch Spark recorded there is committed exactly once.

"""

from __future__ import annotations

import argparse
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote

from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from lakesink.cli.exits import EXIT_CODES, EXIT_OK, exit_process, run_command
from lakesink.cli.signals import stop_requested
from lakesink.cli.spark_output import add_spark_options, jvm_output
from lakesink.errors import ConfigurationError, LakesinkError
from lakesink.ops.metrics import MetricsExport
from lakesink.sources.landing import quarantine
from lakesink.storage.files import check_reachable
from lakesink.storage.location import is_uri, join, normalize
from lakesink.tables.format import COMMIT_MODES

__all__ = ["ORDERS_SCHEMA", "RAW_SCHEMA", "TOTALS_SCHEMA", "main", "totals", "transform"]

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


# Named for argparse's message: "invalid count value: 'x'".
def count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobs/ingest.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2] + EXIT_CODES + ".",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--landing", help="folder new files arrive in")
    source.add_argument("--kafka", metavar="HOST:PORT", help="Kafka bootstrap servers")
    parser.add_argument("--topic", help="with --kafka: the topic of the order messages")
    parser.add_argument("--table", required=True, help="lakesink table of the orders")
    parser.add_argument(
        "--totals-table",
        help="optional lakesink table of per-batch customer totals (committed with the "
        "orders, in the same batch)",
    )
    parser.add_argument("--state", required=True, help="folder of the query's checkpoint location")
    parser.add_argument(
        "--job-id", default="ingest", help="query name, and its folder in --state (default: ingest)"
    )
    parser.add_argument(
        "--format",
        default="json",
        choices=["json", "csv", "parquet"],
        help="landing file format (default: json lines)",
    )
    parser.add_argument(
        "--files-per-checkpoint",
        type=count,
        default=10,
        metavar="N",
        help="at most N landing files per micro-batch (default 10)",
    )
    parser.add_argument(
        "--records-per-checkpoint",
        type=count,
        default=10_000,
        metavar="N",
        help="with --kafka: at most N records per micro-batch (default 10000)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep running (a batch every --checkpoint-seconds) instead of stopping when "
        "drained (availableNow)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=seconds,
        default=30.0,
        metavar="M",
        help="with --follow, start a micro-batch every M seconds (default 30)",
    )
    parser.add_argument("--journal", help="journal table (default: beside the table)")
    parser.add_argument(
        "--commit",
        choices=COMMIT_MODES,
        default=None,
        help="how a new table's checkpoints are made visible: a Delta MERGE that writes "
        "their rows into the committed partition (default), or a metadata commit that moves "
        "their files there (milliseconds; see the README's commit modes); an existing "
        "table commits its own way, recorded when it was created",
    )
    parser.add_argument(
        "--suite",
        metavar="FILE",
        help="Great Expectations suite (JSON) every batch's orders must pass before they "
        "are committed",
    )
    parser.add_argument(
        "--on-failure",
        choices=["abort", "quarantine", "warn"],
        default="abort",
        help="what a batch that fails --suite becomes: aborted (never visible; the "
        "default), held for an operator (lakesink commit/abort), or committed with a warning",
    )
    parser.add_argument(
        "--metrics-file",
        metavar="FILE.prom",
        help="after every batch, write the tables' Prometheus metrics to this file (for "
        "node_exporter's textfile collector; see lakesink metrics --help)",
    )
    parser.add_argument(
        "--push-gateway",
        metavar="URL",
        help="after every batch, push the tables' metrics to this Prometheus Pushgateway "
        "(job label lakesink_<job id>)",
    )
    add_spark_options(parser)
    return parser


def run(args: argparse.Namespace, stop: threading.Event) -> int:
    """Run the query until it is drained or ``stop`` is set; return its batches."""
    if args.kafka and not args.topic:
        raise LakesinkError("--kafka needs --topic: the topic the orders arrive on")
    gate = None
    if args.suite:
        from lakesink.spark.validation import ValidationGate

        gate = ValidationGate.from_file(args.suite, policy=args.on_failure)
    metrics = MetricsExport(
        textfile=args.metrics_file, push_gateway=args.push_gateway, job=f"lakesink_{args.job_id}"
    )
    # Every store the job writes answers, before Spark starts (the landing folder gets
    # the quarantined files).
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

    from lakesink.delta.options import SinkOptions
    from lakesink.delta.sink import DeltaSink
    from lakesink.spark.session import KAFKA_CONNECTOR, spark_session
    from lakesink.streaming import StreamingSink

    spark = spark_session(
        master=args.master,
        app_name=f"lakesink-{args.job_id}",
        packages=[KAFKA_CONNECTOR] if args.kafka else [],
        jvm_output=jvm_output(args),
    )
    options = SinkOptions(journal_path=args.journal, commit=args.commit)
    stream = _kafka_stream(spark, args) if args.kafka else _landing_stream(spark, args)
    batches: list[int] = []

    def process(batch: DataFrame, writers: Mapping[str, DeltaSink]) -> None:
        batches.append(writers["orders"].current_checkpoint_id)
        batch = batch.cache()
        quarantined = _quarantine(batch) if args.landing else []
        good = batch.where(~F.col("_file").isin(quarantined)) if quarantined else batch
        orders = transform(good).cache()
        rows = orders.count()
        writers["orders"].write(orders)
        if "totals" in writers:
            writers["totals"].write(totals(orders))
        files = batch.select("_file").distinct().count()
        orders.unpersist()
        batch.unpersist()
        unit = "file" if args.landing else "partition"
        print(
            f"batch {batches[-1]}: {files} {unit}{'' if files == 1 else 's'}, {rows} orders"
            + (f", {len(quarantined)} quarantined" if quarantined else ""),
            flush=True,
        )

    def run_query() -> None:
        sinks = {
            "orders": DeltaSink(
                spark,
                args.table,
                schema=ORDERS_SCHEMA,
                options=options,
                validation=gate,
            )
        }
        if args.totals_table:
            sinks["totals"] = DeltaSink(
                spark, args.totals_table, schema=TOTALS_SCHEMA, options=options
            )
        with StreamingSink.for_sinks(
            spark,
            sinks,
            checkpoint_location=checkpoint_location,
            process=process,
            metrics=metrics,
        ) as sink:
            writer = stream.writeStream.foreachBatch(sink).queryName(args.job_id)
            writer = writer.option("checkpointLocation", checkpoint_location)
            if args.follow:
                writer = writer.trigger(processingTime=f"{args.checkpoint_seconds} seconds")
            else:
                writer = writer.trigger(availableNow=True)
            query = writer.start()
            # In slices: a signal only sets ``stop``, and the query is stopped from here.
            while not query.awaitTermination(1):
                if stop.is_set():
                    _stop_between_batches(query)

    try:
        if stop.is_set():  # it came while Spark started
            return 0
        run_query()
    except StreamingQueryException as exc:
        if stop.is_set():  # a batch that was starting as the query stopped: it runs again
            log.warning("the batch in flight when the query stopped failed: %s", _first(exc))
            return len(batches)
        # SPARK-55271: Spark's Kafka source (4.1.1-4.1.2) fails its progress report after a
        # restart whose first batch is one it runs again. The batch is in the commit log by
        # then (and committed by the sink's close), so running the query again goes on.
        if not (args.kafka and '"scala.Option.get()" is null' in str(exc)):
            raise
        log.warning("the Kafka source failed its metrics after a restart (SPARK-55271); again")
        run_query()
    finally:
        spark.stop()
    return len(batches)


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


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    stop = stop_requested()
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per listener callback

    def ingest() -> int:
        batches = run(args, stop)
        print(f"{'stopped' if stop.is_set() else 'done'}: {batches} batch(es)")
        return EXIT_OK

    return run_command("ingest", ingest, verbose=args.verbose)


if __name__ == "__main__":
    exit_process(main())
