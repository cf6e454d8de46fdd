"""Runnable ingest job (see ``lakesink ingest --help``): python or spark-submit."""

import sys

from lakesink.cli import main
from lakesink.cli.exits import exit_process

if __name__ == "__main__":
    exit_process(main(["ingest", *sys.argv[1:]]))
