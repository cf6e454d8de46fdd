"""Committers: what makes a pre-committed transaction's rows visible, one per commit mode.

Flink's sink2 split, carried over: a sink's writer pre-commits and hands over
**committables** (one per transaction: which table, checkpoint, transaction and writer);
a **committer** publishes a committable idempotently, and anyone may call it: the sink at
its checkpoint's completion, recovery, an operator's ``lakesink commit``, the vacuum
publishing again what a commit left behind. The group's **global committer**, which
publishes a checkpoint in every table of a group and then records the group's cut, is
``lakesink.core.checkpointing.commit_all``.

- ``MergeCommitter``: one MERGE keyed on the checkpoint id and the transaction id, which
  moves the rows from the transaction's pending partition into the committed one (retried
  on write conflicts). Run again, it finds nothing left there and changes nothing.
- ``MetadataCommitter``: one delta-rs commit that moves the transaction's files into the
  committed partition, no byte written again (``lakesink.delta.publish``).

A committer raises ``CommitFailedError`` when the commit surely did not happen (retry it),
``CommitStateUnknownError`` when it may have (the next, idempotent, commit settles it).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import SparkSession

from lakesink.delta.modes import COMMIT_MODES, CommitMode
from lakesink.delta.publish import publish
from lakesink.errors import CommitFailedError, CommitStateUnknownError, ConfigurationError
from lakesink.spark.settings import (
    USER_METADATA_CONF,
    WRITE_SETTINGS,
    CommitRetry,
    conflict_exceptions,
    labelled,
    merge_settings,
    retry_on_conflict,
    session_conf,
)
from lakesink.spark.sql import delta_path, string_literal
from lakesink.storage.access import access_error
from lakesink.tables.format import (
    CHECKPOINT_ID,
    PENDING,
    VISIBLE,
    commit_metadata,
    pending_txn_rows,
)
from lakesink.tables.journal import transaction_fields

__all__ = [
    "Committable",
    "Committer",
    "MergeCommitter",
    "MetadataCommitter",
    "committer",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Committable:
    """One pre-committed transaction, as its commit needs it.

    Attributes:
        table: The sink table's location.
        sink_id: The sink the transaction belongs to.
        checkpoint_id: Its checkpoint.
        txn_id: The transaction (its pending partition).
        writer_id: The writer that wrote it.
        rows: Its rows, if known (a MERGE sizes its shuffle by them).
    """

    table: str
    sink_id: str
    checkpoint_id: int
    txn_id: str
    writer_id: str
    rows: int | None = None

    @property
    def metadata(self) -> str:
        """The ``userMetadata`` of its commit, which the table's history shows."""
        return commit_metadata("commit", self.sink_id, **transaction_fields(self))

    @property
    def what(self) -> str:
        return f"the commit of checkpoint {self.checkpoint_id} of {self.table}"


#: Told of each attempt that conflicted and is tried again: its number and the error.
OnRetry = Callable[[int, str], None]


class Committer(ABC):
    """Publishes committables, idempotently: committing one twice changes nothing."""

    @abstractmethod
    def commit(self, committable: Committable, *, on_retry: OnRetry | None = None) -> int:
        """Make the committable's rows visible; return how many this call made visible.

        Raises:
            CommitFailedError: It did not happen (conflicts, all attempts); retry it.
            CommitStateUnknownError: It may have happened; committing again settles it.
        """


class MergeCommitter(Committer):
    """Publishes by a MERGE keyed on the checkpoint and transaction id (Delta's own commit
    checks guard it); retries write conflicts as ``retry`` says."""

    def __init__(self, spark: SparkSession, *, retry: CommitRetry | None = None) -> None:
        self.spark = spark
        self.retry = retry or CommitRetry()

    def commit(self, committable: Committable, *, on_retry: OnRetry | None = None) -> int:
        """One idempotent MERGE: only masked rows of exactly this transaction match.

        It moves them from the transaction's pending partition into the committed one; run
        again, it finds nothing left there and changes nothing.
        """
        c = committable
        txn = string_literal(c.txn_id)
        statement = (
            f"MERGE INTO {delta_path(c.table)} AS t "
            f"USING (SELECT {c.checkpoint_id} AS checkpoint_id, {txn} AS txn_id) AS s "
            # The literals pin the partition, so Delta reads (and conflict-checks) it alone.
            f"ON {pending_txn_rows(c.txn_id).sql(alias='t')} "
            f"AND t.{PENDING} = s.txn_id AND t.{CHECKPOINT_ID} = s.checkpoint_id "
            f"WHEN MATCHED THEN UPDATE SET t.{VISIBLE} = true, t.{PENDING} = NULL"
        )

        def run() -> int:
            settings = {
                **WRITE_SETTINGS,
                **merge_settings(c.rows),
                USER_METADATA_CONF: c.metadata,
            }
            with (
                session_conf(self.spark, settings),
                labelled(self.spark, c.sink_id, c.checkpoint_id, "commit"),
            ):
                metrics = self.spark.sql(statement).first()
            return int(metrics["num_updated_rows"]) if metrics else 0

        try:
            return retry_on_conflict(run, retry=self.retry, what=c.what, on_retry=on_retry)
        except conflict_exceptions() as exc:
            raise CommitFailedError(
                f"{c.what} still conflicted after {self.retry.max_attempts} attempts "
                f"({type(exc).__name__}); nothing changed, it stays pending"
            ) from exc
        except Exception as exc:
            _raise_if_refused(exc, c.table)
            raise CommitStateUnknownError(
                f"{c.what} failed ({exc!r}); the MERGE may or may not have taken effect: it "
                "stays pending, and the next commit (idempotent) settles it"
            ) from exc


class MetadataCommitter(Committer):
    """Publishes by moving the transaction's files into the committed partition (delta-rs), reading
    and writing no row."""

    def commit(self, committable: Committable, *, on_retry: OnRetry | None = None) -> int:
        c = committable
        try:
            return publish(c.table, c.txn_id, c.metadata)
        except CommitFailedError:
            raise
        except Exception as exc:
            _raise_if_refused(exc, c.table)
            raise CommitStateUnknownError(
                f"the metadata commit of checkpoint {c.checkpoint_id} of {c.table} failed "
                f"({exc!r}); it may or may not have landed: it stays pending, and the next "
                "commit (idempotent) settles it"
            ) from exc


def _raise_if_refused(error: Exception, table: str) -> None:
    """The store said no (a wrong secret, a missing bucket): fix its settings, then commit
    again; not a commit whose outcome is unknown."""
    refused = access_error(error, table, unanswered=False)
    if refused is not None:
        raise refused from error


def committer(
    mode: CommitMode, spark: SparkSession, *, retry: CommitRetry | None = None
) -> Committer:
    """The committer of a commit mode.

    Raises:
        ConfigurationError: An unknown mode.
    """
    if mode == "merge":
        return MergeCommitter(spark, retry=retry)
    if mode == "metadata":
        return MetadataCommitter()
    raise ConfigurationError(f"unknown commit mode {mode!r}; pass one of {', '.join(COMMIT_MODES)}")
