"""Checkpoints a user's ``RESTORE`` took back, shown as they are: their rows are gone.

``RESTORE TABLE ... TO VERSION AS OF v`` gives the table the files of version ``v``: every
commit after ``v`` is undone. A checkpoint published after ``v`` is then no longer in the
table: the files its commit added are removed, and its pending files, if they were still
on disk, are live again, masked. Its transactions stay committed in the journal unless
something says otherwise, and a commit must never publish those rows again (the vacuum
re-commits a committed transaction whose pending partition holds files, for a release that
did not follow). So:

- ``restored_statuses`` marks, from the table's history, each committed transaction whose
  publishing version the table no longer holds (``lakesink.tables.history.lineage``):
  ``aborted``, ``restored``. ``lakesink.Table.checkpoints`` shows them so at once.
- ``journal_restores`` journals an ``aborted`` event (``restored: ...``) for each one the
  journal does not know yet, at lakesink's next action (the published table's update that
  meets the RESTORE, the vacuum); from then on the vacuum removes their masked rows as it
  removes an aborted transaction's.

A later ``RESTORE`` back to a version that holds the commit would show the rows again; a
transaction journaled ``restored`` stays so (the journal only moves forward), and the
audit names the difference.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime, timezone

from lakesink.core import TxnState
from lakesink.tables.history import HistoryEntry, first_versions, lineage, read_history
from lakesink.tables.journal import RESTORED_PREFIX, Journal, TransactionStatus

__all__ = ["journal_restores", "restored_statuses"]

log = logging.getLogger(__name__)


def restored_statuses(
    statuses: Sequence[TransactionStatus], history: Sequence[HistoryEntry]
) -> list[TransactionStatus]:
    """``statuses`` with each committed transaction whose commit the table's newest version
    no longer holds (a RESTORE undid it) marked ``aborted`` and ``restored``."""
    published = first_versions(history, "commit")
    held = lineage(history)
    newest = max((entry.version for entry in history), default=-1)
    return [
        dataclasses.replace(s, state=TxnState.ABORTED, restored=True)
        if s.state is TxnState.COMMITTED
        and s.txn_id in published
        and published[s.txn_id] <= newest
        and published[s.txn_id] not in held
        else s
        for s in statuses
    ]


def journal_restores(
    table_path: str, journal: Journal, statuses: Sequence[TransactionStatus]
) -> list[TransactionStatus]:
    """Journal each committed transaction of ``statuses`` that a RESTORE of the table at
    ``table_path`` undid; return those (already journaled ones are not again)."""
    committed = [s for s in statuses if s.state is TxnState.COMMITTED]
    if not committed:
        return []
    history = read_history(table_path)
    undone = [s for s in restored_statuses(committed, history) if s.restored]
    if not undone:
        return []
    restores = [e for e in history if e.restored_to is not None]
    now = datetime.now(timezone.utc)
    journal.record(
        *(
            s.event(
                table_path=table_path,
                state=TxnState.ABORTED,
                event_time=now,
                row_count=s.row_count,
                detail=f"{RESTORED_PREFIX} {_which(s, history, restores)}; its rows are gone "
                "from the table, and its masked rows go with the vacuum",
            )
            for s in undone
        )
    )
    log.warning(
        "%s: a RESTORE undid the commit of checkpoint(s) %s; journaled as restored",
        table_path,
        ", ".join(str(c) for c in sorted({s.checkpoint_id for s in undone})),
    )
    return undone


def _which(
    status: TransactionStatus, history: Sequence[HistoryEntry], restores: Sequence[HistoryEntry]
) -> str:
    """Which RESTORE undid the transaction's commit, in words."""
    published = first_versions(history, "commit").get(status.txn_id, -1)
    for entry in restores:
        target = entry.restored_to
        if entry.version > published and (not isinstance(target, int) or target < published):
            return (
                f"the RESTORE of version {entry.version} took the table back to "
                f"{entry.restored_to}, before this checkpoint's commit (version {published})"
            )
    return f"a RESTORE undid this checkpoint's commit (version {published})"
