"""Delta's VACUUM as the vacuum runs it: the retention (read from the table's property,
checked against the one asked for), the listing of ``VACUUM ... DRY RUN`` and the VACUUM
itself, and the console line Delta prints on the driver, kept from the caller's output.

What is removed and when is ``lakesink.ops.vacuum``'s to decide; this is only how Delta's
command is made to do it.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from pyspark.sql import SparkSession

from lakesink.errors import ConfigurationError
from lakesink.jvm import session_jvm
from lakesink.spark.settings import default_parallelism, session_conf
from lakesink.spark.sql import delta_path
from lakesink.storage.hadoop import file_size
from lakesink.tables.format import PUBLISHED_FOLDER

__all__ = ["local_listing", "retention", "run_vacuum"]

log = logging.getLogger(__name__)

RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
LISTING_PARALLELISM = "spark.sql.sources.parallelPartitionDiscovery.parallelism"
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
RETENTION_WINDOW_CONF = "spark.databricks.delta.vacuum.retentionWindowIgnore.enabled"
DEFAULT_RETENTION_HOURS = 168.0  # Delta's default for delta.deletedFileRetentionDuration
_HOURS_PER_UNIT = {
    "week": 168.0,
    "day": 24.0,
    "hour": 1.0,
    "minute": 1 / 60,
    "second": 1 / 3600,
    "millisecond": 1 / 3_600_000,
    "microsecond": 1 / 3_600_000_000,
}


def retention(
    properties: Mapping[str, str], retain_hours: float | None, allow_short: bool, path: str
) -> tuple[float, bool]:
    """The VACUUM retention in hours, and whether it is below the table's own.

    Args:
        properties: The table's properties (its ``delta.deletedFileRetentionDuration``).
        retain_hours: The retention asked for; None: the table's own.
        allow_short: Whether one below the table's own is allowed.
        path: The table, for the messages.

    Raises:
        ConfigurationError: The retention is negative, below the table's own without
            ``allow_short``, or the table's property cannot be read.
    """
    configured = properties.get(RETENTION_PROPERTY)
    table_hours = _interval_hours(configured) if configured else DEFAULT_RETENTION_HOURS
    hours = table_hours if retain_hours is None else float(retain_hours)
    if hours < 0:
        raise ConfigurationError(f"retain_hours must not be negative, got {retain_hours}")
    short = hours < table_hours
    if short and not allow_short:
        raise ConfigurationError(
            f"retain_hours={retain_hours:g} is below the table's {RETENTION_PROPERTY} "
            f"({table_hours:g} h) at {path}: a short retention can delete the files of a "
            "write in flight or of a snapshot a reader still uses. Pass "
            "allow_short_retention=True (--allow-short-retention) only when nothing writes"
        )
    return hours, short


def _interval_hours(interval: str) -> float:
    """``interval 1 week`` / ``168 hours`` / ``interval 1 day 12 hours`` -> hours."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", interval.lower())
    known = [(float(n), unit) for n, unit in parts if unit in _HOURS_PER_UNIT]
    if not known:
        raise ConfigurationError(
            f"cannot read {RETENTION_PROPERTY}={interval!r}; pass retain_hours explicitly"
        )
    return sum(n * _HOURS_PER_UNIT[unit] for n, unit in known)


@contextmanager
def local_listing(spark: SparkSession) -> Iterator[None]:
    """One listing task per core for the block, on a local master whose session left the
    listing parallelism unset (lakesink's ``spark_session`` sets it; ``spark-submit`` does
    not), a Spark Connect server's too."""
    master = spark.conf.get("spark.master", None) or ""
    if not master.startswith("local") or spark.conf.get(LISTING_PARALLELISM, None):
        yield
        return
    spark.conf.set(LISTING_PARALLELISM, str(default_parallelism(spark)))
    try:
        yield
    finally:
        spark.conf.unset(LISTING_PARALLELISM)


def run_vacuum(
    spark: SparkSession,
    table_path: str,
    hours: float,
    *,
    short: bool,
    dry_run: bool,
    pending: frozenset[str] = frozenset(),
) -> tuple[int, int]:
    """Run VACUUM DRY RUN (and VACUUM unless ``dry_run``); return files and bytes.

    Args:
        spark: A Delta-ready session.
        table_path: The table.
        hours: The retention (``retention``'s).
        short: It is below the table's own (Delta's check of it is turned off).
        dry_run: List and size the files, delete none.
        pending: Files to count beside the listed ones (those a dry run's DELETE would
            remove, which the listing cannot know).
    """
    statement = f"VACUUM {delta_path(table_path)} RETAIN {_number(hours)} HOURS"
    # Delta 4.4 ignores RETAIN n for any n but 0 unless told not to, and uses the table's
    # own retention: the one asked for would be reported, another one applied.
    settings = {RETENTION_WINDOW_CONF: "false"}
    if short:  # only for these two commands, like the window setting
        settings[RETENTION_CHECK_CONF] = "false"
    with session_conf(spark, settings), _quiet_console(spark):
        listed = {row.path for row in spark.sql(f"{statement} DRY RUN").collect()}
        files = {f for f in listed if not _published_folder(f)} | pending
        size = sum(_file_size(spark, f) for f in files)  # before VACUUM deletes them
        log.info(
            "vacuum %s: VACUUM RETAIN %g HOURS: %d file(s), %d bytes%s",
            table_path,
            hours,
            len(files),
            size,
            "" if dry_run else ", deleting",
        )
        if not dry_run:
            spark.sql(statement).collect()
    return len(files), size


def _published_folder(listed: str) -> bool:
    """Whether VACUUM listed the published table's folder or its parent: until a commit puts
    a data file in the committed partition, they hold only the published table's log, which
    VACUUM does not see (a hidden folder), so it lists them as empty folders; its delete
    (not recursive) fails on them and keeps the log. Not removed, so not counted."""
    folder = listed.rstrip("/")
    return folder.endswith((f"/{PUBLISHED_FOLDER}", f"/{PUBLISHED_FOLDER.split('/')[0]}"))


@contextmanager
def _quiet_console(spark: SparkSession) -> Iterator[None]:
    """Nothing that Scala code prints to the console while the block runs reaches it.

    Delta's VACUUM prints "Deleted N files and directories in a total of M directories."
    (its own count, of folders too) on the driver's stdout: a Python caller's own output,
    beside the report that says what was removed. Scala's console stream is per thread,
    and the JVM thread that runs this Python thread's statements is always the same one.
    Without a JVM in this process (Spark Connect), nothing is changed.
    """
    jvm = session_jvm(spark)
    if jvm is None:  # the server's console: not this process's output
        yield
        return
    try:
        console = getattr(jvm.scala, "Console$").__getattr__("MODULE$")
        shown = console.out()
        nowhere = jvm.java.io.PrintStream(jvm.java.io.OutputStream.nullOutputStream())
        console.setOutDirect(nowhere)
    except Exception:  # another Scala: the line stays
        yield
        return
    try:
        yield
    finally:
        console.setOutDirect(shown)


def _file_size(spark: SparkSession, uri: str) -> int:
    """Size of a file VACUUM lists (a decoded path, ``file:`` or another Hadoop scheme)."""
    local = re.sub(r"^file:(//)?", "", uri)
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", local):
        try:
            return os.stat(local).st_size
        except FileNotFoundError:  # already gone (another vacuum): nothing to count
            return 0
    try:
        return file_size(spark, uri)
    except Exception as exc:  # a size is only reported, never worth failing the vacuum for
        log.warning("cannot read the size of %s: %s", uri, exc)
        return 0


def _number(value: float) -> str:
    # A plain decimal: Spark SQL's RETAIN takes no exponent notation such as 1e-05.
    return f"{value:.6f}".rstrip("0").rstrip(".")
