"""The S3 server goes away in the middle of a pre-commit, and of a commit.

The ingest job runs on a server of its own (the shared one must stay up for the other
tests). It is held at the step, the server is frozen (SIGSTOP), the job goes on into the
frozen store, then the server is killed (SIGKILL) and started again over the same data
folder, as a store that crashed and came back.

How the test knows the outage hit the job, and cost it nothing: while the server is frozen,
a request of the step's client reaches it and waits there unread (the kernel's socket
queues, matched to the sender's socket in /proc): Spark's (the job's driver JVM) in the
append; in the commit, delta-rs' in the job's Python process, which lists the
transaction's files before the MERGE (the writer's lease renewals, from that process too,
are 40 s apart, beyond the outage). The run still finishes (the store's clients retry
through the outage), with every generated order committed exactly once (read by delta-rs)
and no checkpoint left pending.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from servers.cluster import free_port
from servers.s3 import create_bucket, start_server, stop_server
from test_ingest_crash import ORDERS, generate, ingest_command
from test_serve import descendants

from lakesink.jvm import wait_gone
from lakesink.ops.status import sink_status
from lakesink.readers.deltars import arrow
from lakesink.storage.lease import LEASE_SECONDS_ENV
from lakesink.storage.location import join

pytestmark = pytest.mark.slow

BUCKET = "outage"
OUTAGE_S = 10  # frozen this long, then killed and restarted


@pytest.fixture
def own_server(tmp_path: Path):
    folder = tmp_path / "s3"
    server = start_server(folder, port=free_port())
    create_bucket(server, BUCKET)
    yield server
    stop_server(folder)


def run_job(tmp_path, lake, env, **popen) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ingest_command(tmp_path, lake=lake),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def waiting_requests(port: int, job: int) -> list[tuple[str, int]]:
    """Requests that wait, unread, at the server on 127.0.0.1:``port``, sent by the process
    ``job`` or one below it: each as the sender's command and the bytes waiting. The
    kernel's view (/proc/net/tcp, tcp6 for the JVM's sockets, /proc/PID/fd): a server that
    runs reads a request at once, a frozen one leaves it in its socket's queue."""
    sockets = []  # (local port, remote port, bytes unread, inode) of every TCP socket
    for name in ("tcp", "tcp6"):
        for line in Path("/proc/net", name).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(f.rsplit(":", 1)[1], 16) for f in fields[1:3])
            sockets.append((local, remote, int(fields[4].split(":")[1], 16), fields[9]))
    # The server's end of each connection with bytes unread, by the client's port; then
    # the client's end of those connections, by its socket's inode.
    unread = {remote: queued for local, remote, queued, _ in sockets if local == port and queued}
    clients = {f"socket:[{inode}]": unread[local] for local, remote, _, inode in sockets
               if remote == port and local in unread}  # fmt: skip
    found = []
    for pid in {job, *descendants(job)} if clients else ():
        try:
            command = Path(f"/proc/{pid}/comm").read_text().strip()
            targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:  # it ended meanwhile, or an fd closed
            continue
        found += [(command, clients[target]) for target in targets if target in clients]
    return found


@pytest.mark.parametrize(
    ("point", "client"), [("before_append@1", "java"), ("before_publish@1", "python")]
)
def test_a_store_that_freezes_and_dies_mid_checkpoint_loses_and_duplicates_nothing(
    own_server, tmp_path, point, client, monkeypatch, record_property
):
    generate(tmp_path)
    lake = f"s3a://{BUCKET}/run"
    markers = tmp_path / "markers"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_CRASH")},
        **own_server.environment(),
        "LAKESINK_STEP_MARKERS": str(markers),
        "LAKESINK_HOLD_AT": point,
        # The writers' leases outlast the outage: its 10 s, the store's restart and the
        # clients' backoff after it took 37 s once on a loaded machine, past the default 30
        # s, and the job then rightly gave up its lease (what test_lease.py tests).
        LEASE_SECONDS_ENV: "120",
    }
    job = run_job(tmp_path, lake, env)
    waiting: list[tuple[str, int]] = []
    try:
        deadline = time.monotonic() + 600
        while not (markers / f"{point}.1").exists():
            assert job.poll() is None, job.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the job never reached the step"
            time.sleep(0.5)
        os.kill(own_server.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        (markers / f"{point}.go").touch()  # the job goes on into a frozen store
        # The step's next request reaches the frozen store, and waits there.
        while time.monotonic() < frozen_at + 120 and job.poll() is None:
            waiting = waiting_requests(own_server.port, job.pid)
            if any(command == client for command, _ in waiting):
                break
            time.sleep(0.05)
        time.sleep(max(0.0, frozen_at + OUTAGE_S - time.monotonic()))
        os.kill(own_server.pid, signal.SIGKILL)
        wait_gone(own_server.pid, 30)
        start_server(own_server.directory, port=own_server.port)
        _, err = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    hit = any(command == client for command, _ in waiting)
    assert hit, f"no request of the step's {client} client reached the frozen store ({waiting})"
    # The store's clients retried through the outage: the run finished.
    assert job.returncode == 0, err[-3000:]
    record_property(
        "figures",
        f"{point}: requests waiting at the frozen store, by sender and bytes: {waiting}; "
        f"the run through the outage exited {job.returncode}",
    )

    for name, value in own_server.environment().items():  # read it with delta-rs
        monkeypatch.setenv(name, value)
    ids = Counter(arrow(join(lake, "orders"), columns=["order_id"]).column(0).to_pylist())
    assert set(ids) == set(range(1, ORDERS + 1)), "an order was lost"
    assert max(ids.values()) == 1, "an order was committed twice"
    status = sink_status(join(lake, "orders"))
    assert not status.pending and not status.held, "a checkpoint was left pending"
