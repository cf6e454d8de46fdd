"""Committed rows in Spark: a DataFrame, a downstream stream, catalog views (the tables of
a group all at one cut), and the rows of pending transactions that a check audits."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import overload

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from lakesink.errors import ConfigurationError
from lakesink.spark.sql import delta_path, quote_identifier, quote_name
from lakesink.storage.location import normalize
from lakesink.tables.cuts import group_cut, read_versions, view_cut
from lakesink.tables.format import (
    CHECKPOINT_ID,
    COMMITTED_FILTER,
    SinkTable,
    pending_txn_rows,
    published_path,
    user_columns,
)
from lakesink.tables.published import current_version

__all__ = [
    "CommittedViews",
    "committed",
    "committed_stream",
    "create_committed_view",
    "create_pending_view",
    "cut_view_name",
    "show_cut",
    "transaction_rows",
]


@overload
def committed(spark: SparkSession, path: str, *, version: int | None = None) -> DataFrame: ...


@overload
def committed(
    spark: SparkSession, path: str, second: str, /, *more: str
) -> tuple[DataFrame, ...]: ...


def committed(
    spark: SparkSession, path: str, *more: str, version: int | None = None
) -> DataFrame | tuple[DataFrame, ...]:
    """The committed rows of lakesink tables, without the hidden columns.

    One path gives one DataFrame; several give one each, in order, all at one cut: a table
    of a group (the tables one job or streaming query commits together) is read at the
    versions of its group's newest cut, so totals never run ahead of their orders
    (``lakesink.core.cut``); a table of no group, at its latest version (from its
    published table, when that is up to date). ``version`` reads one table as of that
    Delta version (time travel).

    Raises:
        ConfigurationError: Several tables not all of one group, or ``version`` with
            several tables.
        TableNotFoundError: A path holds no lakesink table.
    """
    paths = [normalize(p) for p in (path, *more)]  # a relative path means this process's
    if version is not None and more:
        raise ConfigurationError("version= reads one table; read the others one by one")
    versions = {paths[0]: version} if version is not None else read_versions(paths)
    frames = tuple(_committed_at(spark, p, versions[p]) for p in paths)
    return frames if more else frames[0]


def _committed_at(spark: SparkSession, path: str, version: int | None) -> DataFrame:
    reader = spark.read.format("delta")
    # At its latest version, a table whose published table is up to date is read there:
    # the same files, without Delta's partition-filtered listing of the sink table's whole
    # state (thousands of tombstones after compaction), which costs more with its history.
    # Its latest version, not the one checked: never ahead of the sink nor wrong, and the
    # one Delta keeps in its cache (a version as of is rebuilt at every read).
    if version is None and current_version(path) is not None:
        return reader.load(published_path(path))
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return _committed_rows(reader.load(path))


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
    return _committed_rows(
        spark.readStream.format("delta")
        .option("ignoreChanges", "true")
        .options(**options)
        .load(normalize(path))
    )


def _committed_rows(table: DataFrame) -> DataFrame:
    """A sink table's committed rows, user columns only (a batch or a streaming read)."""
    columns = [quote_identifier(c) for c in user_columns(table.columns)]
    return table.where(COMMITTED_FILTER).select(*columns)


def create_committed_view(
    spark: SparkSession,
    path: str,
    view_name: str,
    columns: Sequence[str],
    *,
    cut_view: str | None = None,
) -> None:
    """Create or replace the catalog view ``view_name`` showing only committed rows.

    A qualified name (``db.view``) creates its database if missing. With ``cut_view``
    (the group's, ``show_cut``), it shows the group's checkpoints up to its cut only: every
    row a group's commit publishes carries its checkpoint id, and a row without one was
    committed before the table was one of the group's.
    """
    where = COMMITTED_FILTER
    if cut_view is not None:
        where += (
            f" AND coalesce({CHECKPOINT_ID}, -1) <= "
            f"(SELECT checkpoint_id FROM {quote_name(cut_view)})"
        )
    _create_view(spark, view_name, path, columns, where)


def cut_view_name(view_name: str, group_id: str) -> str:
    """The name of the view that holds a group's cut, beside a member's view."""
    database, _, _ = view_name.rpartition(".")
    digest = hashlib.sha1(group_id.encode()).hexdigest()[:12]
    return f"{database}.lakesink_cut_{digest}" if database else f"lakesink_cut_{digest}"


def show_cut(spark: SparkSession, cut_view: str, checkpoint_id: int) -> None:
    """Make ``cut_view`` hold the group's cut: the views of its tables then show it.

    Why one view of a constant, and views that filter by checkpoint id, rather than a view
    per table pinned at a version: a statement over several of the group's views reads
    this one view once (Spark's analyzer resolves a name used twice in one query once), so
    all of them agree; views pinned at versions would be replaced one at a time, and a
    statement between two replacements would see two cuts. The tables themselves are read
    at their latest versions, which hold every checkpoint up to the cut.
    """
    _replace_view(spark, cut_view, f"SELECT CAST({int(checkpoint_id)} AS BIGINT) AS checkpoint_id")


class CommittedViews:
    """The committed views of tables, each kept at its group's newest cut: for a reader
    that lives on while writers go on (``lakesink serve``).

    A table of a group (that its group alone writes, ``lakesink.tables.cuts.view_cut``)
    gets a view that reads through its group's cut view; ``refresh`` moves each group's
    cut view to the group's newest cut. Other tables get a view of their latest commits.
    """

    def __init__(self, spark: SparkSession, tables: Sequence[SinkTable]) -> None:
        self.spark = spark
        self._shown: dict[str, tuple[SinkTable, str, int]] = {}  # by group: a table, view, id
        for table in tables:
            cut = view_cut(table.sink_id, table.journal_path)
            cut_view = cut_view_name(table.sink_id, cut.group_id) if cut else None
            if cut is not None and cut_view is not None:
                show_cut(spark, cut_view, cut.checkpoint_id)
                self._shown[cut.group_id] = (table, cut_view, cut.checkpoint_id)
            create_committed_view(
                spark, table.path, table.sink_id, table.columns, cut_view=cut_view
            )

    def refresh(self) -> None:
        """Move each group's cut view to its newest cut (a cuts table read per group)."""
        for group_id, (table, cut_view, shown) in list(self._shown.items()):
            cut = group_cut(table.sink_id, table.journal_path)
            if cut is not None and cut.group_id == group_id and cut.checkpoint_id != shown:
                show_cut(self.spark, cut_view, cut.checkpoint_id)
                self._shown[group_id] = (table, cut_view, cut.checkpoint_id)


def create_pending_view(
    spark: SparkSession, table: SinkTable, view_name: str, txn_ids: Sequence[str]
) -> None:
    """Create or replace the catalog view ``view_name`` of these pending transactions' rows.

    User columns only, like the committed view, so a SQL check (a dbt test, an ad hoc
    query) written for one runs on the other. It reads the transactions' own partitions;
    once they are committed or vacuumed, it is empty.
    """
    where = pending_txn_rows(txn_ids).sql()
    _create_view(spark, view_name, table.path, table.columns, where)


def _create_view(
    spark: SparkSession, view_name: str, path: str, columns: Sequence[str], where: str
) -> None:
    if "." in view_name:
        database = view_name.rsplit(".", 1)[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_name(database)}")
    select = ", ".join(quote_identifier(c) for c in columns)
    _replace_view(spark, view_name, f"SELECT {select} FROM {delta_path(path)} WHERE {where}")


def _replace_view(spark: SparkSession, view_name: str, query: str) -> None:
    """Make ``view_name`` the view of ``query``, never missing meanwhile: Spark's CREATE OR
    REPLACE drops an existing view and creates it again, and a reader's statement that
    resolves the name in between fails (TABLE_OR_VIEW_NOT_FOUND); ALTER VIEW replaces its
    definition in one catalog call."""
    name = quote_name(view_name)
    verb = "ALTER VIEW" if spark.catalog.tableExists(name) else "CREATE OR REPLACE VIEW"
    spark.sql(f"{verb} {name} AS {query}")


def transaction_rows(spark: SparkSession, table: SinkTable, txn_ids: Sequence[str]) -> DataFrame:
    """The rows of pending (pre-committed, held or open) transactions, user columns only.

    What a suite audits. Read from the transactions' own partitions, no other file.
    """
    return (
        spark.read.format("delta")
        .load(table.path)
        .where(pending_txn_rows(txn_ids).sql())
        .select(*[F.col(quote_identifier(name)) for name in table.columns])
    )
