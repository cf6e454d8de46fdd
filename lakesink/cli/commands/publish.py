"""``lakesink publish``: bring tables' published tables up to date now, without Spark."""

from __future__ import annotations

import argparse

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    add_verbose_option,
    reachable,
)
from lakesink.cli.output import Output

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "publish",
        help="bring each table's published table up to date now (after your own changes)",
        description="Bring the published table of each lakesink table (the committed rows "
        "alone, which every engine reads by path) up to the table's newest version at once. "
        "Writers, recovery and the vacuum do it after each of their changes; run it after "
        "your own: a DELETE, UPDATE or MERGE (a GDPR request, a correction), a RESTORE, an "
        "OPTIMIZE or REORG, a VACUUM. Files with deletion vectors are named through copies "
        "without their deleted rows, and a RESTORE that undid a checkpoint's commit is "
        "journaled. Read and written with delta-rs: no Spark, no JVM. Exit 0, 2 when a "
        "table is not a lakesink table or keeps no published table, 78 when its store "
        "refuses access or does not answer.",
    )
    parser.add_argument("table", nargs="+", help="path of a lakesink table")
    add_json_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(func=_publish)


def _publish(args: argparse.Namespace, out: Output) -> int:
    from lakesink.table import Table

    done = [Table(path).publish() for path in reachable(*args.table)]
    reports = [
        {
            "table": table,
            "published": published.path,
            "version": published.version,
            "table_version": published.sink_version,
        }
        for table, published in zip(args.table, done, strict=True)
    ]
    out.show(
        {"published": reports},
        lambda: "\n".join(
            f"{r['table']}: published table at version {r['version']}, showing table "
            f"version {r['table_version']} (up to date)"
            for r in reports
        ),
    )
    return 0
