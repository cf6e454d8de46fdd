"""The metadata commit (``commit="metadata"``): a checkpoint published by moving its files
into the committed partition (hard links, no byte written again) in one delta-rs commit,
on a real Spark session and real Delta tables.

The guarantees both commit modes share (crashes at every step, several writers, readers
during commits, the downstream stream, the vacuum) are parametrized over both modes where
they are tested (test_delta_sink, test_readers, test_ingest_crash); here are the ones
particular to this mode: no row rewritten, statistics kept, racing publishes, and rewrites
of a pending partition racing the publish from either side.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError as DeltaCommitFailedError
from deltalake.transaction import AddAction, RemoveAction

import lakesink.delta.publish as publish_module
from lakesink import committed
from lakesink.delta.publish import publish
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError
from lakesink.ops.audit import audit_table
from lakesink.ops.vacuum import vacuum
from lakesink.readers.deltars import arrow
from lakesink.tables.format import (
    COMMIT_MODE_PROPERTY,
    PENDING,
    VISIBLE,
    commit_metadata,
    writer_app_id,
)

SCHEMA = "order_id BIGINT, item STRING"


def open_sink(spark, table: Path, **options) -> DeltaSink:
    options.setdefault("schema", SCHEMA)
    options.setdefault("view_name", f"v_{table.parent.name}")
    return DeltaSink.open(spark, str(table), commit="metadata", **options)


def write(spark, sink: DeltaSink, ids, parts: int = 2) -> None:
    """Rows in ``parts`` files of order ranges, so a pending partition has several files
    to compact, and each its own minimum and maximum."""
    frame = spark.createDataFrame([(i, f"item-{i}") for i in ids], SCHEMA)
    sink.write(frame.repartitionByRange(parts, "order_id"))


def visible_ids(spark, table: Path, version: int | None = None) -> Counter:
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    frame = reader.load(str(table)).where(f"{VISIBLE} = true")
    return Counter(r.order_id for r in frame.collect())


def live_files(table: Path) -> dict[str, dict]:
    actions = pa.table(DeltaTable(str(table)).get_add_actions(flatten=True)).to_pylist()
    return {a["path"]: a for a in actions}


def commit_infos(table: Path, after: int) -> list[tuple[int, dict]]:
    """The ``commitInfo`` of each log version after ``after``, read from the log's files."""
    infos = []
    for commit in sorted((table / "_delta_log").glob("*.json")):
        version = int(commit.stem)
        if version > after:
            actions = [json.loads(line) for line in commit.read_text().splitlines() if line]
            infos += [(version, a["commitInfo"]) for a in actions if "commitInfo" in a]
    return infos


def pending_txn(sink: DeltaSink, checkpoint_id: int) -> str:
    (txn,) = [
        s.txn_id
        for s in sink.journal.transactions(sink.sink_id)
        if s.checkpoint_id == checkpoint_id
    ]
    return txn


def test_a_publish_rewrites_no_row_and_keeps_each_files_statistics(spark, tmp_path):
    table = tmp_path / "orders"
    sink = open_sink(spark, table)
    write(spark, sink, range(100))
    checkpoint = sink.prepare_commit()
    before = live_files(table)
    version = DeltaTable(str(table)).version()

    sink.notify_checkpoint_complete(checkpoint)

    after = live_files(table)
    moved = {Path(p).name: p for p in after}
    assert set(moved) == {Path(p).name for p in before}  # the same files, in new folders
    for old_path, old in before.items():
        path = moved[Path(old_path).name]
        file = after[path]
        # In the committed partition's folder, as the log says; not one byte written again.
        assert path.startswith(f"{VISIBLE}=true/{PENDING}=__HIVE_DEFAULT_PARTITION__/")
        assert (table / path).stat().st_ino == (table / old_path).stat().st_ino
        assert file[f"partition.{VISIBLE}"] is True and file[f"partition.{PENDING}"] is None
        for stat in ("num_records", "min.order_id", "max.order_id", "null_count.order_id"):
            assert file[stat] == old[stat], (path, stat)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where(f"version > {version}")
    (entry,) = history.collect()  # one Delta commit, no MERGE
    assert entry.operation == "WRITE" and '"lakesink": "commit"' in entry.userMetadata
    # Data skipping still works on the carried statistics: one file holds order 7.
    assert len(committed(spark, str(table)).where("order_id = 7").inputFiles()) == 1
    assert visible_ids(spark, table) == Counter(range(100))
    # Time travel before the publish shows the checkpoint pending, as with the MERGE.
    assert visible_ids(spark, table, version) == Counter()
    report = audit_table(spark, str(table))  # the audit lines the publish up with the journal
    assert report.passed, [str(c) for c in report.checks]
    assert [a.commit_version for a in report.timeline] == [version + 1]
    sink.close()


def test_the_arrow_reader_sees_a_checkpoint_published_after_a_log_checkpoint_once(spark, tmp_path):
    table = tmp_path / "orders"
    sink = open_sink(spark, table)
    for n in range(3):
        write(spark, sink, range(n * 10, n * 10 + 10))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    write(spark, sink, range(30, 40))
    checkpoint = sink.prepare_commit()
    txn = pending_txn(sink, checkpoint)
    # Its pending add goes into a log checkpoint, its move into a JSON commit after it: a
    # reader that prunes by partition before reconciling the two would see the old add.
    DeltaTable(str(table)).create_checkpoint()
    sink.notify_checkpoint_complete(checkpoint)
    write(spark, sink, [1000])
    sink.prepare_commit()  # pending: the Arrow reader must not show it

    assert Counter(arrow(str(table)).column("order_id").to_pylist()) == Counter(range(40))
    reader = DeltaTable(str(table))
    assert reader.file_uris(file_pruning_predicate=[(PENDING, "=", txn)]) == []
    assert len(reader.file_uris(file_pruning_predicate=[(VISIBLE, "=", True)])) == 8
    sink.close()


def test_publishes_keep_the_logs_checksums_true_and_checkpoint_at_the_interval(spark, tmp_path):
    """Each publish carries the checksum (``.crc``) of the version before it, its list of
    files updated, which Spark's next write would otherwise rebuild with a state
    reconstruction, and one that lands on a multiple of the checkpoint interval writes the
    log checkpoint Spark would have. So does each append, lakesink's other delta-rs commit
    (the files Spark wrote, and a Delta ``txn`` action).

    How the test knows the checksums are true: Delta itself checks each one against a full
    state reconstruction before its next write (``incremental.commit.verify``: a Spark
    commit after each checkpoint) and fails the write on a mismatch
    (``checksum.mismatch.fatal``, its default); and each commit's list of files and of txn
    versions is the one Delta's state reconstruction of that version finds
    (``Snapshot.allFiles``, ``Snapshot.setTransactions``), field for field."""
    table = tmp_path / "orders"
    log_folder = table / "_delta_log"
    verify = "spark.databricks.delta.incremental.commit.verify"
    spark.conf.set(verify, "true")
    try:
        sink = open_sink(spark, table)
        # Each checkpoint is an append and a publish (both delta-rs), then a Spark commit
        # that verifies the checksum before it: versions 1, 2, 3; 4, 5, 6; ...
        appends, publishes, log_checkpoints = [], [], []
        for n in range(6):
            write(spark, sink, range(n * 10, n * 10 + 10))
            appended = DeltaTable(str(table)).version()
            checkpoint = sink.prepare_commit()
            appends.append((appended, checkpoint))
            sink.notify_checkpoint_complete(checkpoint)
            publishes.append((DeltaTable(str(table)).version(), checkpoint))
            spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('round' = '{n}')")
            last = log_folder / "_last_checkpoint"
            log_checkpoints.append(
                json.loads(last.read_text())["version"] if last.exists() else None
            )
    finally:
        spark.conf.unset(verify)

    assert [v for v, _ in appends] == [1, 4, 7, 10, 13, 16]
    assert [v for v, _ in publishes] == [2, 5, 8, 11, 14, 17]
    apps = {
        "append": writer_app_id("orders", "0"),
        "publish": writer_app_id("orders", "0", commit=True),
    }
    for what, commits in (("append", appends), ("publish", publishes)):
        for version, checkpoint in commits:
            carried = json.loads((log_folder / f"{version:020d}.crc").read_text())
            before = json.loads((log_folder / f"{version - 1:020d}.crc").read_text())
            listed = {f["path"]: _file_facts(f) for f in carried.pop("allFiles")}
            assert listed == files_as_delta_finds(spark, table, version), (what, version)
            recorded = _txn_versions(carried.pop("setTransactions"))
            assert recorded == txns_as_delta_finds(spark, table, version), (what, version)
            # The commit's own txn action, over the ones before it.
            expected = {**_txn_versions(before.get("setTransactions", [])), apps[what]: checkpoint}
            assert recorded == expected, (what, version)
            # What a commit changes and a checksum counts: its files and bytes (an append
            # adds files, a publish moves them); the rest is the checksum before it.
            for key in ("txnId", "allFiles", "setTransactions"):
                before.pop(key, None)
            if what == "publish":
                assert carried == before, (what, version)
            else:
                assert carried["numFiles"] > before["numFiles"], (what, version)
            # The Spark commit after each checkpoint derived its own checksum from these.
            assert (log_folder / f"{version + 1:020d}.crc").is_file(), (what, version)
    assert (log_folder / f"{10:020d}.checkpoint.parquet").is_file()
    # The append at version 10 wrote it.
    assert log_checkpoints == [None, None, None, 10, 10, 10]
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
    assert detail.numFiles == len(live_files(table))
    # A reader starting from that checkpoint sees each committed row once.
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()
    assert visible_ids(spark, table) == Counter(range(60))
    assert Counter(arrow(str(table)).column("order_id").to_pylist()) == Counter(range(60))
    sink.close()


def _txn_versions(transactions: list[dict]) -> dict[str, int]:
    return {t["appId"]: t["version"] for t in transactions}


def _snapshot(spark, table: Path, version: int):
    delta_log = spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(
        spark._jsparkSession, str(table)
    )
    defaults = [getattr(delta_log, f"getSnapshotAt$default${n}")() for n in (2, 3, 4)]
    return delta_log.getSnapshotAt(version, *defaults)


def txns_as_delta_finds(spark, table: Path, version: int) -> dict[str, int]:
    """Each app id's txn version at ``version``, by a state reconstruction of Spark's Delta."""
    found = _snapshot(spark, table, version).setTransactions()
    return {found.apply(i).appId(): found.apply(i).version() for i in range(found.length())}


def files_as_delta_finds(spark, table: Path, version: int) -> dict[str, tuple]:
    """The live files of ``version`` by a state reconstruction of Spark's Delta (not from a
    checksum): per path, its partition values, size, modification time and statistics."""
    snapshot = _snapshot(spark, table, version)
    files = [json.loads(f) for f in snapshot.allFiles().toJSON().collectAsList()]
    return {f["path"]: _file_facts(f) for f in files}


def _file_facts(file: dict) -> tuple:
    values = {k: v for k, v in file["partitionValues"].items() if v is not None}
    return values, file["size"], file["modificationTime"], json.loads(file["stats"])


def test_publishes_of_one_transaction_racing_make_it_visible_once(
    spark, tmp_path, monkeypatch, caplog
):
    table = tmp_path / "orders"
    sink = open_sink(spark, table)
    write(spark, sink, range(50), parts=4)
    checkpoint = sink.prepare_commit()
    txn = pending_txn(sink, checkpoint)
    metadata = json.loads(
        commit_metadata("commit", sink.sink_id, checkpoint_id=checkpoint, txn_id=txn)
    )
    before = DeltaTable(str(table)).version()
    racers, results = 3, []
    read = publish_module.pending_files
    all_read = threading.Barrier(racers, timeout=120)

    def read_then_meet(delta_table, txn_id):
        files = read(delta_table, txn_id)
        if files:  # every racer has found the partition pending before any commits
            all_read.wait()
        return files

    monkeypatch.setattr(publish_module, "pending_files", read_then_meet)
    threads = [
        threading.Thread(target=lambda: results.append(publish(str(table), txn, metadata)))
        for _ in range(racers)
    ]
    with caplog.at_level(logging.INFO, logger="lakesink.delta.publish"):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    # Every racer got past the check with the files pending; one commit landed, the others
    # conflicted (it removed the files they would move), read again and found nothing.
    published = [
        version
        for version, info in commit_infos(table, after=before)
        if txn in info.get("userMetadata", "")
    ]
    assert len(published) == 1, published
    assert caplog.text.count(f"publishing transaction {txn} of {table} conflicted") == racers - 1
    assert sorted(results) == [0] * (racers - 1) + [50]  # each counts what its commit showed
    assert visible_ids(spark, table) == Counter(range(50))  # each row visible once
    last = DeltaTable(str(table)).version()
    sink.notify_checkpoint_complete(checkpoint)  # the sink's own commit finds nothing left
    assert DeltaTable(str(table)).version() == last
    assert visible_ids(spark, table) == Counter(range(50))
    sink.close()


def test_an_optimize_of_the_pending_partition_between_read_and_commit_duplicates_nothing(
    spark, tmp_path, monkeypatch, caplog
):
    """Scenario 2: an OPTIMIZE (whose removes change no data, so delta-rs' conflict check
    lets the publish pass) lands between the publish's read and its commit; the publish
    finds it in the log and publishes its file in place of the copies it made visible."""
    table = tmp_path / "orders"
    sink = open_sink(spark, table)
    write(spark, sink, range(40), parts=4)
    checkpoint = sink.prepare_commit()
    txn = pending_txn(sink, checkpoint)
    first = DeltaTable(str(table)).version()
    read = publish_module.pending_files
    raced = []

    def read_then_optimize(delta_table, txn_id):
        files = read(delta_table, txn_id)
        if not raced:  # a real OPTIMIZE of the partition, after the publish read it
            raced.append(spark.sql(f"OPTIMIZE delta.`{table}` WHERE {PENDING} = '{txn}'").first())
        return files

    monkeypatch.setattr(publish_module, "pending_files", read_then_optimize)
    with caplog.at_level(logging.WARNING, logger="lakesink.delta.publish"):
        sink.notify_checkpoint_complete(checkpoint)

    assert raced and raced[0].metrics.numFilesRemoved == 4
    assert "rewrote 4 file(s)" in caplog.text
    last = DeltaTable(str(table)).version()
    # Every version a reader could have read shows the checkpoint not at all, or once.
    for version in range(first, last + 1):
        assert visible_ids(spark, table, version) in (Counter(), Counter(range(40))), version
    assert visible_ids(spark, table) == Counter(range(40))
    assert len(live_files(table)) == 1  # the OPTIMIZE's file, published; the copies gone
    assert all(f[f"partition.{VISIBLE}"] for f in live_files(table).values())
    sink.close()


def test_a_rewrite_from_before_the_publish_cannot_mask_published_rows(spark, tmp_path):
    """Scenario 3 of lakesink 0.2's re-add: a rewrite that read the pending partition before
    the publish and committed after it removed the published files and kept their rows
    masked (the vacuum published them again). The publish now removes the pending files
    itself, so such a rewrite conflicts and lands nothing (here by delta-rs, from its
    older snapshot)."""
    table = tmp_path / "orders"
    sink = open_sink(spark, table)
    write(spark, sink, range(30), parts=3)
    checkpoint = sink.prepare_commit()
    txn = pending_txn(sink, checkpoint)
    stale = DeltaTable(str(table))  # the rewrite's snapshot, taken before the publish
    old = [f for f in live_files(table).values() if f[f"partition.{PENDING}"] == txn]
    merged = pa.concat_tables([pq.read_table(table / f["path"]) for f in old])
    new_path = f"{VISIBLE}=false/{PENDING}={txn}/part-rewrite-{uuid.uuid4().hex}.parquet"
    pq.write_table(merged, table / new_path)

    sink.notify_checkpoint_complete(checkpoint)
    assert visible_ids(spark, table) == Counter(range(30))

    pending = {VISIBLE: "false", PENDING: txn}
    with pytest.raises(DeltaCommitFailedError, match=r"(?i)conflict|concurrent"):
        stale.create_write_transaction(
            [
                AddAction(
                    new_path,
                    (table / new_path).stat().st_size,
                    pending,
                    0,
                    False,
                    f'{{"numRecords": {merged.num_rows}}}',
                ),
                *(
                    RemoveAction(
                        f["path"], False, 0, size=f["size_bytes"], partition_values=pending
                    )
                    for f in old
                ),
            ],
            mode="append",
            schema=stale.schema(),
            partition_by=stale.metadata().partition_columns,
        )
    assert visible_ids(spark, table) == Counter(range(30))  # each row once, none masked
    assert vacuum(spark, str(table)).republished_txn_ids == ()
    sink.close()


# Each writer feature delta-rs cannot write, and the table property that brings it in.
WRITER_FEATURES = {
    "rowTracking": ("delta.enableRowTracking", "true"),
    "inCommitTimestamp": ("delta.enableInCommitTimestamps", "true"),
    "domainMetadata": ("delta.feature.domainMetadata", "supported"),
}


@pytest.mark.parametrize("feature", list(WRITER_FEATURES))
def test_a_table_given_a_feature_delta_rs_cannot_write_is_refused_then_commits_by_merge(
    spark, tmp_path, feature
):
    """A table committed by metadata that gains, by ``ALTER TABLE``, a feature delta-rs
    cannot write is refused when opened, in one line naming the feature, its property and
    the switch to the MERGE; switched, it is written on, each row once. (Made so by the
    session's defaults, it is refused before anything is made: tests/test_table_features.)"""
    table = tmp_path / "orders"
    with open_sink(spark, table) as sink:
        write(spark, sink, range(0, 10))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    name, value = WRITER_FEATURES[feature]
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{name}' = '{value}')")
    switch = re.escape(f"SET TBLPROPERTIES ('{COMMIT_MODE_PROPERTY}' = 'merge')")
    with pytest.raises(ConfigurationError, match=rf"uses .*\b{feature}\b.*{switch}") as refused:
        open_sink(spark, table)
    assert "\n" not in str(refused.value)
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{COMMIT_MODE_PROPERTY}' = 'merge')")
    with DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_switched") as sink:
        write(spark, sink, range(10, 20))
        sink.notify_checkpoint_complete(sink.prepare_commit())
    assert feature in DeltaTable(str(table)).protocol().writer_features
    assert visible_ids(spark, table) == Counter(range(20))


@pytest.mark.parametrize(
    ("column", "kind", "existing"),
    [
        ("at", "TIMESTAMP", False),
        # a table made with the MERGE, switched to the metadata commit, opened
        ("at", "TIMESTAMP", True),
        ("price", "DECIMAL(10,2)", False),
        ("ratio", "DOUBLE", False),
        ("ratio", "FLOAT", False),
        ("blob", "BINARY", False),
    ],
    ids=["timestamp", "timestamp-existing-table", "decimal", "double", "float", "binary"],
)
def test_a_partition_column_whose_values_delta_rs_cannot_copy_exactly_is_refused(
    spark, tmp_path, column, kind, existing
):
    table = tmp_path / "events"
    schema = f"event_id BIGINT, {column} {kind}"
    options = {"schema": schema, "view_name": "v_events", "partition_by": (column,)}
    if existing:
        DeltaSink.open(spark, str(table), **options).close()  # it commits by MERGE
        del options["partition_by"]  # read from the table: check_publishable refuses it
        # Opened for the other mode, it refuses first, naming the switch.
        mode = re.escape(COMMIT_MODE_PROPERTY)
        switch = rf"ALTER TABLE .* SET TBLPROPERTIES \('{mode}' = 'metadata'\)"
        with pytest.raises(
            ConfigurationError, match=rf"commits by merge \({mode}\), not by metadata.*{switch}"
        ):
            DeltaSink.open(spark, str(table), commit="metadata", **options)
        spark.sql(
            f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{COMMIT_MODE_PROPERTY}' = 'metadata')"
        )
    refusal = rf"partitioned by {column} \({re.escape(kind.lower())}"
    with pytest.raises(ConfigurationError, match=refusal):
        DeltaSink.open(spark, str(table), commit="metadata", **options)
    assert table.exists() is existing  # a new table is refused before it is made


def test_an_unknown_commit_mode_is_refused(spark, tmp_path):
    with pytest.raises(ConfigurationError, match=r"unknown commit mode 'fast'"):
        DeltaSink.open(spark, str(tmp_path / "t2"), schema=SCHEMA, commit="fast")


def test_an_operator_publishes_a_pending_checkpoint_by_metadata(spark, tmp_path, capsys):
    from lakesink import Table
    from lakesink.cli import main

    table = tmp_path / "orders"
    sink = open_sink(spark, table, view_name="v_operator")  # a table committed by metadata
    for first in (0, 10):
        write(spark, sink, range(first, first + 10))
        sink.prepare_commit()  # checkpoints 1 and 2 pre-committed, not published
    sink.close()  # the writer stops: both stay pending for an operator
    before = live_files(table)
    version = DeltaTable(str(table)).version()

    done = Table(str(table)).commit(spark, 1, mode="metadata")
    assert main(["commit", str(table), "--checkpoint", "2", "--mode", "metadata", "--yes"]) == 0
    assert "committed checkpoint 2: 1 transaction(s)" in capsys.readouterr().out

    assert [t.checkpoint_id for t in done] == [1]
    # The same files, moved into the committed partition: no row rewritten.
    assert {Path(p).name for p in live_files(table)} == {Path(p).name for p in before}
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where(f"version > {version}")
    assert sorted(r.operation for r in history.collect()) == ["WRITE", "WRITE"]  # no MERGE
    assert visible_ids(spark, table) == Counter(range(20))
    with pytest.raises(ConfigurationError, match=r"unknown commit mode 'fast'"):
        Table(str(table)).commit(spark, 3, mode="fast")
