"""The benchmark suite: ``python -m benchmarks.run`` (``make bench``); see ``run.py``."""

import sys
from pathlib import Path

# The object-store section runs the tests' S3 server (``tests/servers/s3.py``, imported as
# ``servers.s3``, as pytest and the crash-point harness import it): test tooling, which the
# installed package leaves out.
_TESTS = str(Path(__file__).resolve().parent.parent / "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
