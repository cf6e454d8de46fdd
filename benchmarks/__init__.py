"""The benchmark suite: ``python -m benchmarks.run`` (``make bench``); see ``run.py``."""
