"""Spark helpers of the Delta implementation: session settings taken in turns, the settings
of lakesink's writes and MERGEs, and retries of Delta write conflicts."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from lakesink.errors import ConfigurationError
from lakesink.jvm import session_jvm

__all__ = [
    "CONFLICT_CONDITIONS",
    "MERGE_SETTINGS",
    "USER_METADATA_CONF",
    "WRITE_SETTINGS",
    "CommitRetry",
    "capture_delta_errors",
    "is_conflict",
    "job_tag",
    "labelled",
    "retry_on_conflict",
    "session_commit_metadata",
    "session_conf",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

USER_METADATA_CONF = "spark.databricks.delta.commitInfo.userMetadata"

# A lakesink append writes into one partition (its transaction's), a commit's MERGE into
# one (the committed one), unless the user partitions the table too. Without these, Spark
# sorts a partitioned write's rows by partition before writing them, and Delta's MERGE first
# shuffles its output into one task per partition: a pass over all the rows each, and the
# shuffle leaves one task to write them all. With them, each task writes its rows straight
# into its partition. Spark's concurrent writers fall back to sorting the task's remaining
# rows as soon as the files open reach the limit, so the limit is 2: at 1, the first file
# opened already reached it, and every task sorted all its rows but one.
WRITE_SETTINGS = {
    "spark.sql.maxConcurrentOutputFileWriters": "2",
    "spark.databricks.delta.merge.repartitionBeforeWrite.enabled": "false",
}
# A commit's MERGE reads the transaction's own files as its source, deterministic, so
# materializing it (Delta's default for sources it cannot prove deterministic) would write
# every row once more for nothing.
MERGE_SETTINGS = {"spark.databricks.delta.merge.materializeSource": "none"}


# A session's SQL conf is shared by every thread that uses the session: two sinks writing
# at once in two threads would tag each other's commits (the audit would then pin a commit
# on the wrong checkpoint) and one could put back a setting the other still needs. So the
# blocks that set the conf take turns per session; a thread with its own
# ``spark.newSession()`` has its own conf and lock, and runs alongside.
_CONF_LOCKS: weakref.WeakKeyDictionary[SparkSession, threading.RLock] = weakref.WeakKeyDictionary()
_CONF_LOCKS_GUARD = threading.Lock()


@contextmanager
def session_conf(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """Run the block with ``settings`` on the session, then put back what was there.

    Blocks on the same session, in any thread, run one at a time.
    """
    with _CONF_LOCKS_GUARD:
        lock = _CONF_LOCKS.setdefault(spark, threading.RLock())
    with lock:
        previous = {key: spark.conf.get(key, None) for key in settings}
        value: str | None  # a setting to make here, what was there (None: unset) below
        for key, value in settings.items():
            spark.conf.set(key, value)
        try:
            yield
        finally:
            for key, value in previous.items():
                if value is None:
                    spark.conf.unset(key)
                else:
                    spark.conf.set(key, value)


_JOB_DESCRIPTION = "spark.job.description"  # what the Spark UI shows for a job


def job_tag(sink_id: str, checkpoint_id: int | None, phase: str) -> str:
    """The Spark job tag of lakesink's work: ``lakesink:<sink>:<checkpoint>:<phase>``."""
    checkpoint = "-" if checkpoint_id is None else str(checkpoint_id)
    return f"lakesink:{sink_id}:{checkpoint}:{phase}".replace(",", "_")  # no commas in tags


@contextmanager
def labelled(
    spark: SparkSession, sink_id: str, checkpoint_id: int | None, phase: str
) -> Iterator[None]:
    """Label the Spark jobs the block starts (in this thread) with the sink, checkpoint and
    phase (``pre-commit``, ``validate``, ``commit``, ``vacuum``, ``compact``): a job tag
    (``job_tag``) to find or cancel them by, and a description the Spark UI shows.

    Tags add to the caller's (a streaming query's job group and tags stay, so stopping it
    still cancels them); the description is put back afterwards.
    """
    tag = job_tag(sink_id, checkpoint_id, phase)
    if session_jvm(spark) is None:  # a Spark Connect client: the session's own tags
        had = tag in spark.getTags()
        spark.addTag(tag)
        try:
            yield
        finally:
            if not had:
                spark.removeTag(tag)
        return
    context = spark.sparkContext
    previous = context.getLocalProperty(_JOB_DESCRIPTION)
    checkpoint = "" if checkpoint_id is None else f" checkpoint {checkpoint_id}"
    had_tag = tag in context.getJobTags()
    context.addJobTag(tag)
    context.setJobDescription(f"lakesink {sink_id}{checkpoint}: {phase}")
    try:
        yield
    finally:
        # None removes it; pyspark types the value as str only.
        context.setLocalProperty(_JOB_DESCRIPTION, previous)  # type: ignore[arg-type]
        if not had_tag:
            context.removeJobTag(tag)


def local_parallelism(master: str) -> int | None:
    """How many tasks a local master (``local``, ``local[4]``, ``local[*]``) runs at once;
    None for a cluster's master."""
    match = re.fullmatch(r"local(?:\[(\d+|\*)(?:,\s*\d+)?\])?", master.strip())
    if not match:
        return None
    cores = match.group(1)
    if cores is None:  # plain "local" runs one thread
        return 1
    return (os.cpu_count() or 1) if cores == "*" else int(cores)


def default_parallelism(spark: SparkSession) -> int:
    """How many tasks the session's cluster runs at once: its SparkContext's; through Spark
    Connect (no SparkContext here), a local master's cores, the server's
    ``spark.default.parallelism``, or else 1 (unknown: one file per share rather than too
    many small ones)."""
    if session_jvm(spark) is not None:
        return int(spark.sparkContext.defaultParallelism)
    try:
        local = local_parallelism(spark.conf.get("spark.master", None) or "")
        return local or max(1, int(spark.conf.get("spark.default.parallelism", None) or 1))
    except Exception:  # a server that does not show core settings to its clients
        return 1


def session_commit_metadata(spark: SparkSession, metadata: str) -> AbstractContextManager[None]:
    """Tag the SQL commands run inside with ``metadata`` (MERGE and DELETE take no option)."""
    return session_conf(spark, {USER_METADATA_CONF: metadata})


@dataclass(frozen=True, kw_only=True)
class CommitRetry:
    """How a commit retries Delta write conflicts: exponential backoff with jitter."""

    max_attempts: int = 20
    initial_backoff_s: float = 0.1
    max_backoff_s: float = 5.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigurationError(
                f"CommitRetry(max_attempts={self.max_attempts}): a commit needs at least one "
                "attempt"
            )
        if not 0 <= self.initial_backoff_s <= self.max_backoff_s:
            raise ConfigurationError(
                f"CommitRetry backoffs must satisfy 0 <= initial_backoff_s "
                f"({self.initial_backoff_s:g}) <= max_backoff_s ({self.max_backoff_s:g})"
            )


def retry_on_conflict(
    command: Callable[[], T],
    *,
    retry: CommitRetry,
    what: str,
    on_retry: Callable[[int, str], None] | None = None,
) -> T:
    """Run an idempotent Delta command, retrying write conflicts with backoff and jitter.

    ``on_retry`` gets the number of the attempt about to start and the conflict. The last
    conflict is raised once the attempts are used up.
    """
    capture_delta_errors()
    backoff = retry.initial_backoff_s
    attempt = 1
    while True:
        try:
            return command()
        except Exception as exc:
            if not is_conflict(exc) or attempt >= retry.max_attempts:
                raise
            error = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            log.info("%s conflicted (attempt %d), retrying: %s", what, attempt, error)
            attempt += 1
            if on_retry is not None:
                on_retry(attempt, error)
            time.sleep(backoff * (0.5 + random.random()))
            backoff = min(backoff * 2, retry.max_backoff_s)


#: Delta's error conditions for "a concurrent commit got in the way; try again" (some come
#: with a sub-condition, as in ``DELTA_CONCURRENT_APPEND.WITH_PARTITION_HINT``).
CONFLICT_CONDITIONS = frozenset(
    {
        "DELTA_CONCURRENT_APPEND",
        "DELTA_CONCURRENT_DELETE_DELETE",
        "DELTA_CONCURRENT_DELETE_READ",
        "DELTA_CONCURRENT_TRANSACTION",
        "DELTA_CONCURRENT_WRITE",
        "DELTA_METADATA_CHANGED",
        "DELTA_PROTOCOL_CHANGED",
    }
)


def is_conflict(error: BaseException) -> bool:
    """Whether ``error`` is a Delta write conflict, from a classic or a Connect session.

    A classic session raises delta-spark's exception classes (once ``capture_delta_errors``
    put its hook in); a Connect session, PySpark's exceptions carrying Delta's condition.
    """
    if isinstance(error, _delta_conflict_classes()):
        return True
    condition = error.getCondition() if isinstance(error, PySparkException) else None
    return (condition or "").split(".")[0] in CONFLICT_CONDITIONS


def capture_delta_errors() -> None:
    """Have a classic session raise Delta's errors as delta-spark's exception classes.

    Without delta-spark's hook, Py4J's error comes through; a Spark Connect client alone
    (no delta-spark installed) needs no hook.
    """
    with contextlib.suppress(ImportError):
        import delta.exceptions.captured  # noqa: F401


def _delta_conflict_classes() -> tuple[type[BaseException], ...]:
    try:
        from delta.exceptions import (
            ConcurrentAppendException,
            ConcurrentDeleteDeleteException,
            ConcurrentDeleteReadException,
            ConcurrentTransactionException,
            ConcurrentWriteException,
            MetadataChangedException,
            ProtocolChangedException,
        )
    except ImportError:  # a Spark Connect client alone: no delta-spark
        return ()
    return (
        ConcurrentAppendException,
        ConcurrentDeleteReadException,
        ConcurrentDeleteDeleteException,
        ConcurrentTransactionException,
        ConcurrentWriteException,
        MetadataChangedException,
        ProtocolChangedException,
    )
