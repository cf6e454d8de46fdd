"""``lakesink metastore``: the shared metastore server (Derby) of the committed views."""

from __future__ import annotations

import argparse
import logging
import sys

from lakesink.cli.commands.common import Subparsers, add_verbose_option
from lakesink.cli.exits import EXIT_CHECK_FAILED
from lakesink.cli.output import Output

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "metastore",
        help="start, stop or check a shared metastore server (Derby) for the committed views",
        description="Run a Derby network server that keeps the Hive metastore, so a writer "
        "job and SQL readers in other processes share the committed views at once. start "
        "and status print the JDBC URL to pass as metastore_url= or LAKESINK_METASTORE_URL; "
        "status fails when no server answers.",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--dir",
        default=".cache/metastore",
        help="folder for the metastore database, the server log and pid file "
        "(default: %(default)s)",
    )
    parser.add_argument("--port", type=int, default=1527, help="TCP port (default: %(default)s)")
    add_verbose_option(parser)
    parser.set_defaults(func=_metastore)


def _metastore(args: argparse.Namespace, out: Output) -> int:
    from lakesink.spark import metastore

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    # Loopback only (the module's default host): the server has no authentication.
    if args.action == "start":
        started = metastore.start_server(args.dir, port=args.port)
        out.show(started, lambda: started)
        return 0
    if args.action == "stop":
        metastore.stop_server(data_dir=args.dir, port=args.port)
        return 0
    if metastore.server_running(port=args.port):
        url = metastore.jdbc_url(port=args.port)
        out.show(url, lambda: url)
        return 0
    print(f"no metastore server answers on 127.0.0.1:{args.port}", file=sys.stderr)
    return EXIT_CHECK_FAILED
