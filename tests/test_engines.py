"""Every engine that reads a lakesink table by its path gets the committed rows.

One table per commit mode holds committed checkpoints (some compacted by the vacuum, one
committed after), an aborted checkpoint the vacuum removed, another aborted one not yet
removed, and a pending one. Each engine reads it by path, as its users would, with the
documented filter (``_lakesink_visible = true``) and the ``_lakesink_*`` columns dropped:
Spark (``lakesink.committed``, the view by name, the raw path), delta-rs, DuckDB
(``delta_scan``, its extension from the PyPI package ``duckdb-ext-delta``, offline), polars
(``scan_delta``) and ``lakesink.arrow``. How the test knows each is right: its ids equal
the ids of the checkpoints the journal says are committed, each once.

polars takes partition values from the files' folders (pola-rs/polars#23391): it reads
right because no folder of a format-4 table names a value the log changed. The control: a
format-3 table whose metadata commit left a published file in its pending folder, where
polars finds none of its rows visible, until ``lakesink migrate-table`` rewrites it.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction

import lakesink
from lakesink.cli import main
from lakesink.core import TxnState
from lakesink.delta.sink import DeltaSink
from lakesink.ops.vacuum import vacuum
from lakesink.tables.format import (
    FORMAT_PROPERTY,
    HIDDEN_PREFIX,
    PENDING,
    TABLE_FORMAT,
    UNMATERIALIZED,
    VISIBLE,
)

SCHEMA = "id BIGINT, item STRING"
BATCHES = {  # checkpoint -> (ids, fate); in this order
    1: (range(0, 50), "committed"),
    2: (range(100, 130), "aborted"),  # removed by the vacuum
    3: (range(200, 260), "committed"),
    4: (range(300, 320), "committed"),  # after the vacuum's compaction
    5: (range(400, 410), "aborted"),  # masked, not vacuumed yet
    6: (range(500, 505), "pending"),
}


def build(spark, path: str, commit: str, view: str) -> None:
    sink = DeltaSink.open(spark, path, schema=SCHEMA, commit=commit, view_name=view)
    for checkpoint, (ids, fate) in BATCHES.items():
        sink.write(spark.createDataFrame([(i, f"x{i}") for i in ids], SCHEMA))
        assert sink.prepare_commit() == checkpoint
        if fate == "committed":
            sink.notify_checkpoint_complete(checkpoint)
        elif fate == "aborted":
            sink.withhold(checkpoint, TxnState.ABORTED, "a test aborts it")
        if checkpoint == 3:  # aborted rows removed, committed ones compacted to one file
            report = vacuum(spark, path, retain_hours=0, allow_short_retention=True,
                            compact_min_files=2)  # fmt: skip
            (rows,) = [c for c in report.compaction if c.what == "committed rows"]
            assert report.rows_removed == 30 and rows.files_removed >= 2 and rows.files_added == 1
    sink.close()


def committed_ids(path: str) -> Counter[int]:
    """The ids of the checkpoints the journal says are committed."""
    states = {c.checkpoint_id: c.state for c in lakesink.Table(path).checkpoints()}
    return Counter(
        i for c, (ids, _) in BATCHES.items() if states[c] is TxnState.COMMITTED for i in ids
    )


def duckdb_ids(path: str) -> list[int]:
    """DuckDB 1.4's own Delta reader, its extension loaded from the ``duckdb-ext-delta``
    wheel (``duckdb_ext/extensions/v<version>/<platform>/delta.duckdb_extension``): DuckDB
    would download it from the internet otherwise."""
    import duckdb

    (folder,) = (Path(p) for p in sys.path if (Path(p) / "duckdb_ext").is_dir())
    (extension,) = (folder / "duckdb_ext" / "extensions").glob(
        f"v{duckdb.__version__}/*/delta.duckdb_extension"
    )
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{extension}'")
    rows = connection.execute(
        f"SELECT COLUMNS(c -> NOT starts_with(c, '{HIDDEN_PREFIX}')) "
        f"FROM delta_scan('{path}') WHERE {VISIBLE}"
    )
    columns = [d[0] for d in rows.description]
    assert columns == ["id", "item"], columns
    return [row[0] for row in rows.fetchall()]


def polars_ids(path: str) -> list[int]:
    frame = (
        pl.scan_delta(path)
        .filter(pl.col(VISIBLE))
        .select(pl.exclude(f"^{HIDDEN_PREFIX}.*$"))
        .collect()
    )
    assert frame.columns == ["id", "item"], frame.columns
    return frame["id"].to_list()


def spark_ids(spark, path: str, view: str) -> dict[str, list[int]]:
    raw = spark.read.format("delta").load(path).where(f"{VISIBLE} = true")
    return {
        "lakesink.committed": [r.id for r in lakesink.committed(spark, path).collect()],
        "the view by name": [r.id for r in spark.sql(f"SELECT id FROM {view}").collect()],
        "the raw path, filtered": [r.id for r in raw.collect()],
    }


@pytest.mark.parametrize("commit", ["merge", "metadata"])
def test_every_engine_reads_exactly_the_committed_rows_by_path(spark, tmp_path, commit):
    path, view = str(tmp_path / "orders"), f"engines_{commit}"
    build(spark, path, commit, view)
    expected = committed_ids(path)
    assert sum(expected.values()) == 130  # checkpoints 1, 3 and 4
    delta_rs = DeltaTable(path).to_pyarrow_table(columns=["id"], filters=[(VISIBLE, "=", True)])
    found = {
        **spark_ids(spark, path, view),
        "delta-rs": delta_rs.column("id").to_pylist(),
        "DuckDB delta_scan": duckdb_ids(path),
        "polars scan_delta": polars_ids(path),
        "lakesink.arrow": lakesink.arrow(path).column("id").to_pylist(),
    }
    wrong = {engine: ids for engine, ids in found.items() if Counter(ids) != expected}
    assert not wrong, {e: sorted(Counter(ids) - expected) or "missing" for e, ids in wrong.items()}


def test_a_format_3_table_published_by_metadata_misleads_polars_until_migrated(spark, tmp_path):
    """The control, and the migration: a format-3 table whose metadata commit added a
    published file again in its pending folder (as lakesink 0.2 did; made here by hand with
    delta-rs) reads right in delta-rs and wrong in polars, until ``lakesink migrate-table``
    rewrites it in format 4."""
    path = str(tmp_path / "orders")
    sink = DeltaSink.open(spark, path, schema=SCHEMA, view_name="engines_3")
    spark.sql(
        f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('{FORMAT_PROPERTY}' = '3', "
        f"'{UNMATERIALIZED[0]}' = 'true')"
    )
    sink.write(spark.createDataFrame([(i, f"x{i}") for i in range(20)], SCHEMA))
    sink.prepare_commit()
    sink.close()
    table = DeltaTable(path)
    table.create_write_transaction(
        [
            AddAction(
                file["path"],
                file["size_bytes"],
                {VISIBLE: "true", PENDING: None},
                file["modification_time"],
                True,
                f'{{"numRecords": {file["num_records"]}}}',
            )
            for file in pa.table(table.get_add_actions(flatten=True)).to_pylist()
        ],
        mode="append",
        schema=table.schema(),
        partition_by=table.metadata().partition_columns,
    )
    assert len(DeltaTable(path).to_pyarrow_table(filters=[(VISIBLE, "=", True)])) == 20
    assert polars_ids(path) == []  # the folder says pending: polars believes it

    assert main(["migrate-table", path]) == 0
    assert DeltaTable(path).metadata().configuration[FORMAT_PROPERTY] == str(TABLE_FORMAT)
    assert Counter(polars_ids(path)) == Counter(range(20))
    assert Counter(duckdb_ids(path)) == Counter(range(20))
