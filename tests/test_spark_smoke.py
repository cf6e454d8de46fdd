"""The session lakesink builds: the Delta jar it names is the one Spark loads, from a class
path that replaces none of Spark's own classes; its JVM runs apart from this process's
signals; and a session without Delta is refused."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from lakesink.jvm import delta_jars, pyspark_jars
from lakesink.spark.session import delta_maven_coordinate, spark_session


def test_the_driver_jvm_runs_in_a_session_of_its_own(spark):
    # So a signal sent to this process's group reaches Python alone (lakesink.cli.signals).
    jvm = int(spark._jvm.java.lang.ProcessHandle.current().pid())
    assert jvm != os.getpid()
    assert os.getpgid(jvm) != os.getpgid(0) and os.getsid(jvm) != os.getsid(0)


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


def test_the_maven_coordinate_is_the_delta_jar_spark_loaded(spark):
    _, artifact, release = delta_maven_coordinate().split(":")
    extension = spark._jvm.java.lang.Class.forName("io.delta.sql.DeltaSparkSessionExtension")
    loaded = str(extension.getProtectionDomain().getCodeSource().getLocation().getPath())
    assert loaded.endswith(f"/{artifact}-{release}.jar"), loaded


def _classes(jar: Path) -> set[str]:
    with zipfile.ZipFile(jar) as archive:
        return {
            name
            for name in archive.namelist()
            if name.endswith(".class")
            and not name.startswith("META-INF/")
            and name != "module-info.class"
        }


def test_the_local_class_path_adds_delta_and_replaces_none_of_sparks_classes(spark):
    jars = delta_jars()
    class_path = spark.sparkContext.getConf().get("spark.driver.extraClassPath").split(os.pathsep)
    assert {str(jar) for jar in jars} <= set(class_path)
    names = [jar.name for jar in jars]
    assert any(n.startswith("delta-spark_") for n in names), names
    assert any(n.startswith("delta-storage-") for n in names), names
    shipped = set().union(*(_classes(jar) for jar in pyspark_jars().glob("*.jar")))
    # Delta's own dependencies include older Jackson, Hadoop and Parquet jars; first on
    # the class path, any of them would replace Spark's.
    replacing = {jar.name: len(_classes(jar) & shipped) for jar in jars}
    assert not any(replacing.values()), replacing
