"""The exit status of every lakesink command and job, decided in one table.

A scheduler (Airflow, a cron wrapper, a Kubernetes Job) acts on the status alone: retry
later, have someone look at a failed check, have someone fix the input, or report a bug.
A commit that failed or whose outcome is unknown leaves its checkpoint pending, and a run
later settles it (commits are idempotent): that is "retry later", not "fix the input". A
store that refuses lakesink or does not answer (a wrong secret, a missing bucket, an
unreachable endpoint, expired credentials, a folder without permission), whichever client
met it, is "fix the storage settings": one line that names the store, the location and the
cause; the full trace goes where Spark's own output goes (``--verbose`` shows it).
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from collections.abc import Callable
from typing import NoReturn

from lakesink.cli.spark_output import settle
from lakesink.errors import (
    AlreadyRunningError,
    AuditFailedError,
    CommitFailedError,
    CommitRoundError,
    CommitStateUnknownError,
    LakesinkError,
    LeaseLostError,
    MetricsExportError,
    StorageAccessError,
)
from lakesink.storage.access import access_error

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_CHECK_FAILED",
    "EXIT_CODES",
    "EXIT_CONFIG",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_SOFTWARE",
    "EXIT_TRY_LATER",
    "exit_process",
    "exit_status",
    "run_command",
]

log = logging.getLogger(__name__)

EXIT_OK = 0
EXIT_CHECK_FAILED = 1  # a check failed (validation, audit), or a confirmation was declined
EXIT_BAD_INPUT = 2  # bad options, input or configuration: fix them, retrying fails again
EXIT_SOFTWARE = 70  # EX_SOFTWARE: a failure lakesink did not foresee; the log has its trace
EXIT_TRY_LATER = 75  # EX_TEMPFAIL: a lock or lease is held, a commit is unsettled, a push failed
EXIT_CONFIG = 78  # EX_CONFIG: the store refused or did not answer: fix the storage settings
EXIT_INTERRUPTED = 130  # the shells' status for a command Ctrl-C (SIGINT) stopped

# The first class an error is an instance of decides; anything else lakesink raises is bad
# input, and an exception lakesink did not raise is EXIT_SOFTWARE.
STATUSES: tuple[tuple[type[BaseException], int], ...] = (
    (StorageAccessError, EXIT_CONFIG),
    (AuditFailedError, EXIT_CHECK_FAILED),
    (AlreadyRunningError, EXIT_TRY_LATER),
    (LeaseLostError, EXIT_TRY_LATER),
    (MetricsExportError, EXIT_TRY_LATER),
    (CommitRoundError, EXIT_TRY_LATER),
    (CommitFailedError, EXIT_TRY_LATER),
    (CommitStateUnknownError, EXIT_TRY_LATER),
    (LakesinkError, EXIT_BAD_INPUT),
)

EXIT_CODES = (
    f"exit status: {EXIT_OK} done, {EXIT_CHECK_FAILED} a check failed (or a confirmation "
    f"was declined), {EXIT_BAD_INPUT} bad input or configuration, {EXIT_SOFTWARE} an "
    f"unexpected failure (a bug: the log has its trace), {EXIT_TRY_LATER} retry later (another "
    "live run holds the lock or lease, a commit failed or its outcome is unknown and the "
    f"checkpoint stays pending, or the Pushgateway did not answer), {EXIT_CONFIG} the store "
    "refused access or did not answer (a wrong secret, a missing bucket, an unreachable "
    "endpoint, expired credentials, a folder without permission): fix the storage settings "
    "the message names"
)


# How a command names the file its failed run's output was kept in.
_KEPT = "Spark's own output of this run (or run with --verbose)"


def exit_status(error: BaseException) -> int:
    """The exit status a command or job ends with when ``error`` stops it."""
    reported = reported_error(error)
    for kind, status in STATUSES:
        if isinstance(reported, kind):
            return status
    return EXIT_SOFTWARE


def reported_error(error: BaseException) -> BaseException:
    """What a run stopped by ``error`` reports: the store's refusal when one is behind it
    (whichever client met it, however it was wrapped), else ``error`` itself."""
    if isinstance(error, LakesinkError):
        # A lakesink error says what went wrong; a refusal translated beneath it says why.
        cause: BaseException | None = error
        while cause is not None:
            if isinstance(cause, StorageAccessError):
                return cause
            # ``raise ... from None`` said the error it replaced does not matter.
            context = None if cause.__suppress_context__ else cause.__context__
            cause = cause.__cause__ or context
        for _, failure in getattr(error, "failures", ()):  # a CommitRoundError's
            found = reported_error(failure)
            if isinstance(found, StorageAccessError):
                return found
        return error
    return access_error(error) or error


def exit_process(status: int) -> NoReturn:
    """End a command or job's process with ``status``, once its output is flushed.

    It skips the interpreter's teardown: after a read of a table on S3, delta-rs's
    object-store client (deltalake 1.6) can abort the process there ("terminate called
    without an active exception", status 134; delta-io/delta-rs#2184), so a scheduler
    would see a command that did its work as failed. Nothing lakesink needs runs at exit:
    the driver JVM ends when this process does (its stdin closes).
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(status)


def run_command(name: str, action: Callable[[], int], *, verbose: bool = False) -> int:
    """Run a command's body; what it raises becomes one line on stderr and its status.

    A lakesink error (and a store's refusal, whichever client met it) is printed as its
    message, which says what to do; its trace goes to Spark's own output of the run, or
    with ``verbose`` to stderr. Anything else is logged with its traceback, for a bug
    report.
    """
    try:
        status = action()
    except KeyboardInterrupt:  # Ctrl-C of a short command: what it left is as after a crash
        print(f"{name}: interrupted", file=sys.stderr)
        status = EXIT_INTERRUPTED
    except Exception as error:
        reported = reported_error(error)
        if not isinstance(reported, LakesinkError):
            log.exception("%s failed unexpectedly", name)
            status = EXIT_SOFTWARE
            kept = settle(status)
            if kept is not None:
                print(f"{_KEPT}: {kept}", file=sys.stderr)
            return status
        status = exit_status(reported)
        trace = "".join(traceback.format_exception(error))
        if verbose:
            sys.stderr.write(trace)
        kept = settle(status)
        where = ""
        if kept is not None:
            with kept.open("a") as output:
                output.write(f"\n{name} failed:\n{trace}")
            where = f"; its trace and {_KEPT}: {kept}"
        print(f"{name}: {reported}{where}", file=sys.stderr)
        return status
    kept = settle(status)
    if kept is not None:  # a check failed, or a confirmation was declined
        print(f"{_KEPT}: {kept}", file=sys.stderr)
    return status
