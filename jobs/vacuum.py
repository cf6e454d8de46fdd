"""Runnable vacuum job (see ``lakesink vacuum --help``): python or spark-submit."""

import sys

from lakesink.cli import main
from lakesink.cli.exits import exit_process

if __name__ == "__main__":
    exit_process(main(["vacuum", *sys.argv[1:]]))
