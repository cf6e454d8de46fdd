"""What lakesink does through delta-rs (the ``deltalake`` package), without a Spark job.

- **Appends** to lakesink's own small tables (the journal, the checkpoint table). A journal
  event or a checkpoint record is a row or two. Written through delta-spark, each was a
  whole Spark write job with Delta's post-commit hooks, about half a second, and a
  checkpoint journals two or three events per sink. delta-rs commits the same blind append
  in tens of milliseconds. Both write the tables' protocol (reader 1, writer 2,
  append-only) and commit by creating the next log file only if it is absent, so Spark and
  delta-rs processes append to one table at once safely. Each append is a file, and a read
  opens every file (2.5 ms each: a journal of 1,000 checkpoints took 2.5 s to read), so an
  append that leaves more than ``COMPACT_EVERY`` files merges them into one.
- **Reads of a table's log**: the data files of given partitions with their row counts,
  a partition's file count. Through delta-spark
  each costs Spark jobs (a state reconstruction; a scan of the files).
- **Reads of lakesink's small tables** (the journal, the checkpoint table): a few thousand
  rows at most, read in milliseconds, where Spark needs jobs (and the read-only commands
  would need a JVM started first).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as fs
from deltalake import DeltaTable, write_deltalake
from deltalake.exceptions import DeltaError
from deltalake.exceptions import TableNotFoundError as DeltaTableNotFoundError

from lakesink.errors import TableNotFoundError
from lakesink.storage.access import translated
from lakesink.storage.files import is_delta_table
from lakesink.storage.location import is_uri
from lakesink.storage.options import StorageOptions
from lakesink.tables.format import (
    FORMAT_PROPERTY,
    PENDING,
    VISIBLE,
    RowFilter,
    SinkTable,
    check_format,
    check_new_folder,
    sink_table,
)
from lakesink.tables.history import read_history

__all__ = [
    "COMPACT_EVERY",
    "PartitionFiles",
    "append_rows",
    "append_table",
    "arrow_dataset",
    "delta_table",
    "ensure_log_table",
    "file_sizes",
    "has_sink_history",
    "partition_files",
    "pending_rows",
    "read_log_rows",
    "read_sink_table_log",
]

log = logging.getLogger(__name__)

# The files one of lakesink's small tables may have before an append compacts them.
COMPACT_EVERY = 100


def append_rows(path: str, rows: Sequence[tuple[Any, ...]]) -> None:
    """Append rows, each a tuple in the table's column order, in one Delta commit.

    The table's own schema types the rows, so a wrong value (a None in a NOT NULL column,
    a string for a number) fails here, before anything is committed.
    """
    if not rows:
        return
    table = delta_table(path)
    schema = pa.schema(table.schema().to_arrow())
    columns = list(zip(*rows, strict=True))
    data = pa.Table.from_arrays(
        [pa.array(column, type=f.type) for column, f in zip(columns, schema, strict=True)],
        schema=schema,
    )
    append_table(table, path, data)


def append_table(table: DeltaTable, path: str, data: pa.Table) -> None:
    """Append ``data`` to one of lakesink's small tables (``table``, at ``path``) in one
    commit; then compact the table if it has more than ``COMPACT_EVERY`` files."""
    with translated(path):
        write_deltalake(table, data, mode="append")
    log.debug("appended %d row(s) to %s (version %d)", data.num_rows, path, table.version())
    if len(table.file_uris()) > COMPACT_EVERY:  # the snapshot the append left: no read
        _compact(table, path)


def _compact(table: DeltaTable, path: str) -> None:
    """Merge the small table's files into as few as Delta's target size allows.

    An OPTIMIZE changes no data (an append-only table allows it), and appends committed
    meanwhile do not conflict with it. It is an optimization only: the append before it is
    committed whatever happens here, so a failure (another appender compacting the same
    files at once, or appends winning every one of delta-rs's tries at the next version)
    is logged, and the next append tries again.
    """
    try:
        with translated(path):
            metrics = table.optimize.compact()
    except Exception as exc:  # an optimization: the append above stands (see the docstring)
        log.info("did not compact %s (the next append will try): %s", path, exc)
        return
    log.info(
        "compacted %s: %d file(s) into %d",
        path,
        metrics["numFilesRemoved"],
        metrics["numFilesAdded"],
    )


def ensure_log_table(
    path: str, *, schema: pa.Schema, version: int, what: str, create: bool, missing: str = ""
) -> None:
    """Create one of lakesink's append-only tables (journal, checkpoints, cuts), or check
    the format of the one there; no Spark job.

    ``missing`` finishes the error raised when it is absent and ``create`` is false.

    Raises:
        TableNotFoundError: Absent and not to be created, or a folder of other files.
        FormatVersionError: Written in another format.
    """
    with translated(path):
        if is_delta_table(path):
            check_format(delta_table(path).metadata().configuration, path, what, version)
            return
        if not create:
            raise TableNotFoundError(f"no lakesink {what} at {path}: {missing}")
        check_new_folder(path, f"the {what}")
        storage = StorageOptions.from_env()
        try:
            DeltaTable.create(
                storage.deltars_uri(path),
                schema,
                mode="ignore",
                configuration={"delta.appendOnly": "true", FORMAT_PROPERTY: str(version)},
                storage_options=storage.deltars_options(path) or None,
                raise_if_key_not_exists=False,  # lakesink's own property
            )
        except DeltaError:  # another process made it meanwhile
            if not is_delta_table(path):
                raise
    log.info("created %s %s", what, path)


def read_log_rows(
    path: str, *, what: str, version: int, missing: str, **equal: str
) -> list[dict[str, Any]]:
    """The rows of lakesink's table ``what`` at ``path`` whose columns equal ``equal``.

    Raises:
        TableNotFoundError: No Delta table there (``missing`` says what to pass instead).
        FormatVersionError: The table has another lakesink format than ``version``.
    """
    table = _open(path, f"no lakesink {what} at {path}: {missing}")
    check_format(table.metadata().configuration, path, what, version)
    predicate = None
    for column, value in equal.items():
        term = pc.field(column) == value
        predicate = term if predicate is None else predicate & term
    with translated(path):
        found = arrow_dataset(table, path).to_table(filter=predicate)
    return cast(list[dict[str, Any]], found.to_pylist())


def arrow_dataset(table: DeltaTable, path: str, **options: Any) -> ds.Dataset:
    """The table's files as a ``pyarrow`` dataset (``options``: delta-rs's file pruning).

    A local table is read through pyarrow's own file system: through delta-rs's, a process
    that read one aborts when it exits ("terminate called without an active exception",
    deltalake 1.6), whatever it did meanwhile.
    """
    if not is_uri(path):
        options["filesystem"] = fs.SubTreeFileSystem(path, fs.LocalFileSystem())
    return table.to_pyarrow_dataset(**options)


def read_sink_table_log(path: str, *, version: int | None = None) -> tuple[SinkTable, DeltaTable]:
    """The lakesink sink table at ``path`` (as of ``version``), checked, from its log; and
    the delta-rs table to read it with. No Spark job, no JVM.

    Raises: as ``lakesink.tables.format.check_sink_table``; TableNotFoundError also for no
    Delta table there, or a version the table does not have.
    """
    missing = f"no Delta table at {path}; pass the folder of a lakesink table"
    table = _open(path, missing, version)
    metadata = table.metadata()
    schema = json.loads(table.schema().to_json())
    found = sink_table(path, metadata.configuration, metadata.partition_columns, schema)
    return found, table


def delta_table(path: str, *, version: int | None = None) -> DeltaTable:
    """The delta-rs table at the location ``path`` (as of ``version``), with the storage
    settings of ``StorageOptions.from_env()``.

    Raises:
        StorageAccessError: The store refused or did not answer.
    """
    storage = StorageOptions.from_env()
    with translated(path):
        return DeltaTable(
            storage.deltars_uri(path),
            version=version,
            storage_options=storage.deltars_options(path) or None,
        )


def _open(path: str, missing: str, version: int | None = None) -> DeltaTable:
    try:
        return delta_table(path, version=version)
    except DeltaTableNotFoundError:
        raise TableNotFoundError(missing) from None
    except DeltaError as exc:  # delta-rs's error for a version the table lacks
        if version is None:
            raise
        raise TableNotFoundError(f"cannot read {path} at version {version}: {exc}") from None


def has_sink_history(path: str) -> bool:
    """Whether the sink table at ``path`` ever held rows or a commit of lakesink's.

    A table with neither was only created (and maybe given properties or columns): its
    journal, if it has none, knows nothing recovery could need.
    """
    if delta_table(path).file_uris():
        return True
    return any(entry.lakesink is not None for entry in read_history(path))


def file_sizes(path: str, rows: RowFilter | None = None) -> list[int]:
    """The sizes in bytes of the data files of the Delta table at ``path`` (of the
    partitions ``rows`` selects, if given), as its log lists them."""
    table = delta_table(path)
    with translated(path):
        actions = pa.table(table.get_add_actions(flatten=False))
    if "size_bytes" not in actions.column_names:  # no file at all
        return []
    if rows is not None:
        actions = actions.filter(rows.expression(within="partition"))
    return [int(size) for size in actions.column("size_bytes").to_pylist()]


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
    table = delta_table(path)
    with translated(path):
        actions = pa.table(table.get_add_actions(flatten=True))
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


def pending_rows(path: str, *, version: int | None = None) -> dict[str, int]:
    """Per pending transaction of the sink table at ``path`` (as of ``version``), the rows
    of its partition, from each file's row count in the log (a file without one counts 0)."""
    table = delta_table(path, version=version)
    with translated(path):
        actions = pa.table(table.get_add_actions(flatten=True))
    column = f"partition.{PENDING}"
    if column not in actions.column_names:  # no file at all
        return {}
    found: dict[str, int] = {}
    for txn_id, visible, rows in zip(
        actions.column(column).to_pylist(),
        actions.column(f"partition.{VISIBLE}").to_pylist(),
        actions.column("num_records").to_pylist(),
        strict=True,
    ):
        if txn_id is not None and not visible:
            found[txn_id] = found.get(txn_id, 0) + int(rows or 0)
    return found
