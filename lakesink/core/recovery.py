"""What a restarted sink does with every transaction it may have left behind: the plan.

A pure function of two inputs: the sink's state in the driver's last *completed*
checkpoint, and the sink's own log (its journal). Failure scenarios it handles:

1. A pre-committed transaction whose checkpoint completed, but whose commit was lost
   (a crash between the driver's record and the sink's commit): commit it. Commit is
   idempotent, so it is re-committed when in doubt.
2. The same, already committed before the crash: the log says so, nothing to do (an
   idempotent commit would change nothing either).
3. A transaction an operator decided to commit (``committing``), whether or not the
   restored state lists it: commit it, whatever else is known.
4. A transaction held by validation in a completed checkpoint: left held for an operator.
5. The transaction open at the snapshot: never pre-committed, so abort it.
6. Lingering transactions: begun, pre-committed or held *after* the snapshot, so not in
   it. Their checkpoint never completed and the driver replays its input: abort them
   (Flink's lingering transactions). Committing a held one later would duplicate rows.
7. A transaction the log shows committed or aborted already (an operator acted): leave it,
   even if the restored state lists it as pending.

Transactions begun after the snapshot are matched by handle, never by checkpoint id, so a
replayed id (the same id, a new transaction) cannot be confused with the aborted attempt,
and nothing here can publish a transaction the restored state does not name (FLINK-8132).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from lakesink.core.state import (
    LoggedTransaction,
    SinkState,
    TransactionHolder,
    TransactionLog,
    TxnState,
)
from lakesink.errors import ProtocolError

__all__ = ["RecoveryPlan", "check_resolvable", "plan"]

TxnT = TypeVar("TxnT", bound=Hashable)

NEVER_PRE_COMMITTED = "open when the sink stopped: never pre-committed"
LINGERING = "not in the last completed checkpoint: its input is replayed"


@dataclass(frozen=True)
class RecoveryPlan(Generic[TxnT]):
    """What recovery does: commit (ascending), keep held, abort (with the reason)."""

    commit: tuple[TransactionHolder[TxnT], ...]
    hold: tuple[TransactionHolder[TxnT], ...]
    abort: tuple[tuple[TransactionHolder[TxnT], str], ...]
    known: frozenset[TransactionHolder[TxnT]]  # every transaction seen: never to be reused

    def summary(self) -> str:
        def ids(holders: Sequence[TransactionHolder[TxnT]]) -> str:
            return ", ".join(str(h.checkpoint_id) for h in holders) or "none"

        return (
            f"commit checkpoints {ids(self.commit)}; keep held {ids(self.hold)}; "
            f"abort {ids([h for h, _ in self.abort])}"
        )


def plan(restored: SinkState[TxnT], logged: TransactionLog[TxnT]) -> RecoveryPlan[TxnT]:
    """The recovery plan for a sink restored to ``restored`` whose log says ``logged``."""
    states = {t.holder.handle: t.state for t in logged.transactions}
    commit: list[TransactionHolder[TxnT]] = []
    hold: list[TransactionHolder[TxnT]] = []
    abort: list[tuple[TransactionHolder[TxnT], str]] = []
    listed: set[TxnT] = set()
    for holder in (*restored.pending_commit, *restored.held):
        listed.add(holder.handle)
        state = states.get(holder.handle)
        if state is not None and state.final:
            continue  # scenarios 2 and 7
        in_held = holder in restored.held
        if state is TxnState.HELD or (in_held and state is not TxnState.COMMITTING):
            hold.append(holder)  # scenario 4
        else:
            commit.append(holder)  # scenarios 1 and 3
    # The open one at the snapshot (scenario 5) may have moved on since, like any other
    # transaction the snapshot does not list as pre-committed (scenario 6).
    unlisted = {t.holder.handle: t for t in logged.unfinished() if t.holder.handle not in listed}
    if restored.current is not None and restored.current.handle not in unlisted:
        state = states.get(restored.current.handle, TxnState.OPEN)
        if not state.final:
            unlisted[restored.current.handle] = LoggedTransaction(restored.current, state)
    for txn in unlisted.values():
        if txn.state is TxnState.COMMITTING:
            commit.append(txn.holder)  # scenario 3
        else:
            reason = NEVER_PRE_COMMITTED if txn.state is TxnState.OPEN else LINGERING
            abort.append((txn.holder, reason))  # scenarios 5 and 6
    return RecoveryPlan(
        commit=tuple(sorted(commit, key=lambda h: h.checkpoint_id)),
        hold=tuple(hold),
        abort=tuple(abort),
        known=frozenset(
            [*restored.pending_commit, *restored.held]
            + ([restored.current] if restored.current else [])
            + [t.holder for t in logged.transactions]
        ),
    )


def check_resolvable(transactions: Sequence[LoggedTransaction[TxnT]], *, commit: bool) -> None:
    """Refuse an operator's action that could publish partial or undo decided data.

    Raises:
        ProtocolError: A commit of a transaction never pre-committed (its rows may be
            incomplete), or an abort of one whose commit was already decided.
    """
    for txn in transactions:
        where = f"transaction {txn.holder.handle!r} of checkpoint {txn.holder.checkpoint_id}"
        if commit and txn.state is TxnState.OPEN:
            raise ProtocolError(
                f"{where} was never pre-committed, so it may be incomplete; abort it instead"
            )
        if not commit and txn.state is TxnState.COMMITTING:
            raise ProtocolError(
                f"the commit of {where} was already decided; it can only be committed"
            )
