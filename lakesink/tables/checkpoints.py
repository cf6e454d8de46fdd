"""A job's checkpoint store as a Delta table: one append-only row per completed checkpoint,
read and appended through delta-rs.

The table lives at ``STATE_DIR/checkpoints`` (format: ``lakesink.tables.format``), next to
the lock files of the jobs that use it (``STATE_DIR/JOB.lock``).
"""

from __future__ import annotations

import json
from datetime import timezone
from pathlib import Path
from typing import Any

from lakesink.core import CheckpointRecord, CheckpointStore, Quarantined
from lakesink.errors import TableNotFoundError
from lakesink.storage.files import is_delta_table
from lakesink.storage.lease import Fence, fence
from lakesink.storage.location import is_uri, join, normalize
from lakesink.tables.deltars import append_rows, ensure_log_table, read_log_rows
from lakesink.tables.format import CHECKPOINTS_FORMAT, CHECKPOINTS_SCHEMA

__all__ = ["DeltaCheckpointStore", "checkpoints_path", "old_tables", "read_history"]


def checkpoints_path(state_dir: str) -> str:
    """Where the checkpoint table of a job's ``--state`` folder is."""
    return join(normalize(state_dir), "checkpoints")


def read_history(path: str, job_id: str) -> list[CheckpointRecord]:
    """A job's completed checkpoints in the checkpoint table at ``path``, oldest first.

    Read with delta-rs: no Spark job, no JVM.

    Raises:
        TableNotFoundError: No checkpoint table there.
        FormatVersionError: One of another format (``lakesink migrate-checkpoints``).
    """
    rows = read_log_rows(
        path,
        what="checkpoint table",
        version=CHECKPOINTS_FORMAT,
        missing="pass the --state folder the job ran with",
        job_id=job_id,
    )
    return sorted((from_row(row) for row in rows), key=lambda r: r.checkpoint_id)


def old_tables(state_dir: str) -> tuple[Path, Path]:
    """Where ``lakesink migrate-checkpoints`` keeps the old table, and writes the new one."""
    path = Path(checkpoints_path(state_dir))
    return path.with_name("checkpoints.format1"), path.with_name("checkpoints.migrating")


class DeltaCheckpointStore(CheckpointStore):
    """The checkpoint table under ``state_dir``.

    Args:
        state_dir: The jobs' state folder.
        create: Create the table (and folder) if missing; otherwise a missing table is an
            error naming the folder.
        at: Keep the table there instead (a migration writes its new table aside).

    Raises:
        TableNotFoundError: No table and not ``create``, or a migration was cut short.
        FormatVersionError: The table has another format (``lakesink migrate-checkpoints``
            rewrites an older one).
    """

    def __init__(self, state_dir: str, *, create: bool = True, at: str | None = None) -> None:
        self.state_dir = normalize(state_dir)
        self.path = at or checkpoints_path(state_dir)
        if at is None and _migration_cut_short(state_dir) and not is_delta_table(self.path):
            raise TableNotFoundError(
                f"{self.state_dir} holds a checkpoint table being migrated; run "
                f"`lakesink migrate-checkpoints {self.state_dir}` again to finish it"
            )
        if create and not is_uri(self.state_dir):  # an object store has no folders to make
            Path(self.state_dir).mkdir(parents=True, exist_ok=True)
        ensure_log_table(
            self.path,
            schema=CHECKPOINTS_SCHEMA,
            version=CHECKPOINTS_FORMAT,
            what="checkpoint table",
            create=create,
            missing="pass the --state folder the job ran with",
        )

    def append(self, *records: CheckpointRecord) -> None:
        """Record checkpoints in one Delta commit (one, normally: the moment it completes)."""
        append_rows(self.path, [to_row(r) for r in records])

    def history(self, job_id: str) -> list[CheckpointRecord]:
        return read_history(self.path, job_id)

    def latest(self, job_id: str) -> CheckpointRecord | None:
        records = self.history(job_id)
        return records[-1] if records else None

    def job_lock(self, job_id: str) -> Fence:
        return fence(self.state_dir, job_id, f"job {job_id!r}")


def _migration_cut_short(state_dir: str) -> bool:
    # ``lakesink migrate-checkpoints`` runs on local state folders only (it renames them).
    return not is_uri(state_dir) and old_tables(state_dir)[0].exists()


def to_row(record: CheckpointRecord) -> tuple[Any, ...]:
    """A record as a row of the checkpoint table (``CHECKPOINTS_SCHEMA``)."""
    detail = {
        "items": list(record.items),
        "rows": record.rows,
        "quarantined": [[q.item, q.reason] for q in record.quarantined],
    }
    return (
        record.job_id,
        record.checkpoint_id,
        record.completed_at,
        record.source_position,
        json.dumps(dict(record.sink_states), sort_keys=True),
        json.dumps(detail),
    )


def from_row(row: dict[str, Any]) -> CheckpointRecord:
    """A row of the checkpoint table as a record."""
    detail = json.loads(row["detail"])
    return CheckpointRecord(
        job_id=row["job_id"],
        checkpoint_id=row["checkpoint_id"],
        completed_at=row["completed_at"].astimezone(timezone.utc),
        source_position=row["source_position"],
        sink_states=json.loads(row["sink_states"]),
        items=tuple(detail["items"]),
        rows=detail["rows"],
        quarantined=tuple(Quarantined(item, reason) for item, reason in detail["quarantined"]),
    )
