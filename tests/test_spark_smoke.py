"""Spark with Delta works on this machine: the jars resolve and a table round-trips."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from lakesink.spark.session import delta_maven_coordinate, spark_session


def test_delta_table_round_trips(spark, tmp_path):
    path = str(tmp_path / "orders")
    rows = [(1, "apple", 2.5), (2, "pear", 1.0), (3, "plum", 0.25)]
    spark.createDataFrame(rows, "id INT, item STRING, price DOUBLE").write.format("delta").save(
        path
    )
    spark.createDataFrame([(4, "fig", 3.0)], "id INT, item STRING, price DOUBLE").write.format(
        "delta"
    ).mode("append").save(path)

    back = spark.read.format("delta").load(path)

    assert sorted(tuple(r) for r in back.collect()) == [*rows, (4, "fig", 3.0)]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").select("version").collect()
    assert sorted(r.version for r in history) == [0, 1]
    first = spark.read.format("delta").option("versionAsOf", 0).load(path)
    assert first.count() == 3


def test_existing_session_is_returned_when_it_has_delta(spark):
    assert spark_session(existing=spark) is spark


@pytest.mark.slow
def test_existing_session_without_delta_is_refused():
    # Delta's settings are static per JVM, so a session without them needs its own process.
    script = textwrap.dedent(
        """
        from pyspark.sql import SparkSession
        from lakesink.errors import ConfigurationError
        from lakesink.spark.session import spark_session
        plain = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
        try:
            spark_session(existing=plain.getOrCreate())
        except ConfigurationError as error:
            print("REFUSED:", error)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert "REFUSED: the Spark session is not set up for Delta Lake" in result.stdout, (
        result.stderr[-2000:]
    )
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in result.stdout


def test_maven_coordinate_matches_installed_versions():
    from importlib.metadata import version

    coordinate = delta_maven_coordinate()
    assert coordinate.startswith("io.delta:delta-spark_4.1_2.13:")
    assert coordinate.endswith(version("delta-spark"))
