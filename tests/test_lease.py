"""Fencing on object storage: the lease of a writer or job, on the real S3 server.

How the tests know a second holder is fenced: the store itself refuses the second
conditional create or update (no process-local state decides), a holder whose lease was
taken over learns it at its next renewal and ``check`` raises before it could commit, two
processes that read one expired lease and take it over at once (each waits for the other
after its read) end with one holder and one refusal, and across hosts (processes with other
host names) a live writer keeps its lease while a dead one's is taken over once it expires,
its pre-committed checkpoint then committed by the new holder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from s3_fixture import BUCKET, s3_uri
from servers.s3 import get_object, put_object

from lakesink.errors import AlreadyRunningError, LeaseLostError
from lakesink.storage.lease import ObjectLease, fence, fences


class Clock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def lease_at(s3_server) -> str:
    return s3_uri("lease") + "/_lakesink_writer_0.lease"


def test_a_live_lease_refuses_a_second_holder_and_a_released_one_is_free(lease_at):
    first = ObjectLease(lease_at, "writer '0'", seconds=30)
    first.acquire()
    second = ObjectLease(lease_at, "writer '0'", seconds=30)
    with pytest.raises(AlreadyRunningError, match=r"writer '0' is already running .* s more"):
        second.acquire(wait=False)
    assert first.is_held() and second.is_held()
    first.check()
    first.release()
    assert not second.is_held()
    second.acquire()
    second.release()


def test_an_expired_lease_is_taken_over_and_its_old_holder_stops(lease_at):
    clock = Clock()
    old = ObjectLease(lease_at, "writer '0'", seconds=30, clock=clock)
    old.acquire()
    old._stop.set()  # a holder that hangs: it renews no more
    old._renewer.join()
    clock.now += 31
    with pytest.raises(LeaseLostError, match="has not renewed its lease"):
        old.check()

    new = ObjectLease(lease_at, "writer '0'", seconds=30, clock=clock)
    new.acquire()
    new.check()
    # The old holder wakes up and renews against the version it wrote: the store says no.
    from obstore.exceptions import PreconditionError

    with pytest.raises(PreconditionError):
        old._write(mode={"e_tag": old._version})
    old._stop.clear()
    old.seconds = 0.3  # renew now
    old._renew()  # returns once the store refused the renewal
    with pytest.raises(LeaseLostError, match="another process took it over"):
        old.check()
    new.release()


def test_a_process_that_waits_takes_over_a_dead_holders_lease_but_not_a_live_ones(lease_at):
    # A restart right after a crash finds the dead holder's lease still running: it waits
    # until the lease would expire, sees it was not renewed, and takes it over.
    clock = Clock()
    dead = ObjectLease(lease_at, "writer '0'", seconds=30, clock=clock)
    dead.acquire()
    dead._stop.set()  # killed: it renews no more
    dead._renewer.join()
    clock.now += 20
    restarted = ObjectLease(lease_at, "writer '0'", seconds=30, clock=clock, sleep=clock.sleep)
    restarted.acquire()
    assert clock.slept == [pytest.approx(11.0)]  # the 10 s left, and a margin
    restarted.check()
    with pytest.raises(LeaseLostError):
        dead.check()

    # A second process while the holder lives: the holder renews while it waits (real
    # time, a short lease), and the store's version tells it so.
    second = ObjectLease(lease_at, "writer '0'", seconds=1.5)
    restarted.release()
    live = ObjectLease(lease_at, "writer '0'", seconds=1.5)
    live.acquire()
    try:
        started = time.monotonic()
        with pytest.raises(AlreadyRunningError, match="already running"):
            second.acquire()
        assert time.monotonic() - started >= 1.0  # it waited for a renewal before refusing
        live.check()
    finally:
        live.release()


RACER = """
import logging, sys, time
from pathlib import Path
from lakesink.errors import AlreadyRunningError
from lakesink.storage.lease import ObjectLease

lease_at, meeting, name = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(message)s")


class MeetingClock:
    # Real time; acquire() reads it to write its create (refused: the lease exists), then to
    # judge the lease it has just read. There it waits for the other racer, so both have
    # read the expired lease before either writes its takeover.
    def __init__(self):
        self.readings = 0

    def __call__(self):
        self.readings += 1
        if self.readings == 2:
            (meeting / name).touch()
            deadline = time.monotonic() + 120
            while len(list(meeting.iterdir())) < 2:
                if time.monotonic() > deadline:
                    sys.exit("the other racer never read the lease")
                time.sleep(0.005)
        return time.time()


try:
    ObjectLease(lease_at, "job 'ingest'", clock=MeetingClock()).acquire(wait=False)
except AlreadyRunningError as exc:
    print("refused:", exc, flush=True)
    sys.exit(75)
print("won", flush=True)  # and exits holding it: the lease stays until it expires
"""


def test_two_processes_taking_over_an_expired_lease_at_once_one_wins(s3_server, lease_at, tmp_path):
    # A dead holder's lease, expired a minute ago, written once: the one version with its name.
    dead = "host-a 4242 deadbeef"
    key = lease_at.removeprefix(f"s3a://{BUCKET}/")
    expired = {"holder": dead, "expires": time.time() - 60}
    put_object(s3_server, BUCKET, key, json.dumps(expired).encode())
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    racers = [
        subprocess.Popen(
            [sys.executable, "-c", RACER, lease_at, str(meeting), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("one", "two")
    ]
    outcomes = [(racer.pid, *racer.communicate(timeout=180), racer.returncode) for racer in racers]

    # Both read the dead holder's expired lease and went for the takeover, at once.
    assert sorted(p.name for p in meeting.iterdir()) == ["one", "two"], outcomes
    for _, _, err, _ in outcomes:
        assert f"taking over the expired lease {lease_at} of {dead}" in err, err[-2000:]
    # The store let one conditional update of that version through; the other got the
    # refusal acquire() makes of a lost takeover.
    won = [(pid, out) for pid, out, _, status in outcomes if status == 0]
    lost = [(out, status) for _, out, _, status in outcomes if status != 0]
    assert [out for _, out in won] == ["won\n"], outcomes
    ((refusal, status),) = lost
    assert status == 75, outcomes
    assert refusal.startswith(
        f"refused: another process took over the lease {lease_at} of job 'ingest' just now"
    ), outcomes
    stored = json.loads(get_object(s3_server, BUCKET, key) or b"{}")
    assert stored["holder"].split()[1] == str(won[0][0])  # the winner's pid
    with pytest.raises(AlreadyRunningError, match="is already running"):
        ObjectLease(lease_at, "job 'ingest'").acquire(wait=False)


def test_fences_are_lock_files_locally_and_leases_on_a_store(tmp_path, s3_server):
    local = fence(str(tmp_path), "_lakesink_writer_a", "writer 'a'")
    assert str(local.path).endswith("_lakesink_writer_a.lock")
    folder = s3_uri("fences")
    remote = fence(folder, "_lakesink_writer_a", "writer 'a'")
    assert isinstance(remote, ObjectLease) and remote.path.endswith("_lakesink_writer_a.lease")
    remote.acquire()
    try:
        (found,) = fences(folder, "_lakesink_writer_", lambda w: f"writer {w!r}")
        assert found.what == "writer 'a'" and found.is_held()
    finally:
        remote.release()


WRITER = """
import sys, time
from lakesink import spark_session
from lakesink.delta.sink import DeltaSink
from lakesink.errors import AlreadyRunningError
spark = spark_session(master="local[1]", conf={"spark.ui.enabled": "false"})
table, ids = sys.argv[1], [int(i) for i in sys.argv[2].split(",") if i]
try:
    sink = DeltaSink.open(spark, table, schema="order_id BIGINT", view_name="v")
except AlreadyRunningError as exc:
    print("refused:", exc, flush=True)
    sys.exit(75)
if ids:
    sink.write(spark.createDataFrame([(i,) for i in ids], "order_id BIGINT"))
    sink.prepare_commit()  # pre-committed; this writer then hangs on, never committing
    print("pre-committed", flush=True)
    time.sleep(600)
sink.close()
print("recovered", flush=True)
"""


def on_host(host: str, *command: str) -> list[str]:
    """``command`` as if on another machine: a UTS namespace whose host name is ``host``
    (resolvable, as the JVM wants, through an /etc/hosts of its own mount namespace)."""
    script = (
        f'hostname {host} && hosts=$(mktemp) && cp /etc/hosts "$hosts" && '
        f'echo "127.0.0.1 {host}" >> "$hosts" && mount --bind "$hosts" /etc/hosts && '
        'exec "$@"'
    )
    return ["unshare", "--uts", "--mount", "sh", "-c", script, "sh", *command]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root for its namespaces (CI runs as root)")
def test_a_writer_on_another_host_is_refused_while_the_first_lives_then_takes_over(spark, tmp_path):
    from lakesink import committed

    # As root (CI) it must run: a missing unshare fails it rather than skipping it unseen.
    assert shutil.which("unshare"), "unshare is not on PATH: apt-get install util-linux"
    table = s3_uri("hosts") + "/orders"
    env = {**os.environ, "LAKESINK_LEASE_SECONDS": "6"}

    def on_host_b() -> subprocess.CompletedProcess[str]:  # the writer again, on the other host
        command = on_host("host-b", sys.executable, "-c", WRITER, table, "")
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)

    with (tmp_path / "host-a.err").open("w") as first_log:
        first = subprocess.Popen(
            on_host("host-a", sys.executable, "-c", WRITER, table, "1,2,3"),
            stdout=subprocess.PIPE,
            stderr=first_log,
            text=True,
            env=env,
        )
    try:
        started = first.stdout.readline().strip()
        assert started == "pre-committed", (tmp_path / "host-a.err").read_text()[-3000:]
        second = on_host_b()
        assert second.returncode == 75, second.stderr[-2000:]
        assert "refused: writer '0' of sink 'orders' is already running (host-a " in second.stdout
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert sorted(r.order_id for r in committed(spark, table).collect()) == []

    third = on_host_b()  # at once: it waits out the dead writer's lease if need be
    assert third.returncode == 0, third.stderr[-2000:]
    assert "recovered" in third.stdout
    assert "taking over the expired lease" in third.stderr
    assert sorted(r.order_id for r in committed(spark, table).collect()) == [1, 2, 3]
