"""The S3 server goes away in the middle of a pre-commit, and of a commit.

The ingest job runs on a server of its own (the shared one must stay up for the other
tests). It is held at the step, the server is frozen (SIGSTOP), the job goes on into the
frozen store, then the server is killed (SIGKILL) and started again over the same data
folder, as a store that crashed and came back.

How the test knows nothing is lost or duplicated: the run either finished (the store's
clients retried within a bounded time) or failed with an error that names the store; a
run after it ends with every generated order committed exactly once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from test_ingest_crash import ORDERS, generate, ingest_command

from lakesink.jvm import wait_gone
from lakesink.readers import arrow
from lakesink.storage.location import join
from lakesink.testing.cluster import free_port
from lakesink.testing.s3 import create_bucket, start_server, stop_server

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


@pytest.mark.parametrize("point", ["before_append@1", "before_flip@1"])
def test_a_store_that_freezes_and_dies_mid_checkpoint_loses_and_duplicates_nothing(
    own_server, tmp_path, point, monkeypatch, record_property
):
    generate(tmp_path)
    lake = f"s3a://{BUCKET}/run"
    markers = tmp_path / "markers"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_CRASH")},
        **own_server.environment(),
        "LAKESINK_STEP_MARKERS": str(markers),
        "LAKESINK_HOLD_AT": point,
    }
    job = run_job(tmp_path, lake, env)
    try:
        deadline = time.monotonic() + 600
        while not (markers / f"{point}.1").exists():
            assert job.poll() is None, job.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the job never reached the step"
            time.sleep(0.5)
        os.kill(own_server.pid, signal.SIGSTOP)
        (markers / f"{point}.go").touch()  # the job goes on into a frozen store
        time.sleep(OUTAGE_S)
        os.kill(own_server.pid, signal.SIGKILL)
        wait_gone(own_server.pid, 30)
        start_server(own_server.directory, port=own_server.port)
        _, err = job.communicate(timeout=900)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0 or own_server.endpoint in err or lake in err, err[-3000:]
    failed = [line for line in err.splitlines() if "Error" in line][-1:] or ["no error"]
    record_property(
        "figures", f"the run through the outage exited {job.returncode}: {failed[0][:200]}"
    )

    env.pop("LAKESINK_HOLD_AT")
    again = run_job(tmp_path, lake, env)
    _, err = again.communicate(timeout=900)
    assert again.returncode == 0, err[-3000:]
    for name, value in own_server.environment().items():  # read it with delta-rs
        monkeypatch.setenv(name, value)
    ids = Counter(arrow(join(lake, "orders"), columns=["order_id"]).column(0).to_pylist())
    assert set(ids) == set(range(1, ORDERS + 1)), "an order was lost"
    assert max(ids.values()) == 1, "an order was committed twice"
