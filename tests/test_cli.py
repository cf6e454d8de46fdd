"""The command line, run as a user runs it: the installed ``lakesink`` script."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

# The console script pip installed next to this interpreter, as a user would call it.
SCRIPT = Path(sys.executable).parent / "lakesink"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"the lakesink console script is not installed at {SCRIPT}"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_help_lists_the_commands():
    result = run("--help")
    assert result.returncode == 0
    assert "jars" in result.stdout


def test_jars_prints_the_delta_coordinate_for_spark_submit():
    result = run("jars")
    assert result.returncode == 0
    assert result.stdout.strip() == f"io.delta:delta-spark_4.1_2.13:{version('delta-spark')}"


def test_no_command_prints_help_and_fails():
    result = run()
    assert result.returncode == 2
    assert "usage: lakesink" in result.stdout
