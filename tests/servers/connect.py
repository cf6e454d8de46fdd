"""A Spark Connect server with Delta, as a Connect client's users run one.

Started with ``spark-submit --class org.apache.spark.sql.connect.service.SparkConnectServer``
from pyspark's own distribution (its wheel carries the Connect server's jar), Delta's jars
from lakesink's cache on its class path and Delta's session extension and catalog set: no
Delta Connect plug-in (lakesink writes with SQL and the DataFrame API, and commits and
reads its journal with delta-rs on the client). Its Python workers (a ``foreachBatch``'s)
run this environment's Python.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

import pyspark

from lakesink.jvm import delta_jars, listening, start_daemon, stop_daemon
from lakesink.storage.options import StorageOptions

__all__ = ["ConnectServer", "start_connect_server", "stop_connect_server"]

PID_FILE = "connect.pid"


@dataclass(frozen=True)
class ConnectServer:
    port: int
    folder: Path  # its log (connect.log) and pid file

    @property
    def url(self) -> str:
        """What ``SparkSession.builder.remote`` takes."""
        return f"sc://127.0.0.1:{self.port}"

    def kill(self) -> None:
        """SIGKILL the server and its Python workers (its process group)."""
        os.killpg(int((self.folder / PID_FILE).read_text()), signal.SIGKILL)


def start_connect_server(
    folder: Path, *, port: int, ivy_dir: str | None, storage: StorageOptions | None = None
) -> ConnectServer:
    """Start the server in the background (its log and pid in ``folder``); return once it
    listens. With ``storage``, it also reads and writes ``s3a://`` tables on that store."""
    home = Path(pyspark.__file__).parent
    connect_jar = next((home / "jars").glob("spark-connect_*.jar"))
    jars = [*delta_jars(ivy_dir), connect_jar]
    settings = {
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.databricks.delta.snapshotPartitions": "2",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    if storage is not None:
        # hadoop-aws and the AWS SDK read in place from the class path; the log store jar
        # needs Delta's classes, so it goes with them in --jars.
        settings |= storage.spark_conf()
        settings["spark.driver.extraClassPath"] = ":".join(storage.spark_class_path())
        jars += storage.spark_jars()
    command = [
        str(home / "bin" / "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--master",
        "local[2]",
        "--jars",
        ",".join(str(j) for j in jars),
        *[part for key, value in settings.items() for part in ("--conf", f"{key}={value}")],
    ]
    start_daemon(
        command,
        folder=folder,
        log_name="connect.log",
        pid_name=PID_FILE,
        ready=lambda: listening("127.0.0.1", port),
        timeout=180,
        what="the Spark Connect server",
        # A foreachBatch function's worker runs $PYSPARK_PYTHON (python3 without it), not
        # spark.pyspark.python: it needs lakesink and the Connect client's packages.
        env={"PYSPARK_PYTHON": sys.executable},
    )
    return ConnectServer(port, folder)


def stop_connect_server(folder: Path) -> None:
    stop_daemon(folder / PID_FILE, timeout=30, what="the Spark Connect server")
