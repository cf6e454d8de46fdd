"""lakesink: exactly-once, two-phase-commit writes from PySpark into Delta Lake tables."""

from lakesink.errors import (
    CheckpointOrderError,
    CommitError,
    ConfigurationError,
    LakesinkError,
    ProtocolError,
    ReservedColumnError,
    SchemaMismatchError,
    TableNotFoundError,
    UnknownCheckpointError,
    ValidationSuiteError,
)
from lakesink.protocol import SinkState, TransactionHolder, TwoPhaseCommitSink

__version__ = "0.1.0"

__all__ = [
    "CheckpointOrderError",
    "CommitError",
    "ConfigurationError",
    "DeltaSink",
    "Journal",
    "LakesinkError",
    "ProtocolError",
    "ReservedColumnError",
    "SchemaMismatchError",
    "SinkState",
    "TableNotFoundError",
    "TransactionHolder",
    "TwoPhaseCommitSink",
    "UnknownCheckpointError",
    "ValidationGate",
    "ValidationSuiteError",
    "committed",
    "spark_session",
]


# Spark-bound names are imported lazily so that the protocol core never pulls in pyspark.
_LAZY = {
    "spark_session": "lakesink.session",
    "committed": "lakesink.readers",
    "DeltaSink": "lakesink.delta_sink",
    "Journal": "lakesink.journal",
    "vacuum": "lakesink.vacuum",
    "ValidationGate": "lakesink.validation",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lakesink' has no attribute {name!r}")
