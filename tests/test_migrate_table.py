"""Sink tables of formats 1 to 4: refused with a clear error, then migrated in place into
format 5 by ``lakesink migrate-table``.

The older layouts, each built by hand here:

- format 1: partitioned by checkpoint and transaction id, the masking bit an ordinary
  column, no ``lakesink.formatVersion`` (it predates the property), the journal recorded
  whole;
- format 2: partitioned by the masking bit and the pending transaction, every row still
  carrying its checkpoint and transaction id, the journal recorded whole;
- format 3: as format 2, a journal beside the table recorded relative to it;
- format 4: as format 3, partition values kept out of the data files
  (``delta.writePartitionColumnsToParquet = false``), also with a user partition column.

None recorded its commit mode, and none had a published table or a Delta ``txn`` action.

The table is first made by a real sink (one checkpoint committed, one pre-committed by a
writer that stopped before its commit), then laid out again as the old format kept it:
each row with its checkpoint and transaction id, a masked row's transaction being its
pending partition and a committed row's the one the history's commit of its checkpoint
names. How the test knows nothing is lost: the migrated table holds exactly the rows it
held before, each keeping its flag and checkpoint, its pending partition the transaction
of a masked row and NULL for a committed one, and no transaction column; its published
table shows the committed rows (a user partition column read from the files, which now
hold it); the restarted writer's recovery commits its pre-committed checkpoint, and a new
checkpoint commits after it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote

import pyarrow.parquet as pq
import pytest
from delta.tables import DeltaTable
from deltalake import DeltaTable as DeltaRsTable
from pyspark.sql import DataFrame
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType

from lakesink import committed
from lakesink.cli import main
from lakesink.delta.sink import DeltaSink
from lakesink.errors import FormatVersionError
from lakesink.storage.lease import writer_lock
from lakesink.tables.format import (
    CHECKPOINT_ID,
    COMMIT_MODE_PROPERTY,
    FORMAT_PROPERTY,
    JOURNAL_PROPERTY,
    LAKESINK_PARTITIONS,
    PARTITION_VALUES_IN_FILES,
    PENDING,
    SINK_ID_PROPERTY,
    TABLE_FORMAT,
    VISIBLE,
    published_path,
)
from lakesink.tables.history import read_history
from lakesink.tables.journal import Journal

SCHEMA = "order_id BIGINT, item STRING"
USER_COLUMNS = ("order_id", "item")
# What every row of formats 1 to 4 carried: its transaction.
OLD_TXN_ID = "_lakesink_txn_id"
# (format, the user's partition columns)
OLD_LAYOUTS = [(1, ()), (2, ()), (3, ()), (4, ()), (4, ("item",))]


def write_and_stop(spark, table: Path, partition_by: tuple[str, ...] = ()) -> None:
    """Checkpoint 1 committed (orders 1 and 2), checkpoint 2 pre-committed (order 3) by a
    writer that stops before its commit."""
    sink = DeltaSink.open(
        spark, str(table), schema=SCHEMA, view_name="v_mig", partition_by=partition_by
    )
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3, "c")], SCHEMA))
    sink.prepare_commit()
    sink.close()


def journal_path(table: Path) -> Path:
    return table.parent / "_lakesink_journal"


def old_rows(spark, table: Path) -> DataFrame:
    """The format-5 table's rows as formats 1 to 4 kept them: each with its checkpoint and
    transaction id. A masked row's transaction is its pending partition; a committed row's
    is the one the history's commit of its checkpoint names (the MERGE stamped the row with
    it); each transaction's checkpoint is the journal's."""
    published = {
        e.checkpoint_id: e.txn_ids for e in read_history(str(table)) if e.lakesink == "commit"
    }
    journal = Journal(str(journal_path(table)), create=False)
    checkpoints = {s.txn_id: s.checkpoint_id for s in journal.transactions(table.name)}
    found = []
    for row in spark.read.format("delta").load(str(table)).collect():
        if row[VISIBLE]:
            (txn,) = published[row[CHECKPOINT_ID]]
        else:
            txn = row[PENDING]
        found.append((row[VISIBLE], checkpoints[txn], txn, *(row[c] for c in USER_COLUMNS)))
    schema = StructType(
        [
            StructField(VISIBLE, BooleanType(), False),
            StructField(CHECKPOINT_ID, LongType(), False),
            StructField(OLD_TXN_ID, StringType(), False),
            *spark.createDataFrame([], SCHEMA).schema.fields,
        ]
    )
    return spark.createDataFrame(found, schema)


def as_old_format(spark, table: Path, version: int, partition_by: tuple[str, ...] = ()) -> None:
    """Lay the table out again as format ``version`` did, in a table made anew (an old table
    had no published table, no txn action and no commit mode)."""
    frame = old_rows(spark, table)
    shutil.rmtree(table)
    hidden = [f for f in frame.schema.fields if f.name.startswith("_lakesink_")]
    if version == 1:  # partitioned by checkpoint and transaction, the flag a column
        columns = [CHECKPOINT_ID, OLD_TXN_ID, VISIBLE, *USER_COLUMNS]
        partitions = [CHECKPOINT_ID, OLD_TXN_ID]
    else:  # partitioned by the flag and the pending transaction, every row with its ids
        pending = StructField(PENDING, StringType(), True)
        hidden = [hidden[0], pending, *hidden[1:]]
        columns = [VISIBLE, PENDING, CHECKPOINT_ID, OLD_TXN_ID, *USER_COLUMNS]
        partitions = [*LAKESINK_PARTITIONS, *partition_by]
        frame = frame.selectExpr(
            "*", f"CASE WHEN {VISIBLE} THEN NULL ELSE {OLD_TXN_ID} END AS {PENDING}"
        )
    user = [f for f in frame.schema.fields if f.name in USER_COLUMNS]
    fields = {f.name: f for f in [*hidden, *user]}
    journal = str(journal_path(table))
    builder = (
        DeltaTable.createIfNotExists(spark)
        .location(str(table))
        .addColumns(StructType([fields[c] for c in columns]))
        .partitionedBy(*partitions)
        .property(SINK_ID_PROPERTY, table.name)
        # Recorded whole before format 3, relative to the table since.
        .property(JOURNAL_PROPERTY, journal if version < 3 else "../_lakesink_journal")
    )
    if version > 1:  # format 1 predates the property
        builder = builder.property(FORMAT_PROPERTY, str(version))
    if version == 4:
        builder = builder.property(PARTITION_VALUES_IN_FILES, "false")
    builder.execute()
    frame.select(*columns).write.format("delta").mode("append").save(str(table))


def rows(spark, table: Path, columns: list[str]) -> list[tuple]:
    frame = spark.read.format("delta").load(str(table))
    return sorted((tuple(r) for r in frame.select(*columns).collect()), key=repr)


def columns_in_files(table: Path) -> set[tuple[str, ...]]:
    """The columns each live data file of the table holds, as its Parquet schema says."""
    files = DeltaRsTable(str(table)).file_uris()
    assert files
    return {tuple(pq.read_schema(unquote(f.removeprefix("file://"))).names) for f in files}


def detail(spark, table: Path):
    return spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()


@pytest.mark.parametrize(
    ("version", "partition_by"),
    OLD_LAYOUTS,
    ids=[f"format-{v}" + ("-partitioned" if p else "") for v, p in OLD_LAYOUTS],
)
def test_an_old_table_is_refused_then_migrated_in_place_and_its_writer_recovers(
    spark, tmp_path, capsys, version, partition_by
):
    table = tmp_path / "orders"
    write_and_stop(spark, table, partition_by)
    as_old_format(spark, table, version, partition_by)
    old_partitions = list(detail(spark, table)["partitionColumns"])
    before = rows(spark, table, [VISIBLE, CHECKPOINT_ID, OLD_TXN_ID, *USER_COLUMNS])
    assert len({r[2] for r in before}) == 2  # both transactions, named on every row
    if partition_by:  # format 4 kept the user's partition values out of its files
        assert all("item" not in names for names in columns_in_files(table))

    with pytest.raises(
        FormatVersionError, match=rf"format {version}, older .* `lakesink migrate-table PATH`"
    ):
        DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_mig")

    assert main(["migrate-table", str(table), "--dry-run"]) == 0
    assert "DRY RUN: would be" in capsys.readouterr().out
    assert list(detail(spark, table)["partitionColumns"]) == old_partitions

    assert main(["migrate-table", str(table)]) == 0
    out = capsys.readouterr().out
    assert f"3 row(s) rewritten from format {version} to {TABLE_FORMAT}" in out
    # Every row kept, its flag and checkpoint with it; its transaction is its pending
    # partition while it is masked, and no row carries a transaction column any more.
    migrated = spark.read.format("delta").load(str(table))
    assert migrated.columns == [VISIBLE, PENDING, CHECKPOINT_ID, *USER_COLUMNS]
    expected = [
        (visible, checkpoint, None if visible else txn, *user)
        for visible, checkpoint, txn, *user in before
    ]
    columns = [VISIBLE, CHECKPOINT_ID, PENDING, *USER_COLUMNS]
    assert rows(spark, table, columns) == sorted(expected, key=repr)
    after = detail(spark, table)
    assert tuple(after["partitionColumns"]) == (*LAKESINK_PARTITIONS, *partition_by)
    assert after["properties"][FORMAT_PROPERTY] == str(TABLE_FORMAT)
    assert after["properties"][COMMIT_MODE_PROPERTY] == "merge"  # what they all committed by
    assert after["properties"][JOURNAL_PROPERTY] == "../_lakesink_journal"
    # Partition values in the files only where the published table reads a user's.
    assert after["properties"][PARTITION_VALUES_IN_FILES] == str(bool(partition_by)).lower()
    assert all("item" in names for names in columns_in_files(table))  # as the log says
    published = DeltaRsTable(published_path(str(table))).to_pyarrow_table()
    assert published.column_names == list(USER_COLUMNS)
    assert sorted(zip(*published.to_pydict().values(), strict=True)) == [(1, "a"), (2, "b")]
    assert main(["migrate-table", str(table)]) == 0
    assert "nothing to do" in capsys.readouterr().out

    restarted = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_mig")
    assert sorted(r.order_id for r in committed(spark, str(table)).collect()) == [1, 2, 3]
    restarted.write(spark.createDataFrame([(4, "d")], SCHEMA))  # and it writes on
    restarted.notify_checkpoint_complete(restarted.prepare_commit())
    restarted.close()
    assert sorted(r.order_id for r in committed(spark, str(table)).collect()) == [1, 2, 3, 4]
    published = DeltaRsTable(published_path(str(table))).to_pyarrow_table()
    assert sorted(zip(*published.to_pydict().values(), strict=True)) == [
        (1, "a"),
        (2, "b"),
        (3, "c"),
        (4, "d"),
    ]


def test_a_migration_is_refused_while_a_writer_runs(spark, tmp_path, capsys):
    table = tmp_path / "orders"
    write_and_stop(spark, table)
    as_old_format(spark, table, 1)
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
    assert list(detail(spark, table)["partitionColumns"]) == [CHECKPOINT_ID, OLD_TXN_ID]
