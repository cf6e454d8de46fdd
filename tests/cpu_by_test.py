"""Where a test run's CPU goes, by test file: ``python tests/cpu_by_test.py -- make test``.

The suite is bound by CPU on 2 cores (its two workers keep both busy), so its wall time is
its CPU time over two, and this is the table to cut from. The command runs with
``LAKESINK_CPU_SAMPLE_DIR`` set, where ``tests/conftest.py`` writes the test each worker
runs; every process's CPU is sampled from /proc twice a second and given to a test:

1. a pytest worker and its children (the session's Spark JVM, the servers and the jobs it
   started) are the test the worker runs at that moment;
2. a process further down that started with ``PYTEST_CURRENT_TEST`` in its environment (a
   job's Spark JVM) is that test's, however long it lives;
3. the rest (the make steps before pytest, pytest's controller) is ``(outside tests)``.

The report gives, per test file, its CPU seconds and the kinds of process that spent most
of them (by command name: ``java`` is a Spark JVM or a server's).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
OUTSIDE = "(outside tests)"


def _stat(pid: str) -> tuple[str, int, int, float] | None:
    """A process's command name, parent, start tick and CPU seconds; None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    end = text.rindex(")")
    fields = text[end + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / HZ
    return text[text.index("(") + 1 : end], int(fields[1]), int(fields[19]), cpu


def _test_of(pid: str) -> str | None:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for entry in environ:
        if entry.startswith(b"PYTEST_CURRENT_TEST="):
            return entry.split(b"=", 1)[1].decode(errors="replace")
    return None


def _workers(folder: Path) -> dict[int, str]:
    """Each worker's pid and the test it runs now (``conftest.py`` writes "pid nodeid")."""
    running = {}
    for entry in folder.iterdir():
        try:
            pid, nodeid = entry.read_text().split(" ", 1)
        except (OSError, ValueError):
            continue
        running[int(pid)] = nodeid
    return running


def _file(nodeid: str) -> str:
    return re.sub(r"::.*", "", nodeid.split(" ")[0])


def sample(command: list[str], interval: float) -> tuple[int, dict[str, collections.Counter]]:
    """Run ``command`` and give its CPU to test files: per file, CPU seconds by process kind."""
    folder = Path(tempfile.mkdtemp(prefix="cpu-by-test-"))
    env = {**os.environ, "LAKESINK_CPU_SAMPLE_DIR": str(folder)}
    seen: dict[tuple[int, int], tuple[str | None, float]] = {}
    by_file: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    process = subprocess.Popen(command, env=env)
    root = _stat(str(process.pid))
    # The command's processes, not those of other runs on this host (a pid is reused, so
    # each is known by its start too).
    ours = {(process.pid, root[2] if root else 0)}
    while True:
        done = process.poll() is not None
        workers = _workers(folder)
        stats = {int(pid): _stat(pid) for pid in filter(str.isdigit, os.listdir("/proc"))}
        started = {pid: stat[2] for pid, stat in stats.items() if stat}
        grown = True
        while grown:  # a new process and its new children in one pass
            before = len(ours)
            ours |= {
                (pid, stat[2])
                for pid, stat in stats.items()
                if stat and (stat[1], started.get(stat[1])) in ours
            }
            grown = len(ours) > before
        for pid, stat in stats.items():
            if stat is None or (pid, stat[2]) not in ours:
                continue
            comm, parent, start, cpu = stat
            key = (pid, start)
            if key not in seen:
                test = _test_of(str(pid))
                # What a test's process spent before it was first seen is the test's too.
                seen[key] = (test, 0.0 if test else cpu)
            test, counted = seen[key]
            if cpu <= counted:
                continue
            seen[key] = (test, cpu)
            owner = workers.get(pid) or workers.get(parent)
            name = _file(owner) if owner else _file(test) if test else OUTSIDE
            by_file[name][comm] += cpu - counted
        if done:
            shutil.rmtree(folder, ignore_errors=True)
            return process.returncode, by_file
        time.sleep(interval)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--interval", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("command", nargs="+", help="the command to run, after --")
    args = parser.parse_args()
    code, by_file = sample(args.command, args.interval)
    total = sum(sum(kinds.values()) for kinds in by_file.values())
    print(f"\n{total:8.0f} CPU-s in all")
    for name, kinds in sorted(by_file.items(), key=lambda item: -sum(item[1].values())):
        largest = ", ".join(f"{kind} {cpu:.0f}" for kind, cpu in kinds.most_common(4))
        print(f"{sum(kinds.values()):8.1f}  {name}  ({largest})")
    sys.exit(code)


if __name__ == "__main__":
    main()
