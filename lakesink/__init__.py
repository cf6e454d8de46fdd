"""lakesink: exactly-once, two-phase-commit writes from PySpark into Delta Lake tables.

What a user needs is importable from here: ``Table`` (a lakesink table: its checkpoints,
rows as of a checkpoint, operator actions), ``DeltaSink`` and ``StreamingSink`` (writing),
``spark_session``, the readers ``committed`` (Spark) and ``arrow`` (no JVM), the options
and every exception. ``lakesink.core`` is the engine-free protocol for implementers of a
new sink or driver.
"""

from typing import TYPE_CHECKING, Any

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
    AuditFailedError,
    CheckpointOrderError,
    CommitFailedError,
    CommitRoundError,
    CommitStateUnknownError,
    ConfigurationError,
    FormatVersionError,
    LakesinkError,
    LeaseLostError,
    MetricsExportError,
    ProtocolError,
    ReservedColumnError,
    SchemaMismatchError,
    StorageAccessError,
    TableNotFoundError,
    UnknownCheckpointError,
    ValidationSuiteError,
)

if TYPE_CHECKING:  # what the lazy names below are, for type checkers
    from lakesink.delta.sink import DeltaSink, SinkOptions
    from lakesink.readers.deltars import arrow
    from lakesink.readers.spark import committed
    from lakesink.spark.session import spark_session
    from lakesink.spark.settings import CommitRetry
    from lakesink.spark.validation import ValidationGate
    from lakesink.streaming import StreamingSink
    from lakesink.table import Checkpoint, Table

__version__ = "0.2.0"

__all__ = [
    "AlreadyRunningError",
    "AuditFailedError",
    "Checkpoint",
    "CheckpointCoordinator",
    "CheckpointOrderError",
    "CommitFailedError",
    "CommitRetry",
    "CommitRoundError",
    "CommitStateUnknownError",
    "ConfigurationError",
    "DeltaSink",
    "FormatVersionError",
    "LakesinkError",
    "LeaseLostError",
    "MetricsExportError",
    "ProtocolError",
    "ReservedColumnError",
    "SchemaMismatchError",
    "SinkOptions",
    "SinkState",
    "StorageAccessError",
    "StreamingSink",
    "Table",
    "TableNotFoundError",
    "TransactionHolder",
    "TransactionTimeout",
    "TwoPhaseCommitSink",
    "TxnState",
    "UnknownCheckpointError",
    "ValidationGate",
    "ValidationSuiteError",
    "arrow",
    "committed",
    "spark_session",
]


# Spark-bound names are imported when first used, so that the core never pulls in pyspark.
_LAZY = {
    "Checkpoint": "lakesink.table",
    "CommitRetry": "lakesink.spark.settings",
    "DeltaSink": "lakesink.delta.sink",
    "SinkOptions": "lakesink.delta.sink",
    "StreamingSink": "lakesink.streaming",
    "Table": "lakesink.table",
    "ValidationGate": "lakesink.spark.validation",
    "arrow": "lakesink.readers.deltars",
    "committed": "lakesink.readers.spark",
    "spark_session": "lakesink.spark.session",
}


def __getattr__(name: str) -> Any:
    if name == "CommitError":  # renamed CommitRoundError: lakesink.errors warns and hands it out
        from lakesink import errors

        return errors.__getattr__(name)
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'lakesink' has no attribute {name!r}")
