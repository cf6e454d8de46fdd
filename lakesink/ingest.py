"""The ingest job: landing folder -> parse, type, dedupe -> lakesink tables, exactly once.

    lakesink ingest --landing /data/landing --table /data/orders --state /data/_state
    python jobs/ingest.py ...        spark-submit --packages "$(lakesink jars)" jobs/ingest.py ...

Input is order records (JSON lines, CSV with a header, or Parquet) with the fields
``order_id, customer, amount, ordered_at``. Each checkpoint takes up to
``--files-per-checkpoint`` new files; with ``--follow`` the job keeps polling and also
checkpoints when ``--checkpoint-seconds`` have passed since the last one.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakesink.coordinator import CheckpointCoordinator
from lakesink.errors import LakesinkError
from lakesink.faults import hook_from_env
from lakesink.file_source import LandingFolder

__all__ = ["ORDERS_SCHEMA", "main", "transform"]

log = logging.getLogger(__name__)

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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakesink ingest",
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
        type=int,
        default=10,
        metavar="N",
        help="at most N files per checkpoint (default 10)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=float,
        default=30.0,
        metavar="M",
        help="with --follow, checkpoint after M seconds even with fewer than N files (default 30)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep polling for new files instead of exiting when drained",
    )
    parser.add_argument("--max-checkpoints", type=int, metavar="K", help="stop after K checkpoints")
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
    from lakesink.session import spark_session

    if args.files_per_checkpoint < 1:
        raise LakesinkError("--files-per-checkpoint must be at least 1")
    if args.checkpoint_seconds <= 0:
        raise LakesinkError("--checkpoint-seconds must be positive")
    gate = None
    if args.suite:
        from lakesink.validation import ValidationGate

        gate = ValidationGate.from_file(args.suite, policy=args.on_failure)
    # Fault injection ($LAKESINK_CRASH_AT and friends, lakesink.faults): crash tests, the
    # cluster fault tests and the demo stop or kill the job at a protocol step. Read
    # before Spark starts, so that a malformed spec fails at once.
    step_hook = hook_from_env()
    spark = spark_session(master=args.master, app_name=f"lakesink-{args.job_id}")
    sink_options = {"step_hook": step_hook, "journal_path": args.journal}
    with CheckpointCoordinator(
        spark, job_id=args.job_id, state_dir=args.state, step_hook=step_hook
    ) as coordinator:
        source = LandingFolder(
            spark,
            args.landing,
            file_format=args.format,
            schema=spark.createDataFrame([], RAW_SCHEMA).schema,
        )
        orders_sink = coordinator.open_sink(
            args.table, schema=ORDERS_SCHEMA, validation=gate, **sink_options
        )
        totals_sink = (
            coordinator.open_sink(args.totals_table, schema=TOTALS_SCHEMA, **sink_options)
            if args.totals_table
            else None
        )
        taken, last = 0, time.monotonic()
        while args.max_checkpoints is None or taken < args.max_checkpoints:
            waiting = source.pending(coordinator.position)
            files = waiting[: args.files_per_checkpoint]
            due = len(files) == args.files_per_checkpoint or (
                files and time.monotonic() - last >= args.checkpoint_seconds
            )
            if not args.follow and not files:
                break
            if args.follow and not due:
                time.sleep(min(1.0, args.checkpoint_seconds))
                continue
            raw, quarantined = source.read(files)
            orders = transform(raw).cache()
            rows = orders.count()
            orders_sink.write(orders)
            if totals_sink is not None:
                totals_sink.write(totals(orders))
            record = coordinator.checkpoint(
                coordinator.position.plus(files),
                files=tuple(files),
                quarantined=tuple(quarantined),
                row_count=rows,
            )
            orders.unpersist()
            taken, last = taken + 1, time.monotonic()
            print(
                f"checkpoint {record.checkpoint_id}: {len(files)} files, {rows} orders"
                + (f", {len(quarantined)} quarantined" if quarantined else "")
                + f" ({len(waiting) - len(files)} files left)",
                flush=True,
            )
    return taken


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        taken = run(args)
    except LakesinkError as error:
        print(f"lakesink ingest: {error}", file=sys.stderr)
        return 2
    print(f"done: {taken} checkpoint(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
