"""Test tooling, not used by lakesink itself: in-memory parts for the engine-free core
(``memory``) and a local Spark standalone cluster (``cluster``); the fault injection of the
crash tests is the repository's ``tests/faults.py``."""
