"""The ``lakesink`` command line."""

from __future__ import annotations

import argparse
import sys

from lakesink import __version__

__all__ = ["main"]


def _jars(_: argparse.Namespace) -> int:
    from lakesink.session import delta_maven_coordinate

    print(delta_maven_coordinate())
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakesink",
        description="Exactly-once, two-phase-commit writes from PySpark into Delta Lake.",
    )
    parser.add_argument("--version", action="version", version=f"lakesink {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    jars = commands.add_parser(
        "jars",
        help="print the Delta jar's Maven coordinate (for spark-submit --packages)",
        description="Print the Maven coordinate of the Delta jar that matches the installed "
        'pyspark and delta-spark, e.g. spark-submit --packages "$(lakesink jars)" job.py',
    )
    jars.set_defaults(func=_jars)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
