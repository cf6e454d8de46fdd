"""``lakesink migrate-checkpoints`` and ``migrate-table``: an older format rewritten in the
current one."""

from __future__ import annotations

import argparse

from lakesink.cli.commands.common import (
    Subparsers,
    add_dry_run_option,
    add_json_option,
    reachable,
    start_spark,
)
from lakesink.cli.output import Output
from lakesink.cli.spark_output import add_spark_options
from lakesink.errors import TableNotFoundError
from lakesink.storage.files import has_files, require_delta_table

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    checkpoints = commands.add_parser(
        "migrate-checkpoints",
        help="rewrite a job's checkpoint table of an older lakesink format",
        description="Rewrite the checkpoint table in a --state folder written by lakesink "
        "0.1 (format 1) in the current format, keeping every record; the old table is kept "
        "beside it as checkpoints.format1. Run it while the jobs of that folder are "
        "stopped. --dry-run says what it would do. Exit 0 done (or nothing to do), 2 bad "
        "input, 78 its store refuses access or does not answer.",
    )
    checkpoints.add_argument("state", help="the jobs' --state folder")
    checkpoints.set_defaults(func=_migrate_checkpoints)
    table = commands.add_parser(
        "migrate-table",
        help="rewrite a sink table of an older lakesink format in place",
        description="Rewrite a lakesink table of an older format (1 to 3) in the current "
        "one (partitioned by the masking bit and the pending transaction; partition values "
        "in the Delta log and the folders only, so every engine reads the right rows), in "
        "place and in one Delta commit; every row and transaction state is kept. Refused "
        "while a writer of the table runs. "
        "--dry-run says what it would do. Exit 0 done (or nothing to do), 2 bad input, 75 a "
        "writer of the table runs, 78 its store refuses access or does not answer.",
    )
    table.add_argument("table", help="the lakesink table's folder")
    table.set_defaults(func=_migrate_table)
    for parser in (checkpoints, table):
        add_dry_run_option(parser)
        add_json_option(parser)
        add_spark_options(parser)


def _migrate_checkpoints(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.migrate import migrate_checkpoints

    (state,) = reachable(args.state, write=True)
    if not has_files(state):  # before Spark: a wrong path fails fast
        raise TableNotFoundError(f"nothing at {args.state}: pass a job's --state folder")
    plan = migrate_checkpoints(start_spark(args), args.state, dry_run=args.dry_run)
    out.show(plan, plan.summary)
    return 0


def _migrate_table(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.migrate import migrate_table

    (table,) = reachable(args.table, write=True)
    require_delta_table(table)  # before Spark: a wrong path fails fast
    plan = migrate_table(start_spark(args), table, dry_run=args.dry_run)
    out.show(plan, plan.summary)
    return 0
