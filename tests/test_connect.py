"""lakesink through Spark Connect: the sink, a group's coordinator, the readers, a
streaming query's batches written in the server's Python worker, an operator's commit (the
library's and ``lakesink commit --remote``) and ``lakesink vacuum --remote``, from clients
with no JVM, in both commit modes, with the tables on local disk and on the S3 server.

The client (``tests/data/connect/client.py``) runs in a process of its own with no ``java``
on its ``PATH`` and no ``JAVA_HOME``: anything of lakesink that tried to start or reach a
JVM on the client would fail there. Its Spark work runs on a Spark Connect server with
Delta (``servers.connect``); what it committed is read back by delta-rs, which is neither
lakesink nor Spark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from connect_fixture import start
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError
from s3_fixture import STORES, s3_uri
from servers.connect import ConnectServer

from lakesink.core import TxnState
from lakesink.storage.location import join
from lakesink.storage.options import StorageOptions
from lakesink.tables.format import published_path
from lakesink.tables.journal import Journal

ROOT = Path(__file__).resolve().parent.parent
CLIENT = ROOT / "tests" / "data" / "connect" / "client.py"
LAKESINK = Path(sys.executable).parent / "lakesink"


def published_table(table: str) -> DeltaTable:
    """The table's published table, opened by delta-rs (on S3 with the store's settings)."""
    location = published_path(table)
    return DeltaTable(location, storage_options=StorageOptions.from_env().deltars_options(location))


def published_ids(table: str) -> list[int]:
    """The ids the table's published table holds, read by delta-rs."""
    return sorted(published_table(table).to_pyarrow_table().column("id").to_pylist())


def published_rows(table: str) -> int:
    """The rows of the table's published table; 0 before it exists."""
    try:
        return published_table(table).to_pyarrow_table().num_rows
    except TableNotFoundError:
        return 0


def without_java() -> dict[str, str]:
    """This environment with every folder holding a ``java`` off ``PATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    folders = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(f for f in folders if not (Path(f) / "java").exists())
    return env


@pytest.mark.slow
@pytest.mark.parametrize("store", STORES)
def test_a_connect_client_writes_commits_reads_and_vacuums_exactly_once(
    connect_server, store: str, tmp_path: Path
) -> None:
    lake = s3_uri("connect") if store == "s3" else str(tmp_path / "lake")
    done = subprocess.run(
        [sys.executable, str(CLIENT), connect_server.url, lake],
        capture_output=True,
        text=True,
        timeout=900,
        env=without_java(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["session"].startswith("pyspark.sql.connect")
    assert found["orders"] == list(range(10))  # two checkpoints, each row once
    assert found["orders_committed"] == 10
    assert found["group"] == [6, 6] and found["group_committed"] == [6, 6]
    assert found["held_verdict"] == "held"
    assert found["held_before"] == [] and found["held_after"] == list(range(5))
    # The streaming query: two batches, then one more after its restart. Each batch's
    # commit waited for the next batch (in the server's worker) or for the client's close.
    assert found["before_close"] == [4, 8]  # the last batch of each run still pending
    assert found["after_close"] == [list(range(8)), list(range(12))]
    assert found["counts"] == [4, 4, 4]  # one row per batch in the other table, each once

    # The operator's commands, through the same server, from a process with no JVM.
    held = join(lake, "held")
    second = str(found["held_second"])
    command = [str(LAKESINK), "commit", held, "--checkpoint", second, "--yes", "--remote"]
    done = subprocess.run(
        [*command, connect_server.url], capture_output=True, text=True, env=without_java()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert published_ids(held) == list(range(10))
    done = subprocess.run(
        [str(LAKESINK), "vacuum", held, "--json", "--remote", connect_server.url],
        capture_output=True,
        text=True,
        env=without_java(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["rows_removed"] == 0  # nothing aborted: nothing to remove


FAULTS = Path(__file__).resolve().parent / "faults.py"
CHECKPOINTS = CLIENT.parent / "checkpoints.py"
STREAM = CLIENT.parent / "stream.py"
# The server's log line as a MERGE starts writing the rows it publishes.
MERGE_WRITES = "MERGE operation - writing new files"


def checkpoints_command(url: str, table: str) -> list[str]:
    """The Connect job of ``tests/data/connect/checkpoints.py``: checkpoints 1-3 of
    ``table``, run through ``tests/faults.py`` (the faults its environment asks for)."""
    return [sys.executable, str(FAULTS), str(CHECKPOINTS), url, table, "3"]


def merge_operations(table: str) -> int:
    from deltalake import DeltaTable

    return sum(1 for h in DeltaTable(table).history() if h.get("operation") == "MERGE")


def restart(server: ConnectServer) -> None:
    """Start the killed shared server again, as it was: the tests after go on with it."""
    start(server.folder, server.port)


def wait_for(condition, what: str, process: subprocess.Popen, timeout_s: float = 600) -> None:
    """Until ``condition()``; fails if ``process`` ends first or it takes over the timeout."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert process.poll() is None, f"the client ended before {what}: {process.returncode}"
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:.0f} s"
        time.sleep(0.01)


@pytest.mark.slow
def test_a_client_killed_between_pre_commit_and_commit_is_finished_by_its_next_run(
    connect_server, tmp_path: Path
) -> None:
    table = str(tmp_path / "orders")
    command = checkpoints_command(connect_server.url, table)
    env = without_java()
    killed = subprocess.run(
        command, capture_output=True, text=True, timeout=600,
        env={**env, "LAKESINK_CRASH_AT": "before_publish@2"},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert "SIGKILL at before_publish of checkpoint 2" in killed.stderr
    assert published_ids(table) == list(range(5))  # 2 was pre-committed, not visible

    again = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "wrote [3]" in again.stdout  # 2 was committed by its recovery, not written again
    assert published_ids(table) == list(range(15))  # every id once


@pytest.mark.slow
def test_the_server_killed_during_the_commit_merge_then_restarted(
    connect_server: ConnectServer, tmp_path: Path, record_property
) -> None:
    table, markers = str(tmp_path / "orders"), tmp_path / "markers"
    env = {**without_java(), "LAKESINK_STEP_MARKERS": str(markers)}
    client = subprocess.Popen(
        checkpoints_command(connect_server.url, table),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**env, "LAKESINK_HOLD_AT": "before_publish@2"},
    )  # fmt: skip
    wait_for(lambda: (markers / "before_publish@2.1").exists(), "checkpoint 2's commit", client)
    log = connect_server.folder / "connect.log"
    merges = log.read_text(errors="replace").count(MERGE_WRITES)  # checkpoint 1's, and earlier
    (markers / "before_publish@2.go").touch()
    wait_for(
        lambda: log.read_text(errors="replace").count(MERGE_WRITES) > merges,
        "MERGE of checkpoint 2 on the server",
        client,
    )
    connect_server.kill()
    try:
        # The MERGE never committed: the table has checkpoint 1's alone, and the journal
        # has checkpoint 2 pending (a sink alone journals no decision before its MERGE).
        merges = merge_operations(table)
        journal = Journal(str(tmp_path / "_lakesink_journal"), create=False)
        states = {t.checkpoint_id: t.state for t in journal.transactions("orders")}
    finally:
        restart(connect_server)  # for the tests after, whatever this one finds
    assert merges == 1
    assert states[2] in (TxnState.PRE_COMMITTED, TxnState.COMMITTING), states
    _, stderr = client.communicate(timeout=900)  # failed, or went on through the new one
    ended = (stderr.strip().splitlines() or [""])[-1][:200]
    record_property("figures", f"the client the kill hit: exit {client.returncode}, {ended}")
    again = subprocess.run(
        checkpoints_command(connect_server.url, table),
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert published_ids(table) == list(range(15))  # every id once


@pytest.mark.slow
def test_a_streaming_query_whose_server_is_killed_is_finished_by_its_restart(
    connect_server: ConnectServer, tmp_path: Path, record_property
) -> None:
    lake = str(tmp_path / "lake")
    events = join(lake, "events")
    command = [sys.executable, str(STREAM), connect_server.url, lake]
    client = subprocess.Popen(
        [*command, "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=without_java(),
    )  # fmt: skip
    # The server's worker commits batch 0 as batch 1 begins: the query is then in batch 1.
    wait_for(lambda: published_rows(events) >= 4, "batch 0's commit", client)
    connect_server.kill()
    try:
        journal = Journal(join(lake, "_lakesink_journal"), create=False)
        at_kill = sorted((t.checkpoint_id, t.state.value) for t in journal.transactions("events"))
    finally:
        # At once, as the client would retry a dead one for minutes; it finds its session
        # and query gone.
        restart(connect_server)
    _, stderr = client.communicate(timeout=900)
    ended = (stderr.strip().splitlines() or [""])[-1][:160]
    assert "StorageAccessError" not in stderr, stderr[-3000:]  # the server died, not the store
    again = subprocess.run(
        [*command, "0"], capture_output=True, text=True, timeout=600, env=without_java()
    )
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads(again.stdout.strip().splitlines()[-1])["after_close"] == list(range(12))
    counts = published_table(join(lake, "counts")).to_pyarrow_table()
    assert sorted(counts.column("n").to_pylist()) == [4, 4, 4]  # one row per batch, once
    record_property(
        "figures",
        f"events' transactions at the kill: {at_kill}; the client: exit {client.returncode}, "
        f"{ended}",
    )


@pytest.mark.slow
def test_the_readme_hello_world_runs_from_a_thin_install(connect_server, tmp_path: Path) -> None:
    """lakesink[connect] in a fresh virtualenv: pyspark's Connect client, no pyspark."""
    from test_readme import hello_world

    uv, thin = Path(sys.executable).parent / "uv", tmp_path / "thin"
    python = thin / "bin" / "python"
    subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, thin], check=True)
    installed = subprocess.run(
        [uv, "pip", "install", "--quiet", "--python", python, f"{ROOT}[connect]"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    listing = "import importlib.metadata as m; print(*(d.name for d in m.distributions()))"
    names = subprocess.run(
        [python, "-c", listing], capture_output=True, text=True, check=True
    ).stdout.split()
    assert {n for n in names if "spark" in n.lower()} == {"pyspark-client"}, names
    local = subprocess.run(
        [python, "-c", "import lakesink; lakesink.spark_session()"],
        capture_output=True, text=True, env=without_java(),
    )  # fmt: skip
    assert "this pyspark is Spark Connect's client alone" in local.stderr, local.stderr[-2000:]

    hello, shown = hello_world()
    session = "spark = lakesink.spark_session()\n"
    assert session in hello
    remote = f"spark = SparkSession.builder.remote({connect_server.url!r}).getOrCreate()\n"
    hello = "from pyspark.sql import SparkSession\n" + hello.replace(session, remote)
    project = tmp_path / "project"
    project.mkdir()
    ran = subprocess.run(
        [python, "-c", hello], cwd=project, capture_output=True, text=True, timeout=600,
        env=without_java(),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.splitlines() == shown
