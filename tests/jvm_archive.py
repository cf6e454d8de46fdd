"""A class-data archive of the Spark driver JVM (Java's AppCDS), made once for a test run.

The tests start a few hundred Spark driver JVMs (jobs, commands, servers, crash-point
runs). Each loaded and verified the same ten thousand classes of Spark, Scala and Delta
before doing anything. Dumped once from a short job that writes and commits a sink table,
the archive lets every later JVM with the same class path map those classes instead.

A JVM's class path must begin as the archive's. A local session puts Delta's jars first on
it, then, with the test S3 server's ``AWS_*`` variables set (the session fixture starts
it), hadoop-aws: the archive is dumped with those variables set too, pointing nowhere (the
job writes to local disk), and so holds Delta's classes as well as Spark's. A JVM whose
class path begins otherwise (a process started before the S3 server, a session with the
shared metastore's Derby client first, the Kafka broker) finds the archive does not fit
and starts as it would without it; ``-Xshare:auto``, the default, never fails a start for
it.

``python tests/jvm_archive.py`` makes (or finds) the archive and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

__all__ = ["archive_path", "java_options", "make_archive"]

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / ".cache" / "jvm"
# The class path follows the variables' presence, not their values; nothing is sent there.
UNUSED_S3 = {
    "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
    "AWS_ACCESS_KEY_ID": "unused",
    "AWS_SECRET_ACCESS_KEY": "unused",
    "AWS_REGION": "us-east-1",
}

# A sink's first open, a checkpoint written, committed both ways, and read: the classes of
# what the tests' jobs and commands do. The driver JVM dumps the archive as it exits, which
# it does once the gateway's stdin (a pipe from this process) closes.
WORKLOAD = """
import sys, tempfile
from pyspark import SparkContext
from lakesink import spark_session, committed
from lakesink.delta.sink import DeltaSink
spark = spark_session(master="local[1]", conf={"spark.ui.enabled": "false"})
folder = tempfile.mkdtemp()
for mode in ("merge", "metadata"):
    sink = DeltaSink.open(spark, f"{folder}/{mode}", schema="id BIGINT, s STRING", commit=mode)
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], "id BIGINT, s STRING"))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    assert committed(spark, f"{folder}/{mode}").count() == 2
gateway = SparkContext._gateway.proc
spark.stop()
gateway.stdin.close()
sys.exit(gateway.wait())
"""


def archive_path() -> Path:
    """Where the archive of this Java, this Spark and this environment's jars goes."""
    plain = {k: v for k, v in os.environ.items() if k != "JAVA_TOOL_OPTIONS"}
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, env=plain).stderr
    # The folder of the Ivy cache is that of hadoop-aws and Delta's jars, on the class path.
    ivy = os.environ.get("LAKESINK_IVY_DIR", "")
    layout = "s3, delta on the class path"
    key = "\n".join([java, sys.prefix, version("pyspark"), version("delta-spark"), ivy, layout])
    return FOLDER / f"spark-driver-{hashlib.sha256(key.encode()).hexdigest()[:16]}.jsa"


def make_archive() -> Path | None:
    """The archive, dumped now if this environment has none; None if Java could not."""
    archive = archive_path()
    if archive.exists():
        return archive
    FOLDER.mkdir(parents=True, exist_ok=True)
    draft = Path(tempfile.mkdtemp(dir=FOLDER)) / archive.name
    options = os.environ.get("JAVA_TOOL_OPTIONS", "")
    env = {
        **os.environ,
        **UNUSED_S3,
        "JAVA_TOOL_OPTIONS": f"{options} -XX:ArchiveClassesAtExit={draft}",
    }
    done = subprocess.run(
        [sys.executable, "-c", WORKLOAD], env=env, capture_output=True, text=True, timeout=900
    )
    if done.returncode != 0 or not draft.exists():
        print(f"no JVM class archive (exit {done.returncode}):\n{done.stderr[-2000:]}")
        return None
    draft.replace(archive)  # whole or not at all: parallel runs may race to make it
    draft.parent.rmdir()
    return archive


# Spark reads ``spark.*`` system properties into every session's conf. Interpreted
# expressions instead of Java generated and compiled for each new plan: the tests' tables are
# tiny, and the compiling cost more than it saved. tests/test_cut.py in one process on an
# idle machine: 323 CPU-s with code generation, 267 without; a job's JVM that opens a sink
# and commits two checkpoints by MERGE: 28.6 against 24.9 CPU-s (means of 3).
NO_CODEGEN = [
    "-Dspark.sql.codegen.wholeStage=false",
    "-Dspark.sql.codegen.factoryMode=NO_CODEGEN",
]


def java_options() -> str:
    """The options of the tests' JVMs: the archive, if made, quiet when a JVM's class path
    does not fit it; the serial collector, whose one thread costs less CPU on 2 cores than
    G1's in JVMs that live seconds to minutes; no C2 compiler (``tests/conftest.py``); no
    generated code in Spark's SQL (``NO_CODEGEN``)."""
    options = ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", *NO_CODEGEN]
    try:
        archive = archive_path()
    except (PackageNotFoundError, OSError):  # no pyspark or no Java: the core's tests only
        return " ".join(options)
    if archive.exists():
        options += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    return " ".join(options)


if __name__ == "__main__":
    print(make_archive())
