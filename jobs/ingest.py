"""The orders pipeline: landing folder -> parse, type, dedupe -> lakesink tables, exactly once.

    python jobs/ingest.py --landing /data/landing --table /data/orders --state /data/_state
    spark-submit --packages "$(lakesink jars)" jobs/ingest.py --landing ... --table ... --state ...

An example job on lakesink's parts: a ``LandingFolder`` source, a ``CheckpointCoordinator``
whose checkpoints are kept in a Delta table under ``--state``, and one ``DeltaSink`` per
table. Input is order records (JSON lines, CSV with a header, or Parquet) with the fields
``order_id, customer, amount, ordered_at``. Each checkpoint takes up to
``--files-per-checkpoint`` new files; with ``--follow`` the job keeps polling and also
checkpoints when ``--checkpoint-seconds`` have passed since the last one.

Exit codes: 0 done, 2 bad options or input (the message says what to fix).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakesink.core import Batch, CheckpointCoordinator, CheckpointRecord, Pacing
from lakesink.errors import LakesinkError
from lakesink.testing.faults import hook_from_env

__all__ = ["ORDERS_SCHEMA", "RAW_SCHEMA", "TOTALS_SCHEMA", "main", "totals", "transform"]

log = logging.getLogger("lakesink.jobs.ingest")

RAW_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE, ordered_at STRING"
ORDERS_SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE, ordered_at TIMESTAMP"
TOTALS_SCHEMA = "customer STRING, orders BIGINT, amount DOUBLE"


def transform(raw: DataFrame) -> DataFrame:
    """Type the raw records, drop the ones without an id, dedupe ids within the batch."""
    return (
        raw.where(F.col("order_id").isNotNull())
        .withColumn("ordered_at", F.to_timestamp("ordered_at"))
        .dropDuplicates(["order_id"])
    )


def totals(orders: DataFrame) -> DataFrame:
    """Per-customer order count and amount of one checkpoint's orders."""
    return orders.groupBy("customer").agg(
        F.count("*").alias("orders"), F.sum("amount").alias("amount")
    )


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jobs/ingest.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument("--landing", required=True, help="folder new files arrive in")
    parser.add_argument("--table", required=True, help="lakesink table of the orders")
    parser.add_argument(
        "--totals-table",
        help="optional lakesink table of per-checkpoint "
        "customer totals (committed with the orders, in the same checkpoint)",
    )
    parser.add_argument(
        "--state", required=True, help="folder of the job's checkpoint table and lock"
    )
    parser.add_argument("--job-id", default="ingest", help="job name (default: ingest)")
    parser.add_argument(
        "--format",
        default="json",
        choices=["json", "csv", "parquet"],
        help="landing file format (default: json lines)",
    )
    parser.add_argument(
        "--files-per-checkpoint",
        type=_at_least_one,
        default=10,
        metavar="N",
        help="at most N files per checkpoint (default 10)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=_positive,
        default=30.0,
        metavar="M",
        help="with --follow, checkpoint after M seconds even with fewer than N files (default 30)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep polling for new files instead of exiting when drained",
    )
    parser.add_argument(
        "--max-checkpoints", type=_at_least_one, metavar="K", help="stop after K checkpoints"
    )
    parser.add_argument("--journal", help="journal table (default: beside the table)")
    parser.add_argument(
        "--suite",
        metavar="FILE",
        help="Great Expectations suite (JSON) every checkpoint's orders must pass before "
        "they are committed",
    )
    parser.add_argument(
        "--on-failure",
        choices=["abort", "quarantine", "warn"],
        default="abort",
        help="what a checkpoint that fails --suite becomes: aborted (never visible; the "
        "default), held for an operator (lakesink commit/abort), or committed with a warning",
    )
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    return parser


def run(args: argparse.Namespace) -> int:
    """Run the job; return the number of checkpoints taken."""
    pacing = Pacing(
        max_items=args.files_per_checkpoint,
        follow=args.follow,
        interval_s=args.checkpoint_seconds,
        poll_s=min(1.0, args.checkpoint_seconds),
        max_checkpoints=args.max_checkpoints,
    )
    gate = None
    if args.suite:
        from lakesink.delta.validation import ValidationGate

        gate = ValidationGate.from_file(args.suite, policy=args.on_failure)
    # Fault injection ($LAKESINK_CRASH_AT and friends, lakesink.testing.faults): the crash
    # tests, the cluster fault tests and the demo stop or kill the job at a protocol step.
    # Read before Spark starts, so that a malformed spec fails at once.
    step_hook = hook_from_env()

    from lakesink.delta.checkpoints import DeltaCheckpointStore
    from lakesink.delta.session import spark_session
    from lakesink.delta.sink import DeltaSink, SinkOptions
    from lakesink.sources.landing import LandingFolder

    spark = spark_session(master=args.master, app_name=f"lakesink-{args.job_id}")
    options = SinkOptions(journal_path=args.journal)
    sinks = {
        "orders": DeltaSink(
            spark,
            args.table,
            schema=ORDERS_SCHEMA,
            step_hook=step_hook,
            options=options,
            validation=gate,
        )
    }
    if args.totals_table:
        sinks["totals"] = DeltaSink(
            spark, args.totals_table, schema=TOTALS_SCHEMA, step_hook=step_hook, options=options
        )
    source = LandingFolder(
        spark,
        args.landing,
        file_format=args.format,
        schema=spark.createDataFrame([], RAW_SCHEMA).schema,
    )

    def process(raw: DataFrame) -> int:
        orders = transform(raw).cache()
        rows = orders.count()
        sinks["orders"].write(orders)
        if "totals" in sinks:
            sinks["totals"].write(totals(orders))
        orders.unpersist()
        return rows

    def report(record: CheckpointRecord, batch: Batch) -> None:
        quarantined = f", {len(record.quarantined)} quarantined" if record.quarantined else ""
        print(
            f"checkpoint {record.checkpoint_id}: {len(record.items)} files, {record.rows} "
            f"orders{quarantined} ({batch.remaining} files left)",
            flush=True,
        )

    store = DeltaCheckpointStore(spark, args.state)
    with CheckpointCoordinator(
        store, job_id=args.job_id, sinks=sinks, step_hook=step_hook
    ) as coordinator:
        return coordinator.run(source, process, pacing=pacing, on_checkpoint=report)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        taken = run(args)
    except LakesinkError as error:
        print(f"ingest: {error}", file=sys.stderr)
        return 2
    print(f"done: {taken} checkpoint(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
