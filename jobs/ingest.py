"""Runnable ingest job (see ``lakesink ingest --help``): python or spark-submit."""

import sys

from lakesink.ingest import main

if __name__ == "__main__":
    sys.exit(main())
