"""``lakesink ingest`` (also ``jobs/ingest.py``): the orders pipeline, a streaming query
into lakesink tables (``lakesink.jobs.ingest``)."""

from __future__ import annotations

import argparse

from lakesink.cli.commands.common import Subparsers, log_to_stderr
from lakesink.cli.exits import EXIT_CODES, EXIT_OK
from lakesink.cli.output import Output
from lakesink.cli.signals import stop_requested
from lakesink.cli.spark_output import add_spark_options, jvm_output
from lakesink.tables.format import COMMIT_MODES

__all__ = ["add_parser"]

# Shown as they are, below the options.
ABOUT = """\
Reads order records (order_id, customer, amount, ordered_at) from a landing folder with
Spark's file source (JSON lines, CSV with a header, or Parquet), or as JSON messages from a
Kafka topic; types them, drops records without an id, dedupes ids within a micro-batch, and
writes each micro-batch into the orders table and, optionally, per-customer totals of the
batch, committed together. By default it runs availableNow: it processes what has arrived,
in batches of up to --files-per-checkpoint files (or --records-per-checkpoint Kafka
records), and exits; with --follow it keeps running, a batch every --checkpoint-seconds,
until SIGINT or SIGTERM stops it cleanly. A landing file that does not parse is copied to
<landing>/_quarantine/ with a .reason.txt, and its rows are left out. The query's
checkpoint location is <state>/<job id>: a restart resumes from it, and every batch Spark
recorded there is committed exactly once.

lakesink ingest --landing /data/landing --table /data/orders --state /data/_state
lakesink ingest --kafka 127.0.0.1:9092 --topic orders --table ... --state ...
spark-submit --jars "$(lakesink jars --files)" "$(lakesink app)" ingest --landing ...

"""


# Named for argparse's message: "invalid count value: 'x'".
def count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def seconds(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value:g}")
    return value


def brokers(text: str) -> str:
    """Kafka bootstrap servers, ``HOST:PORT[,HOST:PORT...]``."""
    for server in text.split(","):
        host, _, port = server.strip().rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise argparse.ArgumentTypeError(
                f"{server.strip()!r} is not HOST:PORT (e.g. 127.0.0.1:9092); several are "
                "separated by commas"
            )
    return text


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "ingest",
        help="run the orders pipeline: landing files or Kafka into lakesink tables",
        description="The orders pipeline: a Structured Streaming query whose sink is "
        "lakesink, exactly once.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=ABOUT + EXIT_CODES + ".",
    )
    _add_place_options(parser)
    _add_batch_options(parser)
    _add_commit_options(parser)
    add_spark_options(parser, remote=False)
    parser.set_defaults(func=_ingest)


def _add_place_options(parser: argparse.ArgumentParser) -> None:
    """What the job reads, and where its tables and query state live."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--landing", help="folder new files arrive in")
    source.add_argument(
        "--kafka", metavar="HOST:PORT", type=brokers, help="Kafka bootstrap servers"
    )
    parser.add_argument("--topic", help="with --kafka: the topic of the order messages")
    parser.add_argument("--table", required=True, help="lakesink table of the orders")
    parser.add_argument(
        "--totals-table",
        help="optional lakesink table of per-batch customer totals (committed with the "
        "orders, in the same batch)",
    )
    parser.add_argument("--state", required=True, help="folder of the query's checkpoint location")
    parser.add_argument(
        "--job-id", default="ingest", help="query name, and its folder in --state (default: ingest)"
    )


def _add_batch_options(parser: argparse.ArgumentParser) -> None:
    """How records become micro-batches, and when."""
    parser.add_argument(
        "--format",
        default="json",
        choices=["json", "csv", "parquet"],
        help="landing file format (default: json lines)",
    )
    parser.add_argument(
        "--files-per-checkpoint",
        type=count,
        default=10,
        metavar="N",
        help="at most N landing files per micro-batch (default 10)",
    )
    parser.add_argument(
        "--records-per-checkpoint",
        type=count,
        default=10_000,
        metavar="N",
        help="with --kafka: at most N records per micro-batch (default 10000)",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep running (a batch every --checkpoint-seconds) instead of stopping when "
        "drained (availableNow)",
    )
    parser.add_argument(
        "--checkpoint-seconds",
        type=seconds,
        default=30.0,
        metavar="M",
        help="with --follow, start a micro-batch every M seconds (default 30)",
    )


def _add_commit_options(parser: argparse.ArgumentParser) -> None:
    """How a batch is checked, committed and reported."""
    parser.add_argument("--journal", help="journal table (default: beside the table)")
    parser.add_argument(
        "--commit",
        choices=COMMIT_MODES,
        default=None,
        help="how a new table's checkpoints are made visible: a Delta MERGE that writes "
        "their rows into the committed partition (default), or a metadata commit that moves "
        "their files there (milliseconds; see the README's commit modes); an existing "
        "table commits its own way, recorded when it was created",
    )
    parser.add_argument(
        "--suite",
        metavar="FILE",
        help="Great Expectations suite (JSON) every batch's orders must pass before they "
        "are committed",
    )
    parser.add_argument(
        "--on-failure",
        choices=["abort", "quarantine", "warn"],
        default="abort",
        help="what a batch that fails --suite becomes: aborted (never visible; the "
        "default), held for an operator (lakesink commit/abort), or committed with a warning",
    )
    parser.add_argument(
        "--metrics-file",
        metavar="FILE.prom",
        help="after every batch, write the tables' Prometheus metrics to this file (for "
        "node_exporter's textfile collector; see lakesink metrics --help)",
    )
    parser.add_argument(
        "--push-gateway",
        metavar="URL",
        help="after every batch, push the tables' metrics to this Prometheus Pushgateway "
        "(job label lakesink_<job id>)",
    )


def _ingest(args: argparse.Namespace, out: Output) -> int:
    from lakesink.jobs.ingest import run

    stop = stop_requested()
    # stdout carries the batches' lines
    log_to_stderr(args, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    batches = run(args, stop, jvm_output(args))
    ended = "stopped" if stop.is_set() else "done"
    print(f"{ended}: {batches} batch{'' if batches == 1 else 'es'}")
    return EXIT_OK
