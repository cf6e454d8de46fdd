"""The lock file that fences a second live process on one host (``lakesink.core.lock``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from lakesink.core import ProcessLock
from lakesink.errors import AlreadyRunningError


def test_a_lock_is_created_whole_and_a_second_holder_is_refused(tmp_path):
    lock = ProcessLock(tmp_path / "job.lock", "job 'x'")
    lock.acquire()
    assert (tmp_path / "job.lock").read_text() == f"{socket.gethostname()} {os.getpid()}"
    assert [p.name for p in tmp_path.iterdir()] == ["job.lock"]  # no draft left behind
    # A live process of this host holds it: another lock object (another process) waits.
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "other.lock").write_text(f"{socket.gethostname()} {holder.pid}")
        with pytest.raises(AlreadyRunningError, match="already running"):
            ProcessLock(tmp_path / "other.lock", "job 'y'").acquire()
    finally:
        holder.kill()
        holder.wait()
    ProcessLock(tmp_path / "other.lock", "job 'y'").acquire()  # its holder is gone: taken over


def test_an_empty_lock_left_by_a_process_killed_while_creating_it_is_taken_over(tmp_path):
    """lakesink 0.2 created the file, then wrote its holder: killed in between, it left an
    empty lock that named no holder, and refused every later process for good."""
    (tmp_path / "writer.lock").write_text("")
    lock = ProcessLock(tmp_path / "writer.lock", "writer '0'")
    assert not lock.is_held()
    lock.acquire()
    assert (tmp_path / "writer.lock").read_text().endswith(f" {os.getpid()}")
