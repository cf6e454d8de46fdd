"""The records of the protocol: transaction states, holders, snapshots and a sink's log.

Pure data, shared by the protocol (``lakesink.core.protocol``), its recovery plan
(``lakesink.core.recovery``) and every implementation.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar, cast

from lakesink.errors import ProtocolError

__all__ = [
    "LoggedTransaction",
    "PreCommit",
    "SinkState",
    "TransactionHolder",
    "TransactionLog",
    "TxnState",
]

TxnT = TypeVar("TxnT", bound=Hashable)


class TxnState(str, Enum):
    """Where a transaction stands; the value is what a sink's log (the journal) stores.

    open -> pre_committed [-> held] [-> committing] -> committed, or -> aborted.
    """

    OPEN = "open"
    PRE_COMMITTED = "pre_committed"
    HELD = "held"  # failed validation under the quarantine policy: an operator decides
    COMMITTING = "committing"  # the commit decision: recovery must finish it
    COMMITTED = "committed"
    ABORTED = "aborted"

    @property
    def rank(self) -> int:
        """States only move forward: a higher rank is later (committed and aborted tie)."""
        return _RANK[self]

    @property
    def final(self) -> bool:
        """Committed or aborted: nothing more happens to the transaction."""
        return self in (TxnState.COMMITTED, TxnState.ABORTED)

    @property
    def decided(self) -> bool:
        """Committing or committed: its commit was decided, and recovery must finish it."""
        return self in (TxnState.COMMITTING, TxnState.COMMITTED)

    @property
    def pending(self) -> bool:
        """Open, pre-committed or committing: it waits for the protocol (held ones wait for
        an operator)."""
        return self in (TxnState.OPEN, TxnState.PRE_COMMITTED, TxnState.COMMITTING)


_RANK = {
    TxnState.OPEN: 0,
    TxnState.PRE_COMMITTED: 1,
    TxnState.HELD: 2,
    TxnState.COMMITTING: 3,
    TxnState.COMMITTED: 4,
    TxnState.ABORTED: 4,
}


@dataclass(frozen=True)
class TransactionHolder(Generic[TxnT]):
    """A transaction handle with the checkpoint it belongs to and when it began."""

    handle: TxnT
    checkpoint_id: int
    started_at_ms: int


@dataclass(frozen=True)
class PreCommit(Generic[TxnT]):
    """What a pre-commit hands over (Flink sink2's ``prepareCommit``): the transaction's
    committable, which its commit, a snapshot and recovery take from then on, and the
    verdict on it.

    The committable is the transaction's handle, or the handle with what its commit needs
    added (its row count, say); either way equal to the handle: the same transaction.
    """

    committable: TxnT
    verdict: TxnState = TxnState.PRE_COMMITTED


@dataclass(frozen=True)
class SinkState(Generic[TxnT]):
    """What a snapshot holds: pre-committed (ascending), held, and the open transaction.

    ``last_checkpoint_id`` is the driver's last checkpoint this state accounts for; the
    open transaction, if any, belongs to the next one. Handles must be JSON scalars or
    dataclasses of JSON scalars to survive ``to_json``.
    """

    pending_commit: tuple[TransactionHolder[TxnT], ...] = ()
    held: tuple[TransactionHolder[TxnT], ...] = ()
    current: TransactionHolder[TxnT] | None = None
    last_checkpoint_id: int = 0

    def __post_init__(self) -> None:
        late = [
            h.checkpoint_id
            for h in (*self.pending_commit, *self.held)
            if h.checkpoint_id > self.last_checkpoint_id
        ]
        if late:
            raise ProtocolError(
                f"a sink state of checkpoint {self.last_checkpoint_id} holds pre-committed "
                f"transactions of later checkpoints {sorted(late)}; it is corrupt"
            )

    def to_json(self) -> str:
        def holder(h: TransactionHolder[TxnT]) -> dict[str, Any]:
            handle = (
                dataclasses.asdict(cast(Any, h.handle))
                if dataclasses.is_dataclass(h.handle)
                else h.handle
            )
            return {
                "handle": handle,
                "checkpoint_id": h.checkpoint_id,
                "started_at_ms": h.started_at_ms,
            }

        return json.dumps(
            {
                "pending_commit": [holder(h) for h in self.pending_commit],
                "held": [holder(h) for h in self.held],
                "current": holder(self.current) if self.current else None,
                "last_checkpoint_id": self.last_checkpoint_id,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str, handle_type: type[TxnT] | None = None) -> SinkState[TxnT]:
        """Rebuild a state written by ``to_json``; ``handle_type`` rebuilds each handle."""
        data = json.loads(text)

        def holder(d: dict[str, Any]) -> TransactionHolder[TxnT]:
            raw = d["handle"]
            if handle_type is None:
                handle = raw
            else:
                # A handle type is any Hashable class; its constructor takes the stored fields.
                handle = (
                    cast(Callable[..., TxnT], handle_type)(**raw)
                    if isinstance(raw, dict)
                    else cast(Callable[..., TxnT], handle_type)(raw)
                )
            return TransactionHolder(handle, int(d["checkpoint_id"]), int(d["started_at_ms"]))

        current = data.get("current")
        return cls(
            pending_commit=tuple(holder(d) for d in data["pending_commit"]),
            held=tuple(holder(d) for d in data.get("held", ())),
            current=holder(current) if current else None,
            last_checkpoint_id=int(data["last_checkpoint_id"]),
        )


@dataclass(frozen=True)
class LoggedTransaction(Generic[TxnT]):
    """One transaction as a sink's own durable log (the journal) knows it now."""

    holder: TransactionHolder[TxnT]
    state: TxnState


@dataclass(frozen=True)
class TransactionLog(Generic[TxnT]):
    """A sink's log: its transactions, and the highest checkpoint id its writers used.

    ``last_checkpoint_id`` may exceed every id in ``transactions``: other writers of the
    same sink count too, so that writers started together share their checkpoint ids.
    """

    transactions: tuple[LoggedTransaction[TxnT], ...] = ()
    last_checkpoint_id: int = 0

    def unfinished(self) -> list[LoggedTransaction[TxnT]]:
        """The transactions neither committed nor aborted, by checkpoint id."""
        found = [t for t in self.transactions if not t.state.final]
        return sorted(found, key=lambda t: t.holder.checkpoint_id)

    def completed_through(self, checkpoint_id: int | None) -> SinkState[TxnT]:
        """The state of a sink whose driver completed every checkpoint up to ``checkpoint_id``.

        Its pre-committed and decided transactions up to that id are pending, its held ones
        held; the next checkpoint is the one after. None: every checkpoint the log knows
        completed (a sink that is its own driver), and ids continue above all of them.
        """
        unfinished = self.unfinished()
        if checkpoint_id is None:
            checkpoint_id = max(
                [self.last_checkpoint_id, *(t.holder.checkpoint_id for t in unfinished)]
            )
        done = [t for t in unfinished if t.holder.checkpoint_id <= checkpoint_id]
        return SinkState(
            pending_commit=tuple(
                t.holder for t in done if t.state in (TxnState.PRE_COMMITTED, TxnState.COMMITTING)
            ),
            held=tuple(t.holder for t in done if t.state is TxnState.HELD),
            last_checkpoint_id=checkpoint_id,
        )
