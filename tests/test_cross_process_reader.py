"""A SQL reader in another process finds the committed view by name after the writer exits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

WRITER = textwrap.dedent(
    """
    import sys
    from lakesink import DeltaSink, spark_session
    spark = spark_session(master="local[1]", conf={"spark.ui.enabled": "false"})
    schema = "order_id BIGINT, item STRING"
    sink = DeltaSink.open(spark, sys.argv[1], schema=schema, view_name="shop.orders_committed")
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], schema))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3, "pending")], schema))
    sink.prepare_commit()  # pre-committed, never committed
    sink.write(spark.createDataFrame([(4, "open")], schema))
    print("WRITER DONE")
    # exits without close: the process simply ends
    """
)

READER = textwrap.dedent(
    """
    from lakesink import spark_session
    spark = spark_session(master="local[1]", conf={"spark.ui.enabled": "false"})
    rows = spark.sql("SELECT * FROM shop.orders_committed ORDER BY order_id").collect()
    print("READ", [tuple(r) for r in rows])
    """
)


def run(script: str, *args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_reader_process_sees_only_committed_rows_through_the_view(tmp_path):
    env = {**os.environ, "LAKESINK_METASTORE_DIR": str(tmp_path / "metastore")}
    assert "WRITER DONE" in run(WRITER, str(tmp_path / "orders"), env=env)

    output = run(READER, env=env)

    assert "READ [(1, 'a'), (2, 'b')]" in output
