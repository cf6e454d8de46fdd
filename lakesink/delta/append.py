"""Appends to lakesink's own small tables (the journal, the checkpoint table) without Spark.

A journal event or a checkpoint record is a row or two. Written through delta-spark, each
was a whole Spark write job with Delta's post-commit hooks, about half a second, and a
checkpoint journals two or three events per sink. delta-rs (the ``deltalake`` package)
commits the same blind append in tens of milliseconds. Both write the tables' protocol
(reader 1, writer 2, append-only) and commit by creating the next log file only if it is
absent, so Spark and delta-rs processes append to one table at once safely; the tables are
still created, and read, by Spark.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

__all__ = ["append_rows"]

log = logging.getLogger(__name__)


def append_rows(path: str, rows: Sequence[tuple]) -> None:
    """Append rows, each a tuple in the table's column order, in one Delta commit.

    The table's own schema types the rows, so a wrong value (a None in a NOT NULL column,
    a string for a number) fails here, before anything is committed.
    """
    if not rows:
        return
    table = DeltaTable(path)
    schema = pa.schema(table.schema().to_arrow())
    columns = list(zip(*rows, strict=True))
    data = pa.Table.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, schema, strict=True)],
        schema=schema,
    )
    write_deltalake(table, data, mode="append")
    log.debug("appended %d row(s) to %s (version %d)", len(rows), path, table.version())
