"""The Delta sink on a real Spark session with real Delta tables on disk."""

from __future__ import annotations

import json
import re
import shutil
import threading
from collections import Counter
from contextlib import nullcontext
from pathlib import Path

import pytest
from deltalake import DeltaTable
from jvm_log import jvm_log
from pyspark.sql import functions as F
from s3_fixture import BUCKET, s3_uri
from servers.s3 import put_object

from lakesink import committed
from lakesink.core import TransactionTimeout, TxnState, step_hook
from lakesink.delta.sink import DeltaSink
from lakesink.errors import (
    AlreadyRunningError,
    CheckpointOrderError,
    CommitRoundError,
    ConfigurationError,
    FormatVersionError,
    ReservedColumnError,
    SchemaMismatchError,
    TableNotFoundError,
    UnknownCheckpointError,
)
from lakesink.spark.settings import USER_METADATA_CONF, WRITE_SETTINGS, session_conf
from lakesink.tables.format import CHECKPOINT_ID, PENDING, TABLE_FORMAT, VISIBLE, writer_app_id
from lakesink.tables.history import commit_actions, read_history
from lakesink.tables.published import current_version

SCHEMA = "order_id BIGINT, item STRING"


class Crash(BaseException):
    """A simulated process death: not an Exception, so no retry loop swallows it."""


class SettableClock:
    def __init__(self) -> None:
        self.now_ms = 1_700_000_000_000

    def millis(self) -> int:
        return self.now_ms


def rows(spark, ids):
    return spark.createDataFrame([(i, f"item-{i}") for i in ids], SCHEMA)


def visible_ids(spark, path) -> list[int]:
    return sorted(r.order_id for r in committed(spark, str(path)).collect())


def raw_count(spark, path) -> int:
    return spark.read.format("delta").load(str(path)).count()


def states(sink: DeltaSink) -> dict[int, set[str]]:
    found: dict[int, set[str]] = {}
    for status in sink.journal.transactions(sink.sink_id):
        found.setdefault(status.checkpoint_id, set()).add(status.state.value)
    return found


def delta_version(spark, path) -> int:
    return spark.sql(f"DESCRIBE HISTORY delta.`{path}` LIMIT 1").first().version


@pytest.fixture
def table(tmp_path) -> Path:
    return tmp_path / "orders"


def open_sink(spark, table, *, hook=None, **options) -> DeltaSink:
    """Open a sink on ``table``; ``hook`` sees its protocol steps (fault injection)."""
    options.setdefault("schema", SCHEMA)
    options.setdefault("view_name", f"v_{table.parent.name}")
    with step_hook(hook) if hook else nullcontext():
        return DeltaSink.open(spark, str(table), **options)


def test_rows_are_visible_only_after_the_commit(spark, table, commit):
    sink = open_sink(spark, table, commit=commit)
    sink.write(rows(spark, [1, 2, 3]))
    checkpoint = sink.prepare_commit()

    assert raw_count(spark, table) == 3
    assert visible_ids(spark, table) == []
    assert spark.table(sink.view_name).count() == 0

    sink.notify_checkpoint_complete(checkpoint)

    assert visible_ids(spark, table) == [1, 2, 3]
    assert sorted(r.order_id for r in spark.table(sink.view_name).collect()) == [1, 2, 3]
    assert spark.table(sink.view_name).columns == ["order_id", "item"]
    assert states(sink)[checkpoint] == {"committed"}
    sink.close()


def test_notify_after_several_checkpoints_commits_exactly_those(spark, table):
    sink = open_sink(spark, table)
    for batch in ([1], [2]):
        sink.write(rows(spark, batch))
        sink.prepare_commit()
    sink.write(rows(spark, [3]))
    assert sink.prepare_commit() == 3
    third = sink.state.pending_commit[-1].handle
    assert [r.order_id for r in sink.transaction_rows(third).collect()] == [3]

    sink.notify_checkpoint_complete(2)

    assert visible_ids(spark, table) == [1, 2]
    # checkpoint 4 is open but has written nothing, so the journal has no record of it yet
    assert states(sink) == {1: {"committed"}, 2: {"committed"}, 3: {"pre_committed"}}
    sink.close()


def test_fail_before_notify_then_restore_commits_once(spark, table):
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1]))
    sink.prepare_commit()
    sink.write(rows(spark, [2]))
    sink.prepare_commit()
    sink.write(rows(spark, [3]))  # open, never pre-committed
    del sink  # the process dies: no notification, no close

    restored = open_sink(spark, table)

    assert visible_ids(spark, table) == [1, 2]
    assert states(restored)[3] == {"aborted"}
    assert restored.current_checkpoint_id == 4  # 3 is never reused
    restored.close()
    again = open_sink(spark, table)  # recovering twice changes nothing
    assert visible_ids(spark, table) == [1, 2]
    again.close()


def test_commit_failure_then_recovery_after_timeout_is_ignored(spark, table):
    clock = SettableClock()
    options = dict(
        clock=clock,
        timeout=TransactionTimeout(timeout_ms=60_000, ignore_failures_after_timeout=True),
    )

    def fail_flip(step, checkpoint_id):
        if step == "before_publish":
            raise RuntimeError("MERGE unavailable")

    sink = open_sink(spark, table, hook=fail_flip, **options)
    sink.write(rows(spark, [1]))
    checkpoint = sink.prepare_commit()
    with pytest.raises(CommitRoundError, match="MERGE unavailable"):
        sink.notify_checkpoint_complete(checkpoint)
    assert visible_ids(spark, table) == []

    with pytest.raises(CommitRoundError, match="MERGE unavailable"):  # within the timeout: raised
        open_sink(spark, table, hook=fail_flip, **options)

    clock.now_ms += 60_001
    recovered = open_sink(spark, table, hook=fail_flip, **options)  # past it: logged
    assert visible_ids(spark, table) == []
    assert states(recovered)[checkpoint] == {"pre_committed"}
    recovered.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash_at, precommitted",
    [
        ("before_append", False),
        ("after_append", False),
        ("after_invoke", False),
        ("before_pre_commit_record", False),
        ("after_pre_commit", True),
        ("before_publish", True),
        ("after_publish", True),
    ],
)
def test_crash_at_every_step_then_recovery_loses_and_duplicates_nothing(
    spark, table, crash_at, precommitted, commit
):
    def crash(step, checkpoint_id):
        if step == crash_at and checkpoint_id == 2:
            raise Crash(step)

    sink = open_sink(spark, table, hook=crash, commit=commit)
    sink.write(rows(spark, [1, 2]))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    with pytest.raises(Crash):
        sink.write(rows(spark, [3, 4]))
        if crash_at == "after_invoke":
            raise Crash(crash_at)
        checkpoint = sink.prepare_commit()
        if crash_at == "after_pre_commit":
            raise Crash(crash_at)
        sink.notify_checkpoint_complete(checkpoint)
    del sink

    restored = open_sink(spark, table, commit=commit)
    journal = states(restored)
    # How the test knows nothing is lost: a checkpoint that recovery did not commit was
    # aborted, and its input is replayed, as a source restored to the last checkpoint would.
    if precommitted:
        assert journal[2] == {"committed"}
    else:
        assert journal[2] == {"aborted"}
        restored.write(rows(spark, [3, 4]))
        restored.notify_checkpoint_complete(restored.prepare_commit())

    ids = visible_ids(spark, table)
    assert Counter(ids) == Counter([1, 2, 3, 4])
    restored.close()


def test_an_append_whose_answer_was_lost_is_found_in_the_log_and_not_sent_again(spark, table):
    failures = []

    def lose_the_reply(step, checkpoint_id):
        if step == "after_append" and not failures:
            failures.append(step)
            raise OSError("connection reset after the commit")

    sink = open_sink(spark, table, hook=lose_the_reply)
    sink.write(rows(spark, [1, 2, 3]))

    assert failures == ["after_append"]
    assert raw_count(spark, table) == 3  # its commit was found: not sent a second time
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`")
    appends = history.where("operation = 'WRITE'").count()
    assert appends == 1
    sink.notify_checkpoint_complete(sink.prepare_commit())
    assert visible_ids(spark, table) == [1, 2, 3]
    assert states(sink)[1] == {"committed"}
    sink.close()


def test_an_append_that_failed_before_its_commit_is_sent_again_once(spark, table):
    failures = []

    def fail_first(step, checkpoint_id):
        if step == "before_append" and not failures:
            failures.append(step)
            raise OSError("connection refused")

    sink = open_sink(spark, table, hook=fail_first)
    sink.write(rows(spark, [1, 2, 3]))
    assert failures == ["before_append"] and raw_count(spark, table) == 3
    sink.close()


def appends(table) -> list[dict]:
    """The lakesink userMetadata of every append, in commit order, from the Delta log."""
    found = []
    for log_file in sorted((table / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in log_file.read_text().splitlines()]
        metadata = next(
            (a["commitInfo"].get("userMetadata") for a in actions if "commitInfo" in a), None
        )
        if not metadata or json.loads(metadata).get("lakesink") != "write":
            continue
        # Each append records its writer's checkpoint as a Delta txn action, any tool's to
        # read; it is found again by its userMetadata (its nonce aside), not by that action.
        written = json.loads(metadata)
        txns = [a["txn"] for a in actions if "txn" in a]
        wanted = {
            "appId": f"lakesink/orders/{written['writer_id']}",
            "version": written["checkpoint_id"],
        }
        if [{k: t[k] for k in wanted} for t in txns] != [wanted]:
            raise AssertionError(f"the append {log_file.name} records {txns}, not {wanted}")
        found.append(written)
    return found


def test_each_append_names_its_writer_transaction_and_step_in_the_log(spark, table):
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1]))
    sink.write(rows(spark, [2]))
    sink.prepare_commit()
    sink.write(rows(spark, [3]))
    sink.close()
    restarted = open_sink(spark, table)
    restarted.write(rows(spark, [4]))
    other = open_sink(spark, table, writer_id="w2")
    other.write(rows(spark, [5]))

    found = [(a["writer_id"], a["checkpoint_id"], a["step"], a["txn_id"]) for a in appends(table)]
    assert [f[:3] for f in found[:4]] == [("0", 1, 1), ("0", 1, 2), ("0", 2, 1), ("0", 3, 1)]
    assert (found[4][0], found[4][2]) == ("w2", 1)
    assert found[0][3] == found[1][3]  # one transaction, two steps
    assert len({f[3] for f in found}) == 4  # each other append a transaction of its own
    restarted.close()
    other.close()


def test_a_replayed_checkpoint_id_writes_anew_and_commits_only_the_replay(spark, table):
    """A driver replays checkpoint 2 after a crash (as Spark replays a micro-batch): its
    appends are new ones, never skipped as repeats of the aborted attempt's, and the commit
    publishes the replay alone (delta-io/connectors#467 lost data with per-checkpoint
    versions)."""
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1]))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    completed = sink.state  # what a driver records for checkpoint 1
    sink.write(rows(spark, [20, 21]))  # checkpoint 2, first attempt: pre-committed, then lost
    sink.prepare_commit()
    sink._release()  # the process dies

    replay = DeltaSink(spark, str(table), view_name="v_replay")
    replay.initialize_state(completed)  # the driver's next checkpoint is 2 again
    assert replay.current_checkpoint_id == 2
    replay.write(rows(spark, [20, 21, 22]))
    replay.notify_checkpoint_complete(replay.prepare_commit())

    assert Counter(visible_ids(spark, table)) == Counter([1, 20, 21, 22])
    attempts = {
        s.txn_id: s.state for s in replay.journal.transactions("orders") if s.checkpoint_id == 2
    }
    assert sorted(attempts.values()) == [TxnState.ABORTED, TxnState.COMMITTED]
    # Checkpoint 1, 2 and 2 again: all written, none skipped as another's repeat.
    assert [(a["checkpoint_id"], a["step"]) for a in appends(table)] == [(1, 1), (2, 1), (2, 1)]
    replay.close()


def test_two_writers_into_one_checkpoint(spark, table, commit):
    a = open_sink(spark, table, writer_id="a", commit=commit)
    b = open_sink(spark, table, writer_id="b", commit=commit)
    assert a.current_checkpoint_id == b.current_checkpoint_id == 1

    a.write(rows(spark, [1, 2]))
    b.write(rows(spark, [3]))
    a.notify_checkpoint_complete(a.prepare_commit())
    assert visible_ids(spark, table) == [1, 2]  # b's rows wait for b's commit
    b.notify_checkpoint_complete(b.prepare_commit())

    assert visible_ids(spark, table) == [1, 2, 3]
    a.close()
    b.close()


def test_commit_while_another_writer_keeps_appending(spark, table, commit):
    """An append of another writer lands while a commit runs (the commit waits at its
    start until one has), and neither loses a row."""
    commit_began, appended_during = threading.Event(), threading.Event()

    def hold_the_commit(step: str, checkpoint_id: int) -> None:
        if step == "before_publish":
            commit_began.set()
            assert appended_during.wait(timeout=300), "no append came during the commit"

    committer = open_sink(spark, table, writer_id="committer", commit=commit, hook=hold_the_commit)
    appender = open_sink(spark, table, writer_id="appender", commit=commit)
    committer.write(rows(spark, range(0, 100)))
    checkpoint = committer.prepare_commit()
    stop = threading.Event()
    appended = []

    def keep_appending():
        assert commit_began.wait(timeout=300)
        batch = 1000
        while not stop.is_set():
            appender.write(rows(spark, range(batch, batch + 10)))
            appended.extend(range(batch, batch + 10))
            appended_during.set()
            batch += 10

    thread = threading.Thread(target=keep_appending)
    thread.start()
    try:
        committer.notify_checkpoint_complete(checkpoint)
    finally:
        stop.set()
        commit_began.set()  # a commit that failed before its start must not hang the thread
        thread.join()

    assert appended_during.is_set()
    assert visible_ids(spark, table) == list(range(100))
    appender.notify_checkpoint_complete(appender.prepare_commit())
    assert visible_ids(spark, table) == sorted([*range(100), *appended])
    committer.close()
    appender.close()


def test_a_reader_never_sees_pending_rows_even_during_commits(spark, table, commit):
    sink = open_sink(spark, table, commit=commit)
    ghost = open_sink(spark, table, writer_id="ghost", commit=commit)
    ghost.write(rows(spark, [-1]))
    ghost.prepare_commit()  # pre-committed, never notified: its row must never show
    ghost.write(rows(spark, [-2]))  # open, never pre-committed
    batches = [list(range(n * 100, n * 100 + 100)) for n in range(4)]
    stop = threading.Event()
    seen: list[frozenset[int]] = []

    def read_continuously():
        while not stop.is_set():
            seen.append(frozenset(r.order_id for r in spark.table(sink.view_name).collect()))

    def let_reader_read() -> None:
        # Two more reads than now: at least one began after this moment.
        target = len(seen) + 2
        while len(seen) < target and reader.is_alive():
            stop.wait(0.01)

    reader = threading.Thread(target=read_continuously)
    reader.start()
    try:
        for batch in batches:
            sink.write(rows(spark, batch))
            checkpoint = sink.prepare_commit()
            let_reader_read()  # between pre-commit and commit
            sink.notify_checkpoint_complete(checkpoint)
            let_reader_read()
    finally:
        stop.set()
        reader.join()

    # Every snapshot a reader saw is exactly the first k committed batches, nothing else,
    # and it saw each of them.
    allowed = [frozenset().union(*map(frozenset, batches[:k])) for k in range(len(batches) + 1)]
    assert all(snapshot in allowed for snapshot in seen), "a reader saw a partial or pending row"
    assert set(allowed[1:]) <= set(seen)
    assert visible_ids(spark, table) == sorted(allowed[-1])
    sink.close()
    ghost.close()


def test_commit_rewrites_only_its_own_transactions_files_in_a_wide_table(spark, table):
    wide = ", ".join(f"c{i} INT" for i in range(40))
    sink = DeltaSink.open(spark, str(table), schema=wide, view_name="v_wide")
    other = DeltaSink.open(spark, str(table), schema=wide, view_name="v_wide", writer_id="w2")
    for writer in (sink, other):
        writer.write(spark.createDataFrame([tuple(range(40))] * 5, wide).repartition(2))
        writer.prepare_commit()

    sink.notify_checkpoint_complete(1)

    files = spark.read.format("delta").load(str(table)).inputFiles()
    partitions = {f.rsplit("/", 1)[0] for f in files}
    # The committed rows moved to the shared committed partition; the other writer's stay
    # in their transaction's own pending one.
    pending = {s.txn_id for s in other.journal.transactions(other.sink_id) if s.writer_id == "w2"}
    assert sorted(p.split(str(table))[-1] for p in partitions) == sorted(
        [
            f"/{VISIBLE}=true/{PENDING}=__HIVE_DEFAULT_PARTITION__",
            f"/{VISIBLE}=false/{PENDING}={pending.pop()}",
        ]
    )
    merge = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where("operation = 'MERGE'").first()
    metrics = merge.operationMetrics
    # The MERGE inserts only, its source pruned to the partition of the committed
    # transaction: it reads those 5 rows, rewrites no file of the table, and the other
    # writer's files of the same checkpoint were neither read for rewriting nor copied.
    assert int(metrics["numSourceRows"]) == 5
    assert int(metrics["numTargetRowsInserted"]) == 5
    assert int(metrics["numTargetRowsUpdated"]) == 0
    assert int(metrics["numTargetRowsCopied"]) == 0
    assert int(metrics["numTargetFilesRemoved"]) == 0
    # Then its release removes the committed transaction's pending files, and no other's.
    (mine,) = {s.txn_id for s in sink.journal.transactions(sink.sink_id) if s.writer_id == "0"}
    (release,) = [e for e in read_history(str(table)) if e.lakesink == "release"]
    assert release.txn_ids == (mine,)
    removed = [
        a["remove"]["partitionValues"][PENDING]
        for a in commit_actions(str(table), release.version)
        if "remove" in a
    ]
    assert removed and set(removed) == {mine}
    assert sorted(r.c0 for r in committed(spark, str(table)).collect()) == [0] * 5
    sink.close()
    other.close()


def test_the_committed_view_skips_masked_files_by_their_partition(spark, table):
    sink = open_sink(spark, table)
    sink.write(rows(spark, range(3)))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(rows(spark, range(3, 6)))
    sink.prepare_commit()  # pending: its file is masked

    # The view by name reads the sink table: the flag is a partition column, so Delta
    # prunes masked files before reading any.
    view = spark.table(f"v_{table.parent.name}")
    plan = view._jdf.queryExecution().executedPlan().toString()
    pruned = re.search(r"PartitionFilters: \[([^\]]*)\]", plan)
    assert pruned and VISIBLE in pruned.group(1), plan
    # lakesink.committed reads the published table (up to date), which holds the committed
    # files only: no filter at all.
    assert current_version(str(table)) is not None
    read = committed(spark, str(table))
    assert "PartitionFilters: []" in read._jdf.queryExecution().executedPlan().toString()
    for frame in (view, read):
        assert all(f"{VISIBLE}=true/" in f for f in frame.inputFiles())
        assert sorted(r.order_id for r in frame.collect()) == [0, 1, 2]
    sink.close()


def test_a_table_partitioned_by_user_columns_keeps_them_through_the_commit(spark, table):
    schema = "order_id BIGINT, region STRING"
    sink = DeltaSink.open(
        spark, str(table), schema=schema, view_name="v_regions", partition_by=("region",)
    )
    sink.write(spark.createDataFrame([(1, "eu"), (2, "us"), (3, "eu")], schema))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()

    detail = spark.sql(f"DESCRIBE DETAIL delta.`{table}`").first()
    assert list(detail.partitionColumns) == [VISIBLE, PENDING, "region"]
    eu = committed(spark, str(table)).where("region = 'eu'")
    assert sorted(r.order_id for r in eu.collect()) == [1, 3]
    assert all("/region=eu/" in f for f in eu.inputFiles())
    with pytest.raises(ConfigurationError, match=r"partitioned by region, not no user column"):
        DeltaSink.open(spark, str(table), schema=schema, view_name="v_regions", partition_by=())
    with pytest.raises(ConfigurationError, match=r"column\(s\) regoin the schema lacks"):
        DeltaSink.open(
            spark, str(table.parent / "t2"), schema=schema, view_name="v2", partition_by=["regoin"]
        )


def test_lakesinks_spark_jobs_are_labelled_with_sink_checkpoint_and_phase(spark, table):
    from lakesink.ops.vacuum import vacuum
    from lakesink.spark.settings import job_tag

    context = spark.sparkContext
    context.setJobDescription("the user's own label")
    tracker, store = context._jsc.sc().statusTracker(), context._jsc.sc().statusStore()
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1, 2]))
    checkpoint = sink.prepare_commit()
    sink.notify_checkpoint_complete(checkpoint)
    vacuum(spark, str(table))

    for phase in ("pre-commit", "commit"):
        jobs = list(tracker.getJobIdsForTag(job_tag("orders", checkpoint, phase)))
        assert jobs, f"no Spark job tagged {phase}"
        label = f"lakesink orders checkpoint {checkpoint}: {phase}"
        options = [store.job(j).description() for j in jobs]  # Scala Options
        described = [o.get() if o.isDefined() else "" for o in options]
        assert any(label in d for d in described), described
    assert list(tracker.getJobIdsForTag(job_tag("orders", None, "vacuum")))
    # Nothing lingers on the thread: the user's description is back, no tag is left.
    assert context.getLocalProperty("spark.job.description") == "the user's own label"
    assert set(context.getJobTags()) == set()
    context.setLocalProperty("spark.job.description", None)
    sink.close()


def test_the_commit_writes_in_parallel_and_puts_the_session_settings_back(spark, table):
    writers = "spark.sql.maxConcurrentOutputFileWriters"
    keys = [*WRITE_SETTINGS, USER_METADATA_CONF]
    spark.conf.set(writers, "3")  # a setting of the user's own, to be kept
    try:
        before = {key: spark.conf.get(key, None) for key in keys}
        sink = open_sink(spark, table)
        sink.write(rows(spark, range(200)).repartition(4))
        sink.notify_checkpoint_complete(sink.prepare_commit())

        merge = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").where("operation = 'MERGE'")
        # The flipped rows are written by the tasks that read them, not funnelled into one.
        assert int(merge.first().operationMetrics["numTargetFilesAdded"]) > 1
        assert visible_ids(spark, table) == list(range(200))
        assert {key: spark.conf.get(key, None) for key in keys} == before
        assert before[writers] == "3"
        sink.close()
    finally:
        spark.conf.unset(writers)


FALLBACK_TO_SORT = "Fall back from concurrent writers to sort-based sequential writer"


def test_the_pre_commit_and_the_merge_write_their_rows_unsorted(spark, table, tmp_path):
    """Spark's concurrent writers sort a task's remaining rows once the files open reach
    ``maxConcurrentOutputFileWriters``: at 1, every append into the transaction's partition
    and every MERGE into the committed one sorted its rows after the first (15% of a
    10M-row pre-commit)."""
    sink = open_sink(spark, table)
    with jvm_log(spark) as log:
        sink.write(rows(spark, range(2000)).repartition(2))
        sink.notify_checkpoint_complete(sink.prepare_commit())
        # The control: a partitioned append with the limit at 1 falls back, and says so.
        with session_conf(spark, {"spark.sql.maxConcurrentOutputFileWriters": "1"}):
            control = rows(spark, range(2000)).repartition(2).withColumn("part", F.lit("a"))
            control.write.format("delta").partitionBy("part").save(str(tmp_path / "control"))
    assert log.text.count(FALLBACK_TO_SORT) == 2  # the control's two tasks, and no more
    # The sink's append and MERGE were logged while captured.
    assert log.text.count(f"to file:{table}/_delta_log") >= 2
    assert visible_ids(spark, table) == list(range(2000))
    sink.close()


def test_threads_sharing_a_session_take_turns_to_set_its_conf(spark):
    """A commit's tag (userMetadata) stays its own while another thread's commit waits."""
    key = "spark.lakesink.test.tag"

    def run_both(second_session, *, turns: bool) -> list[str]:
        """A block on ``spark`` in this thread, and one on ``second_session`` in another,
        started while the first runs; the order they ran in."""
        trying, second_in, first_done = threading.Event(), threading.Event(), threading.Event()
        seen: dict[str, str | None] = {}
        order: list[str] = []

        def second() -> None:
            trying.set()
            with session_conf(second_session, {key: "second"}):
                order.append("second in")
                second_in.set()
                # Read once the first block has set and put back its own setting.
                assert first_done.wait(timeout=60)
                seen["second"] = second_session.conf.get(key, None)

        thread = threading.Thread(target=second)
        with session_conf(spark, {key: "first"}):
            thread.start()
            assert trying.wait(timeout=60)
            # Taking turns, the second block cannot begin while this one runs: it is
            # waited for a while (what a broken lock needs to show), never synchronised on.
            # Without turns, it begins now.
            assert second_in.wait(timeout=2 if turns else 60) is not turns
            seen["first"] = spark.conf.get(key, None)
            order.append("first done")
        first_done.set()
        thread.join(timeout=60)
        assert seen == {"first": "first", "second": "second"}
        return order

    assert run_both(spark, turns=True) == ["first done", "second in"]
    assert spark.conf.get(key, None) is None  # both put back
    # A session of its own (spark.newSession()) has its own conf, and does not wait.
    assert run_both(spark.newSession(), turns=False) == ["second in", "first done"]


def test_empty_dataframe_commits_nothing_and_fails_nothing(spark, table):
    sink = open_sink(spark, table)
    sink.write(rows(spark, []))
    checkpoint = sink.prepare_commit()
    sink.notify_checkpoint_complete(checkpoint)
    assert visible_ids(spark, table) == []
    status = [s for s in sink.journal.transactions(sink.sink_id) if s.checkpoint_id == 1]
    assert status[0].state is TxnState.COMMITTED and status[0].row_count == 0
    sink.close()


# ---------------------------------------------------------------- bad input


def snapshot_of(spark, table, journal) -> tuple[int, int]:
    return delta_version(spark, table), delta_version(spark, journal)


@pytest.fixture
def running(spark, table):
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1]))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    yield sink
    sink.close()


@pytest.mark.parametrize(
    "frame_schema, message",
    [
        ("order_id BIGINT", "missing item"),
        ("order_id BIGINT, item STRING, price DOUBLE", "extra price"),
        ("order_id STRING, item STRING", "order_id is string, expected bigint"),
    ],
)
def test_a_dataframe_that_does_not_match_is_refused(spark, table, running, frame_schema, message):
    before = snapshot_of(spark, table, running.journal.path)
    frame = spark.createDataFrame([], frame_schema)
    with pytest.raises(SchemaMismatchError, match=message):
        running.write(frame)
    assert snapshot_of(spark, table, running.journal.path) == before


def test_a_user_column_with_the_reserved_prefix_is_refused(spark, table, running):
    before = snapshot_of(spark, table, running.journal.path)
    frame = spark.createDataFrame([], "order_id BIGINT, item STRING, _lakesink_visible BOOLEAN")
    with pytest.raises(ReservedColumnError, match="_lakesink_visible"):
        running.write(frame)
    assert snapshot_of(spark, table, running.journal.path) == before


def test_creating_with_a_reserved_column_creates_nothing(spark, table):
    with pytest.raises(ReservedColumnError, match="_lakesink_txn_id"):
        DeltaSink.open(spark, str(table), schema="a INT, _lakesink_txn_id STRING")
    assert not table.exists()
    assert not (table.parent / "_lakesink_journal").exists()


def test_opening_with_a_different_schema_says_what_differs(spark, table, running):
    before = snapshot_of(spark, table, running.journal.path)
    with pytest.raises(SchemaMismatchError, match="missing item; extra price"):
        DeltaSink.open(spark, str(table), schema="order_id BIGINT, price DOUBLE")
    assert snapshot_of(spark, table, running.journal.path) == before


def test_a_checkpoint_id_going_backwards_is_refused(spark, table, running):
    before = snapshot_of(spark, table, running.journal.path)
    with pytest.raises(CheckpointOrderError, match="checkpoint 1 goes backwards"):
        running.snapshot_state(1)
    assert snapshot_of(spark, table, running.journal.path) == before


def test_commit_of_an_unknown_checkpoint_is_refused(spark, table, running):
    before = snapshot_of(spark, table, running.journal.path)
    with pytest.raises(UnknownCheckpointError, match="checkpoint 9 was never snapshotted"):
        running.notify_checkpoint_complete(9)
    assert snapshot_of(spark, table, running.journal.path) == before


def test_commit_of_an_aborted_checkpoint_is_refused(spark, table):
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1]))
    sink.close()  # aborts checkpoint 1
    sink = open_sink(spark, table)
    sink.write(rows(spark, [2]))
    sink.prepare_commit()  # checkpoint 2
    before = snapshot_of(spark, table, sink.journal.path)
    with pytest.raises(UnknownCheckpointError, match=r"checkpoint 1 .*journal says: aborted"):
        sink.notify_checkpoint_complete(1)
    assert snapshot_of(spark, table, sink.journal.path) == before
    sink.notify_checkpoint_complete(2)
    assert visible_ids(spark, table) == [2]
    sink.close()


def test_a_missing_table_without_schema_is_refused(spark, table):
    with pytest.raises(TableNotFoundError, match=r"no Delta table at .*pass schema="):
        DeltaSink.open(spark, str(table))
    assert not table.exists()


def test_a_missing_journal_for_an_existing_table_is_refused(spark, table, running, tmp_path):
    before = delta_version(spark, table)
    elsewhere = tmp_path / "other-journal"
    with pytest.raises(ConfigurationError, match=r"journaled in .*_lakesink_journal"):
        open_sink(spark, table, journal_path=str(elsewhere))
    assert not elsewhere.exists()
    assert delta_version(spark, table) == before


def test_a_table_with_lakesink_history_and_a_deleted_journal_is_refused_by_name(
    spark, table, running
):
    running.close()
    journal = table.parent / "_lakesink_journal"
    shutil.rmtree(journal)
    before = delta_version(spark, table)
    with pytest.raises(TableNotFoundError, match=rf"no lakesink journal at {journal}: pass"):
        open_sink(spark, table)
    assert not journal.exists()
    assert delta_version(spark, table) == before


def test_a_table_that_only_was_created_gets_its_journal_on_the_next_open(spark, table):
    """As a creation cut short leaves it (lakesink 0.2 made the table before its journal):
    a table with no lakesink history and no journal; properties changed since count for
    nothing."""
    open_sink(spark, table).close()
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('team' = 'sales')")
    journal = table.parent / "_lakesink_journal"
    shutil.rmtree(journal)
    sink = open_sink(spark, table)
    sink.write(rows(spark, [1, 2]))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    assert visible_ids(spark, table) == [1, 2]
    assert states(sink) == {1: {"committed"}}


def test_a_creation_cut_short_on_a_store_that_keeps_emptied_folders_opens(spark, s3_server):
    """Killed right after Hadoop's S3A made the new table's ``_delta_log/_staged_commits/``
    (a folder marker), before Delta's first commit: a log with no commit. lakesink removed
    it, but SeaweedFS, as a store with real folders does, still listed ``_delta_log/``,
    and Delta's createIfNotExists took the folder for a table: every open after failed
    with DELTA_TABLE_NOT_FOUND (found by ``make crash-points`` on S3)."""
    table = f"{s3_uri('cut-short')}/orders"
    key = table.removeprefix(f"s3a://{BUCKET}/")
    put_object(s3_server, BUCKET, f"{key}/_delta_log/_staged_commits/", b"")
    sink = DeltaSink.open(
        spark, table, schema=SCHEMA, view_name=f"v_{key.split('/')[0].replace('-', '_')}"
    )
    sink.write(rows(spark, [1, 2]))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    assert visible_ids(spark, table) == [1, 2]
    assert states(sink) == {1: {"committed"}}


def test_a_table_of_another_sink_is_refused(spark, table, running):
    with pytest.raises(ConfigurationError, match="belongs to sink id 'orders', not 'payments'"):
        open_sink(spark, table, sink_id="payments")


def test_the_journal_is_queryable_with_plain_sql(spark, table, running):
    journal = running.journal.path
    rows_ = spark.sql(
        f"SELECT checkpoint_id, state FROM delta.`{journal}` "
        f"WHERE sink_id = 'orders' AND checkpoint_id = 1 ORDER BY event_time"
    ).collect()
    assert [(r.checkpoint_id, r.state) for r in rows_] == [
        (1, "open"),
        (1, "pre_committed"),
        (1, "committed"),
    ]
    row = spark.sql(f"SELECT * FROM delta.`{journal}` WHERE state = 'committed'").first()
    assert row.row_count == 1 and row.writer_id == "0" and row.txn_id


def test_the_masked_rows_carry_checkpoint_and_transaction(spark, table, running):
    running.write(rows(spark, [2]))
    pending = running.prepare_commit()  # pre-committed: its row is masked
    frame = spark.read.format("delta").load(str(table))
    assert frame.columns == [VISIBLE, PENDING, CHECKPOINT_ID, "order_id", "item"]
    raw = {r.order_id: r for r in frame.collect()}
    journal = {s.txn_id: s for s in running.journal.transactions(running.sink_id)}
    masked = raw[2]
    # A masked row's transaction is its partition, which the journal puts in its checkpoint;
    # the pre-commit recorded the checkpoint in the log too, as the writer's txn version.
    assert masked[VISIBLE] is False and len(masked[PENDING]) == 32
    assert journal[masked[PENDING]].checkpoint_id == pending == 2
    assert journal[masked[PENDING]].state is TxnState.PRE_COMMITTED
    assert DeltaTable(str(table)).transaction_version(writer_app_id("orders", "0")) == 2
    assert masked[CHECKPOINT_ID] is None  # no reader needs it before its commit writes it
    committed = raw[1]  # once committed, a row keeps its checkpoint; the log its transaction
    assert committed[VISIBLE] is True and committed[PENDING] is None
    assert committed[CHECKPOINT_ID] == 1
    (commit,) = [e for e in read_history(str(table)) if e.lakesink == "commit"]
    assert (commit.checkpoint_id, commit.rows) == (1, 1)
    (txn,) = commit.txn_ids
    assert txn != masked[PENDING] and len(txn) == 32
    assert (journal[txn].checkpoint_id, journal[txn].state) == (1, TxnState.COMMITTED)
    app = writer_app_id("orders", "0", commit=True)
    assert DeltaTable(str(table)).transaction_version(app) == 1


def test_a_second_live_process_as_the_same_writer_is_refused(spark, table, running):
    import os
    import socket
    import subprocess

    lock = table / "_lakesink_writer_0.lock"
    before = snapshot_of(spark, table, running.journal.path)
    holder = subprocess.Popen(["sleep", "60"])  # a live process that "holds" the writer
    try:
        lock.write_text(f"{socket.gethostname()} {holder.pid}")
        with pytest.raises(AlreadyRunningError, match=r"writer '0' of sink 'orders'.*running"):
            open_sink(spark, table)
    finally:
        holder.kill()
        holder.wait()
    assert snapshot_of(spark, table, running.journal.path) == before
    # Now the holder is dead: its lock is stale and taken over.
    reopened = open_sink(spark, table)
    assert lock.read_text() == f"{socket.gethostname()} {os.getpid()}"
    reopened.close()
    assert not lock.exists()


def test_a_table_of_a_newer_lakesink_format_is_refused_and_left_alone(spark, table, running):
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('lakesink.formatVersion' = '9')")
    before = snapshot_of(spark, table, running.journal.path)
    with pytest.raises(
        FormatVersionError, match=rf"format 9, newer than the {TABLE_FORMAT} .*upgrade"
    ):
        open_sink(spark, table)
    assert snapshot_of(spark, table, running.journal.path) == before


def test_an_unknown_option_is_refused_by_name(spark, table):
    with pytest.raises(ConfigurationError, match=r"unknown sink option\(s\) valdation"):
        DeltaSink(spark, str(table), schema=SCHEMA, valdation=None)
    assert not table.exists()


def test_a_session_that_gives_new_tables_deletion_vectors_still_opens_a_sink(spark, tmp_path):
    """Databricks gives new tables deletion vectors by default; delta-rs, which reads and
    appends to lakesink's journal, cannot read a table that has them: the journal (and a
    job's checkpoint table) is made without them, whatever the session's defaults."""
    default = "spark.databricks.delta.properties.defaults.enableDeletionVectors"
    spark.conf.set(default, "true")
    try:
        table = tmp_path / "orders"
        with DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_dv") as sink:
            sink.write(rows(spark, [1, 2]))
            sink.notify_checkpoint_complete(sink.prepare_commit())
        journal = spark.sql(f"DESCRIBE DETAIL delta.`{tmp_path / '_lakesink_journal'}`").first()
        assert "deletionVectors" not in (journal.tableFeatures or [])
        assert visible_ids(spark, table) == [1, 2]
    finally:
        spark.conf.unset(default)
