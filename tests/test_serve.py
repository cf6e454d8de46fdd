"""``lakesink serve``: a real Thrift JDBC/ODBC server process, queried by real clients.

beeline (from the pyspark installation) and a Python DB-API client (PyHive), logged in as a
user of the server's users file (logins are checked by default), query the committed views
by name while a writer in this process is between pre-commit and commit: they see the
committed rows only, then the new ones once it commits; with the tables on local disk and
on the S3 server. The raw tables have no name.

The writer's checkpoint spans two tables, orders and their totals (one group). Its commit
is held after orders published it and before totals did: there, one SQL statement over
both views through the server must see the previous cut, while the tables' latest
versions (read in this process, the control) disagree. Once the commit is through, the
server moves its views on to the new cut, and every statement on the way agrees.

SIGTERM stops the server: it exits 0 and leaves no JVM behind (its processes are looked up
before, and checked gone after).
Logins, TLS and secrets are tests/test_serve_auth.py's.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F
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

from lakesink.core import step_hook
from lakesink.core.checkpointing import GlobalCommitter, pre_commit_all
from lakesink.delta.sink import DeltaSink
from lakesink.readers.spark import cut_view_name
from lakesink.storage.location import join
from lakesink.tables.format import VISIBLE

pytestmark = pytest.mark.slow

SCHEMAS = {"orders": "order_id BIGINT, item STRING", "totals": "batch BIGINT, orders BIGINT"}
# Orders counted and their totals summed, in one statement: equal in any one cut.
ONE_STATEMENT = "SELECT (SELECT count(*) FROM orders), (SELECT sum(orders) FROM totals)"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_sql_clients_see_only_committed_rows_and_one_cut_during_a_live_checkpoint(
    spark, lake, tmp_path
):
    # Orders and their totals, one group, on local disk and then on the S3 server.
    paths = {name: join(lake, name) for name in ("orders", "totals")}
    window, go = threading.Event(), threading.Event()

    def hold_between_the_tables(step: str, checkpoint_id: int) -> None:
        if step == "after_publish" and checkpoint_id == 2 and not window.is_set():
            window.set()  # orders published checkpoint 2, totals not yet, no new cut
            assert go.wait(timeout=600), "the test never let the commit go on"

    with step_hook(hold_between_the_tables):
        sinks = {
            name: DeltaSink.open(spark, path, schema=SCHEMAS[name], view_name=f"v_serve_{name}")
            for name, path in paths.items()
        }
    for checkpoint, orders in ((1, [(1, "a"), (2, "b")]), (2, [(3, "c")])):
        sinks["orders"].write(spark.createDataFrame(orders, SCHEMAS["orders"]))
        sinks["totals"].write(spark.createDataFrame([(checkpoint, len(orders))], SCHEMAS["totals"]))
        pre_commit_all(sinks, checkpoint)
        if checkpoint == 1:
            GlobalCommitter(sinks, group_id="serve-group").commit(1)
    # Checkpoint 2 is pre-committed in both tables: between pre-commit and commit.
    port, log = free_port(), tmp_path / "serve.log"
    users, password = tmp_path / "users", tmp_path / "password"
    add_user(users, "analyst", "reads-orders")
    password.write_text("reads-orders")
    server = start_serve(
        "--port", str(port), "--users", str(users), "--table", paths["orders"],
        "--table", paths["totals"], "--master", "local[1]",
        log=log,
    )  # fmt: skip
    committer = None
    try:
        url = wait_ready(server, log)
        assert url == f"jdbc:hive2://127.0.0.1:{port}/default"
        query = "SELECT order_id FROM orders ORDER BY order_id"
        done = beeline(url, query, user="analyst", password_file=password)
        assert rows(done) == ["order_id", "1", "2"]
        connection = hive_connect(port, "analyst", "reads-orders")
        cursor = connection.cursor()
        cursor.execute("SHOW TABLES")
        names = sorted(row[1] for row in cursor.fetchall())
        # The committed views and the group's cut view (its checkpoint id); no raw table.
        assert names[:1] == [cut_view_name("x", "serve-group")] and names[1:] == [
            "orders",
            "totals",
        ], names
        cursor.execute("SELECT order_id, item FROM orders ORDER BY order_id")
        assert cursor.fetchall() == [(1, "a"), (2, "b")]

        failed: list[BaseException] = []

        def commit() -> None:
            try:
                GlobalCommitter(sinks, group_id="serve-group").commit(2)
            except BaseException as exc:
                failed.append(exc)
                window.set()

        committer = threading.Thread(target=commit)
        committer.start()
        assert window.wait(timeout=600) and not failed, failed
        # The control: the tables' latest versions disagree inside the window...
        latest = [
            spark.read.format("delta").load(p).where(f"{VISIBLE} = true") for p in paths.values()
        ]
        assert (latest[0].count(), latest[1].agg(F.sum("orders")).first()[0]) == (3, 2)
        # ...one SQL statement over both views through the server sees the previous cut.
        cursor.execute(ONE_STATEMENT)
        assert cursor.fetchall() == [(2, 2)]
        go.set()
        committer.join(timeout=600)
        assert not committer.is_alive() and not failed, failed
        # The server moves its views on to the new cut; every read on the way agrees.
        deadline = time.monotonic() + 120
        while True:
            cursor.execute(ONE_STATEMENT)
            orders_seen, totals_seen = cursor.fetchall()[0]
            assert orders_seen == totals_seen, "one statement over both views saw two cuts"
            if orders_seen == 3:
                break
            assert time.monotonic() < deadline, "the server never showed the new cut"
            time.sleep(0.2)
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
        go.set()
        if committer is not None:
            committer.join(timeout=600)
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        for sink in sinks.values():
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
