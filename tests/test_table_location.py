"""A table moves as a whole: copied or moved with the journal beside it, it finds its own
journal in its new place; a journal shared with another live table is refused by name.

How the tests know nothing is mixed: after the copy, each table's journal holds only its
own new transactions, and each table's committed rows are exactly what was written to it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_migrate_table import as_old_format

from lakesink import committed
from lakesink.cli import main
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError, FormatVersionError
from lakesink.ops.status import sink_status
from lakesink.readers.deltars import arrow
from lakesink.storage.files import write_bytes
from lakesink.storage.location import join
from lakesink.tables.format import FORMAT_PROPERTY, JOURNAL_PROPERTY, TABLE_FORMAT

SCHEMA = "order_id BIGINT, item STRING"


def write_checkpoint(spark, sink: DeltaSink, ids: list[int]) -> int:
    sink.write(spark.createDataFrame([(i, f"item-{i}") for i in ids], SCHEMA))
    checkpoint = sink.prepare_commit()
    sink.notify_checkpoint_complete(checkpoint)
    return checkpoint


def ids(spark, table: Path) -> list[int]:
    return sorted(r.order_id for r in committed(spark, str(table)).collect())


def properties(spark, table: Path) -> dict[str, str]:
    return spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()["properties"]


def test_a_table_copied_with_its_journal_uses_the_copy_and_leaves_the_original_alone(
    spark, tmp_path
):
    original = tmp_path / "first" / "orders"
    sink = DeltaSink.open(spark, str(original), schema=SCHEMA, view_name="v_loc_a")
    write_checkpoint(spark, sink, [1, 2])
    sink.close()
    assert properties(spark, original)[JOURNAL_PROPERTY] == "../_lakesink_journal"

    shutil.copytree(tmp_path / "first", tmp_path / "second")  # cp -r of table and journal
    copy = tmp_path / "second" / "orders"
    status = sink_status(str(copy))
    assert status.journal_path == str(tmp_path / "second" / "_lakesink_journal")
    assert [t.checkpoint_id for t in status.committed] == [1]

    moved = DeltaSink.open(spark, str(copy), schema=SCHEMA, view_name="v_loc_b")
    write_checkpoint(spark, moved, [3])
    moved.close()

    assert ids(spark, copy) == [1, 2, 3]
    assert ids(spark, original) == [1, 2]
    assert [t.checkpoint_id for t in sink_status(str(original)).committed] == [1]
    assert [t.checkpoint_id for t in sink_status(str(copy)).committed] == [1, 2]


def test_a_copy_beside_the_original_sharing_its_journal_is_refused(spark, tmp_path):
    original = tmp_path / "orders"
    sink = DeltaSink.open(spark, str(original), schema=SCHEMA, view_name="v_loc_c")
    write_checkpoint(spark, sink, [1])
    sink.close()
    twin = tmp_path / "orders_copy"
    shutil.copytree(original, twin)  # same folder: the journal beside it is the original's

    with pytest.raises(ConfigurationError, match=r"share one journal") as refused:
        DeltaSink.open(spark, str(twin), schema=SCHEMA, sink_id="orders", view_name="v_loc_d")
    assert str(original) in str(refused.value)
    assert main(["status", str(twin)]) == 2


def test_a_table_renamed_in_its_folder_keeps_its_history(spark, tmp_path):
    sink = DeltaSink.open(spark, str(tmp_path / "orders"), schema=SCHEMA, view_name="v_loc_e")
    write_checkpoint(spark, sink, [1])
    sink.close()
    (tmp_path / "orders").rename(tmp_path / "orders_v2")  # the old place holds nothing now

    renamed = tmp_path / "orders_v2"
    again = DeltaSink.open(
        spark, str(renamed), schema=SCHEMA, sink_id="orders", view_name="v_loc_f"
    )
    write_checkpoint(spark, again, [2])
    again.close()
    assert ids(spark, renamed) == [1, 2]


def test_a_format_2_table_records_its_journal_relative_once_migrated(spark, tmp_path, capsys):
    table = tmp_path / "orders"
    sink = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_loc_g")
    write_checkpoint(spark, sink, [1])
    sink.close()
    as_old_format(spark, table, 2)  # its journal recorded whole, as format 2 did
    journal = str(tmp_path / "_lakesink_journal")
    assert properties(spark, table)[JOURNAL_PROPERTY] == journal
    with pytest.raises(FormatVersionError, match=r"format 2, older .*migrate-table"):
        sink_status(str(table))  # format 2 is no longer read as it is

    assert main(["migrate-table", str(table)]) == 0
    assert f"rewritten from format 2 to {TABLE_FORMAT}" in capsys.readouterr().out
    found = properties(spark, table)
    assert found[FORMAT_PROPERTY] == str(TABLE_FORMAT)
    assert found[JOURNAL_PROPERTY] == "../_lakesink_journal"
    assert sink_status(str(table)).journal_path == journal
    assert ids(spark, table) == [1]


def test_a_table_moved_from_local_disk_to_s3_with_its_journal_goes_on_there(spark, tmp_path):
    from s3_fixture import s3_uri

    local = tmp_path / "lake"
    sink = DeltaSink.open(spark, str(local / "orders"), schema=SCHEMA, view_name="v_loc_h")
    write_checkpoint(spark, sink, [1, 2])
    sink.write(spark.createDataFrame([(3, "item-3")], SCHEMA))
    sink.prepare_commit()  # pre-committed when the copy is made: recovery on S3 commits it
    sink.close()
    bucket = s3_uri("moved")
    for file in sorted(p for p in local.rglob("*") if p.is_file()):  # a bucket sync
        write_bytes(join(bucket, *file.relative_to(local).parts), file.read_bytes())
    shutil.rmtree(local)

    table = join(bucket, "orders")
    assert sink_status(table).journal_path == join(bucket, "_lakesink_journal")
    moved = DeltaSink.open(spark, table, schema=SCHEMA, view_name="v_loc_i")
    write_checkpoint(spark, moved, [4])
    moved.close()
    assert sorted(r.order_id for r in committed(spark, table).collect()) == [1, 2, 3, 4]
    assert sorted(r.order_id for r in spark.table("v_loc_i").collect()) == [1, 2, 3, 4]
    assert sorted(arrow(table, columns=["order_id"]).column(0).to_pylist()) == [1, 2, 3, 4]
    statuses = sink_status(table).committed
    assert [t.checkpoint_id for t in statuses] == [1, 2, 3]
