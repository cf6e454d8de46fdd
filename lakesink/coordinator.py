"""The checkpoint coordinator: Flink's JobManager role, on the driver of a lakesink job.

A checkpoint (1) has every sink pre-commit, (2) records the checkpoint — its id, the source
position and every sink's state — in one atomic append to the checkpoint table, which is
the moment it completes, and (3) tells every sink to commit. A restarted job resumes from
the last completed checkpoint: the source from its position, each sink from its state.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import SparkSession

from lakesink.delta_sink import DeltaSink, DeltaTransaction
from lakesink.errors import CommitError, ConfigurationError, TableNotFoundError
from lakesink.file_source import Quarantined, SourcePosition
from lakesink.journal import TxnState
from lakesink.lock import ProcessLock
from lakesink.protocol import SinkState
from lakesink.sql import delta_path, string_literal

__all__ = ["CheckpointCoordinator", "CheckpointRecord", "CheckpointStore"]

log = logging.getLogger(__name__)

CHECKPOINTS_SCHEMA = (
    "job_id STRING NOT NULL, checkpoint_id BIGINT NOT NULL, completed_at TIMESTAMP NOT NULL, "
    "source_position STRING NOT NULL, sink_states STRING NOT NULL, files STRING NOT NULL, "
    "quarantined STRING NOT NULL, row_count BIGINT NOT NULL"
)

StepHook = Callable[[str, int], None]


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    """A completed checkpoint: what was consumed and what each sink had pending."""

    job_id: str
    checkpoint_id: int
    completed_at: datetime
    position: SourcePosition
    sink_states: dict[str, str] = field(default_factory=dict)  # sink id -> SinkState JSON
    files: tuple[str, ...] = ()
    quarantined: tuple[Quarantined, ...] = ()
    row_count: int = 0

    def as_dict(self) -> dict:
        return {
            "checkpoint_id": self.checkpoint_id,
            "completed_at": self.completed_at.isoformat(),
            "files": list(self.files),
            "row_count": self.row_count,
            "quarantined": [{"file": q.file, "reason": q.reason} for q in self.quarantined],
        }

    def sink_state(self, sink_id: str) -> SinkState[DeltaTransaction] | None:
        text = self.sink_states.get(sink_id)
        return SinkState.from_json(text, DeltaTransaction) if text else None


class CheckpointStore:
    """The checkpoint table under ``state_dir``: one append-only row per completed checkpoint."""

    def __init__(self, spark: SparkSession, state_dir: str, *, create: bool = True) -> None:
        from delta.tables import DeltaTable

        self.spark = spark
        self.path = str(Path(state_dir).resolve() / "checkpoints")
        if not DeltaTable.isDeltaTable(spark, self.path):
            if not create:
                raise TableNotFoundError(
                    f"no checkpoints at {self.path}: pass the --state folder the job ran with"
                )
            (
                DeltaTable.createIfNotExists(spark)
                .location(self.path)
                .addColumns(spark.createDataFrame([], CHECKPOINTS_SCHEMA).schema)
                .property("delta.appendOnly", "true")
                .execute()
            )

    def append(self, record: CheckpointRecord) -> None:
        """Record a checkpoint in one Delta commit: the moment it completes."""
        frame = self.spark.createDataFrame([_row(record)], CHECKPOINTS_SCHEMA)
        frame.write.format("delta").mode("append").save(self.path)

    def history(self, job_id: str, *, latest_only: bool = False) -> list[CheckpointRecord]:
        """The completed checkpoints of a job, oldest first (or just the latest)."""
        order = "DESC LIMIT 1" if latest_only else "ASC"
        rows = self.spark.sql(
            f"SELECT * FROM {delta_path(self.path)} "
            f"WHERE job_id = {string_literal(job_id)} ORDER BY checkpoint_id {order}"
        ).collect()
        return [_record(row.asDict()) for row in rows]


class CheckpointCoordinator:
    """Drives checkpoints for one job over any number of sinks.

    Args:
        spark: A Delta-ready session.
        job_id: Names the job; its checkpoints and lock are kept under ``state_dir``.
        state_dir: Folder of the checkpoint table and the job's lock file.
        step_hook: Called with a step name and checkpoint id (observability, fault tests).
    """

    def __init__(
        self,
        spark: SparkSession,
        *,
        job_id: str,
        state_dir: str,
        step_hook: StepHook | None = None,
    ) -> None:
        if not job_id:
            raise ConfigurationError("job_id must not be empty")
        self.spark = spark
        self.job_id = job_id
        self.state_dir = Path(state_dir).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._step_hook = step_hook
        # One live process per job: a second one would commit the same input twice.
        self._lock = ProcessLock(self.state_dir / f"{job_id}.lock", f"job {job_id!r}")
        self._lock.acquire()
        self.store = CheckpointStore(spark, str(self.state_dir))
        self.last = self.latest()
        self.sinks: dict[str, DeltaSink] = {}

    # ------------------------------------------------------------------ state

    def latest(self) -> CheckpointRecord | None:
        """The last completed checkpoint, or None before the first."""
        records = self.store.history(self.job_id, latest_only=True)
        return records[0] if records else None

    @property
    def position(self) -> SourcePosition:
        """Where the source resumes: what the last completed checkpoint had consumed."""
        return self.last.position if self.last else SourcePosition()

    # ------------------------------------------------------------------ sinks

    def open_sink(self, path: str, **options: object) -> DeltaSink:
        """Open a sink restored to the last completed checkpoint (see ``DeltaSink.open``)."""
        sink_id = DeltaSink.default_sink_id(path, options.get("sink_id"))  # type: ignore[arg-type]
        if sink_id in self.sinks:
            raise ConfigurationError(f"sink {sink_id!r} is already part of this job")
        restored = self.last.sink_state(sink_id) if self.last else None
        opened = DeltaSink.open(self.spark, path, restore=restored, **options)
        self.sinks[opened.sink_id] = opened
        return opened

    # ------------------------------------------------------------- checkpoint

    def checkpoint(
        self,
        position: SourcePosition,
        *,
        files: tuple[str, ...] = (),
        quarantined: tuple[Quarantined, ...] = (),
        row_count: int = 0,
    ) -> CheckpointRecord:
        """Pre-commit every sink, record the checkpoint, then commit every sink.

        Failure scenarios (2-4 are resolved by a restart from the last completed one):

        1. A sink's validation failed: every sink's transaction of the checkpoint is held
           or aborted with it before the record; the checkpoint completes (its input is
           consumed), nothing of it is committed, and an operator decides on a held one.
        2. Crash before the record: the pre-committed transactions are not in any
           completed checkpoint; the restarted sinks abort them and the source replays.
        3. Crash after the record, before or during the commits: the restarted sinks find
           them in the record and commit them (idempotently); the source does not replay.
        4. A commit that fails without a crash: raised after every sink was attempted;
           the transaction stays pending and the next checkpoint's commit retries it.
        """
        checkpoint_id = (self.last.checkpoint_id if self.last else 0) + 1
        states, transactions = {}, {}
        for sink_id, sink in self.sinks.items():
            state = sink.snapshot_state(sink.current_checkpoint_id)
            states[sink_id] = state.to_json()
            transactions[sink_id] = state.pending_commit[-1].handle
        self._withhold_together(checkpoint_id, transactions)
        self._step("after_pre_commit", checkpoint_id)
        record = CheckpointRecord(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            completed_at=datetime.now(timezone.utc),
            position=position,
            sink_states=states,
            files=files,
            quarantined=quarantined,
            row_count=row_count,
        )
        self.store.append(record)
        self.last = record
        log.info(
            "checkpoint %d of job %s complete (%d files)", checkpoint_id, self.job_id, len(files)
        )
        self._step("after_record", checkpoint_id)
        failures: list[tuple[int, BaseException]] = []
        for sink in self.sinks.values():
            if not sink.pending_checkpoint_ids:
                continue
            try:
                sink.notify_checkpoint_complete(sink.pending_checkpoint_ids[-1])
            except CommitError as exc:
                failures.extend(exc.failures)
        if failures:
            raise CommitError(
                f"checkpoint {checkpoint_id} is complete but {len(failures)} commit(s) "
                "failed; they stay pending and are retried at the next checkpoint or restart",
                failures,
            )
        return record

    def close(self) -> None:
        """Close every sink (aborting open transactions) and release the job's lock."""
        for sink in self.sinks.values():
            sink.close()
        self.sinks.clear()
        self._lock.release()

    def __enter__(self) -> CheckpointCoordinator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -------------------------------------------------------------- internals

    def _withhold_together(
        self, checkpoint_id: int, transactions: dict[str, DeltaTransaction]
    ) -> None:
        """A failed validation in one sink holds or aborts the checkpoint in every sink.

        The tables of one checkpoint are published together or not at all: totals must
        not become visible without the orders they sum.
        """
        verdicts = {sid: self.sinks[sid].withheld(txn) for sid, txn in transactions.items()}
        found = set(verdicts.values())
        worst = TxnState.ABORTED if TxnState.ABORTED in found else TxnState.HELD
        if worst not in found:
            return
        causes = ", ".join(sorted(sid for sid, verdict in verdicts.items() if verdict))
        for sid, txn in transactions.items():
            if verdicts[sid] is not worst:
                self.sinks[sid].withhold(
                    txn,
                    worst,
                    f"checkpoint {checkpoint_id} {worst.value}: validation of sink(s) "
                    f"{causes} failed",
                )

    def _step(self, name: str, checkpoint_id: int) -> None:
        if self._step_hook is not None:
            self._step_hook(name, checkpoint_id)


def _row(record: CheckpointRecord) -> tuple:
    return (
        record.job_id,
        record.checkpoint_id,
        record.completed_at,
        record.position.to_json(),
        json.dumps(record.sink_states, sort_keys=True),
        json.dumps(list(record.files)),
        json.dumps([[q.file, q.reason] for q in record.quarantined]),
        record.row_count,
    )


def _record(row: dict) -> CheckpointRecord:
    return CheckpointRecord(
        job_id=row["job_id"],
        checkpoint_id=row["checkpoint_id"],
        completed_at=row["completed_at"].astimezone(timezone.utc),
        position=SourcePosition.from_json(row["source_position"]),
        sink_states=json.loads(row["sink_states"]),
        files=tuple(json.loads(row["files"])),
        quarantined=tuple(Quarantined(f, r) for f, r in json.loads(row["quarantined"])),
        row_count=row["row_count"],
    )
