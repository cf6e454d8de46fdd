"""The exceptions lakesink raises: one root, one class per thing that can go wrong."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_CODES",
    "EXIT_OK",
    "EXIT_TRY_LATER",
    "AlreadyRunningError",
    "AuditFailedError",
    "CheckpointOrderError",
    "CommitError",
    "CommitFailedError",
    "CommitStateUnknownError",
    "ConfigurationError",
    "FormatVersionError",
    "LakesinkError",
    "LeaseLostError",
    "MetricsExportError",
    "ProtocolError",
    "ReservedColumnError",
    "SchemaMismatchError",
    "TableNotFoundError",
    "UnknownCheckpointError",
    "ValidationSuiteError",
    "exit_status",
]


# Exit statuses of every lakesink command and job, for schedulers (Airflow, cron wrappers,
# Kubernetes jobs) to act on: retry later, or have someone fix the input.
EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check failed (validation, audit), a confirmation was declined
EXIT_BAD_INPUT = 2  # bad options, input or configuration: fix them, do not retry as is
# EX_TEMPFAIL: another live run holds the lock, or the Pushgateway did not answer; retry later
EXIT_TRY_LATER = 75
EXIT_CODES = (
    f"exit status: {EXIT_OK} done, {EXIT_CHECK_FAILED} a check failed (or a confirmation "
    f"was declined), {EXIT_BAD_INPUT} bad input or configuration, {EXIT_TRY_LATER} another "
    "live run holds the lock or lease (or took it over), or the Pushgateway did not answer "
    "(retry later)"
)


def exit_status(error: LakesinkError) -> int:
    """The exit status a command or job ends with when ``error`` stops it."""
    if isinstance(error, (AlreadyRunningError, LeaseLostError, MetricsExportError)):
        return EXIT_TRY_LATER
    return EXIT_BAD_INPUT


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


class CommitError(LakesinkError):
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
