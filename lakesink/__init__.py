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
)
from lakesink.protocol import SinkState, TransactionHolder, TwoPhaseCommitSink

__version__ = "0.1.0"

__all__ = [
    "CheckpointOrderError",
    "CommitError",
    "ConfigurationError",
    "LakesinkError",
    "ProtocolError",
    "ReservedColumnError",
    "SchemaMismatchError",
    "SinkState",
    "TableNotFoundError",
    "TransactionHolder",
    "TwoPhaseCommitSink",
    "UnknownCheckpointError",
    "spark_session",
]


def __getattr__(name: str):
    # Imported lazily so that the protocol core never pulls in pyspark.
    if name == "spark_session":
        from lakesink.session import spark_session

        return spark_session
    raise AttributeError(f"module 'lakesink' has no attribute {name!r}")
