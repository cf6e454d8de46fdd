"""The expiry of stale open transactions, for the vacuum: which open transactions past the
expiry it may abort, and their abort events in the journal.

An open transaction was never pre-committed, and only its live writer could still
pre-commit it, however old it is (a restarted writer aborts its own leftovers). So an old
one expires only once its writer is gone: its lock released or stale, which is probed for
each one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from lakesink.core import TxnState
from lakesink.errors import ConfigurationError
from lakesink.storage.lease import writer_lock
from lakesink.tables.journal import Journal, TransactionStatus

__all__ = ["age_text", "check_expiry", "expired_open", "journal_expired"]

log = logging.getLogger(__name__)


def check_expiry(expire_open_after: timedelta) -> None:
    """Refuse an expiry that is not positive (``plan_vacuum`` and the command check it).

    Raises:
        ConfigurationError: ``expire_open_after`` is zero or negative.
    """
    if expire_open_after <= timedelta(0):
        raise ConfigurationError(
            f"the expiry of open transactions must be positive, got {expire_open_after}; "
            "an open transaction younger than that may still be written to"
        )


def expired_open(
    statuses: Sequence[TransactionStatus],
    *,
    table_path: str,
    sink_id: str,
    now: datetime,
    expire_open_after: timedelta,
) -> tuple[list[TransactionStatus], list[TransactionStatus]]:
    """The open transactions older than ``expire_open_after`` (since their first write): those
    whose writer is gone, which expire, and those whose writer still runs, which do not (each
    logged as a warning)."""
    expired: list[TransactionStatus] = []
    live: list[TransactionStatus] = []
    for s in statuses:
        if s.state is TxnState.OPEN and now - s.opened_at > expire_open_after:
            held = writer_lock(table_path, sink_id, s.writer_id).is_held()
            (live if held else expired).append(s)
    for s in live:
        log.warning(
            "vacuum %s: open transaction %s (checkpoint %d) is %s old, but writer %r is still "
            "running; it is not expired",
            table_path,
            s.txn_id,
            s.checkpoint_id,
            age_text(now - s.opened_at),
            s.writer_id,
        )
    return expired, live


def journal_expired(
    journal: Journal,
    expired: Sequence[TransactionStatus],
    *,
    table_path: str,
    now: datetime,
    rows: Mapping[str, int],
) -> None:
    """Journal each of ``expired`` aborted by the vacuum at ``now``, with its age and the
    masked rows it holds (``rows``, by transaction id)."""
    log.info("vacuum %s: marking %d expired open transaction(s) aborted", table_path, len(expired))
    journal.record(
        *(
            s.event(
                table_path=table_path,
                state=TxnState.ABORTED,
                event_time=now,
                detail=f"expired by vacuum after {age_text(now - s.opened_at)}",
                row_count=rows.get(s.txn_id),
            )
            for s in expired
        )
    )


def age_text(age: timedelta) -> str:
    """An age as the vacuum's log and journal give it: ``26.5 h``."""
    return f"{age.total_seconds() / 3600:.1f} h"
