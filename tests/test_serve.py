"""``lakesink serve``: a real Thrift JDBC/ODBC server process, queried by real clients.

beeline (from the pyspark installation) and a Python DB-API client (PyHive), logged in as a
user of the server's users file (logins are checked by default), query the committed view
by name while a writer in this process is between pre-commit and commit: they see the
committed rows only, then the new ones once it commits; with the table on local disk and
on the S3 server. The raw table has no name. SIGTERM stops the server: it exits 0 and
leaves no JVM behind (its processes are looked up before, and checked gone after).
Logins, TLS and secrets are tests/test_serve_auth.py's.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest
from serve_fixture import (
    add_user,
    beeline,
    descendants,
    hive_connect,
    rows,
    start_serve,
    wait_ready,
)
from servers.cluster import free_port

from lakesink.delta.sink import DeltaSink
from lakesink.storage.location import join

pytestmark = pytest.mark.slow

SCHEMA = "order_id BIGINT, item STRING"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_sql_clients_see_only_committed_rows_during_a_live_checkpoint(spark, lake, tmp_path):
    table = join(lake, "orders")  # on local disk, then on the S3 server
    sink = DeltaSink.open(spark, table, schema=SCHEMA, view_name="v_serve")
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA))
    sink.notify_checkpoint_complete(sink.checkpoint())
    sink.write(spark.createDataFrame([(3, "c")], SCHEMA))
    pending = sink.checkpoint()  # pre-committed: between pre-commit and commit
    port, log = free_port(), tmp_path / "serve.log"
    users, password = tmp_path / "users", tmp_path / "password"
    add_user(users, "analyst", "reads-orders")
    password.write_text("reads-orders")
    server = start_serve(
        "--port", str(port), "--users", str(users), "--table", table, "--master", "local[1]",
        log=log,
    )  # fmt: skip
    try:
        url = wait_ready(server, log)
        assert url == f"jdbc:hive2://127.0.0.1:{port}/default"
        query = "SELECT order_id FROM orders ORDER BY order_id"
        done = beeline(url, query, user="analyst", password_file=password)
        assert rows(done) == ["order_id", "1", "2"]
        connection = hive_connect(port, "analyst", "reads-orders")
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
        server = start_serve("--port", str(port), "--no-auth", log=log)
        assert server.wait(timeout=60) == 2
    assert f"127.0.0.1:{port} is taken" in log.read_text()
