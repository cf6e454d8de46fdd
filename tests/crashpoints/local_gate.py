"""Every change under a local lake, held at the gate: the harness side of ``gate.c``.

The scenario's processes run with ``gate.c`` preloaded; each change they make under the
lake (a file created or overwritten under its final name, a rename or link into place, a
deletion) asks this server before it runs and tells it once it is done, and waits for an
answer both times. The server lets one change through at a time, so changes have one
order across every process and thread, and the k-th change is the same kind of event in
every run (where writers run side by side, not always the same file).

To kill "before" change k, the server kills the process tree while the change waits for
its answer: it never ran. To kill "after" it, the server kills once the change reported it
is done, before the process goes on: it ran, and its process never learned it. Either way
no other change can slip in: they all wait at the gate.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import subprocess
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "gate.c"
CACHE = HERE.parent.parent / ".cache" / "crashpoints"


def gate_library() -> Path:
    """``gate.c`` compiled (once per source: the name carries its hash)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    target = CACHE / f"gate-{digest}.so"
    if not target.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        draft = target.with_suffix(f".{uuid.uuid4().hex[:6]}.tmp")
        subprocess.run(
            ["cc", "-shared", "-fPIC", "-O2", "-o", str(draft), str(SOURCE), "-ldl", "-lpthread"],
            check=True,
        )
        draft.replace(target)
    return target


@dataclass
class Plan:
    """When to kill: at change ``index`` (1-based) or the first matching ``pattern``."""

    kill: Callable[[], None]  # SIGKILLs every process of the scenario, at once
    target: str  # the same, for another process (``killing.kill_target``)
    when: str  # "before" or "after"
    index: int | None = None
    pattern: re.Pattern[str] | None = None


@dataclass
class Watch:
    """What went through the gate: changes (``op path``, in order), those that succeeded,
    and the kill."""

    started: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    killed_at: str | None = None  # "before k op path" / "after k op path"
    # Of the killed change: whether its path existed when it asked, and (after) its errno.
    existed: bool = False
    error: int = 0

    def proof(self, root: Path) -> str | None:
        """What is wrong with where the kill landed, seen on disk (None: it is where it
        says). Before a change, its path is as it was when the change asked; after one that
        succeeded, a creation, rename or link is there and a deletion is gone. (An
        overwrite leaves the path there either way: the gate's order is its proof.)"""
        if self.killed_at is None:
            return None
        when, _, op, path = self.killed_at.split(" ", 3)
        there = (root / path).exists()
        expected = self.existed if when == "before" or self.error else op != "delete"
        if there == expected:
            return None
        return f"killed {when} {op} {path}, yet it is {'there' if there else 'absent'}"


class LocalGate:
    """The gate's server for one run of a scenario on the lake at ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.watch = Watch()
        self._plan: Plan | None = None
        # Short: a Unix socket's path has room for about 100 bytes.
        self.address = f"/tmp/lakesink-gate-{uuid.uuid4().hex[:12]}.sock"
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.address)
        self._server.listen(64)
        self._turn = threading.Condition()
        self._holder: int | None = None  # the connection whose changes are in flight
        # They (one thread may nest two): k, the change, whether its path existed.
        self._flight: list[tuple[int, str, bool]] = []
        self._stopped = False
        self._threads: list[threading.Thread] = []
        self._accepting = threading.Thread(target=self._accept, name="gate", daemon=True)
        self._accepting.start()

    def environment(self) -> dict[str, str]:
        """What the scenario's processes need to go through the gate."""
        return {
            "LD_PRELOAD": str(gate_library()),
            "CRASH_POINT_GATE": self.address,
            "CRASH_POINT_ROOT": str(self.root),
        }

    def arm(self, plan: Plan) -> None:
        with self._turn:
            self._plan = plan

    def stop(self) -> Watch:
        with self._turn:
            self._stopped = True
            self._turn.notify_all()
        self._server.close()
        os.unlink(self.address)
        return self.watch

    # ------------------------------------------------------------- internals

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._server.accept()
            except OSError:
                return  # stopped
            thread = threading.Thread(
                target=self._serve, args=(connection,), name="gate-conn", daemon=True
            )
            thread.start()

    def _serve(self, connection: socket.socket) -> None:
        me = id(connection)
        lines = connection.makefile("r", encoding="utf-8", errors="replace")
        try:
            for line in lines:
                phase, rest = line.rstrip("\n").split(" ", 1)
                op, value, path = rest.split(" ", 2)
                if phase == "B":
                    answer = self._before(me, f"{op} {path}", value == "1")
                else:
                    answer = self._after(me, f"{op} {path}", int(value))
                if not answer:
                    # Killed: the process waits for an answer that never comes. The
                    # connection stays open until the run is over: closed, it would let
                    # the change through.
                    with self._turn:
                        self._turn.wait_for(lambda: self._stopped)
                    return
                connection.sendall(b"1")
        except OSError:
            pass
        finally:
            with self._turn:  # a process that went away holds nothing any longer
                if self._holder == me:
                    self._holder, self._flight = None, []
                    self._turn.notify_all()
            connection.close()

    def _before(self, me: int, change: str, existed: bool) -> bool:
        with self._turn:
            while self._holder not in (None, me) and not self._stopped:
                self._turn.wait()
            if self.watch.killed_at is not None:
                return False  # nothing passes the gate once the tree is being killed
            self._holder = me
            self.watch.started.append(change)
            index = len(self.watch.started)
            self._flight.append((index, change, existed))
            return not self._maybe_kill("before", index, change, existed, 0)

    def _after(self, me: int, change: str, error: int) -> bool:
        with self._turn:
            if self.watch.killed_at is not None:
                return False
            found = next(f for f in reversed(self._flight) if f[1] == change)
            self._flight.remove(found)
            index, _, existed = found
            if error == 0:
                self.watch.landed.append(change)
            killed = self._maybe_kill("after", index, change, existed, error)
            if not self._flight:
                self._holder = None
                self._turn.notify_all()
            return not killed

    def _maybe_kill(self, when: str, index: int, change: str, existed: bool, error: int) -> bool:
        """Kill the planned process tree if this is the planned change; whether it did."""
        plan = self._plan
        if plan is None or plan.when != when or self.watch.killed_at is not None:
            return False
        if plan.index is not None and plan.index != index:
            return False
        if plan.pattern is not None and not plan.pattern.search(change.split(" ", 1)[1]):
            return False
        self.watch.killed_at = f"{when} {index} {change}"
        self.watch.existed, self.watch.error = existed, error
        plan.kill()
        return True
