"""The exceptions lakesink raises: one root, one class per thing that can go wrong."""

from __future__ import annotations

from collections.abc import Sequence


class LakesinkError(Exception):
    """Raised for every error lakesink itself detects; catch this to catch them all."""


class ConfigurationError(LakesinkError):
    """Raised when an option, or the Spark session handed to lakesink, is set up wrong."""


class ProtocolError(LakesinkError):
    """Raised when the two-phase-commit protocol is driven out of order."""


class CheckpointOrderError(ProtocolError):
    """Raised when a checkpoint id goes backwards or is not the open transaction's."""


class UnknownCheckpointError(ProtocolError):
    """Raised when a checkpoint is named that has nothing pending under it."""


class CommitRoundError(LakesinkError):
    """Raised after a commit round in which at least one transaction failed to commit.

    Every transaction of the round was attempted; ``failures`` pairs each failed
    checkpoint id with its exception, and the failed ones stay pending for a retry.
    """

    def __init__(self, message: str, failures: Sequence[tuple[int, BaseException]]) -> None:
        super().__init__(message)
        self.failures = tuple(failures)


class CommitFailedError(LakesinkError):
    """Raised when a commit was refused and changed nothing (conflicts past its retries)."""


class CommitStateUnknownError(LakesinkError):
    """Raised when a commit may or may not have taken effect; reconcile before anything else."""


class AlreadyRunningError(LakesinkError):
    """Raised when another live process already runs the same job or sink writer."""


class LeaseLostError(LakesinkError):
    """Raised when a writer or job lost its lease on object storage; it stops uncommitted."""


class StorageAccessError(LakesinkError):
    """Raised when a store refuses lakesink or cannot be reached; its settings need fixing."""


class MetricsExportError(LakesinkError):
    """Raised when a Pushgateway refused or did not answer a push of metrics; try later."""


class SchemaMismatchError(LakesinkError):
    """Raised when a DataFrame's or a table's schema differs from what the sink expects."""


class ReservedColumnError(SchemaMismatchError):
    """Raised when a user column uses the reserved ``_lakesink_`` prefix."""


class TableNotFoundError(LakesinkError):
    """Raised when a path or name that must hold a Delta table holds none."""


class FormatVersionError(LakesinkError):
    """Raised when a table was written in a lakesink format this version cannot use."""


class ValidationSuiteError(ConfigurationError):
    """Raised when an expectation suite is malformed or names columns the table lacks."""


class AuditFailedError(LakesinkError, AssertionError):
    """Raised when an exactly-once check fails; the message names each check and offender."""


# Every class above, so a new one is written once: where it is defined.
__all__ = sorted(
    name
    for name, value in dict(globals()).items()
    if isinstance(value, type) and issubclass(value, LakesinkError)
)
