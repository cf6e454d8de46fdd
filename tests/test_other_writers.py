"""A lakesink table is changed by other writers too, and every reader agrees with Delta's own
read after each change: no deleted row ever comes back.

On each store (local disk, the S3 server), four tables: each commit mode, with deletion
vectors off and on (on: by the session's default for new tables in the MERGE mode, as a
platform sets it; by ``ALTER TABLE`` in the metadata mode). Each holds a committed
checkpoint, an aborted one and a pending one, partitioned by a user column. Then, on each,
what a data team and its platform do, with the sink open throughout, in four rounds:

1. corrections: a GDPR ``DELETE`` of one customer (its pending rows too), an ``UPDATE``
   and a ``MERGE``;
2. lakesink's next action (the pending checkpoint committed, its deleted rows still
   gone), then ``RESTORE`` to before that commit: the checkpoint shows restored at once;
3. maintenance, lakesink idle: ``OPTIMIZE ... ZORDER BY`` and ``VACUUM ... RETAIN 0
   HOURS`` (the published table then names files that are gone, and ``Table.status`` says
   so), then ``REORG TABLE ... APPLY (PURGE)``, each read at once;
4. lakesink's vacuum: the aborted and the restored-away rows go, and nothing is published
   again; on the tables without vectors, a checkpoint that adds a column.

After each round, Delta's read of the committed partition (``spark.read.format("delta")``,
the oracle) is first checked against the rows the changes should leave (so each change did
what it says); then ``lakesink.committed``, ``Table.arrow()`` and the committed view through
a ``lakesink serve`` process (a PyHive client) must read the same multiset of rows at once,
before anything brings the published table up. The published table, read by its path in
Spark, delta-rs, DuckDB, polars and Daft, must read it too once it is brought up: by
``lakesink publish`` (rounds 1 and 3), ``Table.publish()`` (2) or lakesink's own next
action (2, 4). No reader ever returns a row that a DELETE or the RESTORE removed.

The control: the same engines pointed at the sink table itself, as built, count its aborted
and pending rows and lakesink's hidden columns.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date, timedelta
from functools import reduce
from pathlib import Path

import pyarrow as pa
import pytest
from engine_readers import engines
from pyhive import hive
from pyspark.sql import functions as F
from serve_fixture import start_serve, stop_serve, wait_ready
from servers.cluster import free_port

import lakesink
from lakesink.cli import main
from lakesink.core import TxnState
from lakesink.delta.publish import SESSION_DEFAULTS
from lakesink.delta.sink import DeltaSink
from lakesink.spark.settings import session_conf
from lakesink.tables.history import table_version

pytestmark = pytest.mark.slow

SCHEMA = "id BIGINT, customer STRING, amount BIGINT, day DATE"
WIDER = f"{SCHEMA}, note STRING"  # the column a last checkpoint adds
COLUMNS = ("id", "customer", "amount", "day", "note")
Row = tuple[int, str, int, date, str | None]
COMBINATIONS = [(mode, vectors) for mode in ("merge", "metadata") for vectors in ("off", "on")]
CASES = [(store, *c) for store in ("local", "s3") for c in COMBINATIONS]
GDPR = "c7"  # the customer whose rows are deleted


def row(i: int, note: str | None = None) -> Row:
    return (i, f"c{i % 10}", i, date(2024, 1, 1) + timedelta(days=i % 2), note)


@dataclass
class Table:
    """One table of the matrix: its open sink, the rows it should hold, the ids that must
    never be read again."""

    path: str
    sink: DeltaSink
    view: str
    committed: dict[int, Row] = field(default_factory=dict)
    pending: dict[int, Row] = field(default_factory=dict)  # checkpoint 3, pre-committed
    gone: set[int] = field(default_factory=set)


@dataclass
class Lake:
    tables: dict[tuple[str, str, str], Table]  # by store, commit mode, vectors
    port: int


def write(spark, sink: DeltaSink, rows: list[Row], schema: str = SCHEMA) -> int:
    width = len(schema.split(","))
    sink.write(spark.createDataFrame([r[:width] for r in rows], schema))
    return sink.prepare_commit()


def build(spark, path: str, mode: str, vectors: str) -> Table:
    view = Path(path).name
    options = {"commit": mode, "view_name": view, "partition_by": ("day",)}
    default = f"{SESSION_DEFAULTS}enableDeletionVectors"
    by_default = {default: "true"} if vectors == "on" and mode == "merge" else {}
    with session_conf(spark, by_default):
        sink = DeltaSink.open(spark, path, schema=SCHEMA, **options)
    if vectors == "on" and mode == "metadata":
        spark.sql(
            f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
        )
    table = Table(path, sink, view)
    rows = [row(i) for i in range(0, 200)]
    sink.notify_checkpoint_complete(write(spark, sink, rows))  # checkpoint 1
    table.committed.update((r[0], r) for r in rows)
    aborted = write(spark, sink, [row(i) for i in range(200, 230)])  # checkpoint 2
    sink.withhold(aborted, TxnState.ABORTED, "a test aborts it")
    table.pending = {i: row(i) for i in range(300, 360)}
    assert write(spark, sink, list(table.pending.values())) == 3
    properties = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["properties"]
    assert (properties.get("delta.enableDeletionVectors") == "true") is (vectors == "on")
    return table


@pytest.fixture(scope="module")
def other_lake(spark, s3_server, tmp_path_factory) -> Iterator[Lake]:
    """The four tables on each store, and one ``lakesink serve`` over their committed views."""
    from s3_fixture import s3_uri

    roots = {"local": str(tmp_path_factory.mktemp("others")), "s3": s3_uri(f"others-{os.getpid()}")}
    tables = {
        (store, mode, vectors): build(
            spark, f"{root}/orders_{store}_{mode}_{vectors}", mode, vectors
        )
        for store, root in roots.items()
        for mode, vectors in COMBINATIONS
    }
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    port = free_port()
    listed = [a for t in tables.values() for a in ("--table", t.path)]
    server = start_serve("--port", str(port), "--no-auth", "--master", "local[1]", *listed, log=log)
    try:
        wait_ready(server, log)
        yield Lake(tables, port)
    finally:
        for table in tables.values():
            table.sink.close()
        assert stop_serve(server) == 0


READ = pa.schema(
    [
        ("id", pa.int64()),
        ("customer", pa.string()),
        ("amount", pa.int64()),
        ("day", pa.date32()),
        ("note", pa.string()),
        ("reader", pa.string()),
    ]
)


def rows_of(table: pa.Table) -> Counter[Row]:
    found = table.to_pydict()
    notes = found.get("note", [None] * table.num_rows)
    return Counter(
        zip(found["id"], found["customer"], found["amount"], found["day"], notes, strict=True)
    )


def spark_reads(spark, table: Table, names: tuple[str, ...]) -> dict[str, Counter[Row]]:
    """What Spark reads, in one job: of ``names``, Delta's own read of the committed rows
    (the committed partition, plain: ``oracle``), ``lakesink.committed`` and Spark's read of
    the published table by path."""
    published = lakesink.Table(table.path).published
    frames = {
        "oracle": lambda: spark.read.format("delta").load(table.path).where("_lakesink_visible"),
        "lakesink.committed": lambda: lakesink.committed(spark, table.path),
        "Spark delta.`path`": lambda: spark.read.format("delta").load(published),
    }
    tagged = []
    for name in names:
        frame = frames[name]()
        notes = [F.col("note")] if "note" in frame.columns else []
        tagged.append(frame.select(*COLUMNS[:4], *notes, F.lit(name).alias("reader")))
    union = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), tagged)
    found: dict[str, list[dict]] = {name: [] for name in names}
    for r in union.collect():
        found[r.reader].append(r.asDict())
    return {name: rows_of(pa.Table.from_pylist(rows, schema=READ)) for name, rows in found.items()}


def served(port: int, view: str) -> Counter[Row]:
    """The committed view through ``lakesink serve``, with the columns it was made with
    (the server made it at its start)."""
    connection = hive.connect(host="127.0.0.1", port=port, username="analyst")
    try:
        cursor = connection.cursor()
        cursor.execute(f"SELECT * FROM {view}")
        names = [d[0].rsplit(".", 1)[-1] for d in cursor.description]
        found = [dict(zip(names, r, strict=True)) for r in cursor.fetchall()]
    finally:
        connection.close()
    return Counter(
        (r["id"], r["customer"], r["amount"], date.fromisoformat(str(r["day"])), r.get("note"))
        for r in found
    )


def check(
    spark,
    lake: Lake,
    table: Table,
    step: str,
    *,
    published: bool = True,
    view: bool = False,
    truth: Counter[Row] | None = None,
) -> Counter[Row]:
    """Delta's read reads what the changes left, and every reader the same: lakesink's at
    once, the published table once brought up (``published``), the committed view through
    the server if asked (``view``). Given the ``truth`` a check just read (the table has not
    changed since, only its published table), the published table alone is read. Returns
    Delta's read."""
    names = ("oracle", "lakesink.committed") if truth is None else ()
    reads = spark_reads(spark, table, (*names, *(("Spark delta.`path`",) * published)))
    if truth is None:
        truth = reads.pop("oracle")
        assert truth == Counter(table.committed.values()), step
        assert not {r[0] for r in truth} & table.gone, step
        reads["Table.arrow"] = rows_of(lakesink.Table(table.path).arrow())
    if published:
        target = lakesink.Table(table.path).published
        others = {n: r for n, r in engines(spark, target).items() if not n.startswith("Spark")}
        reads |= {name: rows_of(read()) for name, read in others.items()}
    wrong = {name: found for name, found in reads.items() if found != truth}
    assert not wrong, {
        step: {n: (sorted(f - truth)[:3], sorted(truth - f)[:3]) for n, f in wrong.items()}
    }
    if view:  # it shows the columns it was made with, when the server started
        shown = served(lake.port, table.view)
        assert shown == Counter((*r[:4], None) for r in truth.elements()), step
    return truth


def sql(spark, statement: str, **settings: str) -> None:
    with session_conf(spark, settings):
        spark.sql(statement)


def test_read_by_the_sink_tables_own_path_every_engine_sees_pending_rows(spark, other_lake):
    """The control: what the published table is for. The sink table, read by its path with
    no filter, holds its aborted and pending rows and lakesink's columns, in every engine
    (the table without deletion vectors: delta-rs and polars read none). Defined before the
    changes' test, pytest runs it first, on the tables as built."""
    table = other_lake.tables[("local", "metadata", "off")]
    expected = len(table.committed) + 30 + len(table.pending)  # checkpoints 3 and 4
    for engine, read in engines(spark, table.path).items():
        found = read()
        assert found.num_rows == expected, engine
        assert any(c.startswith("_lakesink_") for c in found.column_names), engine


@pytest.mark.parametrize(("store", "mode", "vectors"), CASES, ids=["-".join(c) for c in CASES])
def test_every_reader_agrees_with_deltas_read_after_each_change(
    spark, other_lake, store, mode, vectors
):
    table = other_lake.tables[(store, mode, vectors)]
    path, sink, target = table.path, table.sink, f"delta.`{table.path}`"

    # 1. A GDPR request (every row of one customer, pending rows included), corrections.
    sql(spark, f"DELETE FROM {target} WHERE customer = '{GDPR}'")
    for rows in (table.committed, table.pending):
        deleted = {i for i, r in rows.items() if r[1] == GDPR}
        table.gone |= deleted
        for i in deleted:
            del rows[i]
    sql(spark, f"UPDATE {target} SET amount = -1 WHERE id = 50")
    sql(
        spark,
        f"MERGE INTO {target} t USING (SELECT 60 AS id, 600 AS amount UNION ALL "
        "SELECT 160, 1600) s ON t.id = s.id WHEN MATCHED THEN UPDATE SET amount = s.amount",
    )
    for i, amount in ((50, -1), (60, 600), (160, 1600)):
        table.committed[i] = (*table.committed[i][:2], amount, *table.committed[i][3:])
    truth = check(spark, other_lake, table, "corrections", published=False, view=True)
    assert main(["publish", path]) == 0
    check(spark, other_lake, table, "corrections, published", truth=truth)

    # 2. lakesink's next action: the pending checkpoint, less its deleted rows; then a
    # RESTORE to before its commit, which takes them out again.
    before_commit = table_version(path)
    sink.notify_checkpoint_complete(3)
    table.committed.update(table.pending)
    check(spark, other_lake, table, "checkpoint 3 committed")
    sql(spark, f"RESTORE TABLE {target} TO VERSION AS OF {before_commit}")
    for i in table.pending:
        del table.committed[i]
    table.gone |= set(table.pending)
    shown = lakesink.Table(path).checkpoint(3)
    assert (shown.state, shown.restored, shown.version) == (TxnState.ABORTED, True, None)
    truth = check(spark, other_lake, table, "RESTORE", published=False, view=True)
    lakesink.Table(path).publish()
    check(spark, other_lake, table, "RESTORE, published", truth=truth)
    journaled = lakesink.Table(path).status().aborted
    assert [t.restored for t in journaled if t.checkpoint_id == 3] == [True]

    # 3. The platform's maintenance, lakesink idle.
    sql(spark, f"OPTIMIZE {target} ZORDER BY (id)")
    sql(
        spark,
        f"VACUUM {target} RETAIN 0 HOURS",
        **{"spark.databricks.delta.retentionDurationCheck.enabled": "false"},
    )
    check(spark, other_lake, table, "OPTIMIZE, VACUUM 0 hours", published=False)
    status = lakesink.Table(path).status().published
    assert status is not None and status.behind > 0 and status.gone, status
    sql(spark, f"REORG TABLE {target} APPLY (PURGE)")
    truth = check(spark, other_lake, table, "REORG PURGE", published=False)
    assert main(["publish", path]) == 0
    check(spark, other_lake, table, "OPTIMIZE, VACUUM 0 hours, REORG PURGE, published", truth=truth)
    assert not lakesink.Table(path).status().published.gone

    # 4. lakesink's vacuum: the aborted and the restored-away rows go, none comes back.
    report = lakesink.Table(path).vacuum(spark, retain_hours=0, allow_short_retention=True)
    assert {t.checkpoint_id for t in report.transactions} == {2, 3}
    assert not report.republished_txn_ids
    assert lakesink.Table(path).checkpoint(3).vacuumed
    if vectors == "on":
        check(spark, other_lake, table, "lakesink vacuum", view=True)
        return
    # A checkpoint with a new column (the view shows the columns it was made with).
    sink.close()
    table.sink = sink = DeltaSink.open(
        spark, path, schema=WIDER, merge_schema=True, commit=mode, view_name=table.view
    )
    added = [row(i, f"n{i}") for i in range(600, 620)]
    sink.notify_checkpoint_complete(write(spark, sink, added, WIDER))
    table.committed.update((r[0], r) for r in added)
    check(spark, other_lake, table, "lakesink vacuum, a column added", view=True)
