"""How Spark readers see only committed rows: a view, a DataFrame, a stream, or a filter."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakesink.spark.sql import delta_path, quote_identifier, quote_name, string_literal
from lakesink.storage.location import normalize
from lakesink.tables.format import COMMITTED_FILTER, HIDDEN_PREFIX, PENDING, VISIBLE, SinkTable

__all__ = [
    "committed",
    "committed_stream",
    "create_committed_view",
    "create_pending_view",
    "pending_rows",
]


def committed(spark: SparkSession, path: str, *, version: int | None = None) -> DataFrame:
    """The committed rows of a lakesink table, without the hidden columns.

    ``version`` reads the table as of that Delta version (time travel).
    """
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    table = reader.load(normalize(path))  # a relative path means this process's folder
    user_columns = [c for c in table.columns if not c.startswith(HIDDEN_PREFIX)]
    return table.where(COMMITTED_FILTER).select(*[quote_identifier(c) for c in user_columns])


def committed_stream(spark: SparkSession, path: str, **options: str) -> DataFrame:
    """A streaming DataFrame of the table's rows as they are committed, each exactly once.

    For a downstream streaming query (bronze -> silver). Delta's streaming source fails on
    a commit that removes files with ``dataChange = true``, which every lakesink commit
    does; read with ``ignoreChanges``, such a commit's added files are emitted, and a
    commit adds exactly its transaction's rows, now visible (a pending partition holds
    that transaction's rows alone). So the stream is filtered to visible rows:

    - a pre-commit's append (masked rows) is read and filtered out;
    - a commit emits its transaction's rows, once;
    - compaction (OPTIMIZE, ``dataChange = false``) is skipped by the source;
    - the vacuum's DELETE removes files without adding any: nothing is emitted.

    Rewriting a table by hand (``lakesink migrate-table``, an UPDATE) would emit its rows
    again; start such a consumer over (a new checkpoint location) after one.

    ``options`` are passed to Delta's streaming source (``maxFilesPerTrigger``,
    ``startingVersion``, ...).
    """
    table = (
        spark.readStream.format("delta")
        .option("ignoreChanges", "true")
        .options(**options)
        .load(normalize(path))
    )
    user_columns = [c for c in table.columns if not c.startswith(HIDDEN_PREFIX)]
    return table.where(COMMITTED_FILTER).select(*[quote_identifier(c) for c in user_columns])


def create_committed_view(
    spark: SparkSession, path: str, view_name: str, columns: Sequence[str]
) -> None:
    """Create or replace the catalog view ``view_name`` showing only committed rows.

    A qualified name (``db.view``) creates its database if missing.
    """
    _create_view(spark, view_name, path, columns, COMMITTED_FILTER)


def create_pending_view(
    spark: SparkSession, table: SinkTable, view_name: str, txn_ids: Sequence[str]
) -> None:
    """Create or replace the catalog view ``view_name`` of these pending transactions' rows.

    User columns only, like the committed view, so a SQL check (a dbt test, an ad hoc
    query) written for one runs on the other. It reads the transactions' own partitions;
    once they are committed or vacuumed, it is empty.
    """
    txns = ", ".join(string_literal(t) for t in txn_ids)
    where = f"{VISIBLE} = false AND {PENDING} IN ({txns})"
    _create_view(spark, view_name, table.path, table.schema.fieldNames(), where)


def _create_view(
    spark: SparkSession, view_name: str, path: str, columns: Sequence[str], where: str
) -> None:
    if "." in view_name:
        database = view_name.rsplit(".", 1)[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_name(database)}")
    select = ", ".join(quote_identifier(c) for c in columns)
    spark.sql(
        f"CREATE OR REPLACE VIEW {quote_name(view_name)} AS "
        f"SELECT {select} FROM {delta_path(path)} WHERE {where}"
    )


def pending_rows(spark: SparkSession, table: SinkTable, txn_ids: Sequence[str]) -> DataFrame:
    """The rows of pending (pre-committed, held or open) transactions, user columns only.

    What a suite audits. Read from the transactions' own partitions, no other file.
    """
    return (
        spark.read.format("delta")
        .load(table.path)
        .where((F.col(VISIBLE) == F.lit(False)) & F.col(PENDING).isin(list(txn_ids)))
        .select(*[F.col(quote_identifier(name)) for name in table.schema.fieldNames()])
    )
