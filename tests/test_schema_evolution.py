"""Schema evolution: a sink opened with a new nullable column adds it (``merge_schema=True``).

How the tests know the column is kept and nothing else changed: every reader (the committed
view by name, ``committed``, the Arrow reader, ``Table.schema``) shows the new column, null
for the rows written before it and the values written after, through a commit in each mode
and the vacuum's compaction (which rewrote every committed file, written before and after
the column came, into new ones); each row once. A refused change (a dropped column, a changed
type, a NOT NULL column, a new column without the option) leaves the table's Delta version
and its journal as they were, and the message names the column.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import lakesink
from lakesink import SchemaMismatchError
from lakesink.delta.sink import DeltaSink
from lakesink.tables.format import VISIBLE
from lakesink.tables.journal import read_transactions

BEFORE = "order_id BIGINT, customer STRING, amount DOUBLE"
AFTER = f"{BEFORE}, discount DOUBLE"


def committed_files(path: str) -> set[str]:
    """The live data files of the table's committed partition (delta-rs reads the log)."""
    actions = pa.table(DeltaTable(path).get_add_actions(flatten=True)).to_pylist()
    return {a["path"] for a in actions if a[f"partition.{VISIBLE}"]}


def test_a_new_nullable_column_is_added_and_kept_through_commits_and_compaction(
    spark, tmp_path, commit
):
    path = str(tmp_path / "orders")
    view = f"evolved_{commit}"
    with DeltaSink.open(spark, path, schema=BEFORE, view_name=view, commit=commit) as sink:
        sink.write(spark.createDataFrame([(1, "ada", 9.5), (2, "bob", 3.0)], BEFORE))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    with DeltaSink.open(
        spark, path, schema=AFTER, view_name=view, commit=commit, merge_schema=True
    ) as sink:
        sink.write(spark.createDataFrame([(3, "cy", 4.0, 0.5)], AFTER))
        sink.notify_checkpoint_complete(sink.prepare_commit())

    expected = Counter([(1, None), (2, None), (3, 0.5)])
    by_view = Counter((r.order_id, r.discount) for r in spark.table(view).collect())
    by_path = Counter((r.order_id, r.discount) for r in lakesink.committed(spark, path).collect())
    table = lakesink.Table(path)
    rows = table.arrow().to_pylist()
    assert by_view == by_path == Counter((r["order_id"], r["discount"]) for r in rows) == expected
    assert table.schema.fieldNames() == ["order_id", "customer", "amount", "discount"]

    # Compaction merges files written before and after the column came: still each row once.
    before = committed_files(path)
    report = table.vacuum(spark, dry_run=False, compact_min_files=2)
    after = committed_files(path)
    assert len(before) >= 2 and not before & after, (before, after)  # every one rewritten
    (rows_part,) = [c for c in report.compaction if c.what == "committed rows"]
    assert (rows_part.files_removed, rows_part.files_added) == (len(before), len(after))
    assert Counter((r.order_id, r.discount) for r in table.dataframe(spark).collect()) == expected
    assert table.audit(spark).passed


@pytest.mark.parametrize(
    ("schema", "options", "message"),
    [
        (AFTER, {}, r"extra discount .*; to add discount to the table, pass merge_schema=True"),
        ("order_id BIGINT, amount DOUBLE", {"merge_schema": True}, r"missing customer"),
        (
            "order_id BIGINT, customer STRING, amount STRING",
            {"merge_schema": True},
            r"amount is string, expected double",
        ),
        (f"{BEFORE}, discount DOUBLE NOT NULL", {"merge_schema": True}, r"discount .* NOT NULL"),
    ],
    ids=["added-without-the-option", "dropped", "retyped", "not-null"],
)
def test_a_change_that_cannot_be_merged_is_refused_by_name_and_changes_nothing(
    spark, tmp_path, schema, options, message
):
    path = str(tmp_path / "orders")
    with DeltaSink.open(spark, path, schema=BEFORE, view_name="refused_evolution") as sink:
        sink.write(spark.createDataFrame([(1, "ada", 9.5)], BEFORE))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    version = DeltaTable(path).version()
    journal = read_transactions(sink.journal_path, "orders", table_path=path)

    with pytest.raises(SchemaMismatchError, match=message):
        DeltaSink.open(spark, path, schema=schema, view_name="refused_evolution", **options)

    assert DeltaTable(path).version() == version
    assert read_transactions(sink.journal_path, "orders", table_path=path) == journal
    assert lakesink.Table(path).schema.fieldNames() == ["order_id", "customer", "amount"]
