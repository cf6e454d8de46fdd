"""A SQL reader process queries the committed view by name while the writer is still running.

Both share one Hive metastore in a Derby network server (``lakesink.spark.metastore``); the
embedded Derby metastore would refuse the second process.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers.cluster import free_port

from lakesink.errors import ConfigurationError
from lakesink.spark import metastore

SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
}

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from lakesink import DeltaSink, spark_session
    path, url, warehouse, ready, release = sys.argv[1:6]
    conf = {**CONF, "spark.sql.warehouse.dir": warehouse}
    spark = spark_session(master="local[1]", conf=conf, metastore_url=url)
    schema = "order_id BIGINT, item STRING"
    sink = DeltaSink.open(spark, path, schema=schema, view_name="shop.orders_committed")
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], schema))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3, "pending")], schema))
    sink.prepare_commit()  # pre-committed, never committed
    Path(ready + ".tmp").write_text("ready")
    Path(ready + ".tmp").rename(ready)
    print("WRITER WAITING", flush=True)
    deadline = time.monotonic() + 300
    while not Path(release).exists():
        if time.monotonic() > deadline:
            sys.exit("WRITER NEVER RELEASED")
        time.sleep(0.2)
    sink.close()
    spark.stop()
    print("WRITER RELEASED", flush=True)
    """
).replace("CONF", repr(SPARK_CONF))

READER = textwrap.dedent(
    """
    import sys
    from lakesink import spark_session
    conf = {**CONF, "spark.sql.warehouse.dir": sys.argv[1]}
    spark = spark_session(master="local[1]", conf=conf)  # URL from $LAKESINK_METASTORE_URL
    rows = spark.sql("SELECT * FROM shop.orders_committed ORDER BY order_id").collect()
    print("READ", [tuple(r) for r in rows], flush=True)
    spark.stop()
    """
).replace("CONF", repr(SPARK_CONF))

STARTUP_TIMEOUT = 600  # a first run downloads the Delta jars
READ_TIMEOUT = 600
EXIT_TIMEOUT = 120


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, str]]:
    data = tmp_path_factory.mktemp("derby-server")
    port = free_port()
    url = metastore.start_server(data, port=port)
    try:
        yield port, url
    finally:
        metastore.stop_server(port=port, data_dir=data)


@pytest.fixture
def metastore_url(server: tuple[int, str]) -> str:
    return server[1]


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_METASTORE_")}
    return {**env, **extra}


def tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def test_confs_point_spark_at_the_server_with_the_client_jar_on_the_driver():
    confs = metastore.metastore_confs("127.0.0.1:1527", "/jars/derbyclient.jar")
    assert confs["spark.hadoop.javax.jdo.option.ConnectionURL"] == (
        "jdbc:derby://127.0.0.1:1527/metastore_db;create=true"
    )
    assert confs["spark.sql.catalogImplementation"] == "hive"
    assert confs["spark.driver.extraClassPath"] == str(Path("/jars/derbyclient.jar").resolve())
    url = "jdbc:derby://db.local:1600/other;create=true"
    assert (
        metastore.metastore_confs(url, "c.jar")["spark.hadoop.javax.jdo.option.ConnectionURL"]
        == url
    )


@pytest.mark.parametrize("bad", ["jdbc:postgresql://127.0.0.1/metastore", "localhost", "h:port"])
def test_confs_refuse_what_is_not_a_derby_server(bad: str):
    with pytest.raises(ConfigurationError, match="metastore URL"):
        metastore.metastore_confs(bad, "c.jar")


def test_session_refuses_an_embedded_and_a_shared_metastore_at_once(tmp_path, monkeypatch):
    from lakesink.spark.session import spark_session

    with pytest.raises(ConfigurationError, match="not both"):
        spark_session(metastore_dir=str(tmp_path), metastore_url="127.0.0.1:1527")
    monkeypatch.setenv("LAKESINK_METASTORE_DIR", str(tmp_path))
    monkeypatch.setenv("LAKESINK_METASTORE_URL", "127.0.0.1:1527")
    with pytest.raises(ConfigurationError, match="unset one"):
        spark_session()


@pytest.mark.slow
def test_cli_status_prints_the_url_of_a_running_server(server: tuple[int, str]):
    port, url = server
    command = [sys.executable, "-m", "lakesink.cli", "metastore", "status", "--port"]
    result = subprocess.run(
        [*command, str(port)], capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == url
    result = subprocess.run(
        [*command, str(free_port())], capture_output=True, text=True, timeout=120, env=clean_env()
    )
    assert result.returncode == 1
    assert "no metastore server answers" in result.stderr


@pytest.mark.slow
def test_reader_sees_committed_rows_while_the_writer_runs(tmp_path: Path, metastore_url: str):
    ready, release = tmp_path / "writer-ready", tmp_path / "writer-release"
    out, err = tmp_path / "writer.out", tmp_path / "writer.err"
    warehouse = str(tmp_path / "warehouse")
    args = [str(tmp_path / "orders"), metastore_url, warehouse, str(ready), str(release)]
    with open(out, "w") as stdout, open(err, "w") as stderr:
        writer = subprocess.Popen(
            [sys.executable, "-c", WRITER, *args], stdout=stdout, stderr=stderr, env=clean_env()
        )
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while not ready.exists():
            assert writer.poll() is None, f"writer exited early:\n{tail(err)}"
            assert time.monotonic() < deadline, f"writer not ready in time:\n{tail(err)}"
            time.sleep(0.5)
        assert writer.poll() is None, "the writer must still run when the reader starts"

        reader = subprocess.run(
            [sys.executable, "-c", READER, warehouse],
            capture_output=True,
            text=True,
            timeout=READ_TIMEOUT,
            env=clean_env(LAKESINK_METASTORE_URL=metastore_url),
        )
        writer_alive_after_read = writer.poll() is None

        assert reader.returncode == 0, reader.stderr[-3000:]
        assert "READ [(1, 'a'), (2, 'b')]" in reader.stdout
        assert writer_alive_after_read, "the writer ended before the reader had read"

        release.touch()
        assert writer.wait(timeout=EXIT_TIMEOUT) == 0, tail(err)
        assert "WRITER RELEASED" in out.read_text()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=EXIT_TIMEOUT)
