"""Durable writes under a local folder, seen from outside the writing process (inotify).

A write is one new file: it *starts* when its first bytes are created (the file itself, or
the temporary file it is renamed or linked from) and *lands* when it appears whole under
its final name (renamed or linked into place, or closed after being written in place). A
hard link of a file that exists already (the metadata commit's) starts and lands at once.
Temporary names are those the writers here use: Hadoop's and lakesink's ``.name.<id>.tmp``,
object_store's (delta-rs) ``name#<n>``; Hadoop's ``.name.crc`` checksum side files are
part of their file, not writes of their own.

The watcher kills the writing processes with SIGKILL at the start (``before``) or the landing
(``after``) of a chosen write: the k-th, or the first whose path matches a pattern. inotify
reports an event after the fact and the watcher reacts within a fraction of a millisecond,
so a kill "before" a write that takes less than that may land after it: each kill records
what had landed, and the report says so.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inotify_simple import INotify
from inotify_simple import flags as F

WATCHED = F.CREATE | F.CLOSE_WRITE | F.MOVED_TO | F.ONLYDIR
_TEMP = (
    re.compile(r"^\.(?P<final>.+)\.[0-9a-f-]{8,}\.tmp$"),  # Hadoop, lakesink create_file
    re.compile(r"^(?P<final>[^.].*)#\d+$"),  # object_store's staging file
)
_IGNORED = re.compile(r"^\..*\.crc$")  # Hadoop's checksum side files


def _links(path: Path) -> int:
    try:
        return path.stat().st_nlink
    except OSError:
        return 0


def final_name(name: str) -> tuple[str, bool] | None:
    """The name a created file will land under, and whether it is a temporary one; None
    for a name that is never a write of its own."""
    if _IGNORED.match(name):
        return None
    for pattern in _TEMP:
        match = pattern.match(name)
        if match:
            return match.group("final"), True
    if name.startswith("."):
        return None
    return name, False


@dataclass
class Plan:
    """When to kill: at write ``index`` (1-based) or the first matching ``pattern``."""

    kill: Callable[[], None]  # SIGKILLs every process of the scenario, at once
    target: str  # the same, for another process (``killing.kill_target``)
    when: str  # "before" or "after"
    index: int | None = None
    pattern: re.Pattern[str] | None = None


@dataclass
class Watch:
    """What the watcher saw: writes landed (relative paths, in order), and the kill."""

    started: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    killed_at: str | None = None  # "before k path" / "after k path"
    # A kill "before" a write made by a rename or link: its final path, to tell afterwards
    # whether the write got in first.
    raced: Path | None = None


class LocalWatcher:
    """Watch every folder under ``root`` (new ones as they appear) until ``stop``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.watch = Watch()
        self._plan: Plan | None = None
        self._inotify = INotify()
        self._folders: dict[int, Path] = {}
        self._open: dict[Path, bool] = {}  # final path -> started as a temporary file
        self._stop = threading.Event()
        self._lock = threading.Lock()
        root.mkdir(parents=True, exist_ok=True)
        self._add_tree(root, report=False)
        self._thread = threading.Thread(target=self._loop, name="crash-point-watch", daemon=True)
        self._thread.start()

    def arm(self, plan: Plan) -> None:
        with self._lock:
            self._plan = plan

    def stop(self) -> Watch:
        self._stop.set()
        self._thread.join(timeout=10)
        self._inotify.close()
        return self.watch

    # ------------------------------------------------------------- internals

    def _add_tree(self, folder: Path, *, report: bool) -> None:
        """Watch ``folder`` and everything below; files already there (created before the
        watch could be added) are reported as started and, unless still temporary,
        landed."""
        try:
            wd = self._inotify.add_watch(folder, WATCHED)
        except OSError:  # gone again (a temporary folder)
            return
        self._folders[wd] = folder
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            return
        for entry in entries:
            if entry.is_dir():
                self._add_tree(entry, report=report)
            elif report:
                self._created(entry)
                named = final_name(entry.name)
                if named and not named[1]:
                    self._landed(folder / named[0])

    def _loop(self) -> None:
        # A real-time priority wakes the watcher the moment an event arrives, so that a
        # kill "before" a small write usually gets in first (where it is allowed: root).
        with contextlib.suppress(OSError):
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
        while not self._stop.is_set():
            for event in self._inotify.read(timeout=100):
                folder = self._folders.get(event.wd)
                if folder is None or not event.name:
                    continue
                path = folder / event.name
                if event.mask & F.ISDIR:
                    if event.mask & (F.CREATE | F.MOVED_TO):
                        self._add_tree(path, report=True)
                    continue
                if event.mask & F.CREATE:
                    named = final_name(event.name)
                    if named and (folder / named[0]) in self._open and not named[1]:
                        self._landed(folder / named[0])  # linked into place from its draft
                    elif named and not named[1] and _links(path) > 1:
                        self._landed(path)  # a hard link of a file there already
                    else:
                        self._created(path)
                elif event.mask & F.MOVED_TO:
                    named = final_name(event.name)
                    if named and not named[1]:
                        self._landed(path)
                elif event.mask & F.CLOSE_WRITE:
                    named = final_name(event.name)
                    if named and not named[1] and self._open.get(path) is False:
                        self._landed(path)

    def _created(self, path: Path) -> None:
        named = final_name(path.name)
        if named is None:
            return
        final = path.parent / named[0]
        if final in self._open:
            return
        self._open[final] = named[1]
        relative = str(final.relative_to(self.root))
        self.watch.started.append(relative)
        if self._maybe_kill("before", len(self.watch.started), relative) and named[1]:
            self.watch.raced = final

    def _landed(self, path: Path) -> None:
        if self._open.pop(path, None) is None:
            # Landed without a start seen (its folder was watched too late): it started too.
            self._created(path)
            self._open.pop(path, None)
        relative = str(path.relative_to(self.root))
        self.watch.landed.append(relative)
        self._maybe_kill("after", len(self.watch.landed), relative)

    def _maybe_kill(self, when: str, index: int, relative: str) -> bool:
        """Kill the planned process group if this is the planned write; whether it did."""
        with self._lock:
            plan = self._plan
            if plan is None or plan.when != when or self.watch.killed_at is not None:
                return False
            if plan.index is not None and plan.index != index:
                return False
            if plan.pattern is not None and not plan.pattern.search(relative):
                return False
            # Recorded first: whoever waits on the killed process may read it at once.
            self.watch.killed_at = f"{when} {index} {relative}"
            plan.kill()
            return True
