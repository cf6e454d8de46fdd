"""What lakesink does through delta-rs (the ``deltalake`` package), without a Spark job.

- **Appends** to lakesink's own small tables (the journal, the checkpoint table). A journal
  event or a checkpoint record is a row or two. Written through delta-spark, each was a
  whole Spark write job with Delta's post-commit hooks, about half a second, and a
  checkpoint journals two or three events per sink. delta-rs commits the same blind append
  in tens of milliseconds. Both write the tables' protocol (reader 1, writer 2,
  append-only) and commit by creating the next log file only if it is absent, so Spark and
  delta-rs processes append to one table at once safely; the tables are still created by
  Spark.
- **Reads of a table's log**: the last ``txnVersion`` of an app id, the data files of
  given partitions with their row counts, a partition's file count. Through delta-spark
  each costs Spark jobs (a state reconstruction; a scan of the files).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

__all__ = [
    "PartitionFiles",
    "append_rows",
    "file_count",
    "partition_files",
    "transaction_version",
]

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


def transaction_version(path: str, app_id: str) -> int:
    """The last ``txnVersion`` the Delta table at ``path`` recorded for ``app_id``; 0 if none."""
    return DeltaTable(path).transaction_version(app_id) or 0


def file_count(path: str, partition: Mapping[str, str] | None = None) -> int:
    """The data files of the Delta table at ``path`` (of one partition, if given)."""
    filters = [(column, "=", value) for column, value in (partition or {}).items()]
    return len(DeltaTable(path).file_uris(file_pruning_predicate=filters or None))


@dataclass(frozen=True)
class PartitionFiles:
    """The data files of one value of a partition column, as the table's log lists them."""

    rows: int | None  # None when a file's log entry has no row count (stats were off)
    files: tuple[str, ...]  # paths relative to the table's folder


def partition_files(path: str, column: str, values: Collection[str]) -> dict[str, PartitionFiles]:
    """The files and row counts of the table's partitions where ``column`` is one of ``values``.

    Read from the log (each file's ``numRecords`` statistic), not the data; values with no
    file are left out.
    """
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True))
    if f"partition.{column}" not in actions.column_names:  # no file at all
        return {}
    found: dict[str, PartitionFiles] = {}
    wanted = set(values)
    for value, rows, file in zip(
        actions.column(f"partition.{column}").to_pylist(),
        actions.column("num_records").to_pylist(),
        actions.column("path").to_pylist(),
        strict=True,
    ):
        if value in wanted:
            known = found.get(value, PartitionFiles(0, ()))
            total = None if known.rows is None or rows is None else known.rows + int(rows)
            found[value] = PartitionFiles(total, (*known.files, file))
    return found
