"""A Spark session that can read and write Delta tables, locally or on a cluster."""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

from lakesink.errors import ConfigurationError
from lakesink.jvm import (
    cache_dir,
    delta_jars,
    delta_maven_coordinate,
    pyspark_jars,
    under_spark_submit,
)
from lakesink.spark.settings import local_parallelism
from lakesink.storage.options import StorageOptions

__all__ = [
    "DELTA_EXTENSION",
    "KAFKA_CONNECTOR",
    "delta_maven_coordinate",
    "spark_session",
]

log = logging.getLogger(__name__)

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
IVY_DIR_ENV = "LAKESINK_IVY_DIR"
MASTER_ENV = "LAKESINK_SPARK_MASTER"
METASTORE_ENV = "LAKESINK_METASTORE_DIR"
METASTORE_URL_ENV = "LAKESINK_METASTORE_URL"
# Settings whose values are secrets (S3 keys, passwords): Spark's own redaction pattern
# (spark.redaction.regex).
_SECRET_SETTING = re.compile(r"(?i)secret|password|token|access[.]?key")


# Spark's Kafka source and sink. Maven Central serves 4.1.1-4.1.3 of it but not 4.1.4 (the
# pip pyspark's version), and 4.1.3 lacks its spark-token-provider dependency there; 4.1.1
# resolves whole and runs with pyspark 4.1.4 (the streaming tests read Kafka through it).
KAFKA_CONNECTOR = "org.apache.spark:spark-sql-kafka-0-10_2.13:4.1.1"


def spark_session(
    *,
    master: str | None = None,
    app_name: str = "lakesink",
    existing: SparkSession | None = None,
    conf: Mapping[str, str] | None = None,
    ivy_dir: str | None = None,
    metastore_dir: str | None = None,
    metastore_url: str | None = None,
    packages: Sequence[str] = (),
    storage: StorageOptions | None = None,
    jvm_output: str | os.PathLike[str] | None = None,
    warehouse_in_cache: bool = False,
) -> SparkSession:
    """Return a Spark session with Delta Lake configured.

    Args:
        master: Spark master URL. Default: ``$LAKESINK_SPARK_MASTER``; under
            ``spark-submit`` the master it was given; otherwise ``local[*]``.
        app_name: The Spark application name.
        existing: A session built elsewhere; it is checked for Delta and returned as is.
        conf: Extra Spark settings, applied last: also over what lakesink sizes to the
            cores of a ``local`` master (Delta's snapshot, shuffle and file listing), whose
            defaults, meant for clusters, cost a laptop seconds per Delta commit.
        ivy_dir: Where Spark caches fetched jars (``$LAKESINK_IVY_DIR``, else ``~/.ivy2.5.2``).
        metastore_dir: Keep the catalog (the committed views) in an embedded Derby
            metastore in this folder, one process at a time. Default:
            ``$LAKESINK_METASTORE_DIR``, else an in-memory catalog, gone with the session.
        metastore_url: Keep the catalog in a Derby network server's Hive metastore, which
            many processes share (``lakesink metastore start`` prints its ``jdbc:derby://``
            URL; ``host:port`` also works); its client jar is fetched if missing. Default:
            ``$LAKESINK_METASTORE_URL``. An argument wins over the other's variable.
        packages: More Maven coordinates for Spark to fetch (a connector).
        storage: How to reach ``s3a://`` and ``s3://`` tables (endpoint, region,
            credentials). Default: ``StorageOptions.from_env()`` when any standard AWS
            variable is set, else local and HDFS paths only; ``StorageOptions()`` takes
            AWS's default credential chain. Adds ``hadoop-aws`` and lakesink's log store,
            whose commits on S3 are conditional creates.
        jvm_output: Append the driver JVM's console output (Spark's warnings and log lines,
            Ivy's report) to this file, not to this process's stdout and stderr, when this
            call starts the JVM (not under ``spark-submit``, nor a process's second session).
        warehouse_in_cache: Without a metastore, keep Spark's (empty) warehouse folder in
            lakesink's cache, not the working folder (the ``lakesink`` commands and jobs do).

    Raises:
        ConfigurationError: ``existing`` has no Delta extension or catalog; or both
            ``metastore_dir`` and ``metastore_url`` are given.
    """
    metastore_dir, metastore_url = _metastore(metastore_dir, metastore_url)
    if existing is not None:
        _check_delta(existing)
        return existing
    # spark-submit starts the JVM first and hands the master over; do not override it.
    launching = not under_spark_submit()
    if launching:
        _check_can_start_spark()
    master = master or os.environ.get(MASTER_ENV) or ("local[*]" if launching else None)
    ivy_dir = ivy_dir or os.environ.get(IVY_DIR_ENV)
    builder = _builder(app_name, master, ivy_dir, metastore_dir)
    if warehouse_in_cache and not (metastore_dir or metastore_url):
        builder = builder.config(
            "spark.sql.warehouse.dir", str(cache_dir("spark-warehouse", ivy_dir))
        )
    # Under spark-submit the JVM runs already, with its jars (lakesink jars --s3). A local
    # JVM reads jars in place from its class path; executors elsewhere fetch packages.
    local_jvm = launching and bool(_local_defaults(master or ""))
    conf, packages = _with_storage(
        dict(conf or {}), list(packages), storage, launching=launching, local_jvm=local_jvm
    )
    if metastore_url:
        builder = _network_metastore(builder, metastore_url, ivy_dir, conf)
    builder = _with_jars(builder, conf, packages, ivy_dir, local_jvm=local_jvm)
    if launching:
        _launch_driver_jvm(builder, jvm_output)
    with _callers_sigint_kept():
        session = builder.getOrCreate()
    _check_delta(session)
    log.info("Spark %s session with Delta (%s)", session.version, delta_maven_coordinate())
    return session


def _check_can_start_spark() -> None:
    """Refuse to start Spark from a pyspark that has none: the Connect client alone."""
    spark_home = os.environ.get("SPARK_HOME")  # where pyspark starts Spark from, if set
    jars = Path(spark_home) / "jars" if spark_home else pyspark_jars()
    if not jars.is_dir():
        raise ConfigurationError(
            f"lakesink.spark_session() starts Spark on this machine, and there are no Spark "
            f"jars ({jars}): this pyspark is Spark Connect's client alone (pyspark-client). "
            "Connect to a server instead (SparkSession.builder.remote('sc://host:15002')"
            ".getOrCreate(); the commands take --remote), or install 'lakesink[spark]' in an "
            "environment without pyspark-client"
        )


def _metastore(directory: str | None, url: str | None) -> tuple[str | None, str | None]:
    """The metastore to use: the arguments', else the environment's; never both kinds."""
    if directory and url:
        raise ConfigurationError(
            "give either metastore_dir (embedded Derby, one process) or metastore_url "
            "(shared network server), not both"
        )
    if directory or url:
        return directory, url
    directory, url = os.environ.get(METASTORE_ENV), os.environ.get(METASTORE_URL_ENV)
    if directory and url:
        raise ConfigurationError(
            f"both ${METASTORE_ENV} and ${METASTORE_URL_ENV} are set; unset one of them "
            "(the first is an embedded one-process metastore, the second a shared server)"
        )
    return directory, url


def _builder(
    app_name: str, master: str | None, ivy_dir: str | None, metastore_dir: str | None
) -> SparkSession.Builder:
    """A builder with Delta's extension and catalog, the master (None: spark-submit's)
    with its local defaults, the Ivy cache and an embedded metastore."""
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.extensions", DELTA_EXTENSION)
        .config("spark.sql.catalog.spark_catalog", DELTA_CATALOG)
        .config("spark.ui.showConsoleProgress", "false")
    )
    if master:
        builder = builder.master(master)
        for key, value in _local_defaults(master).items():
            builder = builder.config(key, value)
    if ivy_dir:
        builder = builder.config("spark.jars.ivy", ivy_dir)
    if metastore_dir:
        folder = Path(metastore_dir).resolve()
        builder = (
            builder.enableHiveSupport()
            .config("spark.sql.warehouse.dir", str(folder / "warehouse"))
            .config(
                "spark.hadoop.javax.jdo.option.ConnectionURL",
                f"jdbc:derby:;databaseName={folder / 'metastore_db'};create=true",
            )
            .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={folder}")
        )
    return builder


def _with_storage(
    conf: dict[str, str],
    packages: list[str],
    storage: StorageOptions | None,
    *,
    launching: bool,
    local_jvm: bool,
) -> tuple[dict[str, str], list[str]]:
    """The settings and packages with those of object storage (given, or from the
    environment) added: a local JVM's jars on its class path, others' as packages."""
    storage = storage or _storage_from_env()
    if storage is None:
        return conf, packages
    conf = {**storage.spark_conf(), **conf}
    if local_jvm:
        # As packages they would be copied into every session's temporary folder (640 MB
        # of AWS SDK).
        _extend(conf, "spark.driver.extraClassPath", storage.spark_class_path(), os.pathsep)
    elif launching:
        packages = list(dict.fromkeys([*packages, *storage.spark_packages()]))
    if launching:
        _extend(conf, "spark.jars", storage.spark_jars(), ",")
    log.info("object storage: %r", storage)  # its repr hides the secrets
    return conf, packages


def _with_jars(
    builder: SparkSession.Builder,
    conf: dict[str, str],
    packages: list[str],
    ivy_dir: str | None,
    *,
    local_jvm: bool,
) -> SparkSession.Builder:
    """The builder with ``conf`` and the jars: for a local JVM Delta's on the driver's class
    path (from the Ivy cache), else Delta's package with the others."""
    from delta import configure_spark_with_delta_pip

    delta_class_path = _delta_class_path(ivy_dir) if local_jvm else None
    if delta_class_path:
        _extend(conf, "spark.driver.extraClassPath", delta_class_path, os.pathsep)
    for key, value in conf.items():
        builder = builder.config(key, value)
    if not delta_class_path:
        return configure_spark_with_delta_pip(builder, extra_packages=packages)
    if packages:
        builder = builder.config("spark.jars.packages", ",".join(packages))
    return builder


def _launch_driver_jvm(
    builder: SparkSession.Builder, output: str | os.PathLike[str] | None
) -> None:
    """Start the driver JVM, with the builder's settings, in a session of its own.

    A signal sent to the whole process group (``kill -- -PGID``, a terminal's Ctrl-C, a
    scheduler stopping a job) then reaches this Python process alone, which stops its work
    and then Spark, in order; before, the JVM died first and the Python side failed in
    mid-call. The JVM still ends with this process: pyspark's gateway exits when its stdin,
    a pipe from here, closes. Does nothing once a JVM runs (a second session of a process),
    or if pyspark no longer keeps the builder's settings where this looks for them.

    Secret settings stay off its command line, where ``ps`` shows them to every user of
    the host: ``getOrCreate`` hands every setting to the running JVM through the gateway,
    and only what the JVM's launch needs (its class path, the packages to fetch) must be
    there.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    settings = getattr(builder, "_options", None)  # what getOrCreate hands the JVM too
    if SparkContext._gateway is not None or not isinstance(settings, dict):
        return
    conf = SparkConf()
    for key, value in settings.items():
        if not _SECRET_SETTING.search(key):
            conf.set(key, str(value))
    popen: dict[str, object] = {"start_new_session": True}
    # pyspark's launch_gateway has no annotations.
    if output is None:
        gateway = launch_gateway(conf, popen_kwargs=popen)  # type: ignore[no-untyped-call]
    else:
        # The JVM holds its own descriptor of the file; this one can close at once.
        with open(output, "ab") as sink:
            gateway = launch_gateway(  # type: ignore[no-untyped-call]
                conf, popen_kwargs={**popen, "stdout": sink, "stderr": sink}
            )
    SparkContext._ensure_initialized(gateway=gateway)


@contextmanager
def _callers_sigint_kept() -> Iterator[None]:
    """Keep a SIGINT handler the caller installed across the session's start.

    pyspark puts in its own (cancel every job, raise KeyboardInterrupt) when a SparkContext
    starts in the main thread; a command that stops in order on SIGINT (``lakesink
    serve``, a ``--follow`` job) installed its own first, and keeps it.
    """
    in_main = threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT) if in_main else None
    try:
        yield
    finally:
        if callable(previous) and previous is not signal.default_int_handler:
            signal.signal(signal.SIGINT, previous)


def _storage_from_env() -> StorageOptions | None:
    """The object-store settings of the AWS environment variables, if any is set."""
    storage = StorageOptions.from_env()
    return None if storage == StorageOptions() else storage


def _delta_class_path(ivy_dir: str | None) -> list[str]:
    """Delta's jars for a local JVM's class path; none if they cannot be fetched, and Spark
    then resolves Delta as packages, as it would on a cluster."""
    try:
        return [str(jar) for jar in delta_jars(ivy_dir)]
    except ConfigurationError as exc:
        log.warning("%s; Spark resolves Delta as packages instead, on every start", exc)
        return []


def _extend(conf: dict[str, str], key: str, items: Sequence[str], separator: str) -> None:
    """Put ``items`` first in the list setting ``key``, keeping the caller's entries."""
    given = [item for item in conf.get(key, "").split(separator) if item]
    conf[key] = separator.join(dict.fromkeys([*items, *given]))


def _local_defaults(master: str) -> dict[str, str]:
    """Parallelism settings for a local master: one task per core, not 50 or 200.

    Every Delta commit rebuilds the table's snapshot in ``snapshotPartitions`` tasks (50 by
    default); on two cores that alone made a lakesink checkpoint 2-3 times slower.
    """
    cores = local_parallelism(master)
    if cores is None:
        return {}
    parallelism = str(cores)
    return {
        "spark.databricks.delta.snapshotPartitions": parallelism,
        "spark.sql.shuffle.partitions": parallelism,
        "spark.sql.sources.parallelPartitionDiscovery.parallelism": parallelism,
    }


def _network_metastore(
    builder: SparkSession.Builder, url: str, ivy_dir: str | None, conf: dict[str, str]
) -> SparkSession.Builder:
    from lakesink.spark.metastore import client_jar, default_jars_dir, metastore_confs

    settings = metastore_confs(url, client_jar(default_jars_dir(ivy_dir)))
    class_path = "spark.driver.extraClassPath"
    if conf.get(class_path):  # keep the caller's entries, and the Derby client too
        conf[class_path] = os.pathsep.join([settings[class_path], conf[class_path]])
    if under_spark_submit():
        log.warning(
            "the driver JVM is already running, so the Derby client jar cannot join its class "
            "path now; pass it to spark-submit: --driver-class-path %s",
            settings[class_path],
        )
    builder = builder.enableHiveSupport()
    for key, value in settings.items():
        builder = builder.config(key, value)
    log.info("catalog in the shared metastore %s", url)
    return builder


def _check_delta(session: SparkSession) -> None:
    extensions = session.conf.get("spark.sql.extensions", "") or ""
    catalog = session.conf.get("spark.sql.catalog.spark_catalog", "") or ""
    if DELTA_EXTENSION not in extensions or catalog != DELTA_CATALOG:
        raise ConfigurationError(
            "the Spark session is not set up for Delta Lake: it needs "
            f"spark.sql.extensions={DELTA_EXTENSION} and "
            f"spark.sql.catalog.spark_catalog={DELTA_CATALOG} "
            f"(and the jar {delta_maven_coordinate()}); build it with lakesink.spark_session() "
            "or pass those settings to spark-submit"
        )
