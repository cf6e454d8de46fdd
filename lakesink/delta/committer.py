"""Committers: what makes a pre-committed transaction's rows visible, one per commit mode.

Flink's sink2 split, carried over: a sink's writer pre-commits and hands over
**committables** (one per transaction: which table, checkpoint, transaction and writer);
a **committer** publishes a committable idempotently, and anyone may call it: the sink at
its checkpoint's completion, recovery, an operator's ``lakesink commit``, the vacuum
publishing again what a commit left behind. The group's **global committer**, which
publishes a checkpoint in every table of a group and then records the group's cut, is
``lakesink.core.GlobalCommitter``.

- ``MergeCommitter``: one MERGE that writes the transaction's rows into the committed
  partition, stamped with their checkpoint id, then one delta-rs commit that releases its
  pending files (``lakesink.delta.publish.release``). The MERGE inserts only: it reads the
  pending rows once and writes them once, where a MERGE that matched them would first
  join every row to find their files, which lakesink knows (the transaction's partition).
  It is idempotent by Delta's own ``txnAppId``/``txnVersion``, keyed on the checkpoint id.
- ``MetadataCommitter``: one delta-rs commit that moves the transaction's files into the
  committed partition, no byte written again (``lakesink.delta.publish``).

Both record a Delta ``txn`` action (app id: the writer's commits, version: the checkpoint
id), so any Delta tool reads each writer's newest published checkpoint.

A committer raises ``CommitFailedError`` when the commit surely did not happen (retry it),
``CommitStateUnknownError`` when it may have (the next, idempotent, commit settles it).
"""

from __future__ import annotations

import functools
import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from lakesink.delta.publish import pending_files, publish, release, vectors_in
from lakesink.errors import CommitFailedError, CommitStateUnknownError
from lakesink.spark.settings import (
    MERGE_SETTINGS,
    USER_METADATA_CONF,
    WRITE_SETTINGS,
    CommitRetry,
    is_conflict,
    labelled,
    retry_on_conflict,
    session_commit_metadata,
    session_conf,
)
from lakesink.spark.sql import delta_path, quote_identifier
from lakesink.storage.access import access_error
from lakesink.tables.commits import SPARK_ONLY_FEATURES
from lakesink.tables.deltars import delta_table
from lakesink.tables.format import (
    CHECKPOINT_ID,
    PENDING,
    VISIBLE,
    CommitMode,
    RowFilter,
    check_commit_mode,
    commit_metadata,
    pending_txn_rows,
    user_columns,
    writer_app_id,
)
from lakesink.tables.history import last_operation
from lakesink.tables.journal import TransactionStatus, transaction_fields

__all__ = [
    "Committable",
    "Committer",
    "MergeCommitter",
    "MetadataCommitter",
    "committer",
    "delete_masked",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Committable:
    """One transaction of a Delta sink: the writer's handle from its beginning, what its
    pre-commit hands over, what a snapshot and the journal keep, what a committer publishes.

    Attributes:
        table: The sink table's location.
        sink_id: The sink the transaction belongs to.
        checkpoint_id: Its checkpoint.
        txn_id: The transaction (its pending partition), never reused.
        writer_id: The writer that wrote it.
        rows: Its rows once pre-committed, if known (none: nothing to commit). Not part of
            its identity: the open transaction and its committable are one transaction.
    """

    table: str
    sink_id: str
    checkpoint_id: int
    txn_id: str
    writer_id: str
    rows: int | None = field(default=None, compare=False)

    @classmethod
    def of(cls, status: TransactionStatus, table: str) -> Committable:
        """The committable of a transaction as its journal folds it."""
        return cls(
            **transaction_fields(status), table=table, sink_id=status.sink_id, rows=status.row_count
        )

    @property
    def metadata(self) -> str:
        """The ``userMetadata`` of its commit, which the table's history shows."""
        return commit_metadata("commit", self.sink_id, **transaction_fields(self))

    def operation(self, name: str) -> dict[str, Any]:
        """The ``userMetadata`` of another of its steps (``release``), as a mapping."""
        found: dict[str, Any] = json.loads(
            commit_metadata(name, self.sink_id, **transaction_fields(self))
        )
        return found

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
    """Publishes by an insert-only MERGE, idempotent by Delta's ``txnAppId``/``txnVersion``,
    then releases the pending files; retries write conflicts as ``retry`` says.

    Failure scenarios it handles:

    1. A crash (or a lost answer) after the MERGE, before the release: the writer's
       commits' txn version is the checkpoint's, so the next commit knows the rows are in,
       skips the MERGE and releases.
    2. The same, but the writer committed later checkpoints in between (the release
       failed, its commit raised, and the next checkpoint's commit went on): the log,
       read back to the transaction's writes, shows its MERGE; it releases.
    3. A checkpoint committed after later ones of its writer (a held checkpoint an
       operator publishes): Delta would skip a MERGE whose version is below the writer's
       newest, so this one records its own app id (the writer's and the transaction's).
    4. Two committers of one transaction at once (each holds the writer's lock, so only
       if the locks failed): one app id, so Delta lets one MERGE commit and fails or skips
       the other, which reads the table again.
    5. The release conflicts with another commit: it reads the table again and releases
       what is left, which may be nothing.
    """

    def __init__(self, spark: SparkSession, *, retry: CommitRetry | None = None) -> None:
        self.spark = spark
        self.retry = retry or CommitRetry()

    def commit(self, committable: Committable, *, on_retry: OnRetry | None = None) -> int:
        c = committable
        inserted = 0
        try:
            for _ in range(self.retry.max_attempts):
                table = delta_table(c.table)
                if not pending_files(table, c.txn_id):
                    return inserted
                app, landed = _merge_app(table, c)
                if landed:
                    self._release(c, table)
                    return inserted
                merged = retry_on_conflict(
                    functools.partial(self._merge, c, table, app),
                    retry=self.retry,
                    what=c.what,
                    on_retry=on_retry,
                )
                inserted += merged or 0  # None: Delta found the version recorded; look again
        except CommitFailedError:
            raise
        except Exception as exc:
            if is_conflict(exc):
                raise CommitFailedError(
                    f"{c.what} still conflicted after {self.retry.max_attempts} attempts "
                    f"({type(exc).__name__}); nothing changed, it stays pending"
                ) from exc
            _raise_if_refused(exc, c.table)
            raise CommitStateUnknownError(
                f"{c.what} failed ({exc!r}); the MERGE may or may not have taken effect: it "
                "stays pending, and the next commit (idempotent) settles it"
            ) from exc
        raise CommitFailedError(
            f"{c.what}: another commit of it kept landing first; it stays pending: commit again"
        )

    def _release(self, c: Committable, table: DeltaTable) -> None:
        """Drop the transaction's pending files, now that its rows are in: by delta-rs, or
        by a DELETE of its partition where delta-rs cannot commit to the table, or where a
        pending file carries a deletion vector (a user's DELETE reached it), which
        delta-rs' removal, carrying none, would leave live."""
        features = set(table.protocol().writer_features or []) & SPARK_ONLY_FEATURES
        if not features and not vectors_in(table, c.txn_id):
            release(c.table, c.txn_id, c.operation("release"))
            return
        metadata = json.dumps(c.operation("release"), sort_keys=True)
        delete_masked(
            self.spark, c.table, pending_txn_rows(c.txn_id), metadata, what=c.what, retry=self.retry
        )

    def _merge(self, c: Committable, table: DeltaTable, app: str) -> int | None:
        """The insert-only MERGE; its rows, or None when Delta skipped it as done."""
        columns = [quote_identifier(name) for name in user_columns(table.schema().to_arrow().names)]
        target = ", ".join([*columns, VISIBLE, PENDING, CHECKPOINT_ID])
        values = ", ".join([*(f"s.{col}" for col in columns), "true", "NULL", str(c.checkpoint_id)])
        statement = (
            f"MERGE INTO {delta_path(c.table)} AS t "
            f"USING (SELECT {', '.join(columns)} FROM {delta_path(c.table)} "
            # Partition columns only: the source reads this transaction's files alone.
            f"WHERE {pending_txn_rows(c.txn_id).sql()}) AS s "
            # Matches nothing, so Delta neither joins the committed rows nor conflict-checks
            # them: the txn version below, not a row, is what makes it run once.
            "ON false "
            f"WHEN NOT MATCHED THEN INSERT ({target}) VALUES ({values})"
        )
        settings = {
            **WRITE_SETTINGS,
            **MERGE_SETTINGS,
            USER_METADATA_CONF: c.metadata,
            TXN_APP_CONF: app,
            TXN_VERSION_CONF: str(c.checkpoint_id),
        }
        with (
            session_conf(self.spark, settings),
            labelled(self.spark, c.sink_id, c.checkpoint_id, "commit"),
        ):
            metrics = self.spark.sql(statement).first()
        return int(metrics["num_inserted_rows"]) if metrics else None


# Delta's idempotent writes by SQL: a MERGE whose version of its app id is not above the
# one recorded is skipped. Set for one statement only (session_conf puts them back): left
# set, they would skip a later, unrelated MERGE of the session.
TXN_APP_CONF = "spark.databricks.delta.write.txnAppId"
TXN_VERSION_CONF = "spark.databricks.delta.write.txnVersion"


def _merge_app(table: DeltaTable, c: Committable) -> tuple[str, bool]:
    """The app id the commit's MERGE records, and whether its rows are in already
    (``MergeCommitter``'s scenarios 1 to 3)."""
    mine = writer_app_id(c.sink_id, c.writer_id, commit=True)
    newest = table.transaction_version(mine)
    if newest is None or newest < c.checkpoint_id:
        return mine, False
    if newest == c.checkpoint_id:  # one transaction of a writer's checkpoint is committed
        return mine, True
    own = f"{mine}/{c.txn_id}"
    if table.transaction_version(own) is not None:
        return own, True
    try:
        merged = last_operation(c.table, c.txn_id, {"commit"}) is not None
    except LookupError as exc:
        raise CommitStateUnknownError(
            f"{c.what}: the table's log no longer shows whether its MERGE ran ({exc}); "
            "compare its rows with the committed view, then commit or abort it by hand"
        ) from exc
    return own, merged


class MetadataCommitter(Committer):
    """Publishes by moving the transaction's files into the committed partition (delta-rs), reading
    and writing no row.

    A transaction whose pending files a user's DELETE, UPDATE or MERGE gave deletion vectors
    is published by ``merge`` instead: delta-rs moves no file with its vector.
    """

    def __init__(self, merge: MergeCommitter) -> None:
        self.merge = merge

    def commit(self, committable: Committable, *, on_retry: OnRetry | None = None) -> int:
        c = committable
        try:
            table = delta_table(c.table)
            if vectors_in(table, c.txn_id):
                log.info("%s: its pending files carry deletion vectors; by MERGE", c.what)
                return self.merge.commit(c, on_retry=on_retry)
            app = writer_app_id(c.sink_id, c.writer_id, commit=True)
            newest = table.transaction_version(app)
            if newest is not None and newest > c.checkpoint_id:  # out of order: its own id
                app = f"{app}/{c.txn_id}"
            return publish(
                c.table, c.txn_id, json.loads(c.metadata), transactions=[(app, c.checkpoint_id)]
            )
        except CommitFailedError:
            raise
        except Exception as exc:
            _raise_if_refused(exc, c.table)
            raise CommitStateUnknownError(
                f"the metadata commit of checkpoint {c.checkpoint_id} of {c.table} failed "
                f"({exc!r}); it may or may not have landed: it stays pending, and the next "
                "commit (idempotent) settles it"
            ) from exc


def delete_masked(
    spark: SparkSession,
    path: str,
    rows: RowFilter,
    metadata: str,
    *,
    what: str,
    retry: CommitRetry | None = None,
) -> int:
    """DELETE the rows of pending transactions ``rows`` selects (``pending_txn_rows``: masked
    rows only, whatever a caller's journal said) from the sink table at ``path``, tagged
    with ``metadata``; return how many went. Retried on write conflicts (idempotent: a
    retry deletes what is still there, which may be nothing).

    On partition columns only, Delta drops the partitions' files whole, from the log,
    without reading a row, and conflict-checks only them.
    """
    statement = f"DELETE FROM {delta_path(path)} WHERE {rows.sql()}"

    def run() -> int:
        with session_commit_metadata(spark, metadata):
            result = spark.sql(statement).first()
        # Delta 4.4 answers one row, num_affected_rows (older docs say num_deleted_rows).
        metrics = result.asDict() if result else {}
        return int(metrics.get("num_affected_rows", metrics.get("num_deleted_rows")) or 0)

    return retry_on_conflict(run, retry=retry or CommitRetry(), what=f"{what}: DELETE")


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
    merge = MergeCommitter(spark, retry=retry)
    return merge if check_commit_mode(mode) == "merge" else MetadataCommitter(merge)
