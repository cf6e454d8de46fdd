"""How a long-running command (``lakesink serve``, ``lakesink ingest --follow``) is stopped.

SIGINT and SIGTERM only set an event; the command's own thread sees it between its waits
and stops its work in order. A handler that stopped the work itself would run inside
whatever this thread was doing, such as a py4j call waiting on the JVM's answer, and
calling the JVM again from there breaks that call ("reentrant call"). The driver JVM runs
in a session of its own (``lakesink.spark.session``), so a signal sent to the whole
process group (``kill -- -PGID``, a terminal's Ctrl-C) reaches this process alone.
"""

from __future__ import annotations

import logging
import signal
import threading

__all__ = ["stop_requested"]

log = logging.getLogger(__name__)


def stop_requested() -> threading.Event:
    """An event that SIGINT or SIGTERM sets from now on (call it from the main thread)."""
    stop = threading.Event()

    def handle(signum: int, _frame: object) -> None:
        log.info("%s received: stopping", signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, handle)
    return stop
