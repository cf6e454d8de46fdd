"""The lakesink table format, all in one place: hidden columns, which rows are committed or
pending (``RowFilter``, in each engine's form), properties, format versions, and where each
sink table's published table is. It imports no engine: what a table holds is stated in
Delta's own terms (its JSON schema, properties, partition values), and a sink table is
created and its columns added through Spark in ``lakesink.delta.table``.

Four kinds of Delta table carry it:

- a **sink table**: the user's columns after three hidden ones, partitioned by the masking
  bit and the pending transaction (then by the user's own partition columns, if any), with
  the properties below; beside its committed rows, a **published table** (below);
- the **journal**: an append-only table of transaction events (``lakesink.tables.journal``);
- the **cuts** beside the journal: an append-only table of the cuts of groups of tables
  (``lakesink.tables.cuts``), one row per table per cut;
- the **checkpoint table** of a job (``lakesink.tables.checkpoints``).

Each records ``lakesink.formatVersion``. A table written before the property existed is
format 1. Opening a table of a format this version cannot use fails with
``FormatVersionError``, which says what to do.

Sink table format 5 (the rows written once):

- ``_lakesink_visible`` (partition column): the masking bit. Delta keeps no statistics for
  a boolean data column, so only as a partition column can readers of the committed view
  skip masked files, and the vacuum drop them without reading them.
- ``_lakesink_pending`` (partition column): the transaction's id while its rows are
  pending, NULL once committed. Each pending transaction has a partition of its own, so its
  commit reads its own files only and never conflicts with other writers; committed rows
  share one partition, which compaction keeps in few large files.
- ``_lakesink_checkpoint_id`` (BIGINT, nullable): the checkpoint a committed row was
  published in, where a reader needs it: the MERGE that publishes rows writes it (it
  rewrites them anyway), and a pre-commit into a table of a group in the metadata mode
  writes it (its commit rewrites nothing), so a group's views can show one cut. A pending
  row written otherwise, and a committed row of a table of no group published by metadata,
  carry NULL: no row pays for a column nobody reads.

No row carries its transaction: which transaction and checkpoint a file of rows belongs to
is in its partition (pending), the ``userMetadata`` of the commit that added it, and the
journal; each pre-commit records a Delta ``txn`` action (app id: the writer, version: the
checkpoint id), so any Delta tool reads each writer's newest checkpoint
(``transaction_version``). Partition values live in the Delta log and the folders; a table
partitioned by user columns also writes its partition values into its files (Delta's
default), so that its published table can read them there.

The **published table** of a sink table is a plain Delta table over the committed
partition's files, rooted in that partition's folder (``published_path``): the user's
columns only, no lakesink property a reader must know, each file named by its path
relative to that folder, no byte copied. Any engine that reads Delta by path (DuckDB,
polars, Daft, Trino, delta-rs, Spark) reads exactly the committed rows there, with no
filter. It is unpartitioned, because polars takes partition values from every ``k=v``
folder of a file's path (pola-rs/polars#23391), and the committed files sit under
lakesink's own partition folders: a user partition column is read from the files instead
(``lakesink.tables.published`` keeps it).

Older formats: format 1 was partitioned by checkpoint and transaction id, the flag an
ordinary column; format 2 introduced the partitioning above; format 3 recorded a journal
beside the table relative to it (``../_lakesink_journal``, as Delta records its own files,
so a table moved with its journal finds it); format 4 kept partition values out of the
data files and carried the checkpoint and transaction id on every row. ``lakesink
migrate-table`` rewrites a table of any of them in format 5.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Literal, get_args

import pyarrow as pa
import pyarrow.compute as pc

from lakesink.errors import (
    ConfigurationError,
    FormatVersionError,
    SchemaMismatchError,
    TableNotFoundError,
)
from lakesink.spark.sql import string_literal
from lakesink.storage.files import has_files, remove_folder
from lakesink.storage.location import join, relative_to_parent, resolve_relative

__all__ = [
    "CHECKPOINTS_FORMAT",
    "CHECKPOINTS_SCHEMA",
    "CHECKPOINT_ID",
    "COMMITTED_FILTER",
    "COMMITTED_ROWS",
    "COMMIT_MODES",
    "COMMIT_MODE_PROPERTY",
    "CUTS_FORMAT",
    "CUTS_SCHEMA",
    "FORMAT_PROPERTY",
    "HIDDEN_FIELDS",
    "HIDDEN_PREFIX",
    "HIVE_DEFAULT_PARTITION",
    "JOURNAL_FORMAT",
    "JOURNAL_PROPERTY",
    "JOURNAL_SCHEMA",
    "LAKESINK_PARTITIONS",
    "OLDEST_TABLE_FORMAT",
    "PARTITION_VALUES_IN_FILES",
    "PENDING",
    "PINNED",
    "PUBLISHED_APP_ID",
    "PUBLISHED_FOLDER",
    "PUBLISHED_PROPERTY",
    "PURGED_FOLDER",
    "SINK_ID_PROPERTY",
    "TABLE_FORMAT",
    "VISIBLE",
    "CommitMode",
    "RowFilter",
    "SinkTable",
    "check_commit_mode",
    "check_format",
    "check_new_folder",
    "check_sink_table",
    "commit_metadata",
    "format_version",
    "pending_txn_rows",
    "published_path",
    "recorded_journal",
    "sink_table",
    "user_columns",
    "user_fields",
    "writer_app_id",
]

log = logging.getLogger(__name__)

HIDDEN_PREFIX = "_lakesink_"
VISIBLE = "_lakesink_visible"  # the masking bit: false while pending, true once committed
PENDING = "_lakesink_pending"  # the transaction id while pending, NULL once committed
CHECKPOINT_ID = "_lakesink_checkpoint_id"  # the checkpoint that published a row, where needed
# In Delta's JSON schema form (a table's schemaString), which every engine's types come from.
HIDDEN_FIELDS: tuple[dict[str, Any], ...] = (
    {"name": VISIBLE, "type": "boolean", "nullable": False, "metadata": {}},
    {"name": PENDING, "type": "string", "nullable": True, "metadata": {}},
    {"name": CHECKPOINT_ID, "type": "long", "nullable": True, "metadata": {}},
)
# A sink table's first partition columns; the user's own follow them.
LAKESINK_PARTITIONS = (VISIBLE, PENDING)

SINK_ID_PROPERTY = "lakesink.sinkId"
JOURNAL_PROPERTY = "lakesink.journal"
FORMAT_PROPERTY = "lakesink.formatVersion"
COMMIT_MODE_PROPERTY = "lakesink.commitMode"
# Whether lakesink keeps the table's published table ("true" unless set otherwise).
PUBLISHED_PROPERTY = "lakesink.published"
# Whether Delta writes a table's partition values into its data files too: only a table
# partitioned by user columns does, so that its (unpartitioned) published table reads them.
PARTITION_VALUES_IN_FILES = "delta.writePartitionColumnsToParquet"
# Files written under random prefixes sit in no partition's folder, and column mapping
# writes them so too (and renames columns in the files): both refused.
RANDOM_PREFIXES = "delta.randomizeFilePrefixes"
COLUMN_MAPPING = "delta.columnMapping.mode"
# Each with the value a lakesink table keeps, whatever a session's defaults for new tables.
PINNED = {RANDOM_PREFIXES: "false", COLUMN_MAPPING: "none"}

#: How a commit makes rows visible: a MERGE that rewrites them, or a metadata commit that
#: moves their files into the committed partition (``lakesink.delta.committer``). A property
#: of the table (``lakesink.commitMode``), recorded when it is created.
CommitMode = Literal["merge", "metadata"]
COMMIT_MODES: tuple[CommitMode, ...] = get_args(CommitMode)

# Format 2: the masking bit and the pending transaction are the partition columns.
# Format 3: a journal beside the table is recorded relative to it.
# Format 4: partition values are not written into the data files.
# Format 5: no transaction column on any row; a txn action per pre-commit; the commit mode
# recorded; a published table beside the committed rows.
TABLE_FORMAT = 5
OLDEST_TABLE_FORMAT = 5  # what this lakesink still opens as it is

# The published table: rooted in the committed partition's folder (Spark names the folder
# of a NULL partition value __HIVE_DEFAULT_PARTITION__), it names each committed file by
# its path below that folder. Its commits record, as the version of this app id's Delta
# txn action, the sink table version they bring it up to. Since "/2", a committed file with
# a deletion vector is named through a purged copy: a published table an older lakesink
# kept (app id "lakesink") named such files whole, so it is brought up once from the sink's
# first version, which replaces each of them.
HIVE_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
PUBLISHED_FOLDER = f"{VISIBLE}=true/{PENDING}={HIVE_DEFAULT_PARTITION}"
PUBLISHED_APP_ID = "lakesink/2"
# Where the published table keeps its purged copies of committed files that carry deletion
# vectors (lakesink.tables.published): a folder of its own, whose leading underscore hides
# it from Delta's VACUUM of the sink table (lakesink's vacuum removes those no longer read).
PURGED_FOLDER = "_lakesink_purged"
JOURNAL_FORMAT = 1
JOURNAL_SCHEMA = pa.schema(
    [
        pa.field("sink_id", pa.string(), nullable=False),
        pa.field("table_path", pa.string(), nullable=False),
        pa.field("checkpoint_id", pa.int64(), nullable=False),
        pa.field("txn_id", pa.string(), nullable=False),
        pa.field("writer_id", pa.string(), nullable=False),
        pa.field("state", pa.string(), nullable=False),
        pa.field("event_time", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("row_count", pa.int64()),
        pa.field("error", pa.string()),
        pa.field("detail", pa.string()),
        pa.field("validation", pa.string()),
    ]
)
# The cuts of groups of tables (lakesink.core.cut): one row per table and cut, all of a
# cut in one commit. A table is named by its sink id, as in the journal, and located as the
# sink that wrote it recorded it.
CUTS_FORMAT = 1
CUTS_SCHEMA = pa.schema(
    [
        pa.field("group_id", pa.string(), nullable=False),
        pa.field("checkpoint_id", pa.int64(), nullable=False),
        pa.field("sink_id", pa.string(), nullable=False),
        pa.field("table_path", pa.string(), nullable=False),
        pa.field("table_version", pa.int64(), nullable=False),
        pa.field("writer_id", pa.string(), nullable=False),
        pa.field("recorded_at", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
# Format 2: the source's position is opaque text and what a checkpoint consumed is JSON in
# ``detail``; in format 1 the job's ids and its sinks' could differ.
CHECKPOINTS_FORMAT = 2
CHECKPOINTS_SCHEMA = pa.schema(
    [
        pa.field("job_id", pa.string(), nullable=False),
        pa.field("checkpoint_id", pa.int64(), nullable=False),
        pa.field("completed_at", pa.timestamp("us", tz="UTC"), nullable=False),
        pa.field("source_position", pa.string()),
        pa.field("sink_states", pa.string(), nullable=False),
        pa.field("detail", pa.string(), nullable=False),
    ]
)


@dataclass(frozen=True)
class SinkTable:
    """What a lakesink sink table says of itself."""

    path: str
    sink_id: str
    journal_path: str
    format_version: int
    fields: tuple[dict[str, Any], ...]  # the user's columns only, in Delta's JSON form
    partition_by: tuple[str, ...] = ()  # the user's partition columns
    properties: Mapping[str, str] = field(default_factory=dict)  # all the table's properties
    commit_mode: CommitMode = "merge"  # how its rows are published (lakesink.commitMode)
    published: bool = True  # whether lakesink keeps its published table (lakesink.published)

    @property
    def columns(self) -> list[str]:
        """The names of the user's columns, in order."""
        return [f["name"] for f in self.fields]

    @property
    def published_path(self) -> str:
        """Its published table: the committed rows alone, for any engine (``published_path``)."""
        return published_path(self.path)


def published_path(path: str) -> str:
    """Where the published table of the sink table at ``path`` is: the folder of its
    committed partition, whose files it names."""
    return join(path, PUBLISHED_FOLDER)


def writer_app_id(sink_id: str, writer_id: str, *, commit: bool = False) -> str:
    """The app id of a writer's Delta ``txn`` actions in its table: of its pre-commits (the
    newest checkpoint it pre-committed), or with ``commit`` of its commits (the newest it
    published)."""
    return f"lakesink/{sink_id}/{writer_id}" + ("/commit" if commit else "")


def check_commit_mode(mode: str, *, what: str = "commit mode") -> CommitMode:
    """``mode`` if it is a commit mode.

    Raises:
        ConfigurationError: It is not one.
    """
    for known in COMMIT_MODES:
        if mode == known:
            return known
    raise ConfigurationError(f"unknown {what} {mode!r}; pass one of {', '.join(COMMIT_MODES)}")


def commit_metadata(operation: str, sink_id: str, **detail: object) -> str:
    """The ``userMetadata`` lakesink puts on its Delta commits, so history names them.

    ``DESCRIBE HISTORY`` then shows, per table version, which lakesink operation
    (``write``, ``commit``, ``vacuum``) made it and for which checkpoint and transaction:
    the audit lines history up with the journal.
    """
    return json.dumps({"lakesink": operation, "sink_id": sink_id, **detail}, sort_keys=True)


def sink_table(
    path: str, properties: Mapping[str, str], partitions: Sequence[str], schema: Mapping[str, Any]
) -> SinkTable:
    """The sink table that a Delta table's properties, partitioning and schema (Delta's JSON
    form) describe.

    What any reader of the table's metadata (Spark's or delta-rs's) builds it from.

    Raises: as ``check_sink_table``.
    """
    columns = [f["name"] for f in schema["fields"]]
    version = check_sink_table(path, properties, partitions, columns)
    return SinkTable(
        path=path,
        sink_id=properties[SINK_ID_PROPERTY],
        journal_path=resolve_relative(path, properties.get(JOURNAL_PROPERTY, "")),
        format_version=version,
        fields=tuple(user_fields(schema)),
        partition_by=tuple(partitions[len(LAKESINK_PARTITIONS) :]),
        properties=dict(properties),
        commit_mode=check_commit_mode(
            properties.get(COMMIT_MODE_PROPERTY, "merge"), what=f"{COMMIT_MODE_PROPERTY} of {path}"
        ),
        published=properties.get(PUBLISHED_PROPERTY, "true").lower() != "false",
    )


def check_sink_table(
    path: str, properties: Mapping[str, str], partitions: Sequence[str], columns: Sequence[str]
) -> int:
    """Check what a Delta table at ``path`` says of itself; return its lakesink format.

    Any reader's check (Spark's or another engine's): its properties, partition columns
    and column names.

    Raises:
        TableNotFoundError: Not a table lakesink wrote.
        FormatVersionError: It was written in another format (an older one names the
            migration).
        SchemaMismatchError: It lacks a hidden column or lakesink's partitioning.
        ConfigurationError: Its files are not in its partitions' folders (random file
            prefixes, column mapping).
    """
    if SINK_ID_PROPERTY not in properties:
        raise TableNotFoundError(
            f"the Delta table at {path} is not a lakesink table (no {SINK_ID_PROPERTY} property)"
        )
    version = check_format(properties, path, "table", TABLE_FORMAT, oldest=OLDEST_TABLE_FORMAT)
    missing = [f["name"] for f in HIDDEN_FIELDS if f["name"] not in columns]
    if missing:
        raise SchemaMismatchError(
            f"the table at {path} lacks hidden column(s) {', '.join(missing)}"
        )
    if tuple(partitions[: len(LAKESINK_PARTITIONS)]) != LAKESINK_PARTITIONS:
        raise SchemaMismatchError(
            f"the table at {path} is partitioned by {', '.join(partitions) or 'nothing'}; a "
            f"lakesink table of format {TABLE_FORMAT} starts with {', '.join(LAKESINK_PARTITIONS)}"
        )
    scattered = {
        name: plain
        for name, plain in PINNED.items()
        if properties.get(name, plain).lower() != plain
    }
    if scattered:
        now = ", ".join(f"{name} = {properties[name]}" for name in scattered)
        back = ", ".join(f"'{name}' = '{plain}'" for name, plain in scattered.items())
        raise ConfigurationError(
            f"the table at {path} has {now}: Delta then writes its files under random "
            "prefixes, in no partition's folder, and names its columns apart from its "
            "files', where its published table reads the committed partition's files as "
            f"they are; lakesink tables take neither: ALTER TABLE delta.`{path}` SET "
            f"TBLPROPERTIES ({back}) (Delta rewrites the files), then open it again"
        )
    return version


def user_columns(names: Iterable[str]) -> list[str]:
    """The user's columns among a sink table's column names: all but the hidden ones."""
    return [name for name in names if not name.startswith(HIDDEN_PREFIX)]


def user_fields(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The user's columns of a sink table's schema (Delta's JSON form): every column but
    the hidden ones."""
    return [f for f in schema["fields"] if not f["name"].startswith(HIDDEN_PREFIX)]


# ------------------------------------------------------------------ which rows


@dataclass(frozen=True)
class RowFilter:
    """Which rows of a sink table a reader, a commit or the vacuum takes, in each engine's
    form: terms on lakesink's partition columns, all of which hold.

    ``COMMITTED_ROWS`` and ``pending_txn_rows`` state the two there are, once; every form
    is rendered from the same terms. On partition columns only, each form selects whole
    files from the table's log: no masked file is opened to decide.
    """

    # (column, value): the column holds the value; a tuple of values: any one of them.
    terms: tuple[tuple[str, bool | str | tuple[str, ...]], ...]

    def sql(self, *, alias: str = "") -> str:
        """Spark SQL (a WHERE clause, a MERGE condition), columns qualified by ``alias``."""
        prefix = f"{alias}." if alias else ""

        def literal(value: bool | str) -> str:
            return string_literal(value) if isinstance(value, str) else _spelled(value)

        return " AND ".join(
            f"{prefix}{c} IN ({', '.join(map(literal, v))})"
            if isinstance(v, tuple)
            else f"{prefix}{c} = {literal(v)}"
            for c, v in self.terms
        )

    def partition_filters(self) -> list[tuple[str, str, str | list[str]]]:
        """delta-rs' file pruning filters, values spelled as the Delta log spells them."""
        return [
            (c, "in", list(v)) if isinstance(v, tuple) else (c, "=", _spelled(v))
            for c, v in self.terms
        ]

    def expression(self, *, within: str) -> pc.Expression:
        """A ``pyarrow`` expression on the partition values in the struct column ``within``
        (delta-rs' add actions)."""
        terms = [
            pc.field(within, c).isin(list(v)) if isinstance(v, tuple) else pc.field(within, c) == v
            for c, v in self.terms
        ]
        return reduce(lambda a, b: a & b, terms)


def _spelled(value: bool | str) -> str:
    """A partition value as Spark SQL and the Delta log spell it (``true``, ``false``)."""
    return value if isinstance(value, str) else str(value).lower()


# A committed row has the masking bit set.
COMMITTED_ROWS = RowFilter(((VISIBLE, True),))
# What a reader of committed rows applies (then it drops the _lakesink_* columns), in SQL.
COMMITTED_FILTER = COMMITTED_ROWS.sql()


def pending_txn_rows(txn_ids: str | Iterable[str]) -> RowFilter:
    """The rows of a pending transaction (an id), or of several (ids): masked, in the
    transaction's own partition."""
    ids = txn_ids if isinstance(txn_ids, str) else tuple(txn_ids)
    return RowFilter(((VISIBLE, False), (PENDING, ids)))


# ------------------------------------------------------------------ internals


def recorded_journal(journal: str, table: str) -> str:
    """What a table's ``lakesink.journal`` property holds for ``journal``: ``../<name>``
    for one beside it, else the whole location."""
    return relative_to_parent(journal, table) or journal


def format_version(properties: Mapping[str, str]) -> int:
    """The lakesink format a table's properties record (format 1 recorded none)."""
    return int(properties.get(FORMAT_PROPERTY, "1"))


def check_format(
    properties: Mapping[str, str], path: str, what: str, supported: int, *, oldest: int = 0
) -> int:
    """The table's lakesink format (its properties say), if this lakesink reads it.

    ``oldest`` is the oldest format still read as it is (default: ``supported`` only).

    Raises:
        FormatVersionError: Another format; an older one names its migration.
    """
    version = format_version(properties)
    if version > supported:
        raise FormatVersionError(
            f"the {what} at {path} has lakesink format {version}, newer than the {supported} "
            "this lakesink reads; upgrade lakesink"
        )
    if version < (oldest or supported):
        raise FormatVersionError(
            f"the {what} at {path} has lakesink format {version}, older than the {supported} "
            f"this lakesink writes; {_UPGRADES[what]}"
        )
    return version


# What to do with a table of an older format, per kind.
_UPGRADES = {
    "table": (
        "migrate it with `lakesink migrate-table PATH` (it rewrites the table in place in "
        "one Delta commit, every row and transaction state kept; run it while no writer runs)"
    ),
    "journal": "no migration exists for it",
    "checkpoint table": (
        "migrate it with `lakesink migrate-checkpoints STATE_DIR` (it rewrites the job's "
        "records; run it while the job is stopped)"
    ),
}


def check_new_folder(path: str, what: str) -> bool:
    """Refuse a folder that holds files, for a new table; clear a creation cut short.

    A Delta log without a commit is what a crash while a table was being created leaves
    (a temporary file, folders): Delta's ``createIfNotExists`` then fails on the folder
    with DELTA_TABLE_NOT_FOUND, so the next creation removes it first. Returns whether
    there was one.
    """
    if has_files(path, but_uncommitted_log=True):
        raise TableNotFoundError(
            f"{path} exists and holds no Delta table; give {what} an empty or new folder"
        )
    log_folder = join(path, "_delta_log")
    if not has_files(path):
        return False
    log.warning("%s: removing the Delta log of a table creation cut short", log_folder)
    remove_folder(log_folder)
    return True
