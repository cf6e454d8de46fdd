"""Each engine that reads a Delta table by its path, as its users would: taken from PyPI and
configured for the store (local disk or the S3 server) as its own documentation says.

Spark (``delta.`path```), delta-rs, DuckDB (``delta_scan``, its extension from the PyPI
package ``duckdb-ext-delta``, offline), polars (``scan_delta``) and Daft
(``read_deltalake``); each reads the whole table at ``path``, no filter, every column.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa

from lakesink.storage.options import StorageOptions, deltars_uri

__all__ = ["engines"]


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


def engines(spark, path: str) -> dict[str, Callable[[], pa.Table]]:
    """Each engine's read of the Delta table at ``path``, no filter, every column."""
    return {
        "Spark delta.`path`": lambda: spark_table(spark, path),
        "delta-rs": lambda: delta_rs_table(path),
        "DuckDB delta_scan": lambda: duckdb_table(path),
        "polars scan_delta": lambda: polars_table(path),
        "Daft read_deltalake": lambda: daft_table(path),
    }
