"""Every engine that reads Delta by path gets exactly the committed rows from a sink table's
published table, with no filter and the user's columns only.

One table per commit mode and store (local disk, the S3 server), partitioned by a user
column, holds committed checkpoints (some compacted by the vacuum, one committed after a
column was added), an aborted checkpoint the vacuum removed, another aborted one not yet
removed, and a pending one. Each engine reads its published table by path as its users
would, taken from PyPI and configured for the store as its own documentation says: Spark
(``delta.`path```), delta-rs, DuckDB (``delta_scan``, its extension from the PyPI package
``duckdb-ext-delta``, offline), polars (``scan_delta``) and Daft (``read_deltalake``); and
lakesink's own readers of the sink table (``lakesink.committed``, the view by name,
``lakesink.arrow``). How the test knows each is right: its rows, as a multiset of
(id, day, note), are those of the checkpoints the journal says are committed, and its
columns the user's.

The control: the same engines pointed at the sink table itself, as users did before it had
a published table, count the pending and aborted rows and show lakesink's columns.
"""

from __future__ import annotations

import sys
from collections import Counter
from datetime import date, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pyarrow as pa
import pytest

import lakesink
from lakesink.core import TxnState
from lakesink.delta.sink import DeltaSink
from lakesink.ops.vacuum import vacuum
from lakesink.storage.options import StorageOptions, deltars_uri

SCHEMA = "id BIGINT, item STRING, day DATE"
WIDER = f"{SCHEMA}, note STRING"  # a column added by checkpoint 4
COLUMNS = ["id", "item", "day", "note"]
BATCHES = {  # checkpoint -> (ids, fate); in this order
    1: (range(0, 50), "committed"),
    2: (range(100, 130), "aborted"),  # removed by the vacuum
    3: (range(200, 260), "committed"),
    4: (range(300, 320), "committed"),  # after the vacuum's compaction, with a new column
    5: (range(400, 410), "aborted"),  # masked, not vacuumed yet
    6: (range(500, 505), "pending"),
}
Row = tuple[int, date, str | None]


def day(i: int) -> date:
    return date(2024, 1, 1) + timedelta(days=i % 2)


def note(i: int) -> str | None:
    return f"n{i}" if i >= 300 else None


def build(spark, path: str, commit: str, view: str) -> None:
    options = {"commit": commit, "view_name": view, "partition_by": ("day",)}
    sink = DeltaSink.open(spark, path, schema=SCHEMA, **options)
    for checkpoint, (ids, fate) in BATCHES.items():
        if checkpoint == 4:  # a column added: the table evolves, its published table too
            sink.close()
            sink = DeltaSink.open(spark, path, schema=WIDER, merge_schema=True, **options)
        schema = WIDER if checkpoint >= 4 else SCHEMA
        rows = [(i, f"x{i}", day(i), note(i))[: len(schema.split(","))] for i in ids]
        sink.write(spark.createDataFrame(rows, schema))
        assert sink.prepare_commit() == checkpoint
        if fate == "committed":
            sink.notify_checkpoint_complete(checkpoint)
        elif fate == "aborted":
            sink.withhold(checkpoint, TxnState.ABORTED, "a test aborts it")
        if checkpoint == 3:  # aborted rows removed, committed ones compacted
            report = vacuum(spark, path, retain_hours=0, allow_short_retention=True,
                            compact_min_files=2)  # fmt: skip
            (rows_part,) = [c for c in report.compaction if c.what == "committed rows"]
            assert report.rows_removed == 30 and rows_part.files_removed >= 2
    sink.close()


def committed_rows(path: str) -> Counter[Row]:
    """The rows of the checkpoints the journal says are committed."""
    states = {c.checkpoint_id: c.state for c in lakesink.Table(path).checkpoints()}
    return Counter(
        (i, day(i), note(i))
        for c, (ids, _) in BATCHES.items()
        if states[c] is TxnState.COMMITTED
        for i in ids
    )


def rows_of(table: pa.Table) -> Counter[Row]:
    found = table.to_pydict()
    return Counter(zip(found["id"], found["day"], found["note"], strict=True))


def s3_settings(path: str) -> dict[str, str]:
    """What each engine needs to reach the S3 server: delta-rs' storage options."""
    return StorageOptions.from_env().deltars_options(path)


def spark_table(spark, path: str) -> pa.Table:
    frame = spark.read.format("delta").load(path)
    return pa.Table.from_pylist([r.asDict() for r in frame.collect()])


def delta_rs_table(path: str) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(
        deltars_uri(path), storage_options=s3_settings(path) or None
    ).to_pyarrow_table()


def duckdb_table(path: str) -> pa.Table:
    """DuckDB 1.4's own Delta reader, its extension loaded from the ``duckdb-ext-delta``
    wheel (``duckdb_ext/extensions/v<version>/<platform>/delta.duckdb_extension``): DuckDB
    would download it from the internet otherwise. On S3, a secret as DuckDB's docs say,
    with the ``httpfs`` extension (``duckdb-ext-httpfs``)."""
    import duckdb

    (folder,) = (Path(p) for p in sys.path if (Path(p) / "duckdb_ext").is_dir())
    (extension,) = (folder / "duckdb_ext" / "extensions").glob(
        f"v{duckdb.__version__}/*/delta.duckdb_extension"
    )
    connection = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    connection.execute(f"LOAD '{extension}'")
    settings = s3_settings(path)
    if settings:  # S3 comes with DuckDB's httpfs extension, from its PyPI package too
        connection.execute(f"LOAD '{extension.with_name('httpfs.duckdb_extension')}'")
        endpoint = urlparse(settings["AWS_ENDPOINT_URL"])
        connection.execute(
            "CREATE SECRET lake (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
            "URL_STYLE 'path', USE_SSL false)",
            [
                settings["AWS_ACCESS_KEY_ID"],
                settings["AWS_SECRET_ACCESS_KEY"],
                settings["AWS_REGION"],
                endpoint.netloc,
            ],
        )
    return connection.execute(f"SELECT * FROM delta_scan('{deltars_uri(path)}')").arrow().read_all()


def polars_table(path: str) -> pa.Table:
    import polars as pl

    frame = pl.scan_delta(deltars_uri(path), storage_options=s3_settings(path) or None)
    return frame.collect().to_arrow()


def daft_table(path: str) -> pa.Table:
    import daft
    from daft.io import IOConfig, S3Config

    settings = s3_settings(path)
    io_config = (
        IOConfig(
            s3=S3Config(
                endpoint_url=settings["AWS_ENDPOINT_URL"],
                key_id=settings["AWS_ACCESS_KEY_ID"],
                access_key=settings["AWS_SECRET_ACCESS_KEY"],
                region_name=settings["AWS_REGION"],
                use_ssl=settings["AWS_ALLOW_HTTP"] != "true",
                force_virtual_addressing=False,
            )
        )
        if settings
        else None
    )
    return daft.read_deltalake(deltars_uri(path), io_config=io_config).to_arrow()


def engines(spark, path: str) -> dict[str, Any]:
    """Each engine's read of the Delta table at ``path``, no filter, every column."""
    return {
        "Spark delta.`path`": lambda: spark_table(spark, path),
        "delta-rs": lambda: delta_rs_table(path),
        "DuckDB delta_scan": lambda: duckdb_table(path),
        "polars scan_delta": lambda: polars_table(path),
        "Daft read_deltalake": lambda: daft_table(path),
    }


@pytest.mark.parametrize("commit", ["merge", "metadata"])
def test_every_engine_reads_exactly_the_committed_rows_of_the_published_table(spark, lake, commit):
    path, view = f"{lake}/orders", f"engines_{commit}"
    build(spark, path, commit, view)
    expected = committed_rows(path)
    assert sum(expected.values()) == 130  # checkpoints 1, 3 and 4
    published = lakesink.Table(path).published
    found = {engine: read() for engine, read in engines(spark, published).items()}
    columns = {engine: table.column_names for engine, table in found.items()}
    assert all(names == COLUMNS for names in columns.values()), columns
    wrong = {engine: table for engine, table in found.items() if rows_of(table) != expected}
    assert not wrong, {
        engine: (sorted(rows_of(t) - expected)[:5], sorted(expected - rows_of(t))[:5])
        for engine, t in wrong.items()
    }
    # lakesink's own readers of the sink table agree.
    assert rows_of(lakesink.arrow(path)) == expected
    ours = [r.asDict() for r in lakesink.committed(spark, path).collect()]
    assert Counter((r["id"], r["day"], r["note"]) for r in ours) == expected
    assert sorted(r.id for r in spark.sql(f"SELECT id FROM {view}").collect()) == sorted(
        i for i, _, _ in expected.elements()
    )


def test_read_by_the_sink_tables_own_path_every_engine_sees_pending_rows(spark, tmp_path):
    """The control: what the published table is for. The sink table, read by its path with
    no filter, holds pending and aborted rows and lakesink's columns, in every engine."""
    path, view = str(tmp_path / "orders"), "engines_control"
    build(spark, path, "metadata", view)
    expected = committed_rows(path)
    for engine, read in engines(spark, path).items():
        table = read()
        assert table.num_rows > sum(expected.values()), engine
        assert any(c.startswith("_lakesink_") for c in table.column_names), engine
