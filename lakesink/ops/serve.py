"""``lakesink serve``: Spark's Thrift JDBC/ODBC server over the committed views.

SQL users and BI tools (beeline, DBeaver, dbt's ``spark`` adapter with ``method: thrift``)
connect to it over JDBC/ODBC. It runs in the foreground in this process's Spark driver,
with Delta and the catalog of the shared metastore (``LAKESINK_METASTORE_URL`` or
``LAKESINK_METASTORE_DIR``; without either, a catalog of its own that holds only the views
of ``tables``). The views of ``tables`` are (re)created at start, one per sink, named as the
sink's id; raw tables are registered by no name. It runs until its caller sets ``stop``
(``lakesink serve`` does on SIGINT or SIGTERM), then stops the server and its JVM.

The Delta jars go on the driver's class path too: the server's sessions run on Thrift
threads whose class loader does not see jars given as packages (delta-io/delta#1332), so
without it every connection fails to load Delta's catalog.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lakesink.errors import ConfigurationError
from lakesink.storage.location import normalize

__all__ = ["ServeOptions", "delta_class_path", "serve"]

log = logging.getLogger(__name__)

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
# How often the views of a group's tables move on to its newest cut.
CUT_REFRESH_S = 1.0
# Only these: the packages' other jars (Unity Catalog's client) bring a Jackson that
# clashes with Spark's on the driver's class path.
_CLASS_PATH_JARS = ("io.delta_delta-spark", "io.delta_delta-storage")


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """Where the server listens and what it shows.

    Attributes:
        host: The address to listen on (loopback by default: put a proxy with TLS and
            authentication in front of it to open it to a network).
        port: The Thrift port (JDBC URL ``jdbc:hive2://host:port/default``).
        tables: lakesink tables whose committed views to (re)create at start.
        master: Spark master URL (default ``local[*]``).
        jvm_output: A file for the driver JVM's own output (the server's log); default
            this process's stdout and stderr.
    """

    host: str = "127.0.0.1"
    port: int = 10000
    tables: tuple[str, ...] = ()
    master: str | None = None
    jvm_output: Path | None = None


def delta_class_path() -> str:
    """The Delta jars for the driver's class path, resolved as a Delta session resolves them.

    Resolved in a short child process (the class path is fixed when a JVM starts): the
    Ivy cache makes it a few seconds, or fetches the jars from Maven Central the first time.
    """
    probe = (
        "from lakesink.spark.session import spark_session\n"
        "s = spark_session(master='local[1]', app_name='lakesink-serve-jars')\n"
        # Every local jar of the session, its packages' included (spark.jars holds only
        # the jars given by path, such as the S3 log store, once any is given).
        "print('JARS=' + (s.sparkContext.getConf().get('spark.repl.local.jars') or ''))\n"
        "s.stop()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=900
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("JARS=")]
    if done.returncode != 0 or not lines:
        raise ConfigurationError(
            f"could not resolve the Delta jars (a Spark session failed to start): "
            f"{done.stderr.strip().splitlines()[-1:] or done.returncode}"
        )
    jars = [
        jar.removeprefix("file://").removeprefix("file:")
        for jar in lines[-1].removeprefix("JARS=").split(",")
        if any(f"/{name}" in jar for name in _CLASS_PATH_JARS)
    ]
    if not jars:
        raise ConfigurationError(f"no Delta jar among the session's jars: {lines[-1]}")
    return os.pathsep.join(jars)


def serve(
    options: ServeOptions, *, stop: threading.Event, ready: Callable[[str], None] = print
) -> None:
    """Run the server until ``stop`` is set; ``ready`` gets the JDBC URL once it listens.

    Raises:
        ConfigurationError: The port is taken, or the Delta jars cannot be resolved.
        TableNotFoundError, FormatVersionError: A table of ``tables`` is not a lakesink
            table of this version.
    """
    from lakesink.delta.readers import CommittedViews
    from lakesink.jvm import listening
    from lakesink.spark.session import METASTORE_ENV, METASTORE_URL_ENV, spark_session
    from lakesink.tables.format import read_sink_table

    if listening(options.host, options.port):
        raise ConfigurationError(
            f"{options.host}:{options.port} is taken (another server?); pass --port"
        )
    conf = {
        "spark.driver.extraClassPath": delta_class_path(),
        "spark.hadoop.hive.server2.thrift.bind.host": options.host,
        "spark.hadoop.hive.server2.thrift.port": str(options.port),
    }
    # The Thrift server needs a Hive catalog: the shared one, else one of its own.
    own_catalog = None
    if not os.environ.get(METASTORE_ENV) and not os.environ.get(METASTORE_URL_ENV):
        own_catalog = tempfile.TemporaryDirectory(prefix="lakesink-serve-")
        log.info("no shared metastore set: the catalog holds only the views of --table")
    spark = spark_session(
        master=options.master,
        app_name="lakesink-serve",
        conf=conf,
        metastore_dir=own_catalog.name if own_catalog else None,
        jvm_output=options.jvm_output,
    )
    server = None
    try:
        tables = [read_sink_table(spark, normalize(path)) for path in options.tables]
        views = CommittedViews(spark, tables)
        for table in tables:
            log.info("view %s: the committed rows of %s", table.sink_id, table.path)
        thrift = spark._jvm.org.apache.spark.sql.hive.thriftserver  # type: ignore[union-attr]
        server = thrift.HiveThriftServer2.startWithContext(spark._jsparkSession.sqlContext())
        ready(f"jdbc:hive2://{options.host}:{options.port}/default")
        # The views of a group's tables read at its newest cut: moved on as writers cut.
        while not stop.wait(CUT_REFRESH_S):
            views.refresh()
        log.info("stopping the SQL server")
    finally:
        if server is not None:
            server.stop()
        spark.stop()
        if own_catalog is not None:
            own_catalog.cleanup()
