"""What the driver JVM logs while a block runs: a log4j appender on its root logger."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pyspark.sql import SparkSession


@dataclass
class JvmLog:
    """The lines logged inside the block, read once it ends."""

    text: str = ""


@contextmanager
def jvm_log(spark: SparkSession, *, name: str = "lakesink-test") -> Iterator[JvmLog]:
    """Capture the driver's log at INFO (executors run in it on a local master); the root
    logger's level and appenders are put back after."""
    jvm = spark.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    context = log4j.LogManager.getContext(False)
    root = context.getConfiguration().getRootLogger()
    writer = jvm.java.io.StringWriter()
    appender = log4j.core.appender.WriterAppender.createAppender(
        None, None, writer, name, False, True
    )
    appender.start()
    level = root.getLevel()
    root.addAppender(appender, log4j.Level.INFO, None)
    root.setLevel(log4j.Level.INFO)
    context.updateLoggers()
    captured = JvmLog()
    try:
        yield captured
    finally:
        root.removeAppender(name)
        root.setLevel(level)
        context.updateLoggers()
        appender.stop()
        captured.text = writer.toString()
