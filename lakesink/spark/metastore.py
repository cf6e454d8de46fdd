"""A shared Hive metastore in a Derby network server, so several processes see the views.

The embedded Derby metastore (``spark_session(metastore_dir=...)``) admits one process at
a time. A Derby *network server* on a loopback port lets a writer job and any number of
SQL readers in other processes use the same catalog concurrently::

    jars = fetch_derby_jars()
    url = start_server(".cache/metastore", port=1527, jars_dir=jars)
    spark = spark_session(metastore_url=url)  # in every process
    ...
    stop_server(port=1527, jars_dir=jars, data_dir=".cache/metastore")

The jars come from Maven Central through the Ivy jar that pyspark ships, without a Spark
session; Java 17 must be on ``PATH``.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from lakesink.errors import ConfigurationError
from lakesink.jvm import cache_dir, fetch_jars, java, listening, read_pid, start_daemon, wait_gone

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DERBY_VERSION",
    "client_jar",
    "default_jars_dir",
    "fetch_derby_jars",
    "jdbc_url",
    "metastore_confs",
    "server_running",
    "start_server",
    "stop_server",
]

log = logging.getLogger(__name__)

DERBY_VERSION = "10.16.1.1"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 1527
DATABASE = "metastore_db"  # inside the server's data folder
SERVER_JARS = ("derby", "derbyshared", "derbytools", "derbynet")
CLIENT_JAR = "derbyclient"
LOG_FILE = "derby-server.log"
PID_FILE = "derby-server.pid"
SERVER_CLASS = "org.apache.derby.drda.NetworkServerControl"
CLIENT_DRIVER = "org.apache.derby.client.ClientAutoloadedDriver"


def default_jars_dir(ivy_dir: str | None = None) -> Path:
    """Where the Derby jars go: ``derby`` beside the Ivy cache (``ivy_dir`` or
    ``$LAKESINK_IVY_DIR``), else ``~/.cache/lakesink/derby``."""
    return cache_dir("derby", ivy_dir)


def _jar(folder: Path, name: str) -> Path:
    return folder / f"{name}-{DERBY_VERSION}.jar"


def fetch_derby_jars(folder: str | Path | None = None) -> Path:
    """Download the Derby network-server and client jars into ``folder``; return it.

    Does nothing when they are already there. Default folder: ``default_jars_dir()``.
    """
    target = Path(folder) if folder else default_jars_dir()
    wanted = [_jar(target, name) for name in (*SERVER_JARS, CLIENT_JAR)]
    if all(jar.is_file() for jar in wanted):
        return target.resolve()
    coordinates = [
        f"org.apache.derby:{name}:{DERBY_VERSION}" for name in ("derbynet", "derbyclient")
    ]
    return fetch_jars(coordinates, target, what=f"Derby {DERBY_VERSION}")


def client_jar(folder: str | Path | None = None) -> Path:
    """The Derby client jar a Spark driver needs, fetched into ``folder`` if missing."""
    return _jar(fetch_derby_jars(folder), CLIENT_JAR)


def jdbc_url(host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> str:
    """The JDBC URL of the metastore database of the server on ``host:port``."""
    return f"jdbc:derby://{host}:{port}/{DATABASE};create=true"


def metastore_confs(url_or_host_port: str, client_jar: str | Path) -> dict[str, str]:
    """The Spark settings that keep the catalog in the Derby network server's metastore.

    Args:
        url_or_host_port: A ``jdbc:derby://...`` URL or ``host:port`` of a server that
            ``start_server`` started.
        client_jar: The Derby client jar (``client_jar()``); it goes on the driver's
            class path, so it must exist before the driver JVM starts.
    """
    url = url_or_host_port.strip()
    if not url.startswith("jdbc:derby://"):
        if url.startswith("jdbc:"):
            raise ConfigurationError(
                f"metastore URL {url!r} is not a Derby network-server URL (jdbc:derby://...); "
                "for another database (e.g. PostgreSQL) pass its javax.jdo settings via conf="
            )
        host, _, port = url.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigurationError(
                f"metastore URL {url!r} is neither jdbc:derby://host:port/db nor host:port; "
                f"`lakesink metastore start` prints the URL to use"
            )
        url = jdbc_url(host, int(port))
    return {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": url,
        "spark.hadoop.javax.jdo.option.ConnectionDriverName": CLIENT_DRIVER,
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
        "spark.driver.extraClassPath": str(Path(client_jar).resolve()),
    }


def server_running(
    *, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, jars_dir: str | Path | None = None
) -> bool:
    """Whether a Derby network server answers a ping on ``host:port``."""
    return _control(fetch_derby_jars(jars_dir), "ping", host, port).returncode == 0


def start_server(
    data_dir: str | Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    jars_dir: str | Path | None = None,
    timeout: float = 60.0,
) -> str:
    """Start a Derby network server in the background; return the JDBC URL to use.

    The metastore database, the server's log and its pid file live in ``data_dir``.
    Returns once the server answers a ping; if a server already answers on the port,
    it is left as it is.

    Raises:
        ConfigurationError: Java is missing, or the server did not come up in ``timeout``
            seconds (the message names its log file).
    """
    jars = fetch_derby_jars(jars_dir)
    url = jdbc_url(host, port)
    if listening(host, port):
        if _control(jars, "ping", host, port).returncode == 0:
            log.info("a Derby network server already answers on %s:%s", host, port)
            return url
        raise ConfigurationError(
            f"port {port} on {host} is taken by a program that is not a Derby network server; "
            "choose another port (--port), and pass the URL it prints to the readers"
        )
    data = Path(data_dir).resolve()
    command = [
        java(), f"-Dderby.system.home={data}", "-cp", _classpath(jars),
        SERVER_CLASS, "start", "-h", host, "-p", str(port),
    ]  # fmt: skip
    start_daemon(
        command,
        folder=data,
        log_name=LOG_FILE,
        pid_name=PID_FILE,
        ready=lambda: listening(host, port) and _control(jars, "ping", host, port).returncode == 0,
        timeout=timeout,
        what=f"the Derby network server on {host}:{port}",
    )
    return url


def stop_server(
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    jars_dir: str | Path | None = None,
    data_dir: str | Path | None = None,
    timeout: float = 30.0,
) -> bool:
    """Shut the Derby network server on ``host:port`` down; return whether one was running.

    With ``data_dir``, also waits for the process in its pid file to end.
    """
    jars = fetch_derby_jars(jars_dir)
    pid_file = Path(data_dir).resolve() / PID_FILE if data_dir else None
    pid = read_pid(pid_file)
    result = _control(jars, "shutdown", host, port)
    if result.returncode != 0:
        log.info("no Derby network server answers on %s:%s", host, port)
        if pid_file:
            pid_file.unlink(missing_ok=True)
        return False
    if pid is not None and not wait_gone(pid, timeout):
        raise ConfigurationError(
            f"the Derby network server (pid {pid}) is still running {timeout:.0f}s after "
            f"shutdown; end it with `kill {pid}`"
        )
    if pid_file:
        pid_file.unlink(missing_ok=True)
    log.info("Derby network server on %s:%s stopped", host, port)
    return True


def _classpath(jars: Path) -> str:
    return os.pathsep.join(str(_jar(jars, name)) for name in SERVER_JARS)


def _control(jars: Path, action: str, host: str, port: int) -> subprocess.CompletedProcess[str]:
    command = [java(), "-cp", _classpath(jars), SERVER_CLASS, action, "-h", host, "-p", str(port)]
    try:
        # Bounded: a ping to a port some other program holds may get no answer at all.
        return subprocess.run(command, capture_output=True, text=True, timeout=10)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, 1, "", f"{action} timed out")
