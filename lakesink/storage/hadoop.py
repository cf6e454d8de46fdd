"""Files reached through the Hadoop file system of a Spark session's JVM.

Where lakesink must see a location as Spark does (a streaming query's checkpoint
location, which Spark reads through Hadoop), or make Spark's Hadoop forget what it
created (S3A deletes a folder it made, which ``lakesink.storage.files`` cannot).
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

__all__ = ["delete_tree", "file_size", "folder_listing"]


def delete_tree(spark: SparkSession, path: str) -> None:
    """Delete the file or folder (with all it holds) at ``path``; nothing if it is absent."""
    location, fs = _file_system(spark, path)
    fs.delete(location, True)


def file_size(spark: SparkSession, path: str) -> int:
    """The size in bytes of the file at ``path``.

    Raises:
        Exception: Whatever the JVM raised (a missing file, a refusal), through Py4J.
    """
    location, fs = _file_system(spark, path)
    return int(fs.getFileStatus(location).getLen())


def folder_listing(spark: SparkSession, folder: str) -> list[str]:
    """The names in ``folder`` ([] if it does not exist)."""
    location, fs = _file_system(spark, folder)
    if not fs.exists(location):
        return []
    return [status.getPath().getName() for status in fs.listStatus(location)]


def _file_system(spark: SparkSession, path: str) -> tuple[Any, Any]:
    jvm = spark._jvm  # None only before a session starts its JVM
    location = jvm.org.apache.hadoop.fs.Path(path)  # type: ignore[union-attr]
    return location, location.getFileSystem(spark._jsc.hadoopConfiguration())
