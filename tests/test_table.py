"""``lakesink.Table`` on a real table holding committed, pending, held, aborted and vacuumed
checkpoints.

How the tests know each method tells the truth: what it says is compared with what made
the table (the rows each checkpoint wrote, the states the sink left them in, the journal
folded independently by ``lakesink.tables.journal``), and reads "as of a checkpoint" are
compared with the rows committed up to that checkpoint, by Arrow and by Spark.
"""

from __future__ import annotations

import shutil
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import lakesink
from lakesink import Table, TxnState, UnknownCheckpointError
from lakesink.delta.sink import DeltaSink
from lakesink.jobs.ingest import ORDERS_SCHEMA
from lakesink.spark.validation import ValidationGate
from lakesink.tables.journal import read_transactions

SUITE = Path(__file__).parent / "data" / "suites" / "orders_quality.json"
# What each checkpoint wrote, and the state the story leaves it in.
WRITTEN = {1: [1, 2], 2: [3], 3: [4, 5], 4: [6], 5: [7, 8], 6: [9]}
STORY = {
    1: TxnState.COMMITTED,
    2: TxnState.COMMITTED,
    3: TxnState.ABORTED,  # and vacuumed
    4: TxnState.HELD,  # failed validation: an amount below the suite's minimum
    5: TxnState.PRE_COMMITTED,
    6: TxnState.ABORTED,  # not vacuumed yet
}


def orders(spark, ids, amount=10.0):
    return spark.createDataFrame(
        [(i, "c-1", amount, datetime(2026, 1, 1)) for i in ids], ORDERS_SCHEMA
    )


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> Path:
    """A lake folder with the orders table and its journal, the story above played in it."""
    lake = tmp_path_factory.mktemp("table") / "lake"
    path = str(lake / "orders")
    gate = ValidationGate.from_file(SUITE, policy="quarantine")
    sink = DeltaSink.open(
        spark, path, schema=ORDERS_SCHEMA, view_name="table_orders", validation=gate
    )
    for checkpoint_id in (1, 2):
        sink.write(orders(spark, WRITTEN[checkpoint_id]))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(orders(spark, WRITTEN[3]))
    sink.close()  # checkpoint 3 was open: aborted
    Table(path).vacuum(spark, dry_run=False)  # ... and vacuumed
    sink = DeltaSink.open(
        spark, path, schema=ORDERS_SCHEMA, view_name="table_orders", validation=gate
    )
    sink.write(orders(spark, WRITTEN[4], amount=-1.0))
    assert sink.prepare_commit() == 4  # held by the gate
    sink.write(orders(spark, WRITTEN[5]))
    assert sink.prepare_commit() == 5  # pre-committed, never committed
    sink.write(orders(spark, WRITTEN[6]))
    sink.close()  # checkpoint 6 was open: aborted
    return lake


def test_checkpoints_tell_each_one_as_the_journal_does(lake):
    table = Table(lake / "orders")
    found = table.checkpoints()
    assert {c.checkpoint_id: c.state for c in found} == STORY
    journal = read_transactions(table.journal_path, table.sink_id, table_path=table.path)
    for checkpoint in found:
        mine = [t for t in journal if t.checkpoint_id == checkpoint.checkpoint_id]
        assert {t.txn_id for t in checkpoint.transactions} == {t.txn_id for t in mine}
        if checkpoint.state is not TxnState.ABORTED:
            assert checkpoint.rows == len(WRITTEN[checkpoint.checkpoint_id])
    by_id = {c.checkpoint_id: c for c in found}
    assert by_id[1].version is not None and by_id[2].version > by_id[1].version
    assert [c.checkpoint_id for c in found if c.version is not None] == [1, 2]
    assert by_id[3].vacuumed and not by_id[6].vacuumed
    assert table.checkpoint(4).state is TxnState.HELD
    with pytest.raises(UnknownCheckpointError, match="has no checkpoint 99"):
        table.checkpoint(99)
    assert table.sink_id == "orders" and table.schema.fieldNames() == [
        "order_id",
        "customer",
        "amount",
        "ordered_at",
    ]


def test_reads_as_of_a_checkpoint_hold_what_was_committed_up_to_it(spark, lake):
    table = Table(lake / "orders")
    for checkpoint_id, expected in ((1, [1, 2]), (2, [1, 2, 3])):
        as_arrow = table.arrow(checkpoint=checkpoint_id).column("order_id").to_pylist()
        as_spark = [r.order_id for r in table.dataframe(spark, checkpoint=checkpoint_id).collect()]
        assert Counter(as_arrow) == Counter(as_spark) == Counter(expected), checkpoint_id
    assert Counter(table.arrow().column("order_id").to_pylist()) == Counter([1, 2, 3])
    version = table.checkpoint(1).version
    assert table.arrow(version=version).num_rows == 2
    for unpublished in (4, 5, 6):
        with pytest.raises(UnknownCheckpointError, match="no version of the table"):
            table.arrow(checkpoint=unpublished)
    assert sorted(r.order_id for r in table.pending_rows(spark, 4).collect()) == [6]
    assert table.pending_rows(spark, 5).columns == table.schema.fieldNames()


def test_status_and_metrics_count_what_the_story_left(lake):
    table = Table(lake / "orders")
    status = table.status()
    assert status.last_committed_checkpoint == 2 and status.committed_rows == 3
    assert [t.checkpoint_id for t in status.held] == [4]
    families = {f.name: f for f in text_string_to_metric_families(_exposition(table.metrics()))}
    assert families["lakesink_committed_checkpoints"].samples[0].value == 2
    assert families["lakesink_held_checkpoints"].samples[0].value == 1


def test_operators_commit_abort_validate_vacuum_and_audit_through_it(spark, lake, tmp_path):
    copy = tmp_path / "lake"
    shutil.copytree(lake, copy)  # a table of its own: the module's stays as the story left it
    table = Table(copy / "orders")

    (report,) = [r for _, r in table.validate(spark, 5, ValidationGate.from_file(SUITE))]
    assert report.success
    assert [t.checkpoint_id for t in table.commit(spark, 4)] == [4]  # held: published by hand
    assert [t.checkpoint_id for t in table.abort(spark, 5)] == [5]
    assert table.checkpoint(4).state is TxnState.COMMITTED
    assert Counter(table.arrow(checkpoint=4).column("order_id").to_pylist()) == Counter(
        [1, 2, 3, 6]
    )

    planned = table.vacuum(spark, dry_run=True)
    assert planned.dry_run and sorted(t.checkpoint_id for t in planned.transactions) == [5, 6]
    assert not table.checkpoint(6).vacuumed
    done = table.vacuum(spark)  # for real, as lakesink vacuum runs
    assert not done.dry_run and sorted(t.checkpoint_id for t in done.transactions) == [5, 6]
    assert table.checkpoint(5).vacuumed and table.checkpoint(6).vacuumed
    assert table.audit(spark).passed


def test_what_the_readme_imports_comes_from_lakesink_alone():
    from lakesink.delta.sink import DeltaSink as Implementation
    from lakesink.streaming import StreamingSink

    assert lakesink.DeltaSink is Implementation and lakesink.StreamingSink is StreamingSink
    for name in ("Table", "SinkOptions", "spark_session", "committed", "arrow", "Checkpoint"):
        assert name in lakesink.__all__ and getattr(lakesink, name) is not None, name


def _exposition(registry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode()
