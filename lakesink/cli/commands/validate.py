"""``lakesink validate``: an expectation suite run again on a pending or held checkpoint."""

from __future__ import annotations

import argparse
import json

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    reachable,
    start_spark,
    write_reports,
)
from lakesink.cli.exits import EXIT_CHECK_FAILED
from lakesink.cli.output import Output
from lakesink.cli.spark_output import add_spark_options

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "validate",
        help="run an expectation suite again on a pending or held checkpoint",
        description="Validate the rows of a checkpoint that is pre-committed or held by the "
        "validation gate with a Great Expectations suite file, and journal the result; "
        "nothing else changes (commit or abort it afterwards). Exit 0 when it passes, 1 "
        "when it fails, 2 on bad input, 78 when its store refuses access or does not answer.",
    )
    parser.add_argument("table", help="path of the lakesink table")
    parser.add_argument("--checkpoint", type=int, required=True)
    parser.add_argument("--suite", required=True, metavar="FILE", help="GX suite JSON file")
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="also write the result as a Great Expectations Data Docs page into DIR",
    )
    add_json_option(parser)
    add_spark_options(parser)
    parser.set_defaults(func=_validate)


def _validate(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.resolve import pending_transactions, revalidate_checkpoint
    from lakesink.spark.validation import ValidationGate

    (table,) = reachable(args.table, write=True)
    gate = ValidationGate.from_file(args.suite)
    pending_transactions(table, args.checkpoint)  # before Spark: a wrong one fails fast
    results = revalidate_checkpoint(start_spark(args), table, args.checkpoint, gate)
    if args.report:
        write_reports(results, table, args.report)
    out.show(
        [json.loads(report.to_json()) for _, report in results],
        lambda: "\n".join(
            f"checkpoint {txn.checkpoint_id}  {txn.state.value}  writer {txn.writer_id}\n"
            f"  {report.summary()}"
            for txn, report in results
        ),
    )
    return 0 if all(report.success for _, report in results) else EXIT_CHECK_FAILED
