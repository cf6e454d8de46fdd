"""A sink table of format 1 (partitioned by checkpoint and transaction id, the masking bit an
ordinary column): refused with a clear error, then migrated in place by
``lakesink migrate-table``.

The table is made by a real sink (one checkpoint committed, one pre-committed by a writer
that stopped before its commit), then rewritten the way format 1 laid it out. How the test
knows nothing is lost: the migrated table holds exactly the rows it held before (hidden
columns included, the pending one derived from the flag), and the restarted writer's
recovery commits its pre-committed checkpoint.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lakesink import committed
from lakesink.cli import main
from lakesink.delta.sink import DeltaSink
from lakesink.errors import FormatVersionError
from lakesink.storage.lease import writer_lock
from lakesink.tables.format import (
    CHECKPOINT_ID,
    FORMAT_PROPERTY,
    LAKESINK_PARTITIONS,
    PENDING,
    TABLE_FORMAT,
    TXN_ID,
    VISIBLE,
)

SCHEMA = "order_id BIGINT, item STRING"


def rows(spark, table: Path) -> list[tuple]:
    frame = spark.read.format("delta").load(str(table))
    columns = [CHECKPOINT_ID, TXN_ID, VISIBLE, "order_id", "item"]
    return sorted(tuple(r) for r in frame.select(*columns).collect())


def as_format_1(spark, table: Path) -> None:
    """Lay the table out as format 1 did: partitioned by checkpoint and transaction id."""
    (
        spark.read.format("delta")
        .load(str(table))
        .select(CHECKPOINT_ID, TXN_ID, VISIBLE, "order_id", "item")
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .partitionBy(CHECKPOINT_ID, TXN_ID)
        .save(str(table))
    )
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{FORMAT_PROPERTY}' = '1')")


def detail(spark, table: Path):
    return spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()


def test_a_format_1_table_is_refused_then_migrated_in_place_and_its_writer_recovers(
    spark, tmp_path, capsys
):
    table = tmp_path / "orders"
    sink = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_mig")
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3, "c")], SCHEMA))
    sink.prepare_commit()  # pre-committed; the writer stops before its commit
    sink.close()
    as_format_1(spark, table)
    before = rows(spark, table)

    with pytest.raises(
        FormatVersionError, match=r"format 1, older .* `lakesink migrate-table PATH`"
    ):
        DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_mig")

    assert main(["migrate-table", str(table), "--dry-run"]) == 0
    assert "DRY RUN: would be" in capsys.readouterr().out
    assert list(detail(spark, table)["partitionColumns"]) == [CHECKPOINT_ID, TXN_ID]

    assert main(["migrate-table", str(table)]) == 0
    assert f"3 row(s) rewritten from format 1 to {TABLE_FORMAT}" in capsys.readouterr().out
    assert rows(spark, table) == before
    assert tuple(detail(spark, table)["partitionColumns"]) == LAKESINK_PARTITIONS
    assert detail(spark, table)["properties"][FORMAT_PROPERTY] == str(TABLE_FORMAT)
    migrated = spark.read.format("delta").load(str(table))
    pending = {
        (r[VISIBLE], r[PENDING] == r[TXN_ID], r[PENDING] is None) for r in migrated.collect()
    }
    assert pending == {(True, False, True), (False, True, False)}
    assert main(["migrate-table", str(table)]) == 0
    assert "nothing to do" in capsys.readouterr().out

    restarted = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_mig")
    restarted.close()
    assert sorted(r.order_id for r in committed(spark, str(table)).collect()) == [1, 2, 3]


def test_a_migration_is_refused_while_a_writer_runs(spark, tmp_path, capsys):
    table = tmp_path / "orders"
    DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_mig2").close()
    as_format_1(spark, table)
    # A live process holds writer 0's lock, as a running writer does.
    writer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    lock = writer_lock(str(table), "orders", "0").path
    lock.write_text(f"{socket.gethostname()} {writer.pid}")
    try:
        assert main(["migrate-table", str(table)]) == 75  # retry once the writer stopped
        assert "writer '0' of" in capsys.readouterr().err
    finally:
        writer.kill()
        writer.wait()
    assert lock.exists()  # still the writer's
    assert list(detail(spark, table)["partitionColumns"]) == [CHECKPOINT_ID, TXN_ID]
