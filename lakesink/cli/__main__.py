"""The ``lakesink`` command: ``python -m lakesink.cli``, or this file run as a script
(``spark-submit "$(lakesink app)" ingest ...``)."""

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, where a module of the CLI
# could shadow a standard one; lakesink is imported as installed instead.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

from lakesink.cli import entry

entry()
