"""Rewrite tables of an older lakesink format in the current one: a job's checkpoint table,
and a sink table.

**Checkpoint table.** Rewrite one of format 1 (lakesink 0.1) in the current format.

Format 1 kept what a checkpoint consumed in ``files``, ``quarantined`` and ``row_count``
columns; the current format keeps it as JSON in ``detail``. Every record keeps its id, its
source position and its sinks' states, so a migrated job resumes exactly where it stood.
(Format 1 jobs numbered their checkpoints apart from their sinks: the sinks' states keep
their own ids, and the restarted job continues above every id either used.)

Plan, then execute; a crash at any step leaves something ``migrate_checkpoints`` finishes
when run again, and never a state folder without its records:

1. the new table is written whole beside the old one (``checkpoints.migrating``);
2. the old table is renamed ``checkpoints.format1`` (kept, for the record);
3. the new one is renamed ``checkpoints``.

**Sink table.** Format 1 partitioned it by checkpoint and transaction id, the masking bit an
ordinary column; format 2 by the masking bit and the pending transaction (readers skip masked
files, committed rows share a partition); format 3 records a journal beside the table
relative to it; format 4 keeps partition values out of the data files, so that no file or
folder says other than the log (``lakesink.tables.format``). ``migrate_table`` rewrites
every row of an older table in place in one Delta commit, each keeping its hidden columns
(so every transaction's state) and the user's partition columns, then records the current
format and the journal in the table's properties. Cut short between the two, it finishes
when run again. It holds every writer lock of the table meanwhile: a running writer
refuses it.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, cast

from pyspark.sql import Row, SparkSession

from lakesink.core import CheckpointRecord
from lakesink.errors import AlreadyRunningError, TableNotFoundError
from lakesink.spark.sql import delta_path, quote_identifier, string_literal
from lakesink.storage.files import is_delta_table
from lakesink.storage.lease import writer_locks
from lakesink.storage.location import normalize, resolve_relative
from lakesink.tables.checkpoints import DeltaCheckpointStore, checkpoints_path, from_row, old_tables
from lakesink.tables.format import (
    CHECKPOINT_ID,
    CHECKPOINTS_FORMAT,
    COMMIT_MODE_PROPERTY,
    FORMAT_PROPERTY,
    HIDDEN_FIELDS,
    JOURNAL_PROPERTY,
    LAKESINK_PARTITIONS,
    PARTITION_VALUES_IN_FILES,
    PENDING,
    PUBLISHED_PROPERTY,
    SINK_ID_PROPERTY,
    TABLE_FORMAT,
    VISIBLE,
    commit_metadata,
    format_version,
    recorded_journal,
)
from lakesink.tables.history import read_history
from lakesink.tables.published import publish

__all__ = [
    "MigrationPlan",
    "TableMigrationPlan",
    "migrate_checkpoints",
    "migrate_table",
    "plan_migration",
    "plan_table_migration",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class _Plan:
    """What a migration does (or did): the step it takes, and the line that says so."""

    FORMAT: ClassVar[int]
    path: str
    # "nothing", "migrate" (all the steps) or "finish" (the last step, of a run cut short)
    step: str
    dry_run: bool = False

    def _rewritten(self) -> str:
        """What the "migrate" step rewrites, for the summary."""
        raise NotImplementedError

    def summary(self) -> str:
        what = {
            "nothing": f"{self.path} is in format {self.FORMAT} already: nothing to do",
            "migrate": f"{self.path}: {self._rewritten()}",
            "finish": f"{self.path}: finished a migration that was cut short",
        }[self.step]
        return ("DRY RUN: would be " if self.dry_run else "") + what


@dataclass(frozen=True, kw_only=True)
class MigrationPlan(_Plan):
    """What ``migrate_checkpoints`` does (or did) in one state folder (steps 1-3 above)."""

    FORMAT = CHECKPOINTS_FORMAT
    records: int
    jobs: tuple[str, ...]

    def _rewritten(self) -> str:
        return (
            f"{self.records} checkpoint record(s) of job(s) {', '.join(self.jobs) or 'none'} "
            f"rewritten in format {self.FORMAT}; the old table is kept as "
            "checkpoints.format1"
        )


def plan_migration(spark: SparkSession, state_dir: str) -> MigrationPlan:
    """Look at a state folder's checkpoint table; change nothing.

    Raises:
        TableNotFoundError: The folder has no checkpoint table at all.
    """
    path = checkpoints_path(state_dir)
    old, migrating = old_tables(state_dir)
    if not Path(path).exists():
        if old.exists() and migrating.exists():
            return MigrationPlan(path=path, step="finish", records=0, jobs=())
        raise TableNotFoundError(f"no checkpoint table at {path}: pass a job's --state folder")
    # DESCRIBE DETAIL answers one row (first() is typed Row | None).
    properties = (
        cast(Row, spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first())["properties"] or {}
    )
    if format_version(properties) >= CHECKPOINTS_FORMAT:
        return MigrationPlan(path=path, step="nothing", records=0, jobs=())
    rows = spark.read.format("delta").load(path)
    jobs = tuple(sorted(r.job_id for r in rows.select("job_id").distinct().collect()))
    return MigrationPlan(path=path, step="migrate", records=rows.count(), jobs=jobs)


def migrate_checkpoints(
    spark: SparkSession, state_dir: str, *, dry_run: bool = False
) -> MigrationPlan:
    """Migrate the checkpoint table of ``state_dir`` (``plan_migration``, then do it)."""
    plan = plan_migration(spark, state_dir)
    if dry_run or plan.step == "nothing":
        return dataclasses.replace(plan, dry_run=dry_run)
    old, migrating = old_tables(state_dir)
    if plan.step == "migrate":
        shutil.rmtree(migrating, ignore_errors=True)  # a partial write of a run cut short
        rows = spark.read.format("delta").load(plan.path).collect()
        DeltaCheckpointStore(state_dir, at=str(migrating)).append(
            *(_record(row.asDict()) for row in rows)
        )
        log.info("wrote %d record(s) to %s", len(rows), migrating)
        Path(plan.path).rename(old)
    migrating.rename(plan.path)
    log.info("migrated %s (the old table is %s)", plan.path, old)
    return plan


def _record(row: dict[str, Any]) -> CheckpointRecord:
    """A format-1 row as a record: its files, row count and quarantine become ``detail``."""
    detail = {
        "items": json.loads(row["files"]),
        "rows": row["row_count"],
        "quarantined": json.loads(row["quarantined"]),
    }
    return from_row({**row, "detail": json.dumps(detail)})


@dataclass(frozen=True, kw_only=True)
class TableMigrationPlan(_Plan):
    """What ``migrate_table`` does (or did) to one sink table (the rewrite, then the
    properties; "finish" is the properties of a rewrite cut short)."""

    FORMAT = TABLE_FORMAT
    version: int  # the table's format before
    rows: int

    def _rewritten(self) -> str:
        return (
            f"{self.rows} row(s) rewritten from format {self.version} to {self.FORMAT} "
            f"(partitioned by {', '.join(LAKESINK_PARTITIONS)} first, no transaction column; "
            "its published table created)"
        )


def plan_table_migration(spark: SparkSession, path: str) -> TableMigrationPlan:
    """Look at a sink table; change nothing.

    Raises:
        TableNotFoundError: No lakesink table there.
    """
    path = normalize(path)
    if not is_delta_table(path):
        raise TableNotFoundError(f"no Delta table at {path}; pass the folder of a lakesink table")
    properties = _properties(spark, path)
    if SINK_ID_PROPERTY not in properties:
        raise TableNotFoundError(f"the Delta table at {path} is not a lakesink table")
    version = format_version(properties)
    if version >= TABLE_FORMAT:
        return TableMigrationPlan(path=path, step="nothing", version=version, rows=0)
    newest = read_history(path)[-1]
    if newest.lakesink == "migrate":  # rewritten, its format not recorded yet
        return TableMigrationPlan(path=path, step="finish", version=version, rows=0)
    rows = spark.read.format("delta").load(path).count()
    return TableMigrationPlan(path=path, step="migrate", version=version, rows=rows)


def migrate_table(spark: SparkSession, path: str, *, dry_run: bool = False) -> TableMigrationPlan:
    """Migrate a sink table to the current format (``plan_table_migration``, then do it).

    Every row is rewritten in one Delta commit (each keeps its hidden columns, so every
    transaction keeps its state), then the format recorded; cut short in between, it
    finishes when run again.

    Raises:
        TableNotFoundError: No lakesink table there.
        AlreadyRunningError: A writer of the table runs; stop it first.
    """
    plan = plan_table_migration(spark, path)
    if dry_run or plan.step == "nothing":
        return dataclasses.replace(plan, dry_run=dry_run)
    locks = writer_locks(plan.path)
    for lock in locks:  # also a writer in this process, whose lock acquire() would take over
        if lock.is_held():
            raise AlreadyRunningError(
                f"{lock.what} is running ({lock.path}); stop it, then migrate the table"
            )
    taken = []
    try:
        for lock in locks:  # so that no writer starts meanwhile
            lock.acquire()
            taken.append(lock)
        if plan.step == "migrate":
            # Before the rewrite, so that its files hold the partition values it says.
            partitioned = bool(_user_partitions(spark, plan.path))
            _set_properties(spark, plan.path, {PARTITION_VALUES_IN_FILES: str(partitioned).lower()})
            _rewrite(spark, plan)
        properties = {FORMAT_PROPERTY: str(TABLE_FORMAT)}
        if COMMIT_MODE_PROPERTY not in _properties(spark, plan.path):
            properties[COMMIT_MODE_PROPERTY] = "merge"  # older tables did not record theirs
        journal = _properties(spark, plan.path).get(JOURNAL_PROPERTY)
        if journal:  # recorded whole before format 3
            properties[JOURNAL_PROPERTY] = recorded_journal(
                resolve_relative(plan.path, journal), plan.path
            )
        _set_properties(spark, plan.path, properties)
        if _properties(spark, plan.path).get(PUBLISHED_PROPERTY, "true").lower() != "false":
            publish(plan.path)
        log.info("migrated %s to format %d", plan.path, TABLE_FORMAT)
    finally:
        for lock in taken:
            lock.release()
    return plan


def _set_properties(spark: SparkSession, path: str, properties: dict[str, str]) -> None:
    settings = ", ".join(
        f"{string_literal(k)} = {string_literal(v)}" for k, v in properties.items()
    )
    spark.sql(f"ALTER TABLE {delta_path(path)} SET TBLPROPERTIES ({settings})")


# What every row of formats 1 to 4 carried, and what format 2 to 4 kept as a partition.
_OLD_TXN_ID = "_lakesink_txn_id"


def _user_partitions(spark: SparkSession, path: str) -> tuple[str, ...]:
    """The user's partition columns of a table of any format (format 1 had other
    lakesink partition columns, and no user ones)."""
    detail = cast(Row, spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first())
    old = tuple(detail["partitionColumns"] or ())
    lakesink = len(LAKESINK_PARTITIONS)
    return old[lakesink:] if old[:lakesink] == LAKESINK_PARTITIONS else ()


def _rewrite(spark: SparkSession, plan: TableMigrationPlan) -> None:
    """Every row in the current layout, in one overwrite (Delta reads the snapshot first):
    lakesink's partition columns first (format 1 had others), the user's kept after them."""
    table = spark.read.format("delta").load(plan.path)
    old_hidden = {*(f["name"] for f in HIDDEN_FIELDS), _OLD_TXN_ID}
    user = [quote_identifier(c) for c in table.columns if c not in old_hidden]
    pending = (
        PENDING
        if PENDING in table.columns
        else f"CASE WHEN {VISIBLE} THEN NULL ELSE {_OLD_TXN_ID} END AS {PENDING}"
    )
    sink_id = _properties(spark, plan.path)[SINK_ID_PROPERTY]
    (
        table.selectExpr(
            VISIBLE, pending, f"CAST({CHECKPOINT_ID} AS BIGINT) AS {CHECKPOINT_ID}", *user
        )
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .option("userMetadata", commit_metadata("migrate", sink_id, format=TABLE_FORMAT))
        .partitionBy(*LAKESINK_PARTITIONS, *_user_partitions(spark, plan.path))
        .save(plan.path)
    )
    log.info("rewrote %d row(s) of %s", plan.rows, plan.path)


def _properties(spark: SparkSession, path: str) -> dict[str, str]:
    return dict(
        cast(Row, spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first())["properties"] or {}
    )
