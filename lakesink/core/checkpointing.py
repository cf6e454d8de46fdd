"""The two steps of a checkpoint over several sinks, shared by every driver.

A checkpoint of a driver with several sinks is published in all of them or in none:
``pre_commit_all`` pre-commits every sink and, when one sink's validation held or aborted its
transaction, holds or aborts the checkpoint in the others too (totals must not become
visible without the orders they sum); ``commit_all`` commits every sink, side by side,
attempting all before raising the first failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lakesink.core.protocol import TwoPhaseCommitSink
from lakesink.core.state import TxnState
from lakesink.errors import CommitError

__all__ = ["commit_all", "pre_commit_all"]

Sinks = Mapping[str, TwoPhaseCommitSink[Any, Any]]


def pre_commit_all(sinks: Sinks, checkpoint_id: int) -> dict[str, TxnState]:
    """Pre-commit every sink as ``checkpoint_id``; return each one's verdict after withholding."""
    for sink in sinks.values():
        sink.snapshot_state(checkpoint_id)
    verdicts = {key: sink.verdict(checkpoint_id) for key, sink in sinks.items()}
    found = set(verdicts.values())
    worst = TxnState.ABORTED if TxnState.ABORTED in found else TxnState.HELD
    if worst not in found:
        return verdicts
    causes = ", ".join(sorted(k for k, v in verdicts.items() if v is not TxnState.PRE_COMMITTED))
    for key, sink in sinks.items():
        if verdicts[key] is not worst:
            sink.withhold(
                checkpoint_id,
                worst,
                f"checkpoint {checkpoint_id} {worst.value}: validation of sink(s) {causes} failed",
            )
    return dict.fromkeys(sinks, worst)


def commit_all(sinks: Sinks, checkpoint_id: int) -> None:
    """Commit in every sink all it has pending up to ``checkpoint_id``, the sinks side by side.

    The sinks' commits are independent (each its own table), and a commit is mostly waiting
    (a Delta MERGE is a few small Spark jobs): run one after the other, a checkpoint of two
    sinks paid two of them.

    Raises:
        CommitError: Some commits failed; every sink was attempted, and the failed
            transactions stay pending for the next commit or the restart.
    """
    due = [
        sink
        for sink in sinks.values()
        if any(c <= checkpoint_id for c in sink.pending_checkpoint_ids)
    ]
    if len(due) <= 1:
        outcomes = [_commit(sink, checkpoint_id) for sink in due]
    else:
        with ThreadPoolExecutor(len(due), thread_name_prefix="lakesink-commit") as pool:
            outcomes = list(pool.map(lambda sink: _commit(sink, checkpoint_id), due))
    failures: list[tuple[int, BaseException]] = []
    for outcome in outcomes:
        if isinstance(outcome, CommitError):
            failures.extend(outcome.failures)
        elif outcome is not None:  # not a commit failure (a bug, a kill): as if unthreaded
            raise outcome
    if failures:
        raise CommitError(
            f"checkpoint {checkpoint_id} is complete but {len(failures)} commit(s) failed; "
            "they stay pending and are retried at the next checkpoint or restart",
            failures,
        )


def _commit(sink: TwoPhaseCommitSink[Any, Any], checkpoint_id: int) -> BaseException | None:
    """Commit one sink; what it raised, returned, so every sink is attempted."""
    try:
        sink.notify_checkpoint_complete(checkpoint_id)
    except BaseException as exc:  # re-raised by commit_all once all sinks are done
        return exc
    return None
