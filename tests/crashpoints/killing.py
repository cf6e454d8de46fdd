"""Kill a process and everything it started with SIGKILL, at once (standard library only:
the S3 fault proxy imports it too).

A lakesink process runs its driver JVM in a session of its own (``lakesink.spark.session``),
so killing the process group would leave the JVM running on, and it would finish the write
in flight before it noticed its Python side had gone. A cgroup (v2) holds the whole tree
whatever its sessions: writing ``1`` to its ``cgroup.kill`` makes the kernel SIGKILL every
process in it. Where no cgroup v2 can be made, the processes below the first one are found
in /proc and each is killed (the JVM may then be a few system calls further).
"""

from __future__ import annotations

import contextlib
import os
import signal
import uuid
from pathlib import Path

__all__ = ["Tree", "kill_target"]


def _cgroup2_root() -> Path | None:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            root = Path(fields[1])
            if os.access(root, os.W_OK):
                return root
    return None


class Tree:
    """The processes of one run: a cgroup of their own where the machine allows it."""

    def __init__(self) -> None:
        root = _cgroup2_root()
        self.cgroup: Path | None = None
        if root is not None:
            candidate = root / f"lakesink-crash-{uuid.uuid4().hex[:10]}"
            try:
                candidate.mkdir()
                self.cgroup = candidate
            except OSError:
                self.cgroup = None
        self.pid: int | None = None

    def adopt(self, pid: int) -> None:
        """Put the (stopped) first process in the tree; what it starts follows it."""
        self.pid = pid
        if self.cgroup is not None:
            (self.cgroup / "cgroup.procs").write_text(str(pid))

    @property
    def method(self) -> str:
        """How ``kill_target`` kills: every process at once, or one by one."""
        return "cgroup" if self.cgroup is not None else "process tree"

    @property
    def target(self) -> str:
        """What ``kill_target`` kills: the cgroup's kill file, or ``tree:PID``."""
        if self.cgroup is not None:
            return str(self.cgroup / "cgroup.kill")
        return f"tree:{self.pid}"

    def alive(self) -> bool:
        if self.cgroup is not None:
            return bool((self.cgroup / "cgroup.procs").read_text().split())
        return bool(self.pid and _descendants(self.pid, include_self=True))

    def close(self) -> None:
        if self.cgroup is not None:
            with contextlib.suppress(OSError):
                self.cgroup.rmdir()


def kill_target(target: str) -> None:
    """SIGKILL what ``Tree.target`` names."""
    if target.startswith("tree:"):
        for pid in _descendants(int(target[5:]), include_self=True):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        return
    with contextlib.suppress(FileNotFoundError):
        Path(target).write_text("1")


def _descendants(pid: int, *, include_self: bool) -> set[int]:
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found = {pid} if include_self and pid in parents else set()
    frontier = {pid}
    while frontier:
        children = {p for p, parent in parents.items() if parent in frontier}
        found |= children
        frontier = children
    return found
