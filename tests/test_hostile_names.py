"""Hostile names and values: quotes, backticks, spaces, semicolons, comments, SQL keywords.

Sink ids, writer ids, view and table names, paths and column names go into Spark SQL,
Delta conditions, table properties, the journal and lock-file names. Each hostile one
must either work exactly (its data lands where it should, reads back as it was, and
nothing else changes: a sentinel view stays as it was) or be refused with a
``ConfigurationError`` that names it, before anything is written.

What Spark itself allows sets the line: its session catalog takes only letters, digits
and ``_`` in view and table names (keywords are fine, quoted), Delta refuses `` ,;{}()=``
in column names and a backtick in a table's path, and ``${...}`` is substituted anywhere
in SQL text unless spelled as an escape.
"""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import LongType, StructField, StructType

from lakesink import committed
from lakesink.core import Batch, TxnState
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError
from lakesink.jobs.ingest import RAW_SCHEMA
from lakesink.ops.status import sink_status
from lakesink.ops.vacuum import vacuum
from lakesink.sources.landing import LandingFolder
from lakesink.spark.sql import (
    check_column_names,
    check_file_name_part,
    check_path,
    quote_identifier,
    quote_name,
    string_literal,
)
from lakesink.tables.journal import Journal

INJECTIONS = [
    "it's",
    "x'; DROP VIEW sentinel; --",
    "a' OR '1'='1",
    "back\\slash\\",
    "\\'",
    'double "quotes"',
    "`backticks`",
    "semi;colon -- comment /* c */",
    "select",
    "DROP TABLE orders",
    "uni ü 中 🦆",
    "new\nline\ttab",
    "${var} %s {0}",
    "${spark.app.name}",
]
NAMES = [name for name in INJECTIONS if "${" not in name]
# Hostile, and still fine for a Delta column name (no space, ,;{}()= newline or tab).
COLUMNS = ["it's", "a`b", "select", "from", "a.b", "x--y", 'q"x', "ü中"]
FOLDER = 'it\'s; DROP TABLE x -- "select" ü中'
SINK_ID = "o'rders`; DROP VIEW sentinel; --"
WRITER_ID = "w'1 -- select"
VIEW = "select"  # catalog names: letters, digits, _ only; keywords quoted
TABLE = "drop"


@pytest.fixture
def sentinel(spark):
    """A view the injections name: it must be there, unchanged, at the end."""
    spark.sql("CREATE OR REPLACE TEMP VIEW sentinel AS SELECT 42 AS answer")
    yield
    assert spark.table("sentinel").collect() == [(42,)]
    spark.catalog.dropTempView("sentinel")


def test_string_literals_read_back_exactly(spark, sentinel):
    assert spark.conf.get("spark.sql.variable.substitute") == "true"  # the ${...} trap is on
    select = ", ".join(f"{string_literal(v)} AS c{i}" for i, v in enumerate(INJECTIONS))
    assert list(spark.sql(f"SELECT {select}").first()) == INJECTIONS


def table_names(spark) -> list[str]:
    """The tables and views of the current database. SHOW TABLES, not catalog.listTables:
    the tests' Spark runs without generated code (tests/jvm_archive.py), and Spark 4.1's
    interpreted decoder cannot build listTables' Table objects."""
    return sorted(row.tableName for row in spark.sql("SHOW TABLES").collect())


def test_quoted_names_name_exactly_one_thing(spark, sentinel):
    before = table_names(spark)
    for number, name in enumerate(NAMES):  # temporary views take any name
        quoted = quote_identifier(name)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {quoted} AS SELECT {number} AS n")
        assert spark.table(quoted).collect() == [(number,)]
        assert spark.catalog.dropTempView(name)  # by its raw name: the very view made
    assert table_names(spark) == before
    assert quote_name("db.select") == "`db`.`select`"
    with pytest.raises(ConfigurationError, match=r"'a\$\{b\}'.*substitute"):
        quote_identifier("a${b}")


@pytest.mark.parametrize(
    "name", ["", "a..b", ".v", "v.", "a.b.c.d", "it's", "my-orders", "sp ace", "ü", "a`b"]
)
def test_names_the_catalog_cannot_take_are_refused(name):
    with pytest.raises(ConfigurationError, match="view name") as refused:
        quote_name(name, what="view name")
    assert repr(name) in str(refused.value)


def test_names_delta_or_files_cannot_take_are_refused_by_the_checks():
    with pytest.raises(ConfigurationError, match=r"'/data/a`b'.*backtick"):
        check_path("/data/a`b")
    with pytest.raises(ConfigurationError, match="substitute"):
        check_path("/data/${user}/orders")
    assert check_path(f"/data/{FOLDER}") == f"/data/{FOLDER}"
    with pytest.raises(ConfigurationError, match=r"'sp ace', 'x=1'"):
        check_column_names(["ok", "sp ace", "x=1"])
    check_column_names(COLUMNS)
    for writer in ("a/b", "..", "", "x\\y"):
        with pytest.raises(ConfigurationError, match="writer id"):
            check_file_name_part(writer, what="writer id")
    assert check_file_name_part(WRITER_ID, what="writer id") == WRITER_ID


def test_a_sink_of_hostile_names_writes_commits_reads_and_vacuums_exactly(
    spark, tmp_path, sentinel
):
    path = str(tmp_path / FOLDER / "orders")
    schema = StructType([StructField(c, LongType()) for c in COLUMNS])
    rows = [tuple(10 * i + k for k in range(len(COLUMNS))) for i in range(5)]

    with DeltaSink.open(
        spark,
        path,
        schema=schema,
        sink_id=SINK_ID,
        writer_id=WRITER_ID,
        view_name=VIEW,
        table_name=TABLE,
    ) as sink:
        sink.write(spark.createDataFrame(rows[:3], schema))
        sink.notify_checkpoint_complete(sink.prepare_commit())
        sink.write(spark.createDataFrame(rows[3:], schema))  # still open at close: aborted

    view = spark.table(quote_name(VIEW))
    assert view.columns == COLUMNS
    assert sorted(view.collect()) == rows[:3]
    assert spark.table(quote_name(TABLE)).count() == 5  # the raw table: 2 rows masked
    journal = Journal(str(tmp_path / FOLDER / "_lakesink_journal"), create=False)
    states = [(t.sink_id, t.writer_id, t.state) for t in journal.transactions(SINK_ID)]
    assert states == [
        (SINK_ID, WRITER_ID, TxnState.COMMITTED),
        (SINK_ID, WRITER_ID, TxnState.ABORTED),
    ]
    status = sink_status(path)
    assert (status.sink_id, status.committed_rows) == (SINK_ID, 3)

    report = vacuum(spark, path)

    assert (report.sink_id, report.rows_removed) == (SINK_ID, 2)
    assert sorted(committed(spark, path).collect()) == rows[:3]
    assert spark.read.format("delta").load(path).count() == 3


@pytest.mark.parametrize(
    ("folder", "options", "named"),
    [
        ("a`b", {}, "a`b"),
        ("cols", {"schema": "`sp ace` BIGINT"}, "sp ace"),
        ("writer", {"writer_id": "a/b"}, "a/b"),
        ("my.orders", {}, "my.orders"),  # the default view name would be database.view
        ("my-orders", {}, "my-orders"),  # the default view name is no catalog name
        ("view", {"view_name": "it's"}, "it's"),
        ("table", {"table_name": "t; DROP TABLE x"}, "t; DROP TABLE x"),
    ],
)
def test_names_delta_cannot_take_are_refused_before_anything_is_written(
    spark, tmp_path, folder, options, named
):
    path = tmp_path / folder if folder.startswith("my") else tmp_path / folder / "orders"
    with pytest.raises(ConfigurationError) as refused:
        DeltaSink.open(spark, str(path), **{"schema": "id BIGINT", **options})
    assert named in str(refused.value)
    assert not path.exists() and not spark.catalog.databaseExists("my")


@pytest.mark.parametrize("name", ["orders*.json", "orders[1].json", "orders{a,b}.json"])
def test_a_landing_file_with_glob_characters_is_read_exactly(spark, tmp_path, name):
    order = '{"order_id": %d, "customer": "c", "amount": 1.0, "ordered_at": null}\n'
    (tmp_path / name).write_text(order % 1)
    (tmp_path / "orders-other.json").write_text(order % 2)  # what orders*.json also matches
    schema = spark.createDataFrame([], RAW_SCHEMA).schema
    landing = LandingFolder(spark, str(tmp_path), file_format="json", schema=schema)

    frame, quarantined = landing.read(Batch(items=(name,), position=json.dumps([name])))

    assert [r.order_id for r in frame.collect()] == [1] and not quarantined
