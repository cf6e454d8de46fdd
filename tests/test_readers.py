"""Committed rows without Spark: ``lakesink.readers.deltars.arrow`` over delta-rs, and the
readers guide's DuckDB and polars examples run as written; the table format's filters of
committed and pending rows select the same files in every engine's form.

The table is written by a real sink: two committed checkpoints, one pre-committed but not
committed, one aborted. How the tests know a masked file is not read: the Arrow dataset's
files are listed and every one is in the committed partition, while the table holds the
masked files too.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError, FormatVersionError, TableNotFoundError
from lakesink.readers.deltars import arrow, committed_dataset
from lakesink.tables.format import (
    CHECKPOINT_ID,
    COMMITTED_ROWS,
    PENDING,
    VISIBLE,
    RowFilter,
    pending_txn_rows,
)

SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE"
READERS_GUIDE = Path(__file__).resolve().parent.parent / "docs" / "guides" / "readers.md"


@pytest.fixture(scope="module")
def orders(spark, tmp_path_factory) -> tuple[Path, int]:
    """The table, and its Delta version before the second commit."""
    table = tmp_path_factory.mktemp("readers") / "orders"
    sink = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_readers")

    def write(writer: DeltaSink, first: int) -> None:
        rows = [(i, f"c{i % 2}", float(i)) for i in range(first, first + 3)]
        writer.write(spark.createDataFrame(rows, SCHEMA))

    write(sink, 1)
    sink.notify_checkpoint_complete(sink.prepare_commit())
    write(sink, 4)
    pending = sink.prepare_commit()
    before = DeltaTable(str(table)).version()
    sink.notify_checkpoint_complete(pending)
    write(sink, 100)
    sink.prepare_commit()  # pre-committed, never committed here
    aborter = DeltaSink.open(spark, str(table), view_name="v_readers", writer_id="aborter")
    write(aborter, 200)
    aborter.close()  # aborted
    sink._release()
    return table, before


def test_arrow_returns_exactly_the_committed_rows_and_user_columns(orders):
    table, _ = orders
    rows = arrow(table)
    assert rows.column_names == ["order_id", "customer", "amount"]
    assert sorted(rows.column("order_id").to_pylist()) == [1, 2, 3, 4, 5, 6]
    assert arrow(table, columns=["amount"]).column_names == ["amount"]


def test_masked_files_are_never_opened(orders):
    table, _ = orders
    every_file = [f.removeprefix(f"{table}/") for f in DeltaTable(str(table)).file_uris()]
    masked = [f for f in every_file if f.startswith(f"{VISIBLE}=false/")]
    read = committed_dataset(table).files  # relative to the table, like the log's paths
    assert len(masked) >= 2  # the pending and the aborted transaction's
    assert read and all(f.startswith(f"{VISIBLE}=true/") for f in read)
    assert sorted(read) == sorted(f for f in every_file if f not in masked)


def test_an_older_version_is_read_as_it_was(orders):
    table, before = orders
    assert sorted(arrow(table, version=before).column("order_id").to_pylist()) == [1, 2, 3]


def test_bad_input_is_named(orders, spark, tmp_path):
    table, _ = orders
    with pytest.raises(ConfigurationError, match=r"column\(s\) amont are not user columns"):
        arrow(table, columns=["amont"])
    with pytest.raises(ConfigurationError, match=rf"{CHECKPOINT_ID} are not user columns"):
        arrow(table, columns=[CHECKPOINT_ID])  # a hidden column
    with pytest.raises(TableNotFoundError, match=r"no Delta table at"):
        arrow(tmp_path / "missing")
    plain = tmp_path / "plain"
    spark.range(3).write.format("delta").save(str(plain))
    with pytest.raises(TableNotFoundError, match=r"is not a lakesink table"):
        arrow(plain)
    with pytest.raises(TableNotFoundError, match=r"at version 999"):
        arrow(table, version=999)


def test_a_table_of_another_format_is_refused(spark, tmp_path):
    table = tmp_path / "old"
    DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_old").close()
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('lakesink.formatVersion' = '1')")
    with pytest.raises(FormatVersionError, match=r"`lakesink migrate-table PATH`"):
        arrow(table)


def files_each_form_selects(session, table: Path, rows: RowFilter) -> list[set[str]]:
    """The data files (relative to the table) that each form of ``rows`` selects: Spark SQL
    (the files the selected rows are in), delta-rs' filters, and a pyarrow expression over
    delta-rs' add actions."""

    def relative(path: str) -> str:
        return unquote(path).split(f"{table}/", 1)[1]

    raw = session.read.format("delta").load(str(table)).select(F.input_file_name().alias("f"))
    in_spark = {relative(r.f) for r in raw.where(rows.sql()).distinct().collect()}
    log = DeltaTable(str(table))
    by_filters = {
        relative(f) for f in log.file_uris(file_pruning_predicate=rows.partition_filters())
    }
    actions = pa.table(log.get_add_actions(flatten=False)).filter(
        rows.expression(within="partition")
    )
    by_expression = {unquote(f) for f in actions.column("path").to_pylist()}
    return [in_spark, by_filters, by_expression]


def test_each_form_of_the_row_filters_selects_the_same_files(orders, spark):
    table, _ = orders
    every_file = {f.removeprefix(f"{table}/") for f in DeltaTable(str(table)).file_uris()}
    committed = {f for f in every_file if f.startswith(f"{VISIBLE}=true/")}
    pending = {f for f in every_file if f.startswith(f"{VISIBLE}=false/")}
    txns = sorted({f.split("/")[1].removeprefix(f"{PENDING}=") for f in pending})
    assert committed and len(txns) == 2  # the pre-committed and the aborted transaction's
    for rows, expected in [
        (COMMITTED_ROWS, committed),
        (pending_txn_rows(txns), pending),
        (pending_txn_rows(txns[0]), {f for f in pending if f"={txns[0]}/" in f}),
    ]:
        assert files_each_form_selects(spark, table, rows) == [expected] * 3, rows


def guide_example(engine: str) -> str:
    """The readers guide's first Python example that imports ``engine`` (the engines
    section further down shows each engine again, on a table path), after the one that
    finds the published table it reads (``published``)."""
    blocks = re.findall(r"```python\n(.*?)```", READERS_GUIDE.read_text(), re.S)
    published = next(b for b in blocks if "published = " in b)
    return published + next(b for b in blocks if f"import {engine}" in b)


@pytest.mark.parametrize("engine", ["duckdb", "polars"])
def test_the_guides_examples_read_the_committed_rows(engine, orders, capsys):
    table, _ = orders
    namespace = {"lakesink": __import__("lakesink")}
    exec(guide_example(engine).replace('"lake/orders"', repr(str(table))), namespace)
    where, printed = capsys.readouterr().out.strip().splitlines()
    assert where == f"{table}/{VISIBLE}=true/{PENDING}=__HIVE_DEFAULT_PARTITION__"
    if engine == "duckdb":
        assert printed == "[(6, 21.0)]"  # orders 1-6 only, their amounts summed
    else:
        assert printed == "6 ['order_id', 'customer', 'amount']"  # orders 1-6, user columns


def test_a_downstream_stream_skips_masked_rows_compaction_and_the_vacuum(spark, tmp_path, commit):
    from lakesink.ops.vacuum import vacuum
    from lakesink.readers.spark import committed_stream

    table, silver = tmp_path / "orders", tmp_path / "silver"

    def consume() -> list[int]:
        query = (
            committed_stream(spark, str(table))
            .writeStream.format("delta")
            .option("checkpointLocation", str(tmp_path / "silver-checkpoint"))
            .trigger(availableNow=True)
            .start(str(silver))
        )
        query.awaitTermination(300)
        assert query.exception() is None
        return sorted(r.order_id for r in spark.read.format("delta").load(str(silver)).collect())

    sink = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_stream", commit=commit)
    for first in (1, 3):
        sink.write(spark.createDataFrame([(first, "c", 1.0), (first + 1, "c", 1.0)], SCHEMA))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    aborter = DeltaSink.open(spark, str(table), view_name="v_stream", writer_id="aborter")
    aborter.write(spark.createDataFrame([(99, "x", 1.0)], SCHEMA))
    aborter.close()
    sink.write(spark.createDataFrame([(5, "c", 1.0)], SCHEMA))
    pending = sink.prepare_commit()
    assert consume() == [1, 2, 3, 4]

    report = vacuum(spark, str(table), compact_min_files=2)  # DELETE, OPTIMIZE, VACUUM
    assert report.rows_removed == 1 and report.compaction[0].files_removed >= 2
    assert consume() == [1, 2, 3, 4]  # nothing again, nothing new

    sink.notify_checkpoint_complete(pending)
    assert consume() == [1, 2, 3, 4, 5]
    sink.close()
