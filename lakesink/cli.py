"""The ``lakesink`` command line."""

from __future__ import annotations

import argparse
import logging
import sys

from lakesink import __version__

__all__ = ["main"]


def _jars(_: argparse.Namespace) -> int:
    from lakesink.session import delta_maven_coordinate

    print(delta_maven_coordinate())
    return 0


def _metastore(args: argparse.Namespace) -> int:
    from lakesink import metastore
    from lakesink.errors import ConfigurationError

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    # Loopback only (the module's default host): the server has no authentication.
    try:
        if args.action == "start":
            print(metastore.start_server(args.dir, port=args.port))
            return 0
        if args.action == "stop":
            metastore.stop_server(data_dir=args.dir, port=args.port)
            return 0
        if metastore.server_running(port=args.port):
            print(metastore.jdbc_url(port=args.port))
            return 0
        print(f"no metastore server answers on 127.0.0.1:{args.port}", file=sys.stderr)
        return 1
    except ConfigurationError as exc:
        print(f"lakesink metastore {args.action}: {exc}", file=sys.stderr)
        return 1


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
    server = commands.add_parser(
        "metastore",
        help="start, stop or check a shared metastore server (Derby) for the committed views",
        description="Run a Derby network server that keeps the Hive metastore, so a writer "
        "job and SQL readers in other processes share the committed views at once. start "
        "and status print the JDBC URL to pass as metastore_url= or LAKESINK_METASTORE_URL; "
        "status fails when no server answers.",
    )
    server.add_argument("action", choices=["start", "stop", "status"])
    server.add_argument(
        "--dir",
        default=".cache/metastore",
        help="folder for the metastore database, the server log and pid file "
        "(default: %(default)s)",
    )
    server.add_argument("--port", type=int, default=1527, help="TCP port (default: %(default)s)")
    server.set_defaults(func=_metastore)
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
