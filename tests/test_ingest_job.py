"""The ingest job as a user runs it: bad files, a failing audit, a second job started.

How the tests know nothing is lost: every order of a good file ends up committed exactly
once, the unparsable file sits in the quarantine folder with its reason, and the held
checkpoint's rows become visible exactly once when the operator commits them.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from test_ingest_crash import ORDERS, generate, ingest, ingest_command
from test_metrics import samples
from test_validation_gate import expectation_rows
from tools_fixture import page_dom

from lakesink import committed
from lakesink.cli import main

pytestmark = pytest.mark.slow

SUITE = Path(__file__).parent / "data" / "suites" / "orders_quality.json"
NEGATIVE = (9001, 9002)


def committed_ids(spark, tmp_path: Path) -> Counter[int]:
    return Counter(r.order_id for r in committed(spark, str(tmp_path / "orders")).collect())


def test_bad_files_are_quarantined_and_a_failing_batch_is_held(spark, tmp_path, capsys):
    generate(tmp_path, files=2)  # batch 0: the two good files (the oldest)
    landing = tmp_path / "landing"
    (landing / "z-broken.json").write_text('{"order_id": 7001, "amount": \nnot json at all\n')
    (landing / "z-negative.json").write_text(
        "".join(
            json.dumps({"order_id": i, "customer": "c", "amount": -1.0, "ordered_at": None}) + "\n"
            for i in NEGATIVE
        )
    )

    metrics = tmp_path / "ingest.prom"
    run = ingest(
        tmp_path,
        None,
        *("--suite", str(SUITE), "--on-failure", "quarantine", "--metrics-file", str(metrics)),
    )

    assert run.returncode == 0, run.stderr[-3000:]
    assert "batch 1: 2 files, 2 orders, 1 quarantined" in run.stdout
    assert (landing / "_quarantine" / "z-broken.json").exists()
    assert (landing / "z-broken.json").exists()  # copied: Spark's file source recorded it
    assert "does not parse" in (landing / "_quarantine" / "z-broken.json.reason.txt").read_text()
    assert committed_ids(spark, tmp_path) == Counter(range(1, ORDERS + 1))

    table = str(tmp_path / "orders")
    assert main(["status", table, "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    (held,) = status["sinks"][0]["held"]
    assert held["checkpoint_id"] == 1 and held["rows"] == 2
    assert "amount" in held["validation"]
    assert main(["status", table]) == 0
    assert "held: 1" in capsys.readouterr().out
    # What the job's metrics file said when it stopped: the held batch, the committed one.
    exported = samples(metrics.read_text(), sink="orders")
    assert exported["lakesink_held_checkpoints"] == 1
    assert exported["lakesink_committed_rows_total"] == ORDERS
    assert samples(metrics.read_text(), sink="totals")["lakesink_held_checkpoints"] == 1
    # The held batch's validation, as the Data Docs page an operator opens.
    assert main(["status", table, "--report", str(tmp_path / "docs")]) == 0
    page = tmp_path / "docs" / "orders-checkpoint-1-0.html"
    assert f"report of checkpoint 1: {page}" in capsys.readouterr().err
    rows = expectation_rows(page_dom(page, tmp_path / "chromium"))
    assert rows["values must be greater than or equal to 0.01"] == "failed"

    totals = str(tmp_path / "totals")
    assert main(["status", totals, "--json"]) == 0  # held with the orders it sums
    assert [
        t["checkpoint_id"] for t in json.loads(capsys.readouterr().out)["sinks"][0]["held"]
    ] == [1]

    for held_table in (table, totals):
        assert main(["commit", held_table, "--checkpoint", "1", "--yes"]) == 0
    assert committed_ids(spark, tmp_path) == Counter([*range(1, ORDERS + 1), *NEGATIVE])
    summed = committed(spark, totals).groupBy().sum("orders").first()[0]
    assert summed == ORDERS + len(NEGATIVE)


def test_a_second_run_of_the_same_job_is_refused_while_the_first_runs(spark, tmp_path):
    generate(tmp_path, files=2)  # one batch; then the first job waits for more files
    first = subprocess.Popen(
        ingest_command(tmp_path, "--follow", "--checkpoint-seconds", "1"),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert first.stdout is not None
        line = first.stdout.readline()  # the first batch: the job holds its sinks' locks
        assert line.startswith("batch 0:"), line

        second = ingest(tmp_path)

        assert second.returncode == 75, second.stderr[-3000:]  # EX_TEMPFAIL: retry later
        assert "writer '0' of sink 'orders' is already running" in second.stderr
        deadline = time.monotonic() + 300
        while committed_ids(spark, tmp_path) != Counter(range(1, ORDERS + 1)):
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(2)
    finally:
        first.kill()
        first.wait()


def test_a_malformed_fault_spec_fails_before_spark_starts(tmp_path):
    generate(tmp_path, files=2)

    run = ingest(tmp_path, "after_record-2")

    assert run.returncode == 2, run.stderr[-3000:]
    assert "LAKESINK_CRASH_AT='after_record-2' is not STEP@CHECKPOINT" in run.stderr
    assert "session with Delta" not in run.stderr  # no Spark session was started
    assert not (tmp_path / "orders").exists() and not (tmp_path / "state").exists()
