"""Spark's own console output, kept out of a command's way unless ``--verbose``.

The driver JVM prints its start-up warnings, log lines and, when it fetches packages,
Ivy's dependency report to the terminal, before and between the few lines a command
means to say. A command that starts Spark sends them to a file instead; after a failure
the command names that file (it holds the JVM's side of the story, and the failure's
full trace), after success it deletes it.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

__all__ = ["add_spark_options", "jvm_output", "settle"]

# The files the commands of this process opened, settled when each run ends.
_files: list[Path] = []


def add_spark_options(parser: argparse.ArgumentParser, *, remote: bool = True) -> None:
    """The options of every command that starts Spark: where it runs (``remote``: a Spark
    Connect server too), and what it shows."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--master", help="Spark master URL (default local[*])")
    if remote:
        where.add_argument(
            "--remote",
            metavar="URL",
            help="a Spark Connect server to run on (sc://host:port) instead of a Spark of "
            "this process: no JVM starts here (needs pip install 'lakesink[connect]')",
        )
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="show Spark's own output (start-up warnings, its log lines, Ivy's report of "
        "packages it fetches) and a failure's full trace here; without them, they go to a "
        "file that a failed run names",
    )


def jvm_output(args: argparse.Namespace) -> Path | None:
    """Where the driver JVM of this command prints: None (this terminal) with --verbose."""
    if args.verbose:
        return None
    handle, name = tempfile.mkstemp(prefix="lakesink-spark-", suffix=".log")
    os.close(handle)
    _files.append(Path(name))
    return Path(name)


def settle(status: int) -> Path | None:
    """Delete the output of a run that succeeded; keep that of one that did not, and
    return it (None when nothing was kept).

    ``run_command`` calls it once the run has its status, and names the file it returns.
    """
    kept = None
    for path in _files:
        if status == 0 or not path.exists() or path.stat().st_size == 0:
            path.unlink(missing_ok=True)
        else:
            kept = path
    _files.clear()
    return kept
