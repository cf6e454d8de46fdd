"""``lakesink vacuum`` (also ``jobs/vacuum.py``): remove the rows and files of aborted
and expired pending transactions, then compact."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

from lakesink.cli.commands.common import (
    Subparsers,
    add_dry_run_option,
    add_json_option,
    log_to_stderr,
    reachable,
    start_spark,
)
from lakesink.cli.exits import EXIT_CODES
from lakesink.cli.output import Output
from lakesink.cli.spark_output import add_spark_options
from lakesink.storage.files import require_delta_table

if TYPE_CHECKING:
    from lakesink.ops.metrics import MetricsExport
    from lakesink.ops.vacuum_report import VacuumReport

__all__ = ["add_parser"]

# Shown as they are, below the options.
EXAMPLES = """\
lakesink vacuum /data/orders [--dry-run] [--json]
spark-submit --jars "$(lakesink jars --files)" "$(lakesink app)" vacuum /data/orders

"""


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "vacuum",
        help="remove aborted and expired pending rows, then their files (--dry-run)",
        description="Vacuum job: remove the rows and files of aborted and expired pending "
        "transactions.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=EXAMPLES + EXIT_CODES + ".",
    )
    parser.add_argument("table", nargs="?", help="the lakesink table's folder")
    parser.add_argument(
        "--table", dest="table_option", metavar="TABLE", help="the same, as an option"
    )
    parser.add_argument("--journal", help="the journal (default: the one the table records)")
    parser.add_argument(
        "--expire-open-hours",
        type=float,
        default=24.0,
        help="abort and remove open transactions older than this (default 24)",
    )
    parser.add_argument(
        "--retain-hours",
        type=float,
        help="delete only unreferenced files older than this many hours, which is what "
        "Delta VACUUM RETAIN then applies (default: the table's deletedFileRetentionDuration)",
    )
    parser.add_argument(
        "--allow-short-retention",
        action="store_true",
        help="permit a retention below the table's; only when nothing writes to it",
    )
    parser.add_argument(
        "--no-compact",
        dest="compact",
        action="store_false",
        help="skip compacting the committed rows and the journal (OPTIMIZE; safe while "
        "writers run, so on by default)",
    )
    parser.add_argument(
        "--compact-min-files",
        type=int,
        metavar="N",
        help="compact the committed rows or the journal only once it holds N files (default: "
        "lakesink.ops.compact.MIN_FILES, 8)",
    )
    parser.add_argument(
        "--metrics-file",
        metavar="FILE.prom",
        help="write the run's figures (lakesink_vacuum_last_run_*) to this file for "
        "node_exporter's textfile collector",
    )
    parser.add_argument(
        "--push-gateway",
        metavar="URL",
        help="push the run's figures to this Prometheus Pushgateway (job label "
        "lakesink_vacuum, grouped by sink)",
    )
    add_dry_run_option(parser)
    add_json_option(parser, help="print the report as JSON")
    add_spark_options(parser)
    # The parser, to refuse a table given twice or not at all as argparse refuses options.
    parser.set_defaults(func=partial(_vacuum, parser))


def _vacuum(parser: argparse.ArgumentParser, args: argparse.Namespace, out: Output) -> int:
    if args.table is None and args.table_option is None:
        parser.error("which table? lakesink vacuum TABLE (or --table TABLE)")
    if args.table is not None and args.table_option is not None:
        parser.error("the table is given twice: lakesink vacuum TABLE, or --table TABLE")
    args.table = args.table or args.table_option
    # stdout carries the report (and only the report with --json)
    log_to_stderr(args, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # Imported here, once the options were taken (bad ones refused without loading
    # pyspark); the expiry is the library's own check, made before Spark starts.
    from lakesink.ops.expiry import check_expiry
    from lakesink.ops.metrics import MetricsExport

    check_expiry(timedelta(hours=args.expire_open_hours))
    table = reachable(args.table, args.journal, write=True)[0]
    require_delta_table(table)
    metrics = MetricsExport(
        textfile=args.metrics_file, push_gateway=args.push_gateway, job="lakesink_vacuum"
    )
    with _stdout_to_stderr():
        report = _run(args, metrics)
    out.show(report.as_dict(), lambda: _summary(report))
    return 0


def _run(args: argparse.Namespace, metrics: MetricsExport) -> VacuumReport:
    from lakesink.ops.vacuum import vacuum

    spark = start_spark(args, app_name="lakesink-vacuum", log_level="WARN")
    try:
        return vacuum(
            spark,
            args.table,
            journal_path=args.journal,
            expire_open_after=timedelta(hours=args.expire_open_hours),
            retain_hours=args.retain_hours,
            allow_short_retention=args.allow_short_retention,
            compact=args.compact,
            **(
                {"compact_min_files": args.compact_min_files}
                if args.compact_min_files is not None
                else {}
            ),
            dry_run=args.dry_run,
            metrics=metrics,
        )
    finally:
        spark.stop()


@contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr for a while, so stdout carries only the report.

    The JVM that Spark starts inherits it, and Delta prints on it ("Deleted 2 files ...").
    Under spark-submit the JVM runs already and keeps its own stdout.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _summary(report: VacuumReport) -> str:
    if report.dry_run:
        removed, deleted, stay = "would remove", "would delete", "would stay"
    else:
        removed, deleted, stay = "removed", "deleted", "stay"
    lines = [
        f"{'DRY RUN: ' if report.dry_run else ''}vacuum of {report.table_path} "
        f"(sink {report.sink_id!r}, retention {report.retain_hours:g} h)",
        f"{removed} {report.rows_removed} row(s) of {len(report.transactions)} "
        "transaction(s) from the table",
        f"{deleted} {report.files_removed} file(s) ({report.bytes_removed} bytes) "
        "unreferenced for longer than the retention",
    ]
    if report.kept_until is not None:
        lines.append(
            f"{report.files_kept} file(s) of the removed rows {stay} for time travel until "
            f"{report.kept_until:%Y-%m-%d %H:%M} UTC; a vacuum after that deletes them"
        )
    for txn in report.transactions:
        why = "expired open" if txn.expired else "aborted"
        lines.append(
            f"  checkpoint {txn.checkpoint_id} txn {txn.txn_id} (writer {txn.writer_id}, "
            f"{why}): {txn.rows} row(s)"
        )
    if not report.compaction:
        lines.append(
            f"  {'would compact' if report.dry_run else 'compacted'} nothing: no part "
            "of the table or its journal has enough small files"
        )
    for part in report.compaction:
        if report.dry_run:
            lines.append(f"  would compact the {part.what}: {part.files_before} file(s)")
        else:
            lines.append(
                f"  compacted the {part.what}: {part.files_removed} file(s) rewritten into "
                f"{part.files_added}"
            )
    for txn_id in report.republished_txn_ids:
        lines.append(
            f"  {'would publish' if report.dry_run else 'published'} {txn_id} again: committed, "
            "but a rewrite of its pending partition had masked rows of it"
        )
    for txn_id in report.skipped_txn_ids:
        lines.append(f"  skipped {txn_id}: aborted, but pre-committed once; left for recovery")
    return "\n".join(lines)
