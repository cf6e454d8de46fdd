"""Runnable vacuum job (see ``lakesink vacuum --help``): python or spark-submit."""

import sys

from lakesink.cli.vacuum import main

if __name__ == "__main__":
    sys.exit(main())
