"""``lakesink serve``: a real Thrift JDBC/ODBC server process, queried by real clients.

beeline (from the pyspark installation) and a Python DB-API client (PyHive) query the
committed view by name while a writer in this process is between pre-commit and commit:
they see the committed rows only, then the new ones once it commits; with the table on
local disk and on the S3 server. The raw table has no name. SIGTERM stops the server: it
exits 0 and leaves no JVM behind (its processes are looked up before, and checked gone
after).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyspark
import pytest
from pyhive import hive

from lakesink.delta.sink import DeltaSink
from lakesink.storage.location import join

pytestmark = pytest.mark.slow

SCRIPT = Path(sys.executable).parent / "lakesink"
BEELINE = Path(pyspark.__file__).parent / "bin" / "beeline"
SCHEMA = "order_id BIGINT, item STRING"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (the driver JVM among them), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        children = {p for p, parent in parents.items() if parent in frontier}
        found |= children
        frontier = children
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def serve(*args: str, log: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_METASTORE")}
    return subprocess.Popen(
        [str(SCRIPT), "serve", *args],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env=env,
        start_new_session=True,
    )


def wait_ready(server: subprocess.Popen[str], log: Path, timeout: float = 600) -> str:
    deadline = time.monotonic() + timeout
    assert server.stdout is not None
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if line.startswith("serving SQL at "):
            return line.removeprefix("serving SQL at ").strip()
        assert line or server.poll() is None, f"the server ended:\n{log.read_text()[-3000:]}"
    raise AssertionError(f"not ready in {timeout} s:\n{log.read_text()[-3000:]}")


def beeline(url: str, query: str) -> list[str]:
    done = subprocess.run(
        [
            str(BEELINE),
            "-u",
            url,
            "-n",
            "test",
            "--silent=true",
            "--outputformat=csv2",
            "-e",
            query,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    # Each line may start with beeline's prompt ("0: jdbc:hive2://...> ").
    return [re.sub(r"^\d+: jdbc:\S*> ?", "", line) for line in done.stdout.splitlines() if line]


def test_sql_clients_see_only_committed_rows_during_a_live_checkpoint(spark, lake, tmp_path):
    table = join(lake, "orders")  # on local disk, then on the S3 server
    sink = DeltaSink.open(spark, table, schema=SCHEMA, view_name="v_serve")
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA))
    sink.notify_checkpoint_complete(sink.checkpoint())
    sink.write(spark.createDataFrame([(3, "c")], SCHEMA))
    pending = sink.checkpoint()  # pre-committed: between pre-commit and commit
    port, log = free_port(), tmp_path / "serve.log"
    server = serve("--port", str(port), "--table", table, "--master", "local[1]", log=log)
    try:
        url = wait_ready(server, log)
        assert url == f"jdbc:hive2://127.0.0.1:{port}/default"
        assert beeline(url, "SELECT order_id FROM orders ORDER BY order_id") == [
            "order_id",
            "1",
            "2",
        ]
        connection = hive.connect(host="127.0.0.1", port=port, username="test")
        cursor = connection.cursor()
        cursor.execute("SHOW TABLES")
        assert [row[1] for row in cursor.fetchall()] == ["orders"]  # the view, no raw table
        cursor.execute("SELECT order_id, item FROM orders ORDER BY order_id")
        assert cursor.fetchall() == [(1, "a"), (2, "b")]

        sink.notify_checkpoint_complete(pending)
        cursor.execute("SELECT order_id FROM orders ORDER BY order_id")
        assert [row[0] for row in cursor.fetchall()] == [1, 2, 3]
        connection.close()

        below = descendants(server.pid)
        assert below, "the server started no JVM"
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=120) == 0, log.read_text()[-3000:]
        deadline = time.monotonic() + 30
        while any(alive(p) for p in below) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not [p for p in below if alive(p)], "a process of the server outlived it"
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        sink.close()


def test_a_taken_port_is_refused_before_spark_starts(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        log = tmp_path / "serve.log"
        server = serve("--port", str(port), log=log)
        assert server.wait(timeout=60) == 2
    assert f"127.0.0.1:{port} is taken" in log.read_text()
