"""Long-running commands stopped as schedulers, systemd and terminals stop them.

``lakesink serve`` and the ``--follow`` ingest job each run as a real process in a process
group of its own, and get SIGTERM or SIGINT, sent to the process alone or to its whole
group (``kill -- -PGID``, what a terminal's Ctrl-C and many supervisors do). How the tests
know each stopped cleanly: it exits 0 with no traceback; every process it started (the
driver JVM among them, found under it in /proc before the signal) is gone soon after; and
for the ingest job, the journal holds no transaction left open, every batch Spark
recorded in its commit log is committed, and the committed rows are the orders of the files
those batches read (Spark's source log), each exactly once, under its batch's checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from serve_fixture import descendants, start_serve, wait_ready
from servers.cluster import free_port
from test_ingest_crash import generate
from test_serve import alive

from lakesink.core import TxnState
from lakesink.ops.status import sink_status
from lakesink.readers.deltars import committed_dataset
from lakesink.tables.format import CHECKPOINT_ID

pytestmark = pytest.mark.slow

JOBS = Path(__file__).resolve().parent.parent / "jobs"
# Each command gets both signals and both targets, in pairs: one handler takes both signals
# (``lakesink.cli.signals``), and the target is what differs for the processes it started.
WAYS = {
    "serve": [(signal.SIGTERM, "group"), (signal.SIGINT, "process")],
    "ingest": [(signal.SIGINT, "group"), (signal.SIGTERM, "process")],
}


def ways(command: str) -> list:
    return [pytest.param(s, t, id=f"{s.name}-to-{t}") for s, t in WAYS[command]]


def stop(process: subprocess.Popen[str], signum: signal.Signals, target: str) -> set[int]:
    """Send ``signum`` to the process or its group; return the processes it had started."""
    below = descendants(process.pid)
    assert below, "it started no JVM"
    if target == "group":
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    return below


def kill_if_running(process: subprocess.Popen[str]) -> None:
    """After a failed check: leave no process group behind for the next test."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def assert_gone(below: set[int]) -> None:
    deadline = time.monotonic() + 30
    while any(alive(p) for p in below) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not [p for p in below if alive(p)], "a process it started outlived it"


@pytest.mark.parametrize(("signum", "target"), ways("serve"))
def test_the_sql_server_stops_cleanly(tmp_path, signum, target):
    log = tmp_path / "serve.log"
    server = start_serve("--port", str(free_port()), "--no-auth", "--master", "local[1]", log=log)
    try:
        wait_ready(server, log)
        below = stop(server, signum, target)
        assert server.wait(timeout=120) == 0, log.read_text()[-3000:]
        assert_gone(below)
        assert "Traceback" not in log.read_text()
    finally:
        kill_if_running(server)


@pytest.mark.parametrize(("signum", "target"), ways("ingest"))
def test_a_following_ingest_job_stops_cleanly(tmp_path, signum, target):
    generate(tmp_path, orders=200, files=8)
    command = [
        sys.executable,
        str(JOBS / "ingest.py"),
        "--master", "local[1]",
        "--landing", str(tmp_path / "landing"),
        "--table", str(tmp_path / "orders"),
        "--state", str(tmp_path / "state"),
        "--files-per-checkpoint", "2",
        "--follow",
        "--checkpoint-seconds", "1",
    ]  # fmt: skip
    log = tmp_path / "ingest.log"
    job = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        start_new_session=True,
    )
    try:
        assert job.stdout is not None
        printed = []
        while not any(line.startswith("batch 1:") for line in printed):
            line = job.stdout.readline()
            assert line or job.poll() is None, f"the job ended:\n{log.read_text()[-3000:]}"
            printed.append(line)
        below = stop(job, signum, target)
        rest, _ = job.communicate(timeout=180)
        assert job.returncode == 0, log.read_text()[-3000:]
        assert "stopped:" in rest
        assert_gone(below)
        assert "Traceback" not in log.read_text()
    finally:
        kill_if_running(job)

    status = sink_status(str(tmp_path / "orders"))
    everything = [*status.committed, *status.pending, *status.held, *status.aborted]
    assert not [t for t in everything if t.state is TxnState.OPEN], "a transaction left open"
    state = tmp_path / "state" / "ingest"
    recorded = sorted(
        int(name.name) for name in (state / "commits").iterdir() if name.name.isdigit()
    )
    assert len(recorded) >= 2, recorded  # batch 1 was printed before the signal
    # Every batch Spark recorded is committed, once; and each committed row is an order of
    # the files its batch read (Spark's source log says which), each exactly once.
    assert sorted(t.checkpoint_id for t in status.committed) == recorded
    rows = committed_dataset(str(tmp_path / "orders")).to_table().to_pydict()
    committed = Counter(zip(rows[CHECKPOINT_ID], rows["order_id"], strict=True))
    assert committed == Counter(
        (batch, order) for batch in recorded for order in orders_read(state, batch)
    )


def orders_read(state: Path, batch: int) -> list[int]:
    """The order ids in the landing files batch ``batch`` read (the file source's log)."""
    entries = (state / "sources" / "0" / str(batch)).read_text().splitlines()[1:]  # after v1
    files = [Path(unquote(urlsplit(json.loads(entry)["path"]).path)) for entry in entries]
    assert files, f"batch {batch} read no file"
    return [json.loads(line)["order_id"] for f in files for line in f.read_text().splitlines()]
