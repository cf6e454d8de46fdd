"""A sink table through Spark: read its metadata, create it, add the columns a writer
brings, and check a writer's columns against it, all on Spark's ``StructType``.

The format itself (``lakesink.tables.format``) states a table's columns in Delta's JSON
form, which no engine needs to read; ``spark_schema`` gives the ``StructType`` of a sink
table's user columns from it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.types import StructField, StructType

from lakesink.delta.publish import SESSION_DEFAULTS, check_defaults_publishable
from lakesink.errors import (
    ConfigurationError,
    ReservedColumnError,
    SchemaMismatchError,
    TableNotFoundError,
)
from lakesink.spark.sql import delta_path, quote_identifier, string_literal
from lakesink.storage.files import is_delta_table
from lakesink.storage.hadoop import delete_tree
from lakesink.storage.location import is_uri, join
from lakesink.tables.deltars import ensure_log_table
from lakesink.tables.format import (
    COMMIT_MODE_PROPERTY,
    FORMAT_PROPERTY,
    HIDDEN_FIELDS,
    HIDDEN_PREFIX,
    JOURNAL_FORMAT,
    JOURNAL_PROPERTY,
    JOURNAL_SCHEMA,
    LAKESINK_PARTITIONS,
    PARTITION_VALUES_IN_FILES,
    PINNED,
    PUBLISHED_PROPERTY,
    SINK_ID_PROPERTY,
    TABLE_FORMAT,
    CommitMode,
    SinkTable,
    check_new_folder,
    recorded_journal,
    sink_table,
)

__all__ = [
    "check_columns",
    "check_partition_columns",
    "check_reserved",
    "ensure_sink_table",
    "read_sink_table",
    "spark_schema",
]

log = logging.getLogger(__name__)


def read_sink_table(spark: SparkSession, path: str) -> SinkTable:
    """The lakesink sink table at ``path``, checked.

    Raises:
        TableNotFoundError: No Delta table there, or one lakesink did not write.
        FormatVersionError: It was written in another format (an older one names the
            migration).
        SchemaMismatchError: It lacks a hidden column or lakesink's partitioning.
    """
    detail = _detail(spark, path)
    if detail is None:
        raise TableNotFoundError(f"no Delta table at {path}; pass the folder of a lakesink table")
    properties, partitions = detail
    schema = spark.read.format("delta").load(path).schema
    return sink_table(path, properties, partitions, schema.jsonValue())


def spark_schema(table: SinkTable) -> StructType:
    """The user's columns of ``table`` as a Spark schema."""
    return StructType(_fields(table.fields))


def _fields(fields: Iterable[dict[str, Any]]) -> list[StructField]:
    return [StructField.fromJson(f) for f in fields]


def ensure_sink_table(
    spark: SparkSession,
    path: str,
    *,
    sink_id: str,
    schema: StructType | None,
    journal: str,
    partition_by: tuple[str, ...] | None = None,
    merge_schema: bool = False,
    commit_mode: CommitMode | None = None,
    published: bool | None = None,
) -> tuple[SinkTable, bool]:
    """Create the sink table or check the existing one; return it and whether it was created.

    A table is created after its journal (``journal``), if that does not exist yet.
    ``partition_by`` names user columns to partition a new table by (after lakesink's own
    partition columns); given for an existing table, it must be the table's. With
    ``merge_schema``, the nullable columns ``schema`` adds to an existing table are added
    to it (one Delta commit that changes only its metadata). ``commit_mode`` and whether
    lakesink keeps a published table (``published``) are recorded for a new table (default
    ``merge``, kept); given for an existing one, each must be the table's.

    Raises:
        ConfigurationError: The table belongs to another sink or journal, is partitioned
            otherwise or commits the other way; or ``partition_by`` names a column the
            schema lacks.
        TableNotFoundError: No table and no ``schema``, or a folder that holds other files.
        SchemaMismatchError: ``schema`` differs from the table's (every difference named).
    """
    if schema is not None:
        check_reserved(schema, "the schema")
    if is_delta_table(path):
        try:
            table = read_sink_table(spark, path)
        except TableNotFoundError as exc:
            raise ConfigurationError(f"{exc}; give the sink a new path") from None
        _check_owner(table, sink_id, journal)
        if schema is not None:
            table = _evolve(spark, table, schema, merge_schema)
        _check_settings(table, partition_by, commit_mode, published)
        return table, False
    if schema is None:
        raise TableNotFoundError(f"no Delta table at {path}: pass schema= to create one there")
    table = SinkTable(
        path=path,
        sink_id=sink_id,
        journal_path=journal,
        format_version=TABLE_FORMAT,
        fields=tuple(schema.jsonValue()["fields"]),
        partition_by=tuple(partition_by or ()),
        commit_mode=commit_mode or "merge",
        published=published is not False,
    )
    _create(spark, table, schema)
    return table, True


def _check_owner(table: SinkTable, sink_id: str, journal: str) -> None:
    """Refuse a table that another sink writes, or that another journal records."""
    if table.sink_id != sink_id:
        raise ConfigurationError(
            f"the table at {table.path} belongs to sink id {table.sink_id!r}, not {sink_id!r}"
        )
    if table.journal_path != journal:
        raise ConfigurationError(
            f"the table at {table.path} is journaled in {table.journal_path}, not {journal}; "
            "pass journal_path= with the recorded journal"
        )


def _check_settings(
    table: SinkTable,
    partition_by: tuple[str, ...] | None,
    commit_mode: CommitMode | None,
    published: bool | None,
) -> None:
    """Refuse settings given for an existing table that are not the table's, each with how
    to go on."""
    path = table.path
    if partition_by is not None and tuple(partition_by) != table.partition_by:
        raise ConfigurationError(
            f"the table at {path} is partitioned by "
            f"{', '.join(table.partition_by) or 'no user column'}, not "
            f"{', '.join(partition_by) or 'no user column'}; a table's partitioning is "
            "fixed when it is created: omit partition_by or pass the table's"
        )
    if commit_mode is not None and commit_mode != table.commit_mode:
        raise ConfigurationError(
            f"the table at {path} commits by {table.commit_mode} ({COMMIT_MODE_PROPERTY}), "
            f"not by {commit_mode}: omit commit= to commit its way, or switch the table "
            f"while no writer runs: ALTER TABLE delta.`{path}` SET TBLPROPERTIES "
            f"('{COMMIT_MODE_PROPERTY}' = '{commit_mode}')"
        )
    if published is not None and published != table.published:
        keeps = "keeps" if table.published else "does not keep"
        raise ConfigurationError(
            f"the table at {path} {keeps} a published table ({PUBLISHED_PROPERTY}): omit "
            "published= to keep the table's way, or switch it: ALTER TABLE "
            f"delta.`{path}` SET TBLPROPERTIES ('{PUBLISHED_PROPERTY}' = "
            f"'{str(published).lower()}')"
        )


def _create(spark: SparkSession, table: SinkTable, schema: StructType) -> None:
    """Create the sink table ``table`` describes (its user columns: ``schema``), after its
    journal.

    The session's defaults for new tables (a platform's: deletion vectors, row tracking,
    ...) apply to it, but for those no lakesink table takes (``PINNED``): those it is
    created without, said in a warning. A table committed by metadata that the defaults
    would give a feature delta-rs cannot write is refused before anything is made.
    """
    path = table.path
    check_partition_columns(table.partition_by, schema)
    defaults = session_defaults(spark)
    if table.commit_mode == "metadata":
        check_defaults_publishable(path, defaults)
    pinned = {
        name: plain for name, plain in PINNED.items() if defaults.get(name, plain).lower() != plain
    }
    if pinned:
        log.warning(
            "%s: created with %s despite this session's defaults: a lakesink table keeps "
            "its files in its partitions' folders, where its published table names them",
            path,
            ", ".join(f"{name} = {value}" for name, value in pinned.items()),
        )
    if check_new_folder(path, "the sink's table") and is_uri(path):
        # Delta's createIfNotExists takes a folder that lists anything for a table. A store
        # that keeps emptied folders (SeaweedFS) still lists _delta_log/ once its objects
        # are gone; Hadoop's S3A deletes the folder itself, as it made it.
        delete_tree(spark, join(path, "_delta_log"))
    # The journal first: a crash before the table is made leaves a journal (a shared one
    # holds other sinks' events anyway), which the next open finds; the other way round
    # it would leave a table without its journal.
    ensure_log_table(
        table.journal_path,
        schema=JOURNAL_SCHEMA,
        version=JOURNAL_FORMAT,
        what="journal",
        create=True,
    )
    properties = {
        SINK_ID_PROPERTY: table.sink_id,
        JOURNAL_PROPERTY: recorded_journal(table.journal_path, path),
        FORMAT_PROPERTY: str(TABLE_FORMAT),
        COMMIT_MODE_PROPERTY: table.commit_mode,
        PUBLISHED_PROPERTY: str(table.published).lower(),
        PARTITION_VALUES_IN_FILES: str(bool(table.partition_by)).lower(),
        # Auto-compaction would rewrite pending partitions under a publish, which would
        # then conflict and start again (lakesink.delta.publish); lakesink compacts
        # committed rows only.
        "delta.autoOptimize.autoCompact": "false",
        **pinned,
    }
    # SQL rather than DeltaTable's builder: a Spark Connect server runs it without Delta's
    # own Connect plug-in.
    columns = StructType([*_fields(HIDDEN_FIELDS), *schema.fields]).toDDL()
    partitions = ", ".join(map(quote_identifier, [*LAKESINK_PARTITIONS, *table.partition_by]))
    settings = ", ".join(
        f"{string_literal(k)} = {string_literal(v)}" for k, v in properties.items()
    )
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {delta_path(path)} ({columns}) USING DELTA "
        f"PARTITIONED BY ({partitions}) TBLPROPERTIES ({settings})"
    )
    log.info("created lakesink table %s for sink %r", path, table.sink_id)


def session_defaults(spark: SparkSession) -> dict[str, str]:
    """The table properties this session gives every new Delta table (Delta's
    ``spark.databricks.delta.properties.defaults.*``), by property name (``delta.*``)."""
    return {
        f"delta.{key.removeprefix(SESSION_DEFAULTS)}": value
        for key, value in spark.conf.getAll.items()
        if key.startswith(SESSION_DEFAULTS)
    }


def _evolve(spark: SparkSession, table: SinkTable, schema: StructType, merge: bool) -> SinkTable:
    """The table once the columns ``schema`` adds are added (``merge``), or refused.

    Raises:
        SchemaMismatchError: ``schema`` drops a column or changes a type (named); or adds
            columns without ``merge``, or adds one that is not nullable.
    """
    known = set(table.columns)
    existing = spark_schema(table)
    added = [f for f in schema.fields if f.name not in known]
    names = ", ".join(f.name for f in added)
    if not merge or not added:
        try:
            check_columns(schema, existing, what="the given schema")
        except SchemaMismatchError as exc:
            hint = f"; to add {names} to the table, pass merge_schema=True" if added else ""
            raise SchemaMismatchError(f"{exc}{hint}") from None
        return table
    kept = StructType([f for f in schema.fields if f.name in known])
    check_columns(kept, existing, what="the given schema")  # dropped or retyped columns
    required = [f.name for f in added if not f.nullable]
    if required:
        raise SchemaMismatchError(
            f"new column(s) {', '.join(required)} of the table at {table.path} are NOT NULL: "
            "the rows already in it have no value for them; add them as nullable columns"
        )
    columns = ", ".join(f"{quote_identifier(f.name)} {f.dataType.simpleString()}" for f in added)
    spark.sql(f"ALTER TABLE {delta_path(table.path)} ADD COLUMNS ({columns})")
    log.info("added column(s) %s to the lakesink table %s", names, table.path)
    return read_sink_table(spark, table.path)


def check_partition_columns(partition_by: tuple[str, ...], schema: StructType) -> None:
    """Refuse partition columns the schema lacks, named twice, or of a type Delta refuses.

    Raises:
        ConfigurationError: naming each such column.
    """
    types = {f.name: f.dataType for f in schema.fields}
    unknown = [c for c in partition_by if c not in types]
    if unknown:
        raise ConfigurationError(
            f"partition_by names column(s) {', '.join(unknown)} the schema lacks "
            f"(its columns: {', '.join(types)})"
        )
    if len(set(partition_by)) != len(partition_by):
        raise ConfigurationError(f"partition_by names a column twice: {', '.join(partition_by)}")
    nested = [c for c in partition_by if types[c].typeName() in ("struct", "array", "map")]
    if nested:
        raise ConfigurationError(
            f"partition_by column(s) {', '.join(nested)} are not of a simple type; Delta "
            "partitions by strings, numbers, dates, timestamps and booleans"
        )


def check_reserved(schema: StructType, what: str) -> None:
    """Refuse user columns named like the hidden ones (any case)."""
    reserved = [f.name for f in schema.fields if f.name.lower().startswith(HIDDEN_PREFIX)]
    if reserved:
        raise ReservedColumnError(
            f"{what} has column(s) {', '.join(reserved)}: names starting with "
            f"{HIDDEN_PREFIX!r} are reserved for lakesink's hidden columns; rename them"
        )


def check_columns(actual: StructType, expected: StructType, *, what: str) -> None:
    """Raise naming every missing, extra and wrongly typed column (nullability aside)."""
    check_reserved(actual, what)
    have = {f.name: f.dataType for f in actual.fields}
    want = {f.name: f.dataType for f in expected.fields}
    problems = []
    missing = [name for name in want if name not in have]
    extra = [name for name in have if name not in want]
    if missing:
        problems.append(f"missing {', '.join(missing)}")
    if extra:
        problems.append(f"extra {', '.join(extra)}")
    for name in want:
        if name in have and have[name] != want[name]:
            problems.append(
                f"{name} is {have[name].simpleString()}, expected {want[name].simpleString()}"
            )
    if problems:
        raise SchemaMismatchError(
            f"{what} does not match the sink's schema: {'; '.join(problems)} "
            f"(expected: {expected.simpleString()})"
        )


def _detail(spark: SparkSession, path: str) -> tuple[dict[str, str], tuple[str, ...]] | None:
    """The properties and partition columns of the Delta table at ``path``, or None."""
    if not is_delta_table(path):
        return None
    detail = spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first()
    if detail is None:
        return {}, ()
    return dict(detail["properties"] or {}), tuple(detail["partitionColumns"] or ())
