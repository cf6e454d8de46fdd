"""lakesink's Delta log store for S3, built from its Java source on first use.

``io.lakesink.storage.S3ConditionalLogStore`` (``java/`` beside this file) commits
``_delta_log/N.json`` with S3's conditional create (``If-None-Match: *``, through S3A's
``createFile(...).must("fs.option.create.conditional.overwrite", true)``, Hadoop 3.4.2+): of
two writers of version N, on any host, one wins and the other gets
``FileAlreadyExistsException``, which Delta retries on. Delta's default for S3
(``S3SingleDriverLogStore``) checks and then PUTs under a lock of one JVM, and a second
driver can silently replace its commit.

``logstore_jar()`` compiles the source with ``javac --release 17`` against pyspark's jars
and Delta's ``delta-storage`` jar into a small jar in a cache folder, again only when the
source changes. ``StorageOptions.spark_jars()`` hands it to Spark and
``StorageOptions.spark_conf()`` names the class for ``s3a://`` and ``s3://``.
"""

from __future__ import annotations

import logging
import os
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from lakesink.errors import ConfigurationError
from lakesink.jvm import (
    JAVA_RELEASE,
    build_jar,
    delta_jars,
    fetch_jars,
    pyspark_jars,
    source_digest,
)
from lakesink.jvm import cache_dir as jvm_cache_dir

__all__ = [
    "JAVA_RELEASE",
    "JAVA_SOURCES",
    "LOGSTORE_CLASS",
    "hadoop_version",
    "logstore_jar",
    "s3a_jars",
    "source_hash",
]

log = logging.getLogger(__name__)

JAVA_SOURCES = Path(__file__).resolve().parent / "java"
JAR_PREFIX = "lakesink-logstore-"
# The class lakesink's log store jar holds (lakesink/storage/java/).
LOGSTORE_CLASS = "io.lakesink.storage.S3ConditionalLogStore"
_HADOOP_API_JAR = re.compile(r"^hadoop-client-api-(\d+\.\d+\.\d+)\.jar$")


def hadoop_version() -> str:
    """The Hadoop version of the installed pyspark, from its ``hadoop-client-api`` jar.

    Raises:
        ConfigurationError: pyspark is missing or ships no such jar.
    """
    try:
        import pyspark
    except ImportError as exc:
        raise ConfigurationError(
            "pyspark is not installed; install lakesink's dependencies"
        ) from exc
    # Under spark-submit, pyspark is imported from a zip inside the installation: its jars
    # are then in $SPARK_HOME.
    home = os.environ.get("SPARK_HOME")
    jars = Path(home) / "jars" if home else Path(pyspark.__file__).parent / "jars"
    found = sorted(
        match.group(1)
        for match in (_HADOOP_API_JAR.match(jar.name) for jar in jars.glob("hadoop-client-api-*"))
        if match
    )
    if not found:
        raise ConfigurationError(
            f"no hadoop-client-api-<version>.jar in {jars}: cannot tell which hadoop-aws fits "
            "this pyspark; reinstall pyspark"
        )
    return found[-1]


def source_hash() -> str:
    """A digest of the Java source, the target release and the Delta version it builds for."""
    return source_digest(JAVA_SOURCES, f"delta {_delta_version()}")


def logstore_jar(cache_dir: str | Path | None = None) -> Path:
    """The jar of lakesink's S3 log store, built if its source changed since the last build.

    Args:
        cache_dir: Where the jar is kept. Default: ``logstore`` beside ``$LAKESINK_IVY_DIR``, else
            ``~/.cache/lakesink/logstore``.

    Raises:
        ConfigurationError: No ``javac`` (a JDK 17 or later), or the build failed.
    """
    folder = Path(cache_dir) if cache_dir else jvm_cache_dir("logstore")
    jar = folder / f"{JAR_PREFIX}{source_hash()}.jar"
    if jar.is_file():
        return jar
    class_path = [pyspark_jars() / "*", _delta_storage_jar()]
    return build_jar(jar, JAVA_SOURCES, class_path, what="lakesink's S3 log store")


def s3a_jars(cache_dir: str | Path | None = None) -> list[Path]:
    """Hadoop's S3A connector (``hadoop-aws`` of pyspark's Hadoop) and the jars it needs (the
    AWS SDK bundle), fetched from Maven Central once into a cache folder.

    They join a local session's class path and are read in place. Given to Spark as
    packages instead, pyspark copies every one into each session's temporary folder on
    every start (the SDK bundle alone is 640 MB: 11 s per start here, and a killed process
    leaves the copy behind).

    Args:
        cache_dir: The folder beside which they are kept (default: the log store's).

    Raises:
        ConfigurationError: Maven Central could not be reached or lacks a jar.
    """
    folder = Path(cache_dir) if cache_dir else jvm_cache_dir("logstore")
    coordinate = f"org.apache.hadoop:hadoop-aws:{hadoop_version()}"
    target = fetch_jars(
        [coordinate], folder.parent / f"hadoop-aws-{hadoop_version()}", what=coordinate
    )
    jars = sorted(target.glob("*.jar"))
    if not any(jar.name.startswith("hadoop-aws-") for jar in jars):
        raise ConfigurationError(f"{coordinate} fetched into {target}, but its jar is not there")
    return jars


def _delta_version() -> str:
    try:
        return version("delta-spark")
    except PackageNotFoundError as exc:
        raise ConfigurationError(
            "delta-spark is not installed: pip install 'lakesink[spark]'"
        ) from exc


def _delta_storage_jar() -> Path:
    """Delta's ``delta-storage`` jar (the LogStore API), among the jars a local session reads."""
    found = [jar for jar in delta_jars() if jar.name.startswith("delta-storage-")]
    if not found:
        raise ConfigurationError(f"no delta-storage jar among Delta's jars: {delta_jars()}")
    return found[0]
