"""``lakesink serve``: Spark's Thrift JDBC/ODBC server over the committed views.

SQL users and BI tools (beeline, DBeaver, dbt's ``spark`` adapter with ``method: thrift``)
connect to it over JDBC/ODBC. It runs in the foreground in this process's Spark driver,
with Delta and the catalog of the shared metastore (``LAKESINK_METASTORE_URL`` or
``LAKESINK_METASTORE_DIR``; without either, a catalog of its own that holds only the views
of ``tables``). The views of ``tables`` are (re)created at start, one per sink, named as the
sink's id; raw tables are registered by no name. It runs until its caller sets ``stop``
(``lakesink serve`` does on SIGINT or SIGTERM), then stops the server and its JVM.

Logins are checked (a users file by default, or LDAP; ``serve_access``), and an address
beyond loopback is served only with logins checked and TLS. No secret is on a command line
of the processes it starts, nor in its logs: the keystore's password is made for the run and
handed to the JVM through the gateway, and the keystore is deleted once the server listens.
Spark's web UI is off (it has no login, and shows every query and who ran it), and with a
local master the driver's own ports listen on loopback only.

The Delta jars go on the driver's class path too: the server's sessions run on Thrift
threads whose class loader does not see jars given as packages (delta-io/delta#1332), so
without it every connection fails to load Delta's catalog.
"""

from __future__ import annotations

import logging
import os
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lakesink.errors import ConfigurationError
from lakesink.jvm import delta_jars, listening
from lakesink.ops.serve_access import (
    JvmKeystore,
    ServeAuth,
    ServeTls,
    authenticator_class_path,
    check_access,
    thrift_settings,
)
from lakesink.storage.location import normalize

__all__ = ["ServeOptions", "serve"]

log = logging.getLogger(__name__)

THRIFT_SERVER = "org.apache.spark.sql.hive.thriftserver.HiveThriftServer2"
# How often the views of a group's tables move on to its newest cut.
CUT_REFRESH_S = 1.0


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """Where the server listens, whom it admits, and what it shows.

    Attributes:
        host: The address to listen on (loopback by default); any other is served only
            with logins checked and ``tls``.
        port: The Thrift port (JDBC URL ``jdbc:hive2://host:port/default``).
        auth: How logins are checked (default: the default users file).
        tls: The server's certificate and key; None speaks in clear (loopback only).
        tables: lakesink tables whose committed views to (re)create at start.
        master: Spark master URL (default ``local[*]``).
        jvm_output: A file for the driver JVM's own output (the server's log); default
            this process's stdout and stderr.
    """

    host: str = "127.0.0.1"
    port: int = 10000
    auth: ServeAuth = field(default_factory=ServeAuth)
    tls: ServeTls | None = None
    tables: tuple[str, ...] = ()
    master: str | None = None
    jvm_output: Path | None = None


def serve(
    options: ServeOptions, *, stop: threading.Event, ready: Callable[[str], None] = print
) -> None:
    """Run the server until ``stop`` is set; ``ready`` gets the JDBC URL once it listens.

    Raises:
        ConfigurationError: The address is beyond loopback without logins checked and TLS,
            the users file or TLS files are unusable, the port is taken, or the Delta jars
            cannot be resolved.
        TableNotFoundError, FormatVersionError: A table of ``tables`` is not a lakesink
            table of this version.
    """
    from lakesink.delta.table import read_sink_table
    from lakesink.readers.spark import CommittedViews
    from lakesink.spark.session import METASTORE_ENV, METASTORE_URL_ENV, spark_session

    check_access(options.host, options.auth, options.tls)
    if listening(options.host, options.port):
        raise ConfigurationError(
            f"{options.host}:{options.port} is taken (another server?); pass --port"
        )
    keystore = JvmKeystore(options.tls) if options.tls is not None else None
    own_catalog = None
    spark = None
    server = None
    try:
        access, properties = thrift_settings(options.auth, keystore)
        conf = _server_conf(options, access)
        # The Thrift server needs a Hive catalog: the shared one, else one of its own.
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
        system = spark._jvm.java.lang.System  # type: ignore[union-attr]
        for key, value in properties.items():
            system.setProperty(key, value)
        tables = [read_sink_table(spark, normalize(path)) for path in options.tables]
        views = CommittedViews(spark, tables)
        for table in tables:
            log.info("view %s: the committed rows of %s", table.sink_id, table.path)
        thrift = spark._jvm.org.apache.spark.sql.hive.thriftserver  # type: ignore[union-attr]
        server = thrift.HiveThriftServer2.startWithContext(spark._jsparkSession.sqlContext())
        if keystore is not None:
            keystore.remove()  # read: the server holds the key in memory
        log.info("logins: %s; TLS %s", _logins(options.auth), "on" if keystore else "off")
        url = f"jdbc:hive2://{options.host}:{options.port}/default"
        ready(url + (";ssl=true" if keystore else ""))
        # The views of a group's tables read at its newest cut: moved on as writers cut.
        while not stop.wait(CUT_REFRESH_S):
            views.refresh()
        log.info("stopping the SQL server")
    finally:
        if keystore is not None:
            keystore.remove()
        if server is not None:
            server.stop()
        if spark is not None:
            spark.stop()
        if own_catalog is not None:
            own_catalog.cleanup()


def _server_conf(options: ServeOptions, access: dict[str, str]) -> dict[str, str]:
    """The Spark settings of the server's session: its address, its logins (``access``)."""
    from lakesink.spark.session import MASTER_ENV

    # Delta's classes where the Thrift server's Hive side finds them, on any master.
    class_path = [str(jar) for jar in delta_jars()]
    if not options.auth.no_auth:
        class_path += map(str, authenticator_class_path())
    conf = {
        "spark.driver.extraClassPath": os.pathsep.join(class_path),
        "spark.hadoop.hive.server2.thrift.bind.host": options.host,
        "spark.hadoop.hive.server2.thrift.port": str(options.port),
        "spark.ui.enabled": "false",
        **access,
    }
    master = options.master or os.environ.get(MASTER_ENV) or "local[*]"
    if master.startswith("local"):
        conf["spark.driver.bindAddress"] = conf["spark.driver.host"] = "127.0.0.1"
    return conf


def _logins(auth: ServeAuth) -> str:
    if auth.users is not None:
        return f"checked against {auth.users}"
    if auth.ldap_url is not None:
        return f"checked by {auth.ldap_url}"
    return "not checked (--no-auth)"
