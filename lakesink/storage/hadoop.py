"""Files reached through the Hadoop file system of a Spark session's JVM.

Where lakesink must see a location as Spark does (a streaming query's checkpoint
location, which Spark reads through Hadoop), or make Spark's Hadoop forget what it
created (S3A deletes a folder it made, which ``lakesink.storage.files`` cannot). A Spark
Connect client has no JVM of its own: it reaches the same locations through
``lakesink.storage.files`` (the server's Hadoop keeps no folder of its own there to forget).
"""

from __future__ import annotations

import contextlib
from typing import Any

from pyspark.sql import SparkSession

from lakesink.jvm import session_jvm
from lakesink.storage.files import entry_names, remove_file, remove_folder, size_of

__all__ = ["delete_tree", "file_size", "folder_listing"]


def delete_tree(spark: SparkSession, path: str) -> None:
    """Delete the file or folder (with all it holds) at ``path``; nothing if it is absent."""
    found = _file_system(spark, path)
    if found is None:
        remove_folder(path)  # a folder and all it holds, or nothing
        with contextlib.suppress(FileNotFoundError):
            remove_file(path)
        return
    location, fs = found
    fs.delete(location, True)


def file_size(spark: SparkSession, path: str) -> int:
    """The size in bytes of the file at ``path``.

    Raises:
        Exception: Whatever the JVM raised (a missing file, a refusal), through Py4J.
    """
    found = _file_system(spark, path)
    if found is None:
        return size_of(path)
    location, fs = found
    return int(fs.getFileStatus(location).getLen())


def folder_listing(spark: SparkSession, folder: str) -> list[str]:
    """The names in ``folder`` ([] if it does not exist)."""
    found = _file_system(spark, folder)
    if found is None:
        return entry_names(folder)
    location, fs = found
    if not fs.exists(location):
        return []
    return [status.getPath().getName() for status in fs.listStatus(location)]


def _file_system(spark: SparkSession, path: str) -> tuple[Any, Any] | None:
    """The Hadoop path and file system of ``path``; None without a JVM here (Connect)."""
    jvm = session_jvm(spark)
    if jvm is None:
        return None
    location = jvm.org.apache.hadoop.fs.Path(path)
    return location, location.getFileSystem(spark._jsc.hadoopConfiguration())
