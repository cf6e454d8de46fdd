"""Rows that deletion vectors delete, found and dropped without Spark (delta-rs).

A ``DELETE``, ``UPDATE`` or ``MERGE`` on a table with deletion vectors
(``delta.enableDeletionVectors``) rewrites no file: it marks the deleted rows of a file in a
vector that the file's ``add`` action names, and a reader that takes the ``add`` without it
reads the deleted rows again. delta-rs reads the vectors (``DeltaTable.deletion_vectors``)
and scans such tables (``DeltaTable.scan``), but its pyarrow datasets refuse them, and
delta-rs, polars and other readers of a plain Delta table read no vector at all. So:

- ``kept_rows``: which rows of each file that has a vector are kept, per file;
- ``purge``: a copy of such a file without its deleted rows, which a table that carries no
  vector (the published table, ``lakesink.tables.published``) names instead of the file.
"""

from __future__ import annotations

import hashlib
import io
import logging
from dataclasses import dataclass
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable

from lakesink.storage.access import translated
from lakesink.storage.files import read_bytes, write_bytes

__all__ = [
    "DELETION_VECTORS",
    "PurgedFile",
    "has_deletion_vectors",
    "kept_rows",
    "purge",
    "purged_name",
]

log = logging.getLogger(__name__)

DELETION_VECTORS = "deletionVectors"


def has_deletion_vectors(table: DeltaTable) -> bool:
    """Whether files of the table may carry deletion vectors (its protocol allows them)."""
    return DELETION_VECTORS in (table.protocol().reader_features or [])


def kept_rows(table: DeltaTable) -> dict[str, pa.BooleanArray]:
    """Per data file of the table that has a deletion vector, which of its rows are kept
    (True) in the file's order; a file is named by its path below the table's folder, as
    its folders are named (the log's spelling, decoded). A row past a vector's end is kept.
    """
    root = unquote(table.table_uri.rstrip("/")) + "/"
    with translated(table.table_uri):
        vectors = pa.table(table.deletion_vectors())
    names = vectors.column("filepath").to_pylist()
    selections = vectors.column("selection_vector").combine_chunks()
    return {unquote(name).removeprefix(root): selections[i].values for i, name in enumerate(names)}


@dataclass(frozen=True)
class PurgedFile:
    """A copy of a data file without its deleted rows: its rows, size in bytes and the null
    count of each top-level column."""

    rows: int
    size: int
    null_counts: dict[str, int]


def purged_name(key: str, kept: pa.BooleanArray) -> str:
    """A purged copy's file name: the source file's ``key``, then a digest of its deleted
    rows, so one vector's copy always has one name (written again, it is the same file)."""
    deleted = pc.indices_nonzero(pc.invert(kept)).cast(pa.uint64())
    digest = hashlib.sha1(deleted.buffers()[1].to_pybytes() if len(deleted) else b"")
    return f"{key}-{digest.hexdigest()[:16]}.parquet"


def purge(source: str, kept: pa.BooleanArray, target: str) -> PurgedFile:
    """Write ``target``: the Parquet file ``source`` without the rows ``kept`` marks False.

    Read and written a row group at a time. A timestamp column that Spark wrote as INT96 is
    written as microseconds adjusted to UTC (its type), which every engine reads as a
    timestamp; the rest keeps its type.
    """
    source_file = pq.ParquetFile(io.BytesIO(read_bytes(source)), coerce_int96_timestamp_unit="us")
    schema = _utc_int96(source_file)
    buffer = io.BytesIO()
    rows, start = 0, 0
    nulls = dict.fromkeys(schema.names, 0)
    with pq.ParquetWriter(buffer, schema, coerce_timestamps="us") as writer:
        for group in range(source_file.num_row_groups):
            batch = source_file.read_row_group(group)
            mask = _padded(kept, start, batch.num_rows)
            start += batch.num_rows
            batch = batch.filter(mask).cast(schema)
            writer.write_table(batch)
            rows += batch.num_rows
            for name in schema.names:
                nulls[name] += batch.column(name).null_count
    content = buffer.getvalue()
    write_bytes(target, content)
    log.debug("purged %s into %s: %d row(s) kept", source, target, rows)
    return PurgedFile(rows=rows, size=len(content), null_counts=nulls)


def _padded(kept: pa.BooleanArray, start: int, length: int) -> pa.BooleanArray:
    """``kept`` from ``start`` for ``length`` rows, True past its end."""
    part = kept.slice(start, length)
    if len(part) == length:
        return part
    return pa.concat_arrays([part, pa.array([True] * (length - len(part)), pa.bool_())])


def _utc_int96(source: pq.ParquetFile) -> pa.Schema:
    """The file's Arrow schema, each top-level INT96 timestamp typed as UTC microseconds."""
    schema = source.schema_arrow
    physical = {
        source.schema.column(i).path: source.schema.column(i).physical_type
        for i in range(len(source.schema))
    }
    for index, field in enumerate(schema):
        if physical.get(field.name) == "INT96":
            schema = schema.set(index, field.with_type(pa.timestamp("us", tz="UTC")))
    return schema
