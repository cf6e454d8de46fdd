"""What several commands share: their ``--dry-run``, ``--json`` and ``--verbose`` options,
the store check made before anything else runs, their Spark session, a checkpoint's
transactions as JSON and validation reports as Data Docs pages."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from lakesink.cli.spark_output import jvm_output
from lakesink.jvm import under_spark_submit
from lakesink.storage.files import check_reachable
from lakesink.storage.location import normalize

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from lakesink.core.validation import ValidationReport
    from lakesink.tables.journal import TransactionStatus

__all__ = [
    "Subparsers",
    "add_dry_run_option",
    "add_json_option",
    "add_verbose_option",
    "checkpoint_json",
    "log_to_stderr",
    "reachable",
    "start_spark",
    "write_reports",
]

# What ``add_subparsers`` returns; a string, as the class is generic to type checkers only.
Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def add_dry_run_option(parser: argparse.ArgumentParser) -> None:
    """``--dry-run``: the command says what it would change, and changes nothing."""
    parser.add_argument("--dry-run", action="store_true", help="report, change nothing")


def add_json_option(parser: argparse.ArgumentParser, help: str = "machine-readable output") -> None:
    """``--json``: the command's result as JSON (``lakesink.cli.output``)."""
    parser.add_argument("--json", action="store_true", help=help)


def add_verbose_option(parser: argparse.ArgumentParser) -> None:
    """``--verbose`` of a command without Spark (``add_spark_options`` has Spark's)."""
    parser.add_argument("--verbose", "-v", action="store_true", help="show a failure's full trace")


def reachable(*locations: str | None, write: bool = False) -> list[str]:
    """The locations normalized, once each store answered (before anything else runs)."""
    found = [normalize(location) for location in locations if location]
    for location in found:
        check_reachable(location, write=write)
    return found


def log_to_stderr(args: argparse.Namespace, *, format: str) -> None:
    """lakesink's log on stderr, at INFO: stdout carries the command's own lines. Under
    spark-submit, which joins a Python application's stderr to its stdout, warnings and
    errors only, as Spark's own at ``spark.log.level=WARN`` (``--verbose``: every line)."""
    quiet = under_spark_submit() and not args.verbose
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, format=format, stream=sys.stderr
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its INFO lines are Spark's plumbing


def start_spark(
    args: argparse.Namespace, *, app_name: str = "lakesink-cli", log_level: str = "ERROR"
) -> SparkSession:
    """The Spark session of a command, started once its checks passed: a Spark Connect
    client's with ``--remote``, else a Spark of this process (its log at ``log_level``)."""
    if args.remote:
        return _remote_session(args.remote)
    from lakesink.spark.session import spark_session

    print("starting Spark ...", file=sys.stderr, flush=True)
    spark = spark_session(
        master=args.master,
        app_name=app_name,
        jvm_output=jvm_output(args),
        warehouse_in_cache=True,
    )
    spark.sparkContext.setLogLevel(log_level)
    return spark


def _remote_session(url: str) -> SparkSession:
    from pyspark.sql import SparkSession

    from lakesink.errors import ConfigurationError

    try:
        import pyspark.sql.connect.session  # noqa: F401  (its client's packages)
    except ImportError as exc:
        raise ConfigurationError(
            f"--remote needs pyspark's Spark Connect client ({exc}): pip install "
            "'pyspark[connect]' beside a full pyspark, or 'lakesink[connect]' without one"
        ) from None
    print(f"connecting to Spark Connect at {url} ...", file=sys.stderr, flush=True)
    return SparkSession.builder.remote(url).getOrCreate()


def checkpoint_json(
    checkpoint_id: int, transactions: Sequence[TransactionStatus]
) -> dict[str, Any]:
    """A checkpoint's transactions, as the JSON of the commands that act on one."""
    return {
        "checkpoint_id": checkpoint_id,
        "transactions": [
            {
                "txn_id": t.txn_id,
                "writer_id": t.writer_id,
                "state": t.state.value,
                "rows": t.row_count,
            }
            for t in transactions
        ],
    }


def write_reports(
    validated: Sequence[tuple[TransactionStatus, ValidationReport | None]],
    table: str,
    directory: str,
) -> None:
    """Data Docs pages of (transaction, its report or None) pairs; their paths to stderr."""
    from lakesink.ops.reports import write_report_page

    for txn, report in validated:
        page = (
            None
            if report is None
            else write_report_page(report, txn, table_path=table, directory=directory)
        )
        if page is None:
            print(
                f"checkpoint {txn.checkpoint_id} (writer {txn.writer_id}): no GX result to render "
                "(the run raised, or an older lakesink kept only a summary); lakesink validate "
                "--report renders a new one",
                file=sys.stderr,
            )
        else:
            print(f"report of checkpoint {txn.checkpoint_id}: {page}", file=sys.stderr)
