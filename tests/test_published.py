"""A sink table's published table is kept by every commit, never ahead and never wrong; and
what format 5 records in the sink table's log for any Delta tool: each writer's newest
checkpoint as a Delta ``txn`` version, and a checksum for every commit lakesink makes with
delta-rs.

What reads each engine's rows by path is tests/test_other_writers.py; a kill at each of the
published table's writes is the crash-point enumeration (tests/crashpoints, whose check
compares the published table with the committed view after every restart).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

import lakesink
import lakesink.delta.sink as sink_module
from lakesink.cli import main
from lakesink.delta.sink import DeltaSink
from lakesink.ops.vacuum import plan_vacuum
from lakesink.storage.options import StorageOptions, deltars_uri
from lakesink.tables.format import PUBLISHED_APP_ID, writer_app_id
from lakesink.tables.published import current_version, publish, published_table

SCHEMA = "id BIGINT, item STRING"


def open_sink(spark, path: Path, commit: str, **options) -> DeltaSink:
    options.setdefault("view_name", f"v_{path.parent.name}")
    return DeltaSink.open(spark, str(path), schema=SCHEMA, commit=commit, **options)


def checkpoint(spark, sink: DeltaSink, ids, *, commit: bool = True) -> int:
    sink.write(spark.createDataFrame([(i, f"x{i}") for i in ids], SCHEMA))
    checkpoint_id = sink.prepare_commit()
    if commit:
        sink.notify_checkpoint_complete(checkpoint_id)
    return checkpoint_id


def published_ids(path: Path, version: int | None = None) -> Counter[int]:
    table = DeltaTable(lakesink.Table(str(path)).published, version=version)
    return Counter(table.to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def committed_ids(spark, path: Path) -> Counter[int]:
    return Counter(r.id for r in lakesink.committed(spark, str(path)).collect())


@pytest.fixture
def orders(tmp_path) -> Path:
    return tmp_path / "orders"


@pytest.fixture
def no_publish(monkeypatch):
    """The sink's own updates of the published table fail (as a crash right after a commit
    would leave it): the table is then behind until something brings it up."""

    def fails(path: str) -> None:
        raise OSError("the process died before the published table's commit")

    monkeypatch.setattr(sink_module, "publish", fails)


def test_each_writers_newest_checkpoint_is_a_delta_txn_version_any_tool_reads(
    spark, orders, commit
):
    a = open_sink(spark, orders, commit, writer_id="a")
    b = open_sink(spark, orders, commit, writer_id="b")
    for ids in (range(0, 3), range(3, 6)):
        done = [checkpoint(spark, writer, ids, commit=False) for writer in (a, b)]
        for writer, checkpoint_id in zip((a, b), done, strict=True):
            writer.notify_checkpoint_complete(checkpoint_id)
    checkpoint(spark, a, range(6, 9), commit=False)  # pre-committed, not committed
    table = DeltaTable(str(orders))
    assert table.transaction_version(writer_app_id("orders", "a")) == 3
    assert table.transaction_version(writer_app_id("orders", "b")) == 2
    assert table.transaction_version(writer_app_id("orders", "a", commit=True)) == 2
    assert table.transaction_version(writer_app_id("orders", "b", commit=True)) == 2
    # Spark reads them too: its own idempotent append under writer a's app id and newest
    # version is skipped as done.
    rows = spark.read.format("delta").load(str(orders)).count()
    extra = spark.createDataFrame(
        [(True, None, None, 99, "x")], spark.read.format("delta").load(str(orders)).schema
    )
    extra.write.format("delta").mode("append").option(
        "txnAppId", writer_app_id("orders", "a")
    ).option("txnVersion", "3").save(str(orders))
    assert spark.read.format("delta").load(str(orders)).count() == rows
    a.close()
    b.close()


def test_every_version_of_the_published_table_says_which_checkpoints_it_holds(
    spark, orders, commit
):
    sink = open_sink(spark, orders, commit)
    batches = {checkpoint(spark, sink, range(k * 10, k * 10 + 5)): k for k in range(3)}
    checkpoint(spark, sink, range(100, 105), commit=False)  # pending: not published
    sink.close()
    published = lakesink.Table(str(orders)).published
    history = {
        entry["version"]: json.loads(entry["userMetadata"])
        for entry in DeltaTable(published).history()
        if entry.get("userMetadata")
    }
    holds = {version: meta["checkpoints"] for version, meta in history.items()}
    assert sorted(holds.values()) == [[1], [2], [3]]
    for version, (checkpoint_id,) in holds.items():  # as of a checkpoint: it and the ones before
        wanted = Counter(
            i for c, k in batches.items() if c <= checkpoint_id for i in range(k * 10, k * 10 + 5)
        )
        assert published_ids(orders, version) == wanted
    assert published_ids(orders) == committed_ids(spark, orders)


def test_a_published_table_left_behind_shows_the_previous_commit_until_the_next_open(
    spark, orders, commit, monkeypatch, capsys
):
    sink = open_sink(spark, orders, commit)
    checkpoint(spark, sink, range(0, 5))
    with monkeypatch.context() as patched:  # the process dies before the published commit
        patched.setattr(sink_module, "publish", _dies)
        checkpoint(spark, sink, range(5, 10))
        sink.close()
    assert committed_ids(spark, orders) == Counter(range(10))
    assert published_ids(orders) == Counter(range(5))  # behind, never wrong
    assert published_table(str(orders)).behind == 1
    assert current_version(str(orders)) is None  # so lakesink's readers read the sink table
    assert main(["status", str(orders)]) == 0
    assert "1 table version(s) behind" in capsys.readouterr().out
    sink = open_sink(spark, orders, commit)  # the next open brings it up
    assert published_ids(orders) == Counter(range(10))
    assert published_table(str(orders)).behind == 0
    up_to_date = current_version(str(orders))
    assert up_to_date == DeltaTable(lakesink.Table(str(orders)).published).version()
    checkpoint(spark, sink, range(10, 15), commit=False)  # pending rows change nothing shown
    sink.close()
    assert current_version(str(orders)) == up_to_date
    assert committed_ids(spark, orders) == Counter(range(10))


def _dies(path: str) -> None:
    raise OSError("the process died before the published table's commit")


def test_updates_racing_each_other_add_each_committed_file_once(spark, orders, no_publish):
    sink = open_sink(spark, orders, "merge")
    for k in range(4):
        checkpoint(spark, sink, range(k * 10, k * 10 + 5))
    sink.close()
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def update() -> None:
        start.wait()
        try:
            publish(str(orders))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=update) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert (
        published_ids(orders)
        == committed_ids(spark, orders)
        == Counter(i for k in range(4) for i in range(k * 10, k * 10 + 5))
    )
    files = pa.table(DeltaTable(lakesink.Table(str(orders)).published).get_add_actions()).column(
        "path"
    )
    assert len(files) == len(set(files.to_pylist()))


def test_a_sink_log_cleaned_past_what_it_shows_is_compared_file_by_file(spark, orders, no_publish):
    """Scenario 3: the sink's log no longer holds the versions since the one the published
    table shows (it stayed behind past the log's retention)."""
    sink = open_sink(spark, orders, "metadata")
    checkpoint(spark, sink, range(0, 5))
    publish(str(orders))
    shown = published_table(str(orders)).sink_version
    for k in range(1, 4):
        checkpoint(spark, sink, range(k * 10, k * 10 + 5))
    sink.close()
    DeltaTable(str(orders)).create_checkpoint()
    for commit_file in (orders / "_delta_log").glob("*.json"):
        if int(commit_file.stem) <= shown + 1:  # what the log cleanup would remove
            commit_file.unlink()
    publish(str(orders))
    assert published_ids(orders) == committed_ids(spark, orders)


def test_the_vacuum_keeps_every_file_a_published_version_younger_than_its_retention_reads(
    spark, orders, no_publish
):
    """The published table stayed behind while compaction removed the files it reads. An
    hour on (a clock set ahead), a vacuum retaining half an hour would delete them while
    that version of the published table is younger than half an hour: its retention is
    stretched until they are older. The control: once the published table is up to date,
    nothing is stretched."""
    from lakesink.ops.compact import compact, plan_compaction
    from lakesink.testing.memory import SettableClock

    sink = open_sink(spark, orders, "merge")
    for k in range(3):
        checkpoint(spark, sink, range(k * 10, k * 10 + 5))
    publish(str(orders))
    sink.close()
    compact(spark, plan_compaction(str(orders), None, min_files=2), sink_id="orders")
    later = SettableClock(int(time.time() * 1000) + 3_600_000)
    plan = plan_vacuum(
        spark, str(orders), retain_hours=0.5, allow_short_retention=True, clock=later
    )
    assert plan.retain_hours > 1  # the removals are an hour old, and still read
    publish(str(orders))
    plan = plan_vacuum(
        spark, str(orders), retain_hours=0.5, allow_short_retention=True, clock=later
    )
    assert plan.retain_hours == 0.5


def test_the_published_log_is_checkpointed_and_the_sinks_checksums_are_true(spark, orders, commit):
    """Every commit lakesink writes with delta-rs (a pre-commit's txn, a metadata commit, a
    release, a published update) leaves a checksum that says what the table holds, as
    Spark's own do; the published table's log is checkpointed at Delta's interval."""
    sink = open_sink(spark, orders, commit)
    for k in range(11):
        checkpoint(spark, sink, range(k * 10, k * 10 + 3))
    sink.close()
    published = Path(lakesink.Table(str(orders)).published)
    assert (published / "_delta_log" / f"{10:020d}.checkpoint.parquet").is_file()
    checked = 0
    for crc in sorted((orders / "_delta_log").glob("0*.crc")):
        version = int(crc.stem)
        meta = json.loads(
            (orders / "_delta_log" / f"{version:020d}.json").read_text().split("\n")[0]
        )
        if "delta-rs" not in json.dumps(meta):
            continue  # Spark's own
        checksum = json.loads(crc.read_text())
        table = DeltaTable(str(orders), version=version)
        files = pa.table(table.get_add_actions(flatten=True))
        assert checksum["numFiles"] == files.num_rows, version
        assert checksum["tableSizeBytes"] == sum(files.column("size_bytes").to_pylist()), version
        assert sum(checksum["fileSizeHistogram"]["fileCounts"]) == files.num_rows, version
        for txn in checksum.get("setTransactions", []):
            assert table.transaction_version(txn["appId"]) == txn["version"], version
        checked += 1
    assert checked >= 11
    assert DeltaTable(str(published)).transaction_version(PUBLISHED_APP_ID) is not None


def test_a_vacuum_before_any_commit_keeps_the_published_tables_log(spark, lake):
    """Until a commit puts a file in the committed partition, its folder holds only the
    published table's log, hidden from Delta's VACUUM, which sees an empty folder there:
    on local disk and on S3, the log stays and the table reads, and the pending rows stay."""
    from lakesink.ops.vacuum import vacuum

    path = f"{lake}/orders"
    sink = DeltaSink.open(spark, path, schema=SCHEMA, view_name="v_vacuum_empty")
    sink.write(spark.createDataFrame([(1, "x")], SCHEMA))
    sink.prepare_commit()  # pending only
    sink.close()
    vacuum(spark, path, retain_hours=0, allow_short_retention=True)
    published = lakesink.Table(path).published
    storage = StorageOptions.from_env()
    table = DeltaTable(
        deltars_uri(published), storage_options=storage.deltars_options(published) or None
    )
    assert table.to_pyarrow_table().num_rows == 0 and table.schema().fields
    assert spark.read.format("delta").load(path).count() == 1  # the pending row, masked
    assert lakesink.Table(path).checkpoint(1).rows == 1


def test_a_table_created_without_a_published_table_has_none_until_switched(spark, orders, capsys):
    from lakesink.errors import ConfigurationError
    from lakesink.tables.format import PUBLISHED_PROPERTY

    sink = open_sink(spark, orders, "merge", published=False)
    checkpoint(spark, sink, range(0, 5))
    sink.close()
    assert not Path(lakesink.Table(str(orders)).published, "_delta_log").exists()
    assert main(["status", str(orders)]) == 0
    assert "published table: off" in capsys.readouterr().out
    with pytest.raises(
        ConfigurationError, match=rf"does not keep .*'{PUBLISHED_PROPERTY}' = 'true'"
    ):
        open_sink(spark, orders, "merge", published=True)
    spark.sql(f"ALTER TABLE delta.`{orders}` SET TBLPROPERTIES ('{PUBLISHED_PROPERTY}' = 'true')")
    open_sink(spark, orders, "merge").close()  # switched on: the next open makes it
    assert published_ids(orders) == Counter(range(5))


def test_the_vacuum_removes_the_staging_log_an_append_cut_short_left(spark, orders):
    """An append killed between Spark's write of its staging table and the sink's commit
    leaves that table's log in its transaction's pending folder, hidden from Delta's
    VACUUM; once the transaction is finished, lakesink's vacuum removes it."""
    from lakesink.core import TxnState
    from lakesink.delta.writer import pending_folder, staging_logs, write_staged
    from lakesink.ops.vacuum import vacuum

    sink = open_sink(spark, orders, "merge")
    checkpoint(spark, sink, range(0, 5))
    aborted = checkpoint(spark, sink, range(5, 10), commit=False)
    txn_id = next(
        t.txn_id for t in sink.journal.transactions("orders") if t.checkpoint_id == aborted
    )
    sink.withhold(aborted, TxnState.ABORTED, "a test aborts it")
    frame = spark.createDataFrame([(99, "x")], SCHEMA)
    write_staged(frame, sink.sink_table, txn_id)  # what a kill right after it leaves
    sink.close()
    assert staging_logs(str(orders)) == [txn_id]
    assert Path(pending_folder(str(orders), txn_id), "_delta_log").is_dir()
    vacuum(spark, str(orders), retain_hours=0, allow_short_retention=True)
    assert staging_logs(str(orders)) == []
    assert committed_ids(spark, orders) == Counter(range(5)) == published_ids(orders)
