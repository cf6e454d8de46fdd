"""How readers see only committed rows: a view, a DataFrame, or a filter."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakesink.delta.format import COMMITTED_FILTER, HIDDEN_PREFIX, PENDING, VISIBLE, SinkTable
from lakesink.delta.sql import delta_path, quote_identifier, quote_name

__all__ = ["committed", "create_committed_view", "pending_rows"]


def committed(spark: SparkSession, path: str, *, version: int | None = None) -> DataFrame:
    """The committed rows of a lakesink table, without the hidden columns.

    ``version`` reads the table as of that Delta version (time travel).
    """
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    table = reader.load(path)
    user_columns = [c for c in table.columns if not c.startswith(HIDDEN_PREFIX)]
    return table.where(COMMITTED_FILTER).select(*[quote_identifier(c) for c in user_columns])


def create_committed_view(
    spark: SparkSession, path: str, view_name: str, columns: Sequence[str]
) -> None:
    """Create or replace the catalog view ``view_name`` showing only committed rows.

    A qualified name (``db.view``) creates its database if missing.
    """
    if "." in view_name:
        database = view_name.rsplit(".", 1)[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_name(database)}")
    select = ", ".join(quote_identifier(c) for c in columns)
    spark.sql(
        f"CREATE OR REPLACE VIEW {quote_name(view_name)} AS "
        f"SELECT {select} FROM {delta_path(path)} WHERE {COMMITTED_FILTER}"
    )


def pending_rows(spark: SparkSession, table: SinkTable, txn_id: str) -> DataFrame:
    """A pending (pre-committed, held or open) transaction's rows, user columns only.

    What a suite audits. Read from the transaction's own partition, no other file.
    """
    return (
        spark.read.format("delta")
        .load(table.path)
        .where((F.col(VISIBLE) == F.lit(False)) & (F.col(PENDING) == txn_id))
        .select(*[F.col(quote_identifier(name)) for name in table.schema.fieldNames()])
    )
