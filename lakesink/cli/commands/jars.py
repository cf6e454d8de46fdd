"""``lakesink jars``: the Maven coordinates (or the jar) spark-submit needs for lakesink."""

from __future__ import annotations

import argparse

from lakesink.cli.commands.common import Subparsers, add_verbose_option
from lakesink.cli.output import Output
from lakesink.errors import ConfigurationError

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "jars",
        help="print the Delta jar's Maven coordinate (for spark-submit --packages)",
        description="Print the Maven coordinate of the Delta jar that matches the installed "
        'pyspark and delta-spark, e.g. spark-submit --packages "$(lakesink jars)" job.py',
    )
    parser.add_argument(
        "--kafka", action="store_true", help="also Spark's Kafka connector (comma-separated)"
    )
    parser.add_argument(
        "--s3", action="store_true", help="also hadoop-aws, for s3a:// tables (comma-separated)"
    )
    parser.add_argument(
        "--log-store",
        action="store_true",
        help="instead, the path of lakesink's S3 log store jar (for spark-submit --jars), "
        "built with javac on first use",
    )
    parser.add_argument(
        "--files",
        action="store_true",
        help="instead, Delta's jar files themselves from lakesink's cache, fetched once (for "
        "spark-submit --jars: no Ivy resolution, nothing downloaded); not with --kafka or "
        "--s3, whose packages spark-submit takes by coordinate",
    )
    add_verbose_option(parser)
    parser.set_defaults(func=_jars)


def _jars(args: argparse.Namespace, out: Output) -> int:
    from lakesink.jvm import delta_jars
    from lakesink.spark.session import KAFKA_CONNECTOR, delta_maven_coordinate
    from lakesink.storage.options import StorageOptions

    if args.files and (args.kafka or args.s3):
        raise ConfigurationError(
            "--files lists Delta's jars alone: give spark-submit the others as packages "
            '(--packages "$(lakesink jars --kafka --s3)" lists them with Delta\'s)'
        )
    if args.log_store:
        found = StorageOptions.spark_jars()
    elif args.files:
        found = [str(jar) for jar in delta_jars()]
    else:
        found = [
            delta_maven_coordinate(),
            *([KAFKA_CONNECTOR] if args.kafka else []),
            *(StorageOptions.spark_packages() if args.s3 else []),
        ]
    out.show(found, lambda: ",".join(found))
    return 0
