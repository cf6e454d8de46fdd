"""The pre-commit's append: a DataFrame's rows written once into their transaction's pending
partition of the sink table.

Spark writes the rows as the files of a Delta table of their own, the **staging table**,
rooted in the transaction's pending partition's folder
(``_lakesink_visible=false/_lakesink_pending=<txn>``): a plain write of the user's columns,
with Delta's statistics and the sink table's constraints, its files straight in their
final place. One delta-rs commit then adds exactly those files to the sink table, in that
partition, with the append's ``userMetadata`` and a Delta ``txn`` action (app id: the
writer, version: the checkpoint id); then the staging table's log goes.

Why not Spark's append into the sink table itself: its partitioned writer projects every
row out of lakesink's two partition columns (a quarter of a 10M-row write, measured), and
it records a ``txn`` action only by reconstructing the table's state first
(delta-io/delta#7670). The staging write costs what a plain append of the rows costs; the
commit that adds them is a few milliseconds.

Failure scenarios:

1. A crash after Spark's write, before the sink's commit: its files are in no version of
   the sink table (Delta's VACUUM deletes them after the retention), and the transaction
   is open, so recovery aborts it. Its staging log stays in the pending folder, hidden
   from Delta's VACUUM, until lakesink's vacuum removes those of finished transactions.
2. Spark's write fails half-way: its files are in no version of either table; the append
   is tried again, and only the staging table's newest version's files are added.
3. The sink commit's answer is lost: the caller finds the append in the sink's newest
   versions by its ``userMetadata`` and does not send it again.
4. A crash after the sink's commit, before the staging log is removed: as in 1, for the log.

A table with a feature delta-rs cannot commit to (row tracking, in-commit timestamps:
``SPARK_ONLY_FEATURES``), which platforms turn on for every new table, is appended to by
Spark itself instead (``append_through_spark``): a partitioned append into the sink table,
its first append of a checkpoint made idempotent by Delta's own ``txnAppId``/``txnVersion``
(the writer, the checkpoint id), each found in the log by its ``userMetadata`` if its
answer is lost, as above.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deltalake.transaction import AddAction
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from lakesink.spark.settings import WRITE_SETTINGS, session_conf
from lakesink.spark.sql import quote_identifier
from lakesink.storage.files import has_files, remove_folder, subfolder_names
from lakesink.storage.location import join
from lakesink.tables.commits import Landed, commit
from lakesink.tables.deltars import delta_table
from lakesink.tables.format import PARTITION_VALUES_IN_FILES, PENDING, PINNED, VISIBLE, SinkTable
from lakesink.tables.history import commit_actions, commit_rows, find_commit, table_version

__all__ = [
    "Staged",
    "add_staged",
    "append_through_spark",
    "pending_folder",
    "remove_staging_log",
    "staging_logs",
    "write_staged",
]

log = logging.getLogger(__name__)

# Table properties the staging write takes from the sink table: its constraints, how many
# columns get statistics, and whether partition values go into the files.
_CARRIED = (
    "delta.constraints.",
    PARTITION_VALUES_IN_FILES,
    "delta.dataSkippingNumIndexedCols",
    "delta.dataSkippingStatsColumns",
)
STAGING_LOG = "_delta_log"
# What the staging table is made with, whatever the session's defaults for new tables (a
# platform's): its files become the sink table's as they are, so they hold the columns by
# their own names (no column mapping) in the partition's folder (no random prefixes), and
# the staging table, dropped after one commit, carries no feature a write would pay for.
_STAGING = {
    **PINNED,
    "delta.enableDeletionVectors": "false",
    "delta.enableRowTracking": "false",
    "delta.enableInCommitTimestamps": "false",
    "delta.enableChangeDataFeed": "false",
}


def pending_folder(table_path: str, txn_id: str) -> str:
    """The folder of a transaction's pending partition: its files, and its staging table."""
    return join(table_path, f"{VISIBLE}=false", f"{PENDING}={txn_id}")


def write_staged(frame: DataFrame, table: SinkTable, txn_id: str) -> None:
    """Write ``frame`` (the table's user columns, and any hidden one it should carry) as a
    new version of the transaction's staging table, with the sink table's constraints and
    a ``NOT NULL`` check for each of its required columns."""
    options = {**_STAGING, **{k: v for k, v in table.properties.items() if k.startswith(_CARRIED)}}
    for field in table.fields:
        if not field["nullable"]:  # a table made from a DataFrame takes every column nullable
            options[f"delta.constraints.lakesink_not_null_{field['name']}"] = (
                f"{quote_identifier(field['name'])} IS NOT NULL"
            )
    # The frame's own session writes it: in foreachBatch, a clone of ours.
    with session_conf(frame.sparkSession, WRITE_SETTINGS):
        (
            frame.write.format("delta")
            .mode("append")
            .options(**options)
            .partitionBy(*table.partition_by)
            .save(pending_folder(table.path, txn_id))
        )


@dataclass(frozen=True)
class Staged:
    """What one append added to the sink table: its commit, and the rows it holds (None
    when a file has no row count)."""

    landed: Landed
    rows: int | None


def add_staged(
    table: SinkTable,
    txn_id: str,
    user_metadata: Mapping[str, Any],
    transactions: Sequence[tuple[str, int]],
) -> Staged:
    """Add the files of the staging table's newest version to the sink table, in the
    transaction's pending partition, in one commit (with ``transactions``' txn actions).

    Raises:
        deltalake.exceptions.CommitFailedError: A conflict; nothing landed.
    """
    folder = pending_folder(table.path, txn_id)
    relative = f"{VISIBLE}=false/{PENDING}={txn_id}"
    files = [a["add"] for a in commit_actions(folder, table_version(folder)) if "add" in a]
    actions = [
        AddAction(
            f"{relative}/{file['path']}",
            file["size"],
            {VISIBLE: "false", PENDING: txn_id, **file.get("partitionValues", {})},
            file["modificationTime"],
            True,
            file.get("stats") or "{}",
        )
        for file in files
    ]
    counts = [json.loads(file.get("stats") or "{}").get("numRecords") for file in files]
    rows = None if None in counts else sum(counts)
    # delta-rs records no operation metrics: the rows go into the userMetadata, where the
    # table's history reads them (lakesink.tables.history).
    metadata = {**user_metadata, **({"rows": rows} if rows is not None else {})}
    landed = commit(
        table.path, delta_table(table.path), actions, metadata, transactions=transactions
    )
    return Staged(landed, rows)


def append_through_spark(
    frame: DataFrame,
    table: SinkTable,
    txn_id: str,
    user_metadata: str,
    transactions: Sequence[tuple[str, int]],
) -> int | None:
    """Append ``frame`` into the transaction's pending partition of the sink table with
    Spark's own Delta write; return its rows (None if its commit does not say).

    ``transactions``: at most one (app id, version), recorded by Delta's idempotent write,
    which skips the append if that version is not above the one recorded: give it only for
    a version new to its app id (a checkpoint's first append).
    """
    framed = frame.select(
        F.lit(False).alias(VISIBLE),
        F.lit(txn_id).alias(PENDING),
        *[F.col(quote_identifier(name)) for name in frame.columns],
    )
    writer = framed.write.format("delta").mode("append").option("userMetadata", user_metadata)
    for app_id, version in transactions:
        writer = writer.option("txnAppId", app_id).option("txnVersion", version)
    sent_ms = time.time_ns() // 1_000_000
    with session_conf(frame.sparkSession, WRITE_SETTINGS):
        writer.save(table.path)
    landed = find_commit(table.path, user_metadata, since_ms=sent_ms)
    return None if landed is None else commit_rows(table.path, landed)


def remove_staging_log(table_path: str, txn_id: str) -> None:
    """Remove a transaction's staging log (its files belong to the sink table now)."""
    remove_folder(join(pending_folder(table_path, txn_id), STAGING_LOG))


def staging_logs(table_path: str) -> list[str]:
    """The transactions whose pending folder still holds a staging log (an append cut short
    between its commit and the log's removal, or before its commit)."""
    masked = join(table_path, f"{VISIBLE}=false")
    found = []
    for name in subfolder_names(masked):
        txn_id = name.removeprefix(f"{PENDING}=")
        if txn_id != name and has_files(join(masked, name, STAGING_LOG)):
            found.append(txn_id)
    return found
