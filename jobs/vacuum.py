"""Runnable vacuum job (see ``lakesink vacuum --help``): python or spark-submit."""

from lakesink.cli.exits import exit_process
from lakesink.cli.vacuum import main

if __name__ == "__main__":
    exit_process(main())
