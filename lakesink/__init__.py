"""lakesink: exactly-once, two-phase-commit writes from PySpark into Delta Lake tables.

``lakesink.core`` is the engine-free protocol and coordinator; ``lakesink.delta`` its Spark
and Delta implementation; ``lakesink.sources`` the inputs a job reads; ``lakesink.ops``
what operators run (vacuum, status, audit, commit or abort by hand); ``lakesink.cli`` the
``lakesink`` command; ``lakesink.testing`` test tooling.
"""

from lakesink.core import (
    CheckpointCoordinator,
    SinkState,
    TransactionHolder,
    TransactionTimeout,
    TwoPhaseCommitSink,
    TxnState,
)
from lakesink.errors import (
    AlreadyRunningError,
    CheckpointOrderError,
    CommitError,
    CommitFailedError,
    CommitStateUnknownError,
    ConfigurationError,
    FormatVersionError,
    LakesinkError,
    ProtocolError,
    ReservedColumnError,
    SchemaMismatchError,
    TableNotFoundError,
    UnknownCheckpointError,
    ValidationSuiteError,
)

__version__ = "0.2.0"

__all__ = [
    "AlreadyRunningError",
    "CheckpointCoordinator",
    "CheckpointOrderError",
    "CommitError",
    "CommitFailedError",
    "CommitStateUnknownError",
    "ConfigurationError",
    "DeltaSink",
    "FormatVersionError",
    "Journal",
    "LakesinkError",
    "ProtocolError",
    "ReservedColumnError",
    "SchemaMismatchError",
    "SinkOptions",
    "SinkState",
    "TableNotFoundError",
    "TransactionHolder",
    "TransactionTimeout",
    "TwoPhaseCommitSink",
    "TxnState",
    "UnknownCheckpointError",
    "ValidationGate",
    "ValidationSuiteError",
    "committed",
    "spark_session",
    "vacuum",
]


# Spark-bound names are imported lazily so that the core never pulls in pyspark.
_LAZY = {
    "spark_session": "lakesink.delta.session",
    "committed": "lakesink.delta.readers",
    "DeltaSink": "lakesink.delta.sink",
    "SinkOptions": "lakesink.delta.sink",
    "Journal": "lakesink.delta.journal",
    "vacuum": "lakesink.ops.vacuum",
    "ValidationGate": "lakesink.delta.validation",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lakesink' has no attribute {name!r}")
