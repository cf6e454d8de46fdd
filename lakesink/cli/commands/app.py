"""``lakesink app``: the Python file spark-submit runs as the ``lakesink`` command."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from lakesink.cli.commands.common import Subparsers, add_verbose_option
from lakesink.cli.output import Output

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "app",
        help="print the Python file that spark-submit runs as the lakesink command",
        description="Print the path of the installed Python file that runs the lakesink "
        "command. spark-submit takes a file, not a command: "
        'spark-submit [its options] "$(lakesink app)" ingest --landing ... runs '
        "lakesink ingest as a Spark application, from any folder.",
    )
    add_verbose_option(parser)
    parser.set_defaults(func=_app)


def _app(args: argparse.Namespace, out: Output) -> int:
    # Found, not imported: importing it runs the command.
    spec = importlib.util.find_spec("lakesink.cli.__main__")
    assert spec is not None and spec.origin is not None  # a file of this package
    path = str(Path(spec.origin).resolve())
    out.show(path, lambda: path)
    return 0
