"""The audit gate end to end: a checkpoint's pending rows are validated before its commit.

Each policy on a real Delta table: a bad batch is aborted, held or committed with a
warning, a good one is committed, and the journal records every validation run. How the
tests know nothing is lost: every row written is either visible exactly once or in a
checkpoint the journal shows aborted or held, and a held one commits exactly once later.
"""

from __future__ import annotations

import html
import json
import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from tools_fixture import page_dom

from lakesink import committed
from lakesink.core import CheckpointCoordinator, TxnState, step_hook
from lakesink.delta.journal import journal_events
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ValidationSuiteError
from lakesink.jobs.ingest import ORDERS_SCHEMA
from lakesink.ops.resolve import resolve_checkpoint, revalidate_checkpoint
from lakesink.ops.status import sink_status
from lakesink.spark.validation import ValidationGate
from lakesink.tables.checkpoints import DeltaCheckpointStore

SUITES = Path(__file__).parent / "data" / "suites"
QUALITY = SUITES / "orders_quality.json"


class Crash(Exception):
    """A simulated process death at a protocol step."""


def orders(spark, ids, *, amount=10.0, customer="c-1"):
    when = datetime(2026, 1, 1)
    return spark.createDataFrame([(i, customer, amount, when) for i in ids], ORDERS_SCHEMA)


def gate(policy: str) -> ValidationGate:
    return ValidationGate.from_file(QUALITY, policy=policy)


def visible_ids(spark, table: Path) -> list[int]:
    return sorted(r.order_id for r in committed(spark, str(table)).collect())


def states(sink: DeltaSink) -> dict[int, TxnState]:
    return {s.checkpoint_id: s.state for s in sink.journal.transactions(sink.sink_id)}


def validations(sink: DeltaSink, checkpoint_id: int) -> list[dict]:
    rows = (
        journal_events(sink.spark, sink.journal.path)
        .where(f"checkpoint_id = {checkpoint_id} AND validation IS NOT NULL")
        .orderBy("event_time")
        .collect()
    )
    return [{"state": r.state, "detail": r.detail, **json.loads(r.validation)} for r in rows]


def expectation_rows(dom: str) -> dict[str, str]:
    """Each expectation row of a Data Docs page: its sentence's start, and failed or passed."""
    rows = {}
    for row in re.findall(r"<tr>(.*?)</tr>", dom, flags=re.S):
        text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", row)).split())
        mark = (
            "failed"
            if "fa-times text-danger" in row
            else "passed"
            if "text-success" in row
            else None
        )
        for sentence in ("values must be greater than or equal to 0.01", "values must be unique"):
            if sentence in text.replace(" .", ".") and mark:
                rows[sentence] = mark
    return rows


def write_good_then_bad(spark, sink: DeltaSink) -> None:
    sink.write(orders(spark, [1, 2]))
    sink.notify_checkpoint_complete(sink.prepare_commit())  # checkpoint 1: passes
    sink.write(orders(spark, [3, 4], amount=-5.0))  # below the suite's minimum
    sink.notify_checkpoint_complete(sink.prepare_commit())  # checkpoint 2: fails


@pytest.fixture
def table(tmp_path: Path) -> Path:
    return tmp_path / "orders"


def test_abort_policy_keeps_a_bad_batch_invisible_and_commits_a_good_one(spark, table):
    sink = DeltaSink.open(spark, str(table), schema=ORDERS_SCHEMA, validation=gate("abort"))

    write_good_then_bad(spark, sink)

    assert visible_ids(spark, table) == [1, 2]
    assert states(sink) == {1: TxnState.COMMITTED, 2: TxnState.ABORTED}
    (passed,) = validations(sink, 1)
    assert passed["success"] and passed["rows"] == 2 and passed["failed"] == []
    (failed,) = validations(sink, 2)
    assert failed["state"] == "aborted" and not failed["success"] and failed["rows"] == 2
    assert [(f["expectation"], f["column"]) for f in failed["failed"]] == [
        ("expect_column_values_to_be_between", "amount")
    ]
    assert failed["duration_s"] > 0
    sink.close()


def test_quarantine_policy_holds_a_bad_batch_until_an_operator_commits_it(spark, table):
    sink = DeltaSink.open(spark, str(table), schema=ORDERS_SCHEMA, validation=gate("quarantine"))
    write_good_then_bad(spark, sink)
    sink.write(orders(spark, [5]))
    sink.notify_checkpoint_complete(sink.prepare_commit())  # the job goes on past the held one
    sink.close()

    assert visible_ids(spark, table) == [1, 2, 5]
    reopened = DeltaSink.open(spark, str(table), validation=gate("quarantine"))
    assert states(reopened)[2] is TxnState.HELD  # recovery neither commits nor aborts it
    reopened.close()
    status = sink_status(str(table))
    (held,) = status.held
    assert held.checkpoint_id == 2 and held.checkpoint_id not in {
        t.checkpoint_id for t in status.pending
    }
    assert "amount" in json.loads(held.last_validation)["failed"][0]["column"]

    resolve_checkpoint(spark, str(table), 2, "commit")

    assert Counter(visible_ids(spark, table)) == Counter([1, 2, 3, 4, 5])
    assert states(reopened)[2] is TxnState.COMMITTED


def test_warn_policy_commits_a_bad_batch_and_records_the_failure(spark, table):
    sink = DeltaSink.open(spark, str(table), schema=ORDERS_SCHEMA, validation=gate("warn"))

    write_good_then_bad(spark, sink)

    assert visible_ids(spark, table) == [1, 2, 3, 4]
    assert states(sink)[2] is TxnState.COMMITTED
    (failed,) = validations(sink, 2)
    assert failed["state"] == "pre_committed" and not failed["success"]
    assert "policy warn" in failed["detail"]
    sink.close()


def test_a_validation_that_cannot_run_holds_the_checkpoint_whatever_the_policy(spark, table):
    import great_expectations as gx

    # A suite whose column exists in the table but whose check raises inside GX at run time:
    # a regex test on a numeric column.
    suite = gx.ExpectationSuite(
        name="broken",
        expectations=[gx.expectations.ExpectColumnValuesToMatchRegex(column="amount", regex="[")],
    )
    broken = ValidationGate(suite=suite, policy="abort")
    sink = DeltaSink.open(spark, str(table), schema=ORDERS_SCHEMA, validation=broken)
    sink.write(orders(spark, [1]))

    sink.notify_checkpoint_complete(sink.prepare_commit())

    assert visible_ids(spark, table) == []
    assert states(sink) == {1: TxnState.HELD}
    (report,) = validations(sink, 1)
    assert report["state"] == "held" and not report["success"] and report["error"]
    sink.close()


def test_a_suite_naming_a_missing_column_is_refused_before_anything_is_written(
    spark, tmp_path, table
):
    import great_expectations as gx

    suite = gx.ExpectationSuite(
        name="typo",
        expectations=[gx.expectations.ExpectColumnValuesToNotBeNull(column="custmer")],
    )
    with pytest.raises(ValidationSuiteError, match="custmer"):
        DeltaSink.open(
            spark, str(table), schema=ORDERS_SCHEMA, validation=ValidationGate(suite=suite)
        )
    assert not table.exists()
    assert not (tmp_path / "_lakesink_journal").exists()


def test_a_held_checkpoint_whose_record_never_completed_is_aborted_on_restart(
    spark, tmp_path, table
):
    state = str(tmp_path / "state")

    def crash(step: str, checkpoint_id: int) -> None:
        if step == "after_pre_commit" and checkpoint_id == 1:
            raise Crash(step)

    store = DeltaCheckpointStore(state)
    sink = DeltaSink(spark, str(table), schema=ORDERS_SCHEMA, validation=gate("quarantine"))
    with step_hook(crash):
        coordinator = CheckpointCoordinator(store, job_id="j", sinks={"orders": sink})
    sink.write(orders(spark, [1], amount=-1.0))
    with pytest.raises(Crash):
        coordinator.trigger_checkpoint(coordinator.position)
    assert states(sink) == {1: TxnState.HELD}
    store.job_lock("j").release()  # the process "dies"; a real restart finds its lock stale
    sink._release()

    reopened = DeltaSink(spark, str(table), validation=gate("quarantine"))
    with CheckpointCoordinator(store, job_id="j", sinks={"orders": reopened}) as restarted:
        # Its input is replayed from the last completed checkpoint (none), so committing
        # the held rows later would duplicate them: recovery aborts them instead.
        assert states(reopened) == {1: TxnState.ABORTED}
        assert restarted.next_checkpoint_id == 2  # and its id is not used again


def test_lakesink_validate_reruns_a_suite_journals_it_and_writes_its_report(
    spark, table, tmp_path, capsys
):
    from lakesink.cli import main

    sink = DeltaSink.open(spark, str(table), schema=ORDERS_SCHEMA, validation=gate("quarantine"))
    write_good_then_bad(spark, sink)
    sink.close()
    docs = tmp_path / "docs"

    argv = ["validate", str(table), "--checkpoint", "2", "--suite", str(QUALITY)]
    assert main([*argv, "--report", str(docs)]) == 1
    out, err = capsys.readouterr()
    assert "amount" in out
    page = docs / "orders-checkpoint-2-0.html"
    assert f"report of checkpoint 2: {page}" in err
    rows = expectation_rows(page_dom(page, tmp_path / "chromium"))
    assert rows["values must be greater than or equal to 0.01"] == "failed"
    assert rows["values must be unique"] == "passed"
    assert "orders checkpoint 2 (writer 0, held)" in page.read_text()
    ((_, report),) = revalidate_checkpoint(spark, str(table), 2, gate("quarantine"))
    assert not report.success
    runs = validations(sink, 2)
    assert [r["state"] for r in runs] == ["held", "held", "held"]  # the gate, then 2 re-runs
    assert runs[-1]["detail"] == "validated again by an operator"
    assert main(["validate", str(table), "--checkpoint", "1", "--suite", str(QUALITY)]) == 2


def test_a_failed_validation_withholds_the_checkpoint_in_every_sink_of_the_job(
    spark, tmp_path, table
):
    totals_table = tmp_path / "totals"
    orders_sink = DeltaSink(spark, str(table), schema=ORDERS_SCHEMA, validation=gate("abort"))
    totals_sink = DeltaSink(spark, str(totals_table), schema="customer STRING, n BIGINT")
    sinks = {"orders": orders_sink, "totals": totals_sink}
    store = DeltaCheckpointStore(str(tmp_path / "state"))
    with CheckpointCoordinator(store, job_id="j", sinks=sinks) as job:
        orders_sink.write(orders(spark, [1], amount=-1.0))
        totals_sink.write(spark.createDataFrame([("c-1", 1)], "customer STRING, n BIGINT"))

        record = job.trigger_checkpoint(job.position)

        # Totals must not be published without the orders they sum.
        assert states(orders_sink) == {1: TxnState.ABORTED}
        assert states(totals_sink) == {1: TxnState.ABORTED}
    assert record.checkpoint_id == 1
    assert visible_ids(spark, table) == []
    assert committed(spark, str(totals_table)).count() == 0
