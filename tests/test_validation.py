"""The audit gate on real Spark DataFrames: what a GX suite finds, reports and refuses.

Every GX run costs a dozen Spark jobs, so the file makes five: the failing report is
computed once (a module fixture) and checked by every test that needs it.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import great_expectations as gx
import great_expectations.expectations as gxe
import pytest
from great_expectations.expectations.row_conditions import Column
from pyspark import StorageLevel
from pyspark.sql import functions as F

from lakesink.core.validation import FailedExpectation, ValidationReport
from lakesink.errors import ValidationSuiteError
from lakesink.jobs.ingest import ORDERS_SCHEMA, RAW_SCHEMA, transform
from lakesink.spark.validation import ValidationGate

SUITES = Path(__file__).resolve().parent / "data" / "suites"
ORDERS_SUITE = SUITES / "orders_quality.json"
JOBS = Path(__file__).resolve().parents[1] / "jobs"
START = datetime(2026, 11, 1, tzinfo=timezone.utc)


def quality_suite() -> gx.ExpectationSuite:
    """orders_quality's four expectations, an observed-value one and a distinct-values one."""
    return gx.ExpectationSuite(
        name="quality",
        expectations=[
            gxe.ExpectColumnValuesToNotBeNull(column="order_id"),
            gxe.ExpectColumnValuesToBeUnique(column="order_id"),
            gxe.ExpectColumnValuesToNotBeNull(column="customer"),
            gxe.ExpectColumnValuesToBeBetween(column="amount", min_value=0.01, max_value=100000),
            gxe.ExpectColumnMinToBeBetween(column="amount", min_value=0.01),
            gxe.ExpectColumnDistinctValuesToBeInSet(column="customer", value_set=["customer-001"]),
        ],
    )


def bad_rows() -> list[tuple]:
    """30 orders of one checkpoint: every 10th without a customer, id 5 twice, two amounts
    out of range; 27 distinct customers, far more than a report keeps."""
    rows = []
    for i in range(1, 31):
        order_id = 5 if i == 6 else i
        customer = None if i % 10 == 0 else f"customer-{i:03d}"
        amount = {7: 0.0, 8: 250_000.0}.get(i, float(i))
        rows.append((order_id, customer, amount, START + timedelta(minutes=i)))
    return rows


@pytest.fixture(scope="module")
def generated_orders(spark, tmp_path_factory):
    """Orders as the ingest job types them, from the files jobs/generate_orders.py writes."""
    spec = importlib.util.spec_from_file_location("generate_orders", JOBS / "generate_orders.py")
    generator = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generator)
    landing = tmp_path_factory.mktemp("landing")
    written = generator.generate(landing, orders=200, files=2)
    frame = transform(spark.read.schema(RAW_SCHEMA).json(str(landing)))
    assert frame.count() == written == 200
    return frame


@pytest.fixture(scope="module")
def checkpoints(spark, generated_orders):
    """Checkpoint 1: the generated orders; checkpoint 2: bad_rows(); 3: more bad rows
    (nulls, duplicates, zero amounts) that must never show up in a checkpoint-2 report."""
    worse = [(1000 + i % 3, None, 0.0, START) for i in range(9)]
    bad = spark.createDataFrame(
        [(*row, 2) for row in bad_rows()] + [(*row, 3) for row in worse],
        f"{ORDERS_SCHEMA}, checkpoint BIGINT",
    )
    return generated_orders.withColumn("checkpoint", F.lit(1).cast("bigint")).unionByName(bad)


def pending(checkpoints, checkpoint: int):
    return checkpoints.where(F.col("checkpoint") == checkpoint).drop("checkpoint")


@pytest.fixture(scope="module")
def quality_gate() -> ValidationGate:
    return ValidationGate(suite=quality_suite(), policy="quarantine")


@pytest.fixture(scope="module")
def failing_report(quality_gate, checkpoints) -> ValidationReport:
    return quality_gate.validate(pending(checkpoints, 2))


def by_type(report: ValidationReport) -> dict[str, FailedExpectation]:
    failures = {failure.expectation: failure for failure in report.failed}
    assert len(failures) == len(report.failed), "one failure per expectation type here"
    return failures


# --- runs on real rows ---------------------------------------------------------------------


def test_orders_suite_passes_on_generated_orders(checkpoints):
    gate = ValidationGate.from_file(ORDERS_SUITE)
    orders = pending(checkpoints, 1).cache()  # the caller's own cache: the gate keeps it
    try:
        report = gate.validate(orders)
        assert orders.storageLevel != StorageLevel.NONE
    finally:
        orders.unpersist()
    assert report.success, report.summary()
    assert (report.suite, report.policy, report.error) == ("orders_quality", "abort", None)
    assert report.rows == 200
    assert report.evaluated == len(gate.suite.expectations) == 4
    assert report.failed == ()
    assert report.summary() == "suite orders_quality passed 4 expectations on 200 rows"


def test_failing_suite_reports_exactly_what_the_data_has(failing_report):
    rows = bad_rows()
    ids = [row[0] for row in rows]
    customers = [row[1] for row in rows]
    amounts = [row[2] for row in rows]
    nulls = customers.count(None)
    duplicated = [i for i in ids if ids.count(i) > 1]
    out_of_range = [a for a in amounts if not 0.01 <= a <= 100000]
    outside_set = {c for c in customers if c is not None} - {"customer-001"}
    assert (nulls, duplicated, len(out_of_range), len(outside_set)) == (3, [5, 5], 2, 26)

    assert not failing_report.success
    assert failing_report.error is None
    assert (failing_report.rows, failing_report.evaluated) == (len(rows), 6)
    failures = by_type(failing_report)
    # order_id is never null here, so that expectation passed and is not listed.
    assert set(failures) == {
        "expect_column_values_to_be_unique",
        "expect_column_values_to_not_be_null",
        "expect_column_values_to_be_between",
        "expect_column_min_to_be_between",
        "expect_column_distinct_values_to_be_in_set",
    }
    not_null = failures["expect_column_values_to_not_be_null"]
    assert (not_null.column, dict(not_null.kwargs)) == ("customer", {"column": "customer"})
    assert not_null.observed["unexpected_count"] == nulls
    assert not_null.observed["element_count"] == len(rows)
    assert not_null.observed["partial_unexpected_list"] == [None] * nulls
    unique = failures["expect_column_values_to_be_unique"]
    assert unique.column == "order_id"
    assert unique.observed["unexpected_count"] == len(duplicated)
    assert unique.observed["partial_unexpected_list"] == duplicated
    between = failures["expect_column_values_to_be_between"]
    assert between.kwargs == {"column": "amount", "min_value": 0.01, "max_value": 100000.0}
    assert between.observed["unexpected_count"] == len(out_of_range)
    assert sorted(between.observed["partial_unexpected_list"]) == sorted(out_of_range)
    minimum = failures["expect_column_min_to_be_between"]
    assert minimum.observed["observed_value"] == min(amounts)
    # GX lists 20 unexpected values here whatever it is asked; the report keeps 10.
    distinct = failures["expect_column_distinct_values_to_be_in_set"]
    assert distinct.observed["unexpected_count"] == len(outside_set)
    assert len(distinct.observed["partial_unexpected_list"]) == 10
    assert set(distinct.observed["partial_unexpected_list"]) <= outside_set
    json.dumps([dict(f.observed) for f in failing_report.failed])  # JSON-ready


def test_only_the_given_rows_are_validated(checkpoints, failing_report):
    # The frame holds three checkpoints; the report on checkpoint 2 counts its rows only.
    assert checkpoints.count() == 200 + 30 + 9
    assert checkpoints.where(F.col("customer").isNull()).count() == 3 + 9
    assert failing_report.rows == len(bad_rows()) == 30
    failures = by_type(failing_report)
    assert failures["expect_column_values_to_not_be_null"].observed["unexpected_count"] == 3
    # Checkpoint 3's ids 1000-1002 are duplicated too; only checkpoint 2's id 5 is reported.
    unique = failures["expect_column_values_to_be_unique"]
    assert unique.observed["partial_unexpected_list"] == [5, 5]
    # The gate cached the rows for its run only.
    assert pending(checkpoints, 2).storageLevel == StorageLevel.NONE


def test_gx_written_suite_file_loads_and_behaves_the_same(
    tmp_path, checkpoints, quality_gate, failing_report
):
    path = tmp_path / "quality.json"
    path.write_text(json.dumps(quality_suite().to_json_dict(), indent=2))
    loaded = ValidationGate.from_file(path, policy="quarantine")
    assert loaded.suite.to_json_dict() == quality_suite().to_json_dict()

    from_file = loaded.validate(pending(checkpoints, 2))
    # The first gate runs again after the second made its own GX context: two gates in one
    # process (say one per table of the ingest job) keep their own data sources and suites.
    again = quality_gate.validate(pending(checkpoints, 2))
    for report in (from_file, again):
        assert report.failed == failing_report.failed
        assert (report.rows, report.evaluated) == (30, 6)


def test_a_run_gx_cannot_finish_is_a_report_not_a_raise(generated_orders):
    suite = gx.ExpectationSuite(
        name="broken",
        expectations=[
            gxe.ExpectColumnValuesToNotBeNull(column="customer"),
            gxe.ExpectColumnValuesToNotBeNull(column="discount"),
            # Valid to GX; Spark refuses it at run time (ANSI: 'abc' is no double).
            gxe.ExpectColumnValuesToBeUnique(
                column="order_id", row_condition=Column("amount") > "abc"
            ),
        ],
    )
    report = ValidationGate(suite=suite).validate(generated_orders)
    assert not report.success
    assert report.failed == ()
    assert (report.rows, report.evaluated) == (200, 3)
    assert 'expect_column_values_to_not_be_null on discount: Error: The column "discount"' in (
        report.error
    )
    assert "expect_column_values_to_be_unique on order_id: " in report.error
    assert "CAST_INVALID_INPUT" in report.error
    assert "on customer" not in report.error  # that expectation ran and passed
    assert report.summary() == f"suite broken error: {report.error}"


def test_a_spark_failure_during_the_run_is_a_report_not_a_raise(spark, tmp_path):
    folder = tmp_path / "vanished"
    folder.mkdir()
    (folder / "orders.json").write_text('{"order_id": 1, "customer": "c", "amount": 1.0}\n')
    frame = spark.read.schema(ORDERS_SCHEMA).json(str(folder))
    shutil.rmtree(folder)  # say a vacuum removed the files under the reader
    report = ValidationGate.from_file(ORDERS_SUITE).validate(frame)
    assert (report.success, report.rows, report.evaluated, report.failed) == (False, 0, 0, ())
    assert report.error.startswith("Py4JJavaError: ")
    assert "FILE_NOT_EXIST" in report.error and "vanished" in report.error
    assert "\n" not in report.error and len(report.error) <= 300
    assert report.summary() == f"suite orders_quality error: {report.error}"
    assert frame.storageLevel == StorageLevel.NONE


def test_validate_refuses_what_is_not_a_dataframe(quality_gate):
    with pytest.raises(TypeError, match="list"):
        quality_gate.validate([(1, "a", 1.0, START)])


# --- reports ---------------------------------------------------------------------------


def test_report_json_round_trip(failing_report):
    text = failing_report.to_json()
    assert text == json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
    assert ValidationReport.from_json(text) == failing_report
    assert json.loads(text)["policy"] == "quarantine"
    errored = ValidationReport(
        suite="s", policy="abort", success=False, rows=0, evaluated=0, failed=(),
        duration_s=0.5, error="SparkException: gone",
    )  # fmt: skip
    assert ValidationReport.from_json(errored.to_json()) == errored


def test_failing_report_summary(failing_report):
    head, _, details = failing_report.summary().partition(": ")
    assert head == "suite quality failed 5 of 6 expectations on 30 rows"
    assert set(details.split("; ")) == {
        "order_id 2 rows fail to be unique",
        "customer 3 nulls",
        "amount 2 rows fail to be between [0.01, 100000.0]",
        "amount min 0.0 < 0.01",
        "customer 26 rows fail to be in set",
    }


def test_summary_of_an_error_with_failures_names_both():
    failure = FailedExpectation(
        expectation="expect_table_row_count_to_be_between",
        column=None,
        kwargs={"min_value": 1, "max_value": None},
        observed={"observed_value": 0},
    )
    report = ValidationReport(
        suite="s", policy="warn", success=False, rows=0, evaluated=2, failed=(failure,),
        duration_s=0.1, error="expect_column_values_to_not_be_null on x: no column x",
    )  # fmt: skip
    assert report.summary() == (
        "suite s error: expect_column_values_to_not_be_null on x: no column x; "
        "failed 1 of 2 expectations on 0 rows: table row count 0 < 1"
    )


# --- suites and options --------------------------------------------------------------------


def write_suite(tmp_path: Path, expectations: list) -> Path:
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"name": "s", "expectations": expectations}))
    return path


@pytest.mark.parametrize(
    ("case", "problem"),
    [
        ("missing", "No such file or directory"),
        ("malformed", "is not valid JSON: Expecting property name"),
        ("not a suite", "is not a suite: it needs a non-empty 'name'"),
        ("unknown type", "expectation 1 (expect_column_values_to_be_purple): unknown"),
        ("wrong kwargs", "expectation 0 (expect_column_values_to_be_between): mostly:"),
        ("no type", "expectation 0: needs an object with a 'type' and its 'kwargs'"),
    ],
)
def test_from_file_names_the_file_and_the_problem(tmp_path, case, problem):
    paths = {
        "missing": tmp_path / "absent.json",
        "malformed": SUITES / "malformed.json",
        "not a suite": tmp_path / "list.json",
    }
    (tmp_path / "list.json").write_text("[]")
    path = paths.get(case) or write_suite(
        tmp_path,
        {
            "unknown type": [
                {"type": "expect_column_values_to_not_be_null", "kwargs": {"column": "a"}},
                {"type": "expect_column_values_to_be_purple", "kwargs": {"column": "a"}},
            ],
            "wrong kwargs": [
                {
                    "type": "expect_column_values_to_be_between",
                    "kwargs": {"column": "amount", "min_value": 1, "mostly": 3},
                }
            ],
            "no type": [{"kwargs": {"column": "a"}}],
        }[case],
    )
    with pytest.raises(ValidationSuiteError) as raised:
        ValidationGate.from_file(path)
    assert str(path) in str(raised.value)
    assert problem in str(raised.value)


def test_check_columns_names_every_missing_column_and_its_expectation():
    suite = gx.ExpectationSuite(
        name="s",
        expectations=[
            gxe.ExpectColumnValuesToNotBeNull(column="customer"),
            gxe.ExpectColumnValuesToNotBeNull(column="discount"),
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="amount", column_B="tax"),
            gxe.ExpectCompoundColumnsToBeUnique(column_list=["order_id", "region"]),
            gxe.ExpectColumnValuesToBeUnique(
                column="order_id",
                row_condition=(Column("amount") > 0) | (Column("channel") == "web"),
            ),
        ],
    )
    gate = ValidationGate(suite=suite)
    columns = ["order_id", "customer", "amount", "ordered_at"]
    with pytest.raises(ValidationSuiteError) as raised:
        gate.check_columns(columns)
    message = str(raised.value)
    assert "expect_column_values_to_not_be_null uses 'discount'" in message
    assert "expect_column_pair_values_a_to_be_greater_than_b uses 'tax'" in message
    assert "expect_compound_columns_to_be_unique uses 'region'" in message
    assert "expect_column_values_to_be_unique uses 'channel'" in message
    assert "uses 'customer'" not in message and "uses 'amount'" not in message
    assert "The table has order_id, customer, amount, ordered_at" in message
    gate.check_columns([*columns, "discount", "tax", "region", "channel"])  # all there: no error


@pytest.mark.parametrize("policy", ["ignore", "ABORT", ""])
def test_unknown_policy_is_refused_by_name(policy):
    with pytest.raises(ValidationSuiteError, match=f"unknown validation policy {policy!r}"):
        ValidationGate.from_file(ORDERS_SUITE, policy=policy)


def test_the_callers_suite_is_left_alone(quality_gate, failing_report):
    # The gate ran a copy in its own context; the suite it was given has no GX id.
    assert failing_report.evaluated == len(quality_gate.suite.expectations)
    assert quality_gate.suite.id is None
    assert all(expectation.id is None for expectation in quality_gate.suite.expectations)
