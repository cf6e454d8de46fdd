"""Rewrite a job's checkpoint table of format 1 (lakesink 0.1) in the current format.

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
"""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import SparkSession

from lakesink.core import CheckpointRecord
from lakesink.delta.checkpoints import DeltaCheckpointStore, checkpoints_path, from_row, old_tables
from lakesink.delta.format import CHECKPOINTS_FORMAT, FORMAT_PROPERTY
from lakesink.delta.sql import delta_path
from lakesink.errors import TableNotFoundError

__all__ = ["MigrationPlan", "migrate_checkpoints", "plan_migration"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class MigrationPlan:
    """What ``migrate_checkpoints`` does (or did) in one state folder."""

    path: str
    step: str  # "nothing", "migrate" (steps 1-3) or "finish" (step 3 of a run cut short)
    records: int
    jobs: tuple[str, ...]
    dry_run: bool = False

    def summary(self) -> str:
        what = {
            "nothing": f"{self.path} is in format {CHECKPOINTS_FORMAT} already: nothing to do",
            "migrate": (
                f"{self.path}: {self.records} checkpoint record(s) of job(s) "
                f"{', '.join(self.jobs) or 'none'} rewritten in format {CHECKPOINTS_FORMAT}; "
                "the old table is kept as checkpoints.format1"
            ),
            "finish": f"{self.path}: finished a migration that was cut short",
        }[self.step]
        return ("DRY RUN: would be " if self.dry_run else "") + what


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
    properties = spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first()["properties"] or {}
    if int(properties.get(FORMAT_PROPERTY, "1")) >= CHECKPOINTS_FORMAT:
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
        DeltaCheckpointStore(spark, state_dir, at=str(migrating)).append(
            *(_record(row.asDict()) for row in rows)
        )
        log.info("wrote %d record(s) to %s", len(rows), migrating)
        Path(plan.path).rename(old)
    migrating.rename(plan.path)
    log.info("migrated %s (the old table is %s)", plan.path, old)
    return plan


def _record(row: dict) -> CheckpointRecord:
    """A format-1 row as a record: its files, row count and quarantine become ``detail``."""
    detail = {
        "items": json.loads(row["files"]),
        "rows": row["row_count"],
        "quarantined": json.loads(row["quarantined"]),
    }
    return from_row({**row, "detail": json.dumps(detail)})
