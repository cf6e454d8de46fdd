"""``lakesink commit`` and ``lakesink abort``: an operator settles a pending checkpoint."""

from __future__ import annotations

import argparse
import sys

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    checkpoint_json,
    reachable,
    start_spark,
)
from lakesink.cli.exits import EXIT_BAD_INPUT, EXIT_CHECK_FAILED
from lakesink.cli.output import Output
from lakesink.cli.spark_output import add_spark_options
from lakesink.tables.format import COMMIT_MODES

__all__ = ["add_parser"]

# What an operator's action leaves a checkpoint as.
DONE = {"commit": "committed", "abort": "aborted"}
# What it does to the checkpoint's rows.
EFFECTS = {
    "commit": "make its rows visible (only if its checkpoint really completed: a job "
    "that replays its input would then duplicate it)",
    "abort": "its rows never become visible (the vacuum job removes them)",
}


def add_parser(commands: Subparsers) -> None:
    for action, effect in EFFECTS.items():
        parser = commands.add_parser(
            action,
            help=f"{action} a pending checkpoint by hand (operator recovery)",
            description=f"{action.capitalize()} every pending transaction of a checkpoint of a "
            f"sink: {effect}. Asks for confirmation unless --yes. The writers must not be "
            "running: the checkpoint, its writers' locks and leases and the store are "
            f"checked before Spark starts. A checkpoint already {DONE[action]} is left as it "
            "is, and the command says so (a retry of one that landed succeeds). Exit 0 done "
            "(or already done), 1 declined, 2 bad input, 75 a writer of it runs (retry once "
            "it stopped), 78 the store refuses access or does not answer.",
        )
        parser.add_argument("table", help="path of the lakesink table")
        parser.add_argument("--checkpoint", type=int, required=True)
        parser.add_argument("--yes", action="store_true", help="do not ask")
        if action == "commit":
            parser.add_argument(
                "--mode",
                choices=COMMIT_MODES,
                default=None,
                help="how the rows become visible: the table's own way by default (recorded "
                "when it was created: a Delta MERGE that writes them into the committed "
                "partition, or a metadata commit that moves their files there); given, it "
                "must be the table's",
            )
        add_json_option(parser)
        add_spark_options(parser)
        parser.set_defaults(func=_resolve)


def _resolve(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.resolve import plan_resolution, resolve_checkpoint, settle

    (table,) = reachable(args.table, write=True)
    # Before Spark: a wrong checkpoint, a running writer, a refused action fail at once,
    # and a checkpoint already settled needs nothing.
    plan = plan_resolution(table, args.checkpoint, args.command)
    done_word = DONE[args.command]
    rows = "uncounted" if plan.rows is None else plan.rows
    if plan.done:
        # A retry of a commit that landed: what a kill after it may have left undone (the
        # group's cut, the published tables), without Spark.
        settle(plan, {}, reason=f"operator {args.command}")
        out.show(
            {f"already_{done_word}": checkpoint_json(args.checkpoint, plan.transactions)},
            lambda: (
                f"checkpoint {args.checkpoint} of {table} is already {done_word} "
                f"({len(plan.transactions)} transaction(s), {rows} rows): nothing to do"
            ),
        )
        return 0
    states = ", ".join(sorted({t.state.value for t in plan.transactions}))
    question = (
        f"{args.command} checkpoint {args.checkpoint} of {table}: "
        f"{len(plan.transactions)} transaction(s), {rows} rows ({states})?"
    )
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"{question}\nrefusing without a terminal to confirm; pass --yes", file=sys.stderr
            )
            return EXIT_BAD_INPUT
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing changed")
            return EXIT_CHECK_FAILED
    done = resolve_checkpoint(
        start_spark(args),
        table,
        args.checkpoint,
        args.command,
        mode=getattr(args, "mode", None),  # abort has no mode
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    out.show(
        {done_word: checkpoint_json(args.checkpoint, done)},
        lambda: (
            f"{done_word} checkpoint {args.checkpoint}: {len(done)} transaction(s), {rows} rows"
        ),
    )
    return 0
