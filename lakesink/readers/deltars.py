"""Committed rows as Arrow, read with delta-rs (no Spark, no JVM).

DuckDB, polars, pandas and anything else that speaks Arrow read a lakesink table through
``arrow``: the committed rows, user columns only (the tables of a group at one cut, as
``lakesink.committed`` reads them). The masking bit is the table's first
partition column, so the files of pending and aborted transactions are pruned from the
table's log before any is opened. Spark readers use ``lakesink.committed`` (or the
committed view by name, ``lakesink.readers.spark``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import overload

import pyarrow as pa
import pyarrow.dataset as ds

from lakesink.errors import ConfigurationError
from lakesink.storage.access import translated
from lakesink.storage.location import normalize
from lakesink.tables.cuts import read_versions
from lakesink.tables.deletions import has_deletion_vectors
from lakesink.tables.deltars import arrow_dataset, read_sink_table_log
from lakesink.tables.format import COMMITTED_FILTER, COMMITTED_ROWS, user_columns

__all__ = ["arrow", "committed_dataset"]


def committed_dataset(path: str | Path, *, version: int | None = None) -> ds.Dataset:
    """The committed rows of the lakesink table at ``path`` as a lazy ``pyarrow`` dataset.

    Only the committed partition's files are in it (hidden columns still are: ``arrow``
    drops them). ``version`` reads the table as of that Delta version. A table whose files
    may carry deletion vectors is read at once, the deleted rows left out, into an
    in-memory dataset.

    Raises:
        TableNotFoundError: No lakesink table there (or no such version).
        FormatVersionError: The table has another lakesink format.
    """
    location = normalize(path)
    _, table = read_sink_table_log(location, version=version)
    if has_deletion_vectors(table):
        # delta-rs' pyarrow datasets refuse a table whose files may carry deletion vectors
        # (they would read deleted rows); its own scan drops them, read here whole.
        with translated(location):
            return ds.dataset(pa.table(table.scan(predicate=COMMITTED_FILTER)))
    return arrow_dataset(table, location, file_pruning_predicate=COMMITTED_ROWS.partition_filters())


@overload
def arrow(
    path: str | Path, *, version: int | None = None, columns: Sequence[str] | None = None
) -> pa.Table: ...


@overload
def arrow(path: str | Path, second: str | Path, /, *more: str | Path) -> tuple[pa.Table, ...]: ...


def arrow(
    path: str | Path,
    *more: str | Path,
    version: int | None = None,
    columns: Sequence[str] | None = None,
) -> pa.Table | tuple[pa.Table, ...]:
    """The committed rows of lakesink tables: user columns only, as Arrow.

    One path gives one table; several give one each, in order, all at one cut (the tables
    of a group at its newest cut, as ``lakesink.committed`` reads them).

    Args:
        path: The table's folder (then more folders, read at one cut).
        version: Read one table as of this Delta version (default: at its group's newest
            cut, or the latest).
        columns: The user columns to return (default: all of them; one table only).

    Raises:
        TableNotFoundError: No lakesink table there (or no such version).
        FormatVersionError: The table has another lakesink format.
        ConfigurationError: ``columns`` names a column the table lacks, or a hidden one;
            several tables not all of one group; ``version`` or ``columns`` with several.
    """
    locations = [normalize(p) for p in (path, *more)]
    if more and (version is not None or columns is not None):
        raise ConfigurationError("version= and columns= read one table; read it alone")
    versions = {locations[0]: version} if version is not None else read_versions(locations)
    tables = tuple(_arrow_at(p, versions[p], columns) for p in locations)
    return tables if more else tables[0]


def _arrow_at(path: str, version: int | None, columns: Sequence[str] | None) -> pa.Table:
    dataset = committed_dataset(path, version=version)
    user = user_columns(dataset.schema.names)
    wanted = list(columns) if columns is not None else user
    unknown = [name for name in wanted if name not in user]
    if unknown:
        raise ConfigurationError(
            f"column(s) {', '.join(unknown)} are not user columns of {path} "
            f"(its columns: {', '.join(user)})"
        )
    return dataset.to_table(columns=wanted)
