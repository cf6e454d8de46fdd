"""The two steps of a checkpoint over several sinks, shared by every driver.

A checkpoint of a driver with several sinks is published in all of them or in none:
``pre_commit_all`` pre-commits every sink and, when one sink's validation held or aborted its
transaction, holds or aborts the checkpoint in the others too (totals must not become
visible without the orders they sum); ``commit_all`` commits every sink, attempting all before
raising the first failure, and once all have published, records the group's cut
(``lakesink.core.cut``): the global committer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lakesink.core.cut import Cut, record_cut
from lakesink.core.protocol import TwoPhaseCommitSink
from lakesink.core.state import TxnState
from lakesink.errors import CommitRoundError

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


def commit_all(sinks: Sinks, checkpoint_id: int, *, group_id: str | None = None) -> Cut | None:
    """Commit in every sink all it has pending up to ``checkpoint_id``, then record the cut.

    ``group_id`` names the group whose cut to record once every commit succeeded (None: no
    cut); returns the cut recorded, if any.

    Raises:
        CommitRoundError: Some commits failed; every sink was attempted, and the failed
            transactions stay pending for the next commit or the restart.
    """
    failures: list[tuple[int, BaseException]] = []
    for sink in sinks.values():
        if not [c for c in sink.pending_checkpoint_ids if c <= checkpoint_id]:
            continue
        try:
            sink.notify_checkpoint_complete(checkpoint_id)
        except CommitRoundError as exc:
            failures.extend(exc.failures)
    if failures:
        raise CommitRoundError(
            f"checkpoint {checkpoint_id} is complete but {len(failures)} commit(s) failed; "
            "they stay pending and are retried at the next checkpoint or restart",
            failures,
        )
    return record_cut(group_id, checkpoint_id, sinks.values()) if group_id else None
