"""``lakesink checkpoint-view``: a SQL view of a pending checkpoint's rows, to audit them."""

from __future__ import annotations

import argparse

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    checkpoint_json,
    reachable,
    start_spark,
)
from lakesink.cli.output import Output
from lakesink.cli.spark_output import add_spark_options

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "checkpoint-view",
        help="a SQL view of a pending or held checkpoint's rows, to audit before publishing",
        description="Create (or replace) a catalog view of the rows of a checkpoint that is "
        "pre-committed or held by the validation gate, user columns only, so SQL checks "
        "(dbt tests, ad hoc queries, a SQL client over the shared metastore) can audit what "
        "is about to be published. It is empty once the checkpoint is committed or "
        "vacuumed. Exit 0 done, 2 bad input (nothing pending in that checkpoint), 78 its "
        "store refuses access or does not answer.",
    )
    parser.add_argument("table", help="path of the lakesink table")
    parser.add_argument("--checkpoint", type=int, required=True)
    parser.add_argument("--name", help="the view's name (default: <sink id>_checkpoint_<N>)")
    add_json_option(parser)
    add_spark_options(parser)
    parser.set_defaults(func=_checkpoint_view)


def _checkpoint_view(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.resolve import create_checkpoint_view, pending_transactions

    (table,) = reachable(args.table)
    pending_transactions(table, args.checkpoint)  # before Spark: a wrong one fails fast
    name, transactions = create_checkpoint_view(
        start_spark(args), table, args.checkpoint, args.name
    )
    states = ", ".join(sorted({t.state.value for t in transactions}))
    out.show(
        {"view": name, **checkpoint_json(args.checkpoint, transactions)},
        lambda: (
            f"view {name}: the rows of checkpoint {args.checkpoint} ({len(transactions)} "
            f"transaction(s), {states}); query it with SQL before you commit or abort it"
        ),
    )
    return 0
