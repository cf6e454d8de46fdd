"""StreamingSink as the sink of real Structured Streaming queries, in this process.

Sources are real: Spark's file source over JSON and CSV files (``maxFilesPerTrigger``,
``availableNow`` and a continuous trigger) and Kafka through a real broker. How the tests
know nothing is lost or duplicated: every input record is in the committed view exactly
once when the query is done, the journal's committed checkpoint ids are the query's batch
ids, and a batch a validation failed shows in no table. The crash tests, with processes
killed, are in ``test_ingest_crash.py``.
"""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

import pytest
from kafka_fixture import produce

from lakesink import committed
from lakesink.core import TxnState
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError
from lakesink.spark.validation import ValidationGate
from lakesink.streaming import StreamingSink, recorded_batch
from lakesink.tables.journal import Journal, default_journal_path

SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE"
SUITE = Path(__file__).parent / "data" / "suites" / "orders_quality.json"


def write_files(folder: Path, first: int, files: int, per_file: int = 5, *, csv=False) -> list[int]:
    """Order files ``first``.. into ``folder``, written whole then renamed; return the ids."""
    folder.mkdir(parents=True, exist_ok=True)
    ids = []
    for n in range(first, first + files):
        rows = [(n * 100 + i, f"c{i % 3}", 10.0 + i) for i in range(per_file)]
        ids += [r[0] for r in rows]
        if csv:
            text = "order_id,customer,amount\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)
        else:
            text = "".join(
                json.dumps({"order_id": a, "customer": b, "amount": c}) + "\n" for a, b, c in rows
            )
        hidden = folder / f".f{n:04d}.tmp"
        hidden.write_text(text)
        hidden.rename(folder / f"f{n:04d}.{'csv' if csv else 'json'}")
    return ids


def committed_ids(spark, table: Path) -> Counter[int]:
    return Counter(r.order_id for r in committed(spark, str(table)).collect())


def journal_ids(spark, table: Path, state: TxnState, sink_id: str | None = None) -> list[int]:
    journal = Journal(default_journal_path(str(table)), create=False)
    return [
        t.checkpoint_id for t in journal.transactions(sink_id or table.name) if t.state is state
    ]


def test_the_documented_usage_commits_every_recorded_batch_once_and_refuses_reused_ids(
    spark, tmp_path
):
    ids = write_files(tmp_path / "landing", 0, 5)
    table, chk = tmp_path / "orders", str(tmp_path / "chk")
    stream_df = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 2)
        .json(str(tmp_path / "landing"))
    )

    with StreamingSink(spark, str(table), checkpoint_location=chk, schema=SCHEMA) as sink:
        query = (stream_df.writeStream.foreachBatch(sink)
                 .option("checkpointLocation", chk)
                 .trigger(availableNow=True).start())  # fmt: skip
        query.awaitTermination()

    assert committed_ids(spark, table) == Counter(ids)
    assert recorded_batch(spark, chk) == 2  # 5 files, 2 a batch: batches 0, 1, 2
    assert journal_ids(spark, table, TxnState.COMMITTED) == [0, 1, 2]  # the batch ids

    # The checkpoint location deleted: Spark would start again at batch 0. Refused, rather
    # than batch ids used twice; as the message says, a new writer id starts again at 0.
    shutil.rmtree(chk)
    with pytest.raises(ConfigurationError, match=r"batch 2 .*deleted.*new writer_id"):
        StreamingSink(spark, str(table), checkpoint_location=chk, schema=SCHEMA)
    assert committed_ids(spark, table) == Counter(ids)
    StreamingSink(spark, str(table), checkpoint_location=chk, writer_id="v2").close()


def test_csv_files_one_a_batch_and_a_second_run_with_new_files(spark, tmp_path):
    landing, table, chk = tmp_path / "landing", tmp_path / "orders", str(tmp_path / "chk")
    ids = write_files(landing, 0, 2, csv=True)

    def run() -> None:
        stream_df = (
            spark.readStream.schema(SCHEMA)
            .option("header", "true")
            .option("maxFilesPerTrigger", 1)
            .csv(str(landing))
        )
        with StreamingSink(spark, str(table), checkpoint_location=chk, schema=SCHEMA) as sink:
            stream_df.writeStream.foreachBatch(sink).option("checkpointLocation", chk).trigger(
                availableNow=True
            ).start().awaitTermination()

    run()
    ids += write_files(landing, 2, 1, csv=True)
    run()  # a scheduled run later: only the new file

    assert committed_ids(spark, table) == Counter(ids)
    assert journal_ids(spark, table, TxnState.COMMITTED) == [0, 1, 2]


def test_a_run_killed_while_spark_wrote_its_first_offsets_entry_does_not_stop_the_next(
    spark, tmp_path
):
    """Found by the crash-point enumeration (micro-batch, a kill before ``offsets/0``
    lands): Spark writes the entry as a hidden file and renames it; the killed run left
    the hidden file, and before its first entry Spark refuses a location that holds any."""
    landing, table, chk = tmp_path / "landing", tmp_path / "orders", tmp_path / "chk"
    ids = write_files(landing, 0, 2)
    (chk / "offsets").mkdir(parents=True)
    leftover = chk / "offsets" / f".0.{uuid.uuid4()}.tmp"
    leftover.write_bytes(b"")  # as the killed run left it: created, nothing written yet
    control = tmp_path / "control"
    shutil.copytree(chk, control)

    def stream():
        return spark.readStream.schema(SCHEMA).json(str(landing))

    # The hazard, shown on a copy: Spark's own query on such a location fails to start.
    query = stream().writeStream.format("noop").option("checkpointLocation", str(control)).start()
    with pytest.raises(Exception, match="STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"):
        query.awaitTermination(120)

    with StreamingSink(spark, str(table), checkpoint_location=str(chk), schema=SCHEMA) as sink:
        stream().writeStream.foreachBatch(sink).option("checkpointLocation", str(chk)).trigger(
            availableNow=True
        ).start().awaitTermination()

    assert not leftover.exists()
    assert committed_ids(spark, table) == Counter(ids)
    assert journal_ids(spark, table, TxnState.COMMITTED) == [0]


def test_two_tables_are_committed_together_and_a_failed_validation_aborts_the_batch_in_both(
    spark, tmp_path
):
    landing = tmp_path / "landing"
    good = write_files(landing, 0, 2)
    (landing / "f0002.json").write_text(  # a negative amount: the suite fails
        json.dumps({"order_id": 9000, "customer": "c", "amount": -1.0}) + "\n"
    )
    orders_schema = "order_id BIGINT, customer STRING, amount DOUBLE, ordered_at TIMESTAMP"
    sinks = {
        "orders": DeltaSink(
            spark,
            str(tmp_path / "orders"),
            schema=orders_schema,
            validation=ValidationGate.from_file(SUITE, policy="abort"),
        ),
        "totals": DeltaSink(spark, str(tmp_path / "totals"), schema="customer STRING, n BIGINT"),
    }

    def process(batch, writers) -> None:
        orders = batch.selectExpr("*", "CAST(NULL AS TIMESTAMP) AS ordered_at")
        writers["orders"].write(orders)
        writers["totals"].write(batch.groupBy("customer").count().withColumnRenamed("count", "n"))

    chk = str(tmp_path / "chk")
    stream_df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(landing))
    with StreamingSink.for_sinks(spark, sinks, checkpoint_location=chk, process=process) as sink:
        stream_df.writeStream.foreachBatch(sink).option("checkpointLocation", chk).trigger(
            availableNow=True
        ).start().awaitTermination()

    assert committed_ids(spark, tmp_path / "orders") == Counter(good)
    totals = committed(spark, str(tmp_path / "totals")).groupBy().sum("n").first()[0]
    assert totals == len(good)  # nothing of batch 2 in the totals either
    # The file source orders files by time, not name: which batch held the bad file varies.
    outcome = {
        name: (
            journal_ids(spark, tmp_path / name, TxnState.COMMITTED),
            journal_ids(spark, tmp_path / name, TxnState.ABORTED),
        )
        for name in ("orders", "totals")
    }
    assert outcome["orders"] == outcome["totals"]  # the same batch, in both tables
    done, aborted = outcome["orders"]
    assert len(done) == 2 and len(aborted) == 1 and sorted(done + aborted) == [0, 1, 2]


def test_a_continuous_query_publishes_each_batch_once_spark_records_it_not_at_the_next(
    spark, tmp_path, record_property
):
    landing, table, chk = tmp_path / "landing", tmp_path / "orders", str(tmp_path / "chk")
    write_files(landing, 0, 1)
    stream_df = spark.readStream.schema(SCHEMA).json(str(landing))
    visible_while_running = []
    with StreamingSink(spark, str(table), checkpoint_location=chk, schema=SCHEMA) as sink:
        query = (
            stream_df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", chk)
            .trigger(processingTime="1 second")
            .start()
        )
        try:
            for n in (1, 2):
                deadline = time.monotonic() + 120
                while recorded_batch(spark, chk) < n - 1 and time.monotonic() < deadline:
                    time.sleep(0.2)
                write_files(landing, n, 1)
            deadline = time.monotonic() + 120
            while len(committed_ids(spark, table)) < 15 and time.monotonic() < deadline:
                time.sleep(0.5)
            visible_while_running.append(len(committed_ids(spark, table)))
        finally:
            query.stop()

    # The last batch has no next one to commit it, and the close has not run: the
    # listener committed it.
    assert visible_while_running == [15]
    # From Spark's commit log entry (its file's time) to the journal's committed event.
    journal = Journal(default_journal_path(str(table)), create=False)
    committed_at = {
        t.checkpoint_id: t.updated_at
        for t in journal.transactions("orders")
        if t.state is TxnState.COMMITTED
    }
    commit_log = Path(chk) / "commits"
    latencies = [
        (committed_at[b] - _mtime(commit_log / str(b))).total_seconds() for b in committed_at
    ]
    # Never before Spark recorded it (the record decides the commit); how soon after is a
    # figure for the record, not a timed assertion.
    assert all(latency >= 0 for latency in latencies)
    record_property(
        "figures", "commit log to visible: " + ", ".join(f"{s:.1f} s" for s in latencies)
    )


def test_kafka_records_are_committed_once_in_batches(spark, tmp_path, kafka_broker):
    topic = "orders-streaming-test"
    orders = [
        json.dumps({"order_id": i, "customer": f"c{i % 5}", "amount": 1.0}) for i in range(200)
    ]
    produce(spark, kafka_broker, topic, orders)
    table, chk = tmp_path / "orders", str(tmp_path / "chk")
    stream_df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", 80)
        .load()
        .selectExpr(f"from_json(CAST(value AS STRING), '{SCHEMA}') AS o")
        .select("o.*")
    )

    with StreamingSink(spark, str(table), checkpoint_location=chk, schema=SCHEMA) as sink:
        stream_df.writeStream.foreachBatch(sink).option("checkpointLocation", chk).trigger(
            availableNow=True
        ).start().awaitTermination()

    assert committed_ids(spark, table) == Counter(range(200))
    assert journal_ids(spark, table, TxnState.COMMITTED) == [0, 1, 2]  # 80 + 80 + 40


def test_a_sink_given_another_checkpoint_location_fails_the_batch(spark, tmp_path):
    write_files(tmp_path / "landing", 0, 1)
    table = tmp_path / "orders"
    stream_df = spark.readStream.schema(SCHEMA).json(str(tmp_path / "landing"))
    with StreamingSink(
        spark, str(table), checkpoint_location=str(tmp_path / "elsewhere"), schema=SCHEMA
    ) as sink:
        query = (
            stream_df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        with pytest.raises(Exception, match="has no offsets of it"):
            query.awaitTermination()
    assert committed_ids(spark, table) == Counter()


def _mtime(path: Path) -> datetime:
    return datetime.fromtimestamp(path.stat().st_mtime, tz=timezone.utc)
