"""``lakesink metrics``: the sinks' Prometheus metrics, folded from their journals."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    add_verbose_option,
    reachable,
)
from lakesink.cli.output import Output

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "metrics",
        help="Prometheus metrics of sinks: pending age, commit latency, checkpoints, rows",
        description="Print each sink's metrics in Prometheus' text format, folded from its "
        "journal: the age of the oldest pending checkpoint, pending and held checkpoints, "
        "committed and aborted checkpoints, committed rows, the last commit, the commit "
        "latency (pre-commit to visible) histogram and what the vacuum removed; the README's "
        "'Operating lakesink' lists the names. No Spark, no JVM: run it from cron with "
        "--textfile for node_exporter's textfile collector, or push it with --push-gateway. "
        "Exit 0, 2 when a table is not a lakesink table, 75 when the Pushgateway did not "
        "answer (retry later), 78 when a table's store refuses access or does not answer.",
    )
    parser.add_argument("table", nargs="+", help="path of a lakesink table")
    parser.add_argument(
        "--textfile",
        metavar="FILE.prom",
        help="write them to this file (whole, then renamed into place) instead of stdout",
    )
    parser.add_argument(
        "--push-gateway", metavar="URL", help="push them to this Prometheus Pushgateway"
    )
    parser.add_argument(
        "--job",
        default="lakesink",
        help="the Pushgateway's job label, which groups what is pushed (default: lakesink)",
    )
    add_json_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(func=_metrics)


def _metrics(args: argparse.Namespace, out: Output) -> int:
    from prometheus_client import generate_latest
    from prometheus_client.registry import Collector

    from lakesink.ops.metrics import MetricsExport, sink_registry

    export = MetricsExport(textfile=args.textfile, push_gateway=args.push_gateway, job=args.job)
    registry = sink_registry(reachable(*args.table))
    if args.json or not export.enabled:  # exported as text, they go to the file or gateway
        # Folded once from the journals, for either form.
        families = list(registry.collect())

        class Folded(Collector):
            def collect(self) -> Iterable[Metric]:
                return families

        samples = [
            {"name": s.name, "labels": s.labels, "value": s.value}
            for family in families
            for s in family.samples
        ]
        # The exposition format ends its last line; print ends it once.
        out.show(
            {"metrics": samples},
            lambda: generate_latest(Folded()).decode().removesuffix("\n"),
        )
    if not export.enabled:
        return 0
    export.send(registry)
    where = " and ".join(
        f"{kind} {target}"
        for kind, target in (("wrote", export.textfile), ("pushed to", export.push_gateway))
        if target
    )
    print(f"metrics of {len(args.table)} sink(s): {where}", file=sys.stderr)
    return 0
