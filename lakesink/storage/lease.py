"""A lease on an object store: what fences a second live writer or job across hosts.

A lock file with a pid fences processes of one host; on object storage any host may run
the second writer. The lease is one small object, ``{"holder", "expires"}``:

1. **Taken** with a conditional create (``If-None-Match: *``): of two racing processes,
   one gets it and the other is refused by the store itself.
2. **Renewed** while its holder lives, by a thread that rewrites it every third of its
   duration with a conditional update (``If-Match`` the version it wrote last): a renewal
   after another process took the lease over fails, and the holder learns it lost it.
3. **Taken over** once it expired (its holder died, or hangs without renewing), with the
   same conditional update against the version read: of two processes taking over at
   once, one wins. A process that finds the lease still running waits until it would
   expire: a live holder has renewed it by then (refused), a dead one has not (taken
   over), so a job restarted right after a crash goes on instead of failing.
4. **Checked** before every commit (``check``): a holder that lost it, or whose last
   renewal is older than the duration (a pause, a partition from the store), stops before
   it commits: the new holder may be recovering its transactions.

The duration is ``$LAKESINK_LEASE_SECONDS`` (default 30): a dead writer's claim is taken
over after at most that long.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from lakesink.core import ProcessLock
from lakesink.errors import AlreadyRunningError, LeaseLostError
from lakesink.storage.access import translated
from lakesink.storage.files import folder_names, object_store
from lakesink.storage.location import is_uri, join

__all__ = [
    "LEASE_SECONDS_ENV",
    "Fence",
    "ObjectLease",
    "fence",
    "fences",
    "writer_lock",
    "writer_locks",
]

log = logging.getLogger(__name__)

LEASE_SECONDS_ENV = "LAKESINK_LEASE_SECONDS"
DEFAULT_LEASE_SECONDS = 30.0
LOCK_SUFFIX = ".lock"

LEASE_SUFFIX = ".lease"
_WRITER_LOCK_PREFIX = "_lakesink_writer_"


class ObjectLease:
    """Hold the lease object at ``location`` for this process while it runs ``what``.

    Args:
        location: The lease object's URI.
        what: What it fences, for messages ("writer '0' of sink 'orders'").
        seconds: Its duration; default ``$LAKESINK_LEASE_SECONDS``, else 30.
        clock: Seconds since the epoch (tests set it).
        sleep: Waits that many seconds (tests advance their clock instead).
    """

    def __init__(
        self,
        location: str,
        what: str,
        *,
        seconds: float | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = location
        self.what = what
        self.seconds = seconds or float(os.environ.get(LEASE_SECONDS_ENV, DEFAULT_LEASE_SECONDS))
        self._clock = clock
        self._sleep = sleep
        self._me = f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex[:8]}"
        self._version: str | None = None  # the e-tag of what this process wrote last
        self._renewed_at = 0.0
        self._lost: str | None = None
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._store, self._key = object_store(location)

    def acquire(self, *, wait: bool = True) -> None:
        """Take the lease, or take over an expired one; start renewing it.

        Args:
            wait: When another process holds the lease, wait until it would expire and
                take it over if its holder did not renew it meanwhile (it died). Without
                it, a held lease is refused at once.

        Raises:
            AlreadyRunningError: Another process holds the lease and renews it (or it has
                not expired, without ``wait``).
        """
        from obstore.exceptions import AlreadyExistsError, PreconditionError

        try:
            self._write(mode="create")
        except AlreadyExistsError:
            try:
                holder, expires, version = self._read()
                left = expires - self._clock()
                if left > 0 and wait:
                    log.warning(
                        "%s: the lease %s is held by %s for %.0f s more; waiting to see "
                        "whether its holder renews it",
                        self.what,
                        self.path,
                        holder,
                        left,
                    )
                    self._sleep(left + min(1.0, self.seconds / 10))
                    holder, expires, version = self._read()
                    left = expires - self._clock()
            except FileNotFoundError:  # released in between (obstore's error for a missing object)
                self._write(mode="create")
            else:
                if left > 0:
                    raise AlreadyRunningError(
                        f"{self.what} is already running ({holder}; lease {self.path} "
                        f"for {left:.0f} s more); stop it first, or wait until the "
                        "lease expires if that process is gone"
                    ) from None
                log.warning("taking over the expired lease %s of %s", self.path, holder)
                try:
                    self._write(mode={"e_tag": version})
                except PreconditionError:
                    raise AlreadyRunningError(
                        f"another process took over the lease {self.path} of {self.what} "
                        "just now; it runs instead of this one"
                    ) from None
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name=f"lease {self.what}", daemon=True)
        self._renewer.start()

    def check(self) -> None:
        """Raise unless this process still holds the lease (call it before a commit).

        Raises:
            LeaseLostError: Another process took it over, or it was not renewed in time.
        """
        if self._lost is not None:
            raise LeaseLostError(f"{self.what} lost its lease {self.path}: {self._lost}")
        age = self._clock() - self._renewed_at
        if age >= self.seconds:
            raise LeaseLostError(
                f"{self.what} has not renewed its lease {self.path} for {age:.0f} s (the "
                f"lease lasts {self.seconds:.0f} s): another process may have taken over"
            )

    def release(self) -> None:
        """Stop renewing and delete the lease if this process still holds it."""
        from obstore import delete

        self._stop.set()
        if self._renewer is not None:
            self._renewer.join()
            self._renewer = None
        try:
            holder, _, _ = self._read()
            if holder == self._me:
                with translated(self.path):
                    delete(self._store, self._key)
        except FileNotFoundError:  # what obstore raises for a missing object
            pass

    def is_held(self) -> bool:
        """True while some process holds the lease and it has not expired."""
        try:
            _, expires, _ = self._read()
        except FileNotFoundError:  # what obstore raises for a missing object
            return False
        return expires > self._clock()

    def _write(self, *, mode: object) -> None:
        from obstore import put

        now = self._clock()
        body = json.dumps({"holder": self._me, "expires": now + self.seconds}).encode()
        with translated(self.path):
            result = put(self._store, self._key, body, mode=mode)  # type: ignore[arg-type]
        self._version = result["e_tag"]
        self._renewed_at = now

    def _read(self) -> tuple[str, float, str | None]:
        from obstore import get

        with translated(self.path):
            found = get(self._store, self._key)
            lease = json.loads(bytes(found.bytes()))
        return lease["holder"], float(lease["expires"]), found.meta["e_tag"]

    def _renew(self) -> None:
        from obstore.exceptions import PreconditionError

        while not self._stop.wait(self.seconds / 3):
            try:
                self._write(mode={"e_tag": self._version})
            except PreconditionError:
                self._lost = "another process took it over"
                log.error("%s lost its lease %s", self.what, self.path)
                return
            except Exception as exc:  # the store is unreachable: check() says so in time
                log.warning("could not renew the lease %s: %s", self.path, exc)


Fence = ProcessLock | ObjectLease


def fence(folder: str, stem: str, what: str) -> Fence:
    """What fences a second live ``what``: a lock file ``<stem>.lock`` in a local ``folder``
    (a pid on this host), a lease ``<stem>.lease`` in an object store's (any host)."""
    if is_uri(folder):
        return ObjectLease(join(folder, f"{stem}{LEASE_SUFFIX}"), what)
    return ProcessLock(Path(folder, f"{stem}{LOCK_SUFFIX}"), what)


def fences(folder: str, prefix: str, what: Callable[[str], str]) -> list[Fence]:
    """Every fence in ``folder`` whose stem starts with ``prefix``, held or not; ``what``
    names each from the rest of its stem."""
    found = []
    for file_name in folder_names(folder):
        for suffix in (LOCK_SUFFIX, LEASE_SUFFIX):
            if file_name.startswith(prefix) and file_name.endswith(suffix):
                stem = file_name.removesuffix(suffix)
                found.append(fence(folder, stem, what(stem.removeprefix(prefix))))
    return found


def writer_locks(path: str) -> list[Fence]:
    """A lock or lease for every writer of the table at ``path`` that ever ran (held or not)."""
    return fences(path, _WRITER_LOCK_PREFIX, lambda writer: f"writer {writer!r} of {path}")


def writer_lock(path: str, sink_id: str, writer_id: str) -> Fence:
    """What a live writer of the table at ``path`` holds: a lock file, or a lease on object
    storage (hidden from Delta by its ``_``)."""
    return fence(
        path, f"{_WRITER_LOCK_PREFIX}{writer_id}", f"writer {writer_id!r} of sink {sink_id!r}"
    )
