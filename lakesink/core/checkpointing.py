"""The two steps of a checkpoint over several sinks, shared by every driver and operator.

A checkpoint of a driver with several sinks is published in all of them or in none:
``pre_commit_all`` pre-commits every sink and, when one sink's validation held or aborted its
transaction, holds or aborts the checkpoint in the others too (totals must not become
visible without the orders they sum). The ``GlobalCommitter`` then publishes it (Flink
sink2's global committer): it commits every sink, attempting all before raising the first
failure, and once all have published, records the group's cut (``lakesink.core.cut``), and
last runs each sink's post-commit step (a published table brought up to the cut). It
is the one path that records cuts: the checkpoint coordinator, the micro-batch driver and
an operator's ``lakesink commit`` (``lakesink.ops.resolve``) all publish through it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from lakesink.core.cut import Cut, CutMember, form_group, record_cut
from lakesink.core.protocol import TwoPhaseCommitSink
from lakesink.core.state import TxnState
from lakesink.errors import CommitRoundError, ProtocolError

__all__ = ["GlobalCommitter", "pre_commit_all"]

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


class GlobalCommitter:
    """Publishes a group's checkpoints across its sinks, then records the group's cut.

    Args:
        sinks: The sinks a checkpoint is published in, by key; besides them, tables of the
            group that are not written here (``CutMember``s alone) are named in its cuts.
        group_id: Names the group in its cuts; None for sinks read one by one (no cut).
    """

    def __init__(
        self, sinks: Mapping[str, TwoPhaseCommitSink[Any, Any] | CutMember], *, group_id: str | None
    ) -> None:
        self.sinks = sinks
        self.group_id = group_id

    def form_group(self) -> None:
        """Make the group durable before any sink opens (``lakesink.core.cut.form_group``)."""
        if self.group_id:
            form_group(self.group_id, self.sinks.values())

    def commit(self, checkpoint_id: int) -> Cut | None:
        """Commit in every sink all it has pending up to ``checkpoint_id``, then record the
        cut; return it (None: no group).

        Raises:
            CommitRoundError: Some commits failed; every sink was attempted, and the failed
                transactions stay pending for the next commit or the restart.
        """
        failures: list[tuple[int, BaseException]] = []
        committed: list[TwoPhaseCommitSink[Any, Any]] = []
        for sink in self.sinks.values():
            if not isinstance(sink, TwoPhaseCommitSink):
                continue  # a table of the group that is not written here: in the cut only
            if not [c for c in sink.pending_checkpoint_ids if c <= checkpoint_id]:
                continue
            try:
                sink.notify_checkpoint_complete(checkpoint_id, post_commit=False)
            except CommitRoundError as exc:
                failures.extend(exc.failures)
            else:
                committed.append(sink)
        if failures:
            raise CommitRoundError(
                f"checkpoint {checkpoint_id} is complete but {len(failures)} commit(s) failed; "
                "they stay pending and are retried at the next checkpoint or restart",
                failures,
            )
        cut = self.record(checkpoint_id)
        for sink in committed:  # what derives from the committed rows follows the cut
            sink.run_post_commit()
        return cut

    def resolve(
        self,
        checkpoint_id: int,
        *,
        commit: bool,
        reason: str,
        through: int,
        pending: Collection[str] | None = None,
        done: Callable[[str], None] = lambda key: None,
    ) -> Cut | None:
        """An operator's commit or abort of a checkpoint that its stopped sinks hold
        (``TwoPhaseCommitSink.resolve``), in the sinks of ``pending`` (default: all; none
        for a retry of a commit that landed; ``done`` hears each key); a commit then
        records the cut over every sink, named ``through``: the newest checkpoint the
        tables show, as the operator's may be older than the group's last cut."""
        for key in self.sinks if pending is None else pending:
            sink = self.sinks[key]
            if not isinstance(sink, TwoPhaseCommitSink):
                raise ProtocolError(f"{key} is a table of the group, not a sink: it settles none")
            sink.resolve(checkpoint_id, commit=commit, reason=reason)
            done(key)
        return self.record(through) if commit else None

    def record(self, checkpoint_id: int) -> Cut | None:
        """Record the cut of the group as its sinks stand, every one having published
        ``checkpoint_id`` (after a recovery: what the restart published)."""
        if not self.group_id:
            return None
        return record_cut(self.group_id, checkpoint_id, self.sinks.values())
