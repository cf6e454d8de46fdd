"""Committed rows for engines other than Spark, read with delta-rs (no JVM).

DuckDB, polars, pandas and anything else that speaks Arrow read a lakesink table through
``arrow``: the committed rows, user columns only. The masking bit is the table's first
partition column, so the files of pending and aborted transactions are pruned from the
table's log before any is opened. Spark readers use ``lakesink.committed`` (or the
committed view by name).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds

from lakesink.errors import ConfigurationError
from lakesink.storage.location import normalize
from lakesink.tables.deltars import arrow_dataset, read_sink_table_log
from lakesink.tables.format import HIDDEN_PREFIX, VISIBLE

__all__ = ["arrow", "committed_dataset"]


def committed_dataset(path: str | Path, *, version: int | None = None) -> ds.Dataset:
    """The committed rows of the lakesink table at ``path`` as a lazy ``pyarrow`` dataset.

    Only the committed partition's files are in it (hidden columns still are: ``arrow``
    drops them). ``version`` reads the table as of that Delta version.

    Raises:
        TableNotFoundError: No lakesink table there (or no such version).
        FormatVersionError: The table has another lakesink format.
    """
    location = normalize(path)
    _, table = read_sink_table_log(location, version=version)
    return arrow_dataset(table, location, file_pruning_predicate=[(VISIBLE, "=", "true")])


def arrow(
    path: str | Path, *, version: int | None = None, columns: Sequence[str] | None = None
) -> pa.Table:
    """The committed rows of the lakesink table at ``path``: user columns only, as Arrow.

    Args:
        path: The table's folder.
        version: Read the table as of this Delta version (default: the latest).
        columns: The user columns to return (default: all of them).

    Raises:
        TableNotFoundError: No lakesink table there (or no such version).
        FormatVersionError: The table has another lakesink format.
        ConfigurationError: ``columns`` names a column the table lacks, or a hidden one.
    """
    dataset = committed_dataset(path, version=version)
    user = [name for name in dataset.schema.names if not name.startswith(HIDDEN_PREFIX)]
    wanted = list(columns) if columns is not None else user
    unknown = [name for name in wanted if name not in user]
    if unknown:
        raise ConfigurationError(
            f"column(s) {', '.join(unknown)} are not user columns of {path} "
            f"(its columns: {', '.join(user)})"
        )
    return dataset.to_table(columns=wanted)
