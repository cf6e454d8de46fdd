"""The ``lakesink`` command: its parser, built from the subcommands' modules
(``lakesink.cli.commands``), and the run of the subcommand it parsed."""

from __future__ import annotations

import argparse

from lakesink import __version__
from lakesink.cli.commands import (
    Command,
    app,
    checkpoint_view,
    checkpoints,
    ingest,
    jars,
    metastore,
    metrics,
    migrate,
    publish,
    resolve,
    serve,
    serve_users,
    status,
    vacuum,
    validate,
)
from lakesink.cli.exits import EXIT_BAD_INPUT, EXIT_CODES, exit_process, run_command
from lakesink.cli.output import JsonOutput, TextOutput

__all__ = ["COMMANDS", "build_parser", "entry", "main"]

# The subcommands, in the order ``lakesink --help`` lists them.
COMMANDS: tuple[Command, ...] = (
    jars,
    app,
    metastore,
    status,
    checkpoints,
    metrics,
    resolve,
    publish,
    validate,
    checkpoint_view,
    serve,
    serve_users,
    migrate,
    vacuum,
    ingest,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``lakesink`` parser, with every subcommand's."""
    parser = argparse.ArgumentParser(
        prog="lakesink",
        description="Exactly-once, two-phase-commit writes from PySpark into Delta Lake.",
        epilog=f"Every command and job ends with {EXIT_CODES}.",
    )
    parser.add_argument("--version", action="version", version=f"lakesink {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.add_parser(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's arguments), run the subcommand it names and
    return its exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    out = JsonOutput() if getattr(args, "json", False) else TextOutput()  # not all have --json
    return run_command(
        f"lakesink {args.command}", lambda: args.func(args, out), verbose=args.verbose
    )


def entry() -> None:
    """The ``lakesink`` console script: ``main`` as a whole process."""
    exit_process(main())
