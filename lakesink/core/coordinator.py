"""The checkpoint coordinator: Flink's JobManager role, on the driver of a lakesink job.

A checkpoint (1) has every sink pre-commit, (2) records the checkpoint — its id, the source
position and every sink's state — in one atomic append to the checkpoint store, which is
the moment it completes, and (3) tells every sink to commit. A restarted job resumes from
the last completed checkpoint: the source from its position, each sink from its state.

The coordinator hands out the checkpoint ids, one per checkpoint, and never reuses one: a
restarted job starts above its last record and above every id its sinks' logs know, so a
checkpoint that failed before its record keeps its id (aborted) and its input is read
again under a new one.

Engine-free: the sinks are any ``TwoPhaseCommitSink``, the source any ``Source``, the
store any ``CheckpointStore`` (``lakesink.tables.checkpoints`` keeps it in a Delta table).
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Generic, Protocol, TypeVar

from lakesink.core.checkpointing import GlobalCommitter, pre_commit_all
from lakesink.core.hook import current_step_hook
from lakesink.core.protocol import Clock, SystemClock, TwoPhaseCommitSink
from lakesink.core.source import Batch, Quarantined, Source
from lakesink.core.state import SinkState
from lakesink.errors import ConfigurationError, ProtocolError

__all__ = [
    "CheckpointCoordinator",
    "CheckpointRecord",
    "CheckpointStore",
    "Lock",
    "Pacing",
]

log = logging.getLogger(__name__)

DataT = TypeVar("DataT")


class Lock(Protocol):
    """Fences a second live process out of the same job."""

    def acquire(self) -> None: ...

    def check(self) -> None:
        """Raise if this process no longer holds it (a lease another host took over)."""
        ...

    def release(self) -> None: ...


@dataclass(frozen=True, kw_only=True)
class CheckpointRecord:
    """A completed checkpoint: where the source stood after it, and each sink's state.

    Attributes:
        job_id: The job that made it.
        checkpoint_id: Its id, the same in every sink's journal.
        completed_at: When it was recorded (UTC).
        source_position: The source's opaque position after this checkpoint's input.
        sink_states: Per sink key, the ``SinkState`` JSON at this checkpoint.
        items: What the checkpoint consumed (files, offset ranges).
        rows: Rows the job wrote for it, if counted.
        quarantined: Items of its input set aside because they could not be read.
    """

    job_id: str
    checkpoint_id: int
    completed_at: datetime
    source_position: str | None = None
    sink_states: Mapping[str, str] = field(default_factory=dict)
    items: tuple[str, ...] = ()
    rows: int | None = None
    quarantined: tuple[Quarantined, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """What ``lakesink checkpoints --json`` prints of it."""
        return {
            "checkpoint_id": self.checkpoint_id,
            "completed_at": self.completed_at.isoformat(),
            "items": list(self.items),
            "rows": self.rows,
            "quarantined": [{"item": q.item, "reason": q.reason} for q in self.quarantined],
        }


class CheckpointStore(ABC):
    """Where completed checkpoints are recorded: one atomic append each, never changed."""

    @abstractmethod
    def append(self, record: CheckpointRecord) -> None:
        """Record a checkpoint atomically: the moment it completes."""

    @abstractmethod
    def history(self, job_id: str) -> list[CheckpointRecord]:
        """Every completed checkpoint of a job, oldest first."""

    def latest(self, job_id: str) -> CheckpointRecord | None:
        """The last completed checkpoint of a job, or None before the first."""
        records = self.history(job_id)
        return records[-1] if records else None

    @abstractmethod
    def job_lock(self, job_id: str) -> Lock:
        """The lock a live run of the job holds, so a second run is refused."""


@dataclass(frozen=True, kw_only=True)
class Pacing:
    """How ``CheckpointCoordinator.run`` cuts its input into checkpoints.

    Attributes:
        max_items: At most this many items (files, say) per checkpoint.
        follow: Keep polling for new input instead of stopping when it is drained.
        interval_s: With ``follow``, checkpoint once this long has passed since the last
            checkpoint even with fewer than ``max_items`` items.
        poll_s: With ``follow``, how long to wait between looks at the source.
        max_checkpoints: Stop after this many checkpoints (None: no limit).
    """

    max_items: int = 10
    follow: bool = False
    interval_s: float = 30.0
    poll_s: float = 1.0
    max_checkpoints: int | None = None

    def __post_init__(self) -> None:
        if self.max_items < 1:
            raise ConfigurationError(f"max_items must be at least 1, got {self.max_items}")
        if self.interval_s <= 0 or self.poll_s <= 0:
            raise ConfigurationError("interval_s and poll_s must be positive")


class CheckpointCoordinator(Generic[DataT]):
    """Drives checkpoints for one job over a fixed set of sinks.

    Opening it takes the job's lock, reads the last completed checkpoint, and restores
    every sink to it (each sink's recovery runs then).

    Args:
        store: Where checkpoints are recorded.
        job_id: Names the job in the store.
        sinks: The job's sinks, by the key their state is recorded under (keep it stable
            across runs: a sink whose key changed is restored to nothing).
        clock: Where ``run`` reads the time.
        group_id: Names the sinks' group in the cuts their readers read at
            (``lakesink.core.cut``); default: the job id.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        job_id: str,
        sinks: Mapping[str, TwoPhaseCommitSink[Any, DataT]],
        clock: Clock | None = None,
        group_id: str | None = None,
    ) -> None:
        if not job_id:
            raise ConfigurationError("job_id must not be empty")
        if not sinks:
            raise ConfigurationError(f"job {job_id!r} has no sinks; give it at least one")
        self.store = store
        self.job_id = job_id
        self.sinks = dict(sinks)
        self.group_id = group_id or job_id
        self._step_hook = current_step_hook()  # a test's fault injection, else none
        self._clock = clock or SystemClock()
        self._broken: str | None = None
        # One live process per job: a second one would consume the same input twice.
        self._lock = store.job_lock(job_id)
        self._lock.acquire()
        self._committer = GlobalCommitter(self.sinks, group_id=self.group_id)
        self._committer.form_group()
        try:
            self.last = store.latest(job_id)
            used = max(
                [self.last.checkpoint_id if self.last else 0]
                + [sink.read_log().last_checkpoint_id for sink in self.sinks.values()]
            )
            self._next_id = used + 1
            for key, sink in self.sinks.items():
                sink.initialize_state(self._restored(key, sink), next_checkpoint_id=used + 1)
            self._step("after_recovery", self.last.checkpoint_id if self.last else 0)
            # Recovery published what the last checkpoint left unpublished: its cut now.
            self._committer.record(self.last.checkpoint_id if self.last else 0)
        except BaseException:
            self.close()
            raise
        log.info(
            "job %s: restored to checkpoint %s; the next is %d",
            job_id,
            self.last.checkpoint_id if self.last else "none",
            self._next_id,
        )

    @property
    def position(self) -> str | None:
        """Where the source resumes: its position after the last completed checkpoint."""
        return self.last.source_position if self.last else None

    @property
    def next_checkpoint_id(self) -> int:
        """The id the next checkpoint will have."""
        return self._next_id

    def trigger_checkpoint(
        self,
        position: str | None,
        *,
        items: tuple[str, ...] = (),
        rows: int | None = None,
        quarantined: tuple[Quarantined, ...] = (),
    ) -> CheckpointRecord:
        """Pre-commit every sink, record the checkpoint, then commit every sink.

        Failure scenarios (2-4 are resolved by a restart from the last completed one):

        1. A sink's validation failed: every sink's transaction of the checkpoint is held
           or aborted with it before the record; the checkpoint completes (its input is
           consumed), nothing of it is committed, and an operator decides on a held one.
        2. Crash before the record: the pre-committed transactions are not in any
           completed checkpoint; the restarted sinks abort them and the source replays
           their input under a new checkpoint id.
        3. Crash after the record, before or during the commits: the restarted sinks find
           them in the record and commit them (idempotently); the source does not replay.
        4. A commit that fails without a crash: raised after every sink was attempted;
           the transaction stays pending and the next checkpoint's commit retries it.
        5. A pre-commit that raises: nothing is recorded and the coordinator refuses to
           go on (its sinks no longer agree on the next id); restart the job.
        6. The job's lease was taken over (another host runs the job now): nothing is
           recorded, the coordinator refuses to go on, and the run that holds the lease
           aborts what this one pre-committed, as in 2.
        """
        if self._broken:
            raise ProtocolError(f"job {self.job_id}: {self._broken}; restart the job to recover")
        checkpoint_id = self._next_id
        try:
            pre_commit_all(self.sinks, checkpoint_id)
        except BaseException:
            self._broken = f"the pre-commit of checkpoint {checkpoint_id} failed"
            raise
        self._step("after_pre_commit", checkpoint_id)
        record = CheckpointRecord(
            job_id=self.job_id,
            checkpoint_id=checkpoint_id,
            completed_at=datetime.fromtimestamp(self._clock.millis() / 1000, tz=timezone.utc),
            source_position=position,
            sink_states={key: sink.state.to_json() for key, sink in self.sinks.items()},
            items=items,
            rows=rows,
            quarantined=quarantined,
        )
        try:  # the record decides the commit: a run that lost its lease must not make it
            self._lock.check()
        except BaseException:
            self._broken = f"it lost its lease before recording checkpoint {checkpoint_id}"
            raise
        self.store.append(record)
        self.last, self._next_id = record, checkpoint_id + 1
        log.info(
            "checkpoint %d of job %s complete (%d items)", checkpoint_id, self.job_id, len(items)
        )
        self._step("after_record", checkpoint_id)
        self._committer.commit(checkpoint_id)
        return record

    def run(
        self,
        source: Source[DataT],
        process: Callable[[DataT], int | None],
        *,
        pacing: Pacing,
        on_checkpoint: Callable[[CheckpointRecord, Batch], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> int:
        """Consume ``source`` checkpoint by checkpoint; return how many were taken.

        For each batch: ``process(data)`` writes it into the sinks (returning the rows it
        wrote, if it counts them), then ``checkpoint`` records it with the source's new
        position. Without ``pacing.follow`` it stops once the source has nothing new.
        """
        taken = 0
        last_at = self._clock.millis()
        while pacing.max_checkpoints is None or taken < pacing.max_checkpoints:
            batch = source.next_batch(self.position, limit=pacing.max_items)
            if batch is None and not pacing.follow:
                break
            waited_s = (self._clock.millis() - last_at) / 1000
            due = batch is not None and (
                not pacing.follow
                or len(batch.items) >= pacing.max_items
                or waited_s >= pacing.interval_s
            )
            if not due:
                sleep(min(pacing.poll_s, pacing.interval_s))
                continue
            assert batch is not None
            data, quarantined = source.read(batch)
            rows = process(data)
            record = self.trigger_checkpoint(
                batch.position, items=batch.items, rows=rows, quarantined=quarantined
            )
            taken, last_at = taken + 1, self._clock.millis()
            if on_checkpoint is not None:
                on_checkpoint(record, batch)
        return taken

    def close(self) -> None:
        """Close every sink (aborting open transactions) and release the job's lock."""
        try:
            for sink in self.sinks.values():
                sink.close()
        finally:
            self._lock.release()

    def __enter__(self) -> CheckpointCoordinator[DataT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -------------------------------------------------------------- internals

    def _restored(self, key: str, sink: TwoPhaseCommitSink[Any, DataT]) -> SinkState[Any]:
        text = self.last.sink_states.get(key) if self.last else None
        if text:
            return SinkState.from_json(text, sink.handle_type)
        # A sink new to the job (or none completed yet): nothing of it to restore.
        return SinkState(last_checkpoint_id=self.last.checkpoint_id if self.last else 0)

    def _step(self, name: str, checkpoint_id: int) -> None:
        if self._step_hook is not None:
            self._step_hook(name, checkpoint_id)
