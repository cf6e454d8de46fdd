"""Checkpoints driven by a micro-batch engine (Spark Structured Streaming), engine-free.

The engine's batch id is the checkpoint id, and the engine's own commit log is the
checkpoint record: the engine runs batch N only once batch N-1 is in its commit log, and
after a restart it runs again, under the same id, the batch it had not recorded. So the
driver keeps no record of its own; it reads ``recorded()``, the last batch in the engine's
commit log (-1 before the first).

Failure scenarios, and what the driver does:

1. Crash while batch N is written or pre-committed, before the engine records it: on
   restart every sink aborts N's transaction (not recorded, replayed), and the engine runs
   N again with the same input: a new transaction under the same id.
2. Crash after the engine recorded N, before or during the commit: on restart the sinks
   commit N (recorded), idempotently, even if the engine has no new input to run.
3. A commit that fails while the query runs: raised from the next batch (the query stops
   with it); the transaction stays pending and the restart commits it.
4. A validation failure in one sink: batch N is held or aborted in every sink before the
   engine records it (``pre_commit_all``).
5. The engine's checkpoint location was deleted, or another one given: its batch ids start
   again below ones the sinks' logs have committed or pre-committed. Reusing them would
   mix two queries' batches under one id: refused, naming the fix.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

from lakesink.core.checkpointing import GlobalCommitter, pre_commit_all
from lakesink.core.hook import StepHook
from lakesink.core.protocol import TwoPhaseCommitSink
from lakesink.core.state import TxnState
from lakesink.errors import CheckpointOrderError, ConfigurationError

__all__ = ["MicroBatchDriver"]

log = logging.getLogger(__name__)

SinkT = TypeVar("SinkT", bound=TwoPhaseCommitSink[Any, Any])


class MicroBatchDriver(Generic[SinkT]):
    """Pre-commits each micro-batch in every sink, and commits what the engine recorded.

    Safe to use from the engine's batch thread and a listener thread at once: one batch or
    one commit runs at a time.

    Args:
        sinks: The sinks every batch writes, by name.
        recorded: The last batch id in the engine's commit log, -1 before the first.
        where: Names the engine's checkpoint location in errors.
        step_hook: Called with ``after_recovery`` (the sinks are open and recovered, the
            group's cut of it not recorded yet), ``after_pre_commit`` (the batch is
            pre-committed, the engine has not recorded it) and ``after_record`` (the driver
            found it recorded and commits it next), and the batch id.
        group_id: Names the sinks' group in the cuts their readers read at
            (``lakesink.core.cut``); default: ``where``.

    Raises:
        ConfigurationError: The engine's record is behind the sinks' logs (scenario 5).
    """

    def __init__(
        self,
        sinks: Mapping[str, SinkT],
        *,
        recorded: Callable[[], int],
        where: str,
        step_hook: StepHook | None = None,
        group_id: str | None = None,
    ) -> None:
        if not sinks:
            raise ConfigurationError("a micro-batch driver needs at least one sink")
        self.sinks = dict(sinks)
        self.group_id = group_id or where
        self._recorded = recorded
        self._step_hook = step_hook
        self._lock = threading.RLock()
        last = recorded()
        self._committer = GlobalCommitter(self.sinks, group_id=self.group_id)
        self._committer.form_group()
        try:
            recovered = {
                c for n, s in self.sinks.items() for c in _recorded_pending(n, s, last, where)
            }
            for sink in self.sinks.values():
                sink.initialize_from_log(last)
            self._step("after_recovery", last)
            # Recovery published what the engine recorded: its cut now.
            self._committer.record(last)
        except BaseException:
            self.close(commit=False)
            raise
        self._committed_through = last
        #: The recorded batches this driver's recovery committed, in order.
        self.recovered = sorted(recovered)
        log.info("micro-batches: recorded through %d; the next is %d", last, last + 1)

    @property
    def next_batch_id(self) -> int:
        """The batch id the sinks expect next."""
        return next(iter(self.sinks.values())).current_checkpoint_id

    @contextmanager
    def batch(self, batch_id: int) -> Iterator[Mapping[str, SinkT]]:
        """Run batch ``batch_id``: yields the sinks to write into, then pre-commits them.

        Everything the engine recorded before this batch is committed first (the engine
        runs N only after recording N-1). If the block raises, nothing is pre-committed:
        the query fails, and its restart aborts and replays the batch.
        """
        with self._lock:
            self.commit_recorded(through=batch_id - 1)
            expected = self.next_batch_id
            if batch_id != expected:
                raise CheckpointOrderError(
                    f"micro-batch {batch_id} came, but the sinks expect batch {expected}: "
                    "the query's checkpoint location is not the one the sink was given, or "
                    "one sink is shared by two queries; give each query its own sink and "
                    "the same checkpoint location as the query"
                )
            yield self.sinks
            verdicts = pre_commit_all(self.sinks, batch_id)
            self._step("after_pre_commit", batch_id)
            if set(verdicts.values()) != {TxnState.PRE_COMMITTED}:
                log.warning("micro-batch %d is %s in every sink", batch_id, verdicts)

    def commit_recorded(self, *, through: int | None = None) -> list[int]:
        """Commit the batches the engine recorded (up to ``through``); return their ids."""
        with self._lock:
            last = self._recorded() if through is None else through
            pending = sorted(
                {c for s in self.sinks.values() for c in s.pending_checkpoint_ids if c <= last}
            )
            if last <= self._committed_through and not pending:
                return []
            for batch_id in pending:
                self._step("after_record", batch_id)
            if pending:
                self._committer.commit(last)
                log.info("micro-batches %s recorded by the engine: committed", pending)
            self._committed_through = max(self._committed_through, last)
            return pending

    def close(self, *, commit: bool = True) -> None:
        """Commit what the engine recorded (unless ``commit`` is false), close every sink."""
        with self._lock:
            try:
                if commit:
                    self.commit_recorded()
            finally:
                for sink in self.sinks.values():
                    sink.close()

    def _step(self, name: str, batch_id: int) -> None:
        if self._step_hook is not None:
            self._step_hook(name, batch_id)


def _recorded_pending(
    name: str, sink: TwoPhaseCommitSink[Any, Any], last: int, where: str
) -> set[int]:
    """The recorded batches the sink's recovery commits; refuses a record that is behind
    what the sink's log says happened (scenario 5)."""
    logged = sink.read_log()
    ahead = [
        t
        for t in logged.transactions
        if t.holder.checkpoint_id > last + 1
        or (t.state is TxnState.COMMITTED and t.holder.checkpoint_id > last)
    ]
    if ahead:
        seen = max(t.holder.checkpoint_id for t in ahead)
        raise ConfigurationError(
            f"sink {name!r} has batch {seen} of this writer in its journal, but the "
            f"checkpoint location {where} has recorded batches only up to {last}: it was "
            "deleted or is another query's, and its batch ids would be used twice. Give "
            "the query its original checkpoint location, or give the sink a new writer_id "
            "(its batch ids then start again at 0)"
        )
    return {h.checkpoint_id for h in logged.completed_through(last).pending_commit}
