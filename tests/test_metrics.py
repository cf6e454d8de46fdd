"""Prometheus metrics: folded from a real sink's journal, read back with prometheus_client's
own parser, from ``lakesink metrics`` as a process, a textfile and a real Pushgateway."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lakesink.core import TxnState
from lakesink.ops.metrics import LATENCY_BUCKETS, MetricsExport, sink_registry
from lakesink.tables.journal import default_journal_path, read_transactions

SCRIPT = Path(sys.executable).parent / "lakesink"
SCHEMA = "order_id BIGINT"


def lakesink(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def samples(text: str, **labels: str) -> dict[str, float]:
    """Every sample in Prometheus text, by name (and ``le`` for buckets), with ``labels``."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if all(sample.labels.get(k) == v for k, v in labels.items()):
                key = sample.name + (f"[{sample.labels['le']}]" if "le" in sample.labels else "")
                found[key] = sample.value
    return found


@pytest.fixture(scope="module")
def sink_table(spark, tmp_path_factory) -> str:
    """Checkpoints 1 and 2 committed (2 rows, 1 row), 3 pre-committed, 4 aborted."""
    from lakesink import DeltaSink

    path = str(tmp_path_factory.mktemp("metrics") / "orders")
    sink = DeltaSink.open(spark, path, schema=SCHEMA, view_name="metrics_orders")
    for ids in ([1, 2], [3]):
        sink.write(spark.createDataFrame([(i,) for i in ids], SCHEMA))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(4,), (5,)], SCHEMA))
    sink.prepare_commit()  # checkpoint 3 waits for its commit
    sink.write(spark.createDataFrame([(6,)], SCHEMA))
    sink.close()  # checkpoint 4 is aborted
    return str(Path(path).resolve())


def test_the_metrics_are_the_journals_figures(sink_table):
    transactions = {
        t.checkpoint_id: t for t in read_transactions(default_journal_path(sink_table), "orders")
    }
    now = transactions[3].opened_at + timedelta(seconds=90)
    text = generate_latest(sink_registry([sink_table], clock=lambda: now)).decode()

    got = samples(text, sink="orders", table=sink_table)

    assert got["lakesink_oldest_pending_age_seconds"] == 90.0
    assert got["lakesink_pending_checkpoints"] == 1
    assert got["lakesink_held_checkpoints"] == 0
    assert got["lakesink_committed_checkpoints_total"] == 2
    assert got["lakesink_aborted_checkpoints_total"] == 1
    assert got["lakesink_committed_rows_total"] == 3
    assert got["lakesink_last_committed_checkpoint"] == 2
    committed_at = transactions[2].first_at[TxnState.COMMITTED]
    assert got["lakesink_last_commit_timestamp_seconds"] == committed_at.timestamp()
    latencies = [
        (t.first_at[TxnState.COMMITTED] - t.first_at[TxnState.PRE_COMMITTED]).total_seconds()
        for t in (transactions[1], transactions[2])
    ]
    assert got["lakesink_commit_latency_seconds_count"] == 2
    assert got["lakesink_commit_latency_seconds_sum"] == pytest.approx(sum(latencies))
    for bound in LATENCY_BUCKETS:
        expected = sum(latency <= bound for latency in latencies)
        assert got[f"lakesink_commit_latency_seconds_bucket[{bound}]"] == expected
    assert got["lakesink_commit_latency_seconds_bucket[+Inf]"] == 2
    assert got["lakesink_vacuumed_transactions_total"] == 0


def test_lakesink_metrics_prints_them_without_spark(sink_table):
    before = datetime.now(timezone.utc)
    result = lakesink("metrics", sink_table)
    after = datetime.now(timezone.utc)

    assert result.returncode == 0, result.stderr
    assert "starting Spark" not in result.stderr
    got = samples(result.stdout, sink="orders")
    assert got["lakesink_committed_rows_total"] == 3
    opened = next(
        t.opened_at
        for t in read_transactions(default_journal_path(sink_table), "orders")
        if t.checkpoint_id == 3
    )
    age = got["lakesink_oldest_pending_age_seconds"]
    assert (before - opened).total_seconds() <= age <= (after - opened).total_seconds()


def test_textfile_is_written_whole_for_the_textfile_collector(sink_table, tmp_path):
    target = tmp_path / "lakesink.prom"

    result = lakesink("metrics", sink_table, "--textfile", str(target))

    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    got = samples(target.read_text(), sink="orders")
    assert got["lakesink_committed_checkpoints_total"] == 2
    assert got["lakesink_pending_checkpoints"] == 1
    assert list(tmp_path.iterdir()) == [target]  # no temporary file left beside it


def test_a_textfile_the_collector_would_skip_is_refused_with_exit_2(sink_table, tmp_path):
    result = lakesink("metrics", sink_table, "--textfile", str(tmp_path / "lakesink.txt"))

    assert result.returncode == 2
    assert "must end in .prom" in result.stderr and "lakesink.txt" in result.stderr
    assert not (tmp_path / "lakesink.txt").exists()


def test_metrics_are_pushed_to_a_real_pushgateway(sink_table, push_gateway):
    result = lakesink("metrics", sink_table, "--push-gateway", push_gateway, "--job", "nightly")

    assert result.returncode == 0, result.stderr
    with urllib.request.urlopen(f"{push_gateway}/metrics", timeout=10) as answer:
        scraped = answer.read().decode()
    got = samples(scraped, job="nightly", sink="orders", table=sink_table)
    assert got["lakesink_committed_rows_total"] == 3
    assert got["lakesink_commit_latency_seconds_count"] == 2


def test_a_pushgateway_that_does_not_answer_exits_75_to_retry(sink_table):
    from servers.cluster import free_port

    nowhere = f"http://127.0.0.1:{free_port()}"
    result = lakesink("metrics", sink_table, "--push-gateway", nowhere)

    assert result.returncode == 75
    assert f"cannot push metrics to the Pushgateway at {nowhere}" in result.stderr


def test_a_path_without_a_lakesink_table_exits_2(tmp_path):
    result = lakesink("metrics", str(tmp_path / "nothing"))

    assert result.returncode == 2
    assert "no Delta table at" in result.stderr


def test_an_export_failure_in_a_pipeline_is_logged_not_raised(sink_table, tmp_path, caplog):
    gone = tmp_path / "gone"
    gone.mkdir()
    export = MetricsExport(textfile=str(gone / "lakesink.prom"))
    gone.rmdir()  # the folder vanished after the job started

    export.send_quietly(sink_registry([sink_table]))

    assert "metrics not exported" in caplog.text
