"""A lock file that fences a second live process out of the same job or writer."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from pathlib import Path

from lakesink.errors import AlreadyRunningError

__all__ = ["ProcessLock", "pid_alive"]

log = logging.getLogger(__name__)


class ProcessLock:
    """Hold ``path`` exclusively for this process while it runs ``what``.

    A lock left by a dead process on this host (a crash, a ``kill -9``), or by this very
    process (an instance that was abandoned, not closed), is taken over. A lock of a live
    process, or of another host, is refused: two writers would commit the same input twice.
    """

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._me = f"{socket.gethostname()} {os.getpid()}"

    def acquire(self) -> None:
        for _ in range(2):
            try:
                self._create()
            except FileExistsError:
                if not self._stale():
                    holder = self.path.read_text().strip()
                    raise AlreadyRunningError(
                        f"{self.what} is already running ({holder}; lock {self.path}); "
                        "stop it first, or delete the lock file if that process is gone"
                    ) from None
                log.warning("taking over the lock %s of a dead process", self.path)
                self.path.unlink(missing_ok=True)
                continue
            return
        raise AlreadyRunningError(f"could not take the lock {self.path} of {self.what}")

    def _create(self) -> None:
        """Create the lock whole, holder and all, or not at all (FileExistsError).

        Linked into place from a file written first: a lock created empty and then written
        was left empty by a process killed in between, and named no holder ever after.
        """
        draft = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        draft.write_text(self._me)
        try:
            os.link(draft, self.path)
        finally:
            draft.unlink()

    def check(self) -> None:
        """Nothing to check: no other process takes over the lock while this one lives."""

    def release(self) -> None:
        try:
            if self.path.read_text().strip() == self._me:
                self.path.unlink()
        except FileNotFoundError:
            pass

    def is_held(self) -> bool:
        """True while a live process (any process on another host) holds the lock."""
        try:
            holder = self.path.read_text().strip()
        except FileNotFoundError:
            return False
        if not holder:  # written empty by lakesink 0.2, killed before it wrote its holder
            return False
        host, _, pid = holder.partition(" ")
        if host != socket.gethostname() or not pid.isdigit():
            return True
        return pid_alive(int(pid))

    def _stale(self) -> bool:
        try:
            mine = self.path.read_text().strip() == self._me
        except FileNotFoundError:
            return True
        return mine or not self.is_held()


def pid_alive(pid: int) -> bool:
    """True while a process ``pid`` runs on this host (or is not ours to signal)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
