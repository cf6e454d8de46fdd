"""A checkpoint's tables read as one: readers of a group's tables see one cut.

A streaming query writes orders and per-batch totals through ``StreamingSink.for_sinks``;
the totals of a batch count its orders, so in any consistent read the orders counted
equal the totals summed. A reader in this process reads both tables in one call, over and
over, while the query runs: through ``lakesink.committed(spark, orders, totals)``
aggregated in one query, through ``lakesink.arrow(orders, totals)``, and through one SQL
statement over both committed views.

How the test knows the read raced the publishes: a step hook holds the commit of every
batch right after orders published it and before totals did, until the reader has read
once in that window. The positive control reads both tables at their latest versions
(what readers did before cuts) in that same window, and must disagree every time. The
reader starts before the query's tables exist, and the query is held once more when both
exist and its driver has recorded no cut yet: the group is read as one there too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pyarrow.compute as pc
import pytest
from pyspark.sql import functions as F

import lakesink
from lakesink.core import CheckpointCoordinator, TxnState, step_hook
from lakesink.core.checkpointing import GlobalCommitter, pre_commit_all
from lakesink.delta.committer import Committable
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError, TableNotFoundError
from lakesink.ops.resolve import resolve_checkpoint
from lakesink.storage.location import join
from lakesink.streaming import StreamingSink
from lakesink.tables.checkpoints import DeltaCheckpointStore
from lakesink.tables.cuts import DeltaCutStore, cuts_path, group_cut, read_versions
from lakesink.tables.format import VISIBLE, published_path
from lakesink.tables.history import table_version

SCHEMA = "order_id BIGINT, customer STRING"
TOTALS = "customer STRING, orders BIGINT"
BATCHES, PER_BATCH = 3, 4


def landing(folder: Path) -> None:
    folder.mkdir(parents=True)
    for batch in range(BATCHES):
        rows = [{"order_id": batch * 100 + i, "customer": f"c{i % 2}"} for i in range(PER_BATCH)]
        draft = folder / f".b{batch}.tmp"
        draft.write_text("".join(json.dumps(r) + "\n" for r in rows))
        draft.rename(folder / f"b{batch}.json")


def agree_in_one_query(orders, totals) -> bool:
    """One Spark query over both: the orders counted and the totals summed."""
    row = (
        orders.agg(F.count("*").alias("n"))
        .crossJoin(totals.agg(F.coalesce(F.sum("orders"), F.lit(0)).alias("m")))
        .first()
    )
    return row.n == row.m


def agree_in_arrow(orders, totals) -> bool:
    summed = pc.sum(totals.column("orders")).as_py() or 0
    return orders.num_rows == summed


def latest(spark, path: str):
    """What a reader of the table's latest version sees (the control)."""
    return spark.read.format("delta").load(path).where(f"{VISIBLE} = true")


@dataclass
class Stream:
    """A two-table streaming query started in the background, and its hold points."""

    orders: str
    totals: str
    chk: str
    window: threading.Event  # the query holds in a window, waiting for one read
    read_in_window: threading.Event  # the reader read there: go on
    started: Future  # the sink and the query, once they are


@pytest.fixture
def stream(spark, tmp_path, lake, commit):
    """A two-table streaming query, started in another thread while the test reads: held
    once its sinks are open (before its first cut), and after each batch's orders publish,
    until the reader has read once there."""
    landing(tmp_path / "landing")
    window, read_in_window, released = threading.Event(), threading.Event(), threading.Event()
    published: Counter[int] = Counter()
    found = Stream(join(lake, "orders"), join(lake, "totals"), join(lake, "chk"), window,
                   read_in_window, Future())  # fmt: skip

    def hold() -> None:
        if released.is_set():
            return
        window.set()
        assert read_in_window.wait(timeout=300), "the reader never read"
        read_in_window.clear()

    def hook(step: str, batch_id: int) -> None:
        if step == "after_recovery":  # both tables exist, no cut recorded by the driver
            hold()
        if step == "after_publish":
            published[batch_id] += 1
            if published[batch_id] == 1:  # orders published the batch, totals not yet
                hold()

    def process(batch, sinks) -> None:
        sinks["orders"].write(batch.select("order_id", "customer"))
        sinks["totals"].write(batch.groupBy("customer").agg(F.count("*").alias("orders")))

    def start():
        with step_hook(hook):
            sinks = {
                "orders": DeltaSink(spark, found.orders, schema=SCHEMA, commit=commit,
                                    view_name="c_orders"),
                "totals": DeltaSink(spark, found.totals, schema=TOTALS, commit=commit,
                                    view_name="c_totals"),
            }  # fmt: skip
            sink = StreamingSink.for_sinks(
                spark, sinks, checkpoint_location=found.chk, process=process
            )
        source = (
            spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(str(tmp_path / "landing"))
        )
        query = (
            source.writeStream.foreachBatch(sink)
            .option("checkpointLocation", found.chk)
            .trigger(availableNow=True)
            .start()
        )
        return sink, query

    with ThreadPoolExecutor(1) as starter:
        found.started = starter.submit(start)
        yield found
        released.set()  # a failed test must not leave the query waiting for a reader
        read_in_window.set()
        if found.started.done() and found.started.exception() is None:
            found.started.result()[1].stop()


def test_one_call_reads_of_a_two_table_stream_always_see_one_cut(spark, stream, lake):
    """The reader starts before the query's tables exist: every read agrees, the first
    ones (before the query's first checkpoint) at the group's membership cut."""
    windows, reads = [], 0
    deadline = time.monotonic() + 900
    while len(windows) < 1 + BATCHES:  # the opening, then each batch's commit
        assert time.monotonic() < deadline, f"only {len(windows)} of {1 + BATCHES} windows came"
        in_window = stream.window.is_set()
        try:
            both = lakesink.committed(spark, stream.orders, stream.totals)
        except TableNotFoundError:  # not created yet
            assert not reads, "a table of the group went away"
            stream.window.wait(timeout=0.2)
            continue
        assert agree_in_one_query(*both), "a one-query read saw two cuts"
        assert agree_in_arrow(*lakesink.arrow(stream.orders, stream.totals)), (
            "an Arrow read saw two cuts"
        )
        if windows:  # the views exist once the sinks are open
            assert spark.sql(
                "SELECT (SELECT count(*) FROM c_orders) = "
                "(SELECT coalesce(sum(orders), 0) FROM c_totals)"
            ).first()[0], "one SQL statement over both views saw two cuts"
        reads += 1
        if in_window and not windows:
            # Before the driver's first cut, the tables are read as a group already.
            cut = group_cut("orders", lakesink.Table(stream.orders).journal_path)
            assert cut is not None and cut.checkpoint_id == -1, cut
            windows.append(None)
        elif in_window:
            control = (latest(spark, stream.orders), latest(spark, stream.totals))
            windows.append(agree_in_one_query(*control))
        if in_window:
            stream.window.clear()
            stream.read_in_window.set()
    sink, query = stream.started.result(timeout=300)
    query.awaitTermination()
    sink.close()
    assert not any(windows), "the control: the latest versions disagree inside each window"
    final = lakesink.committed(spark, stream.orders, stream.totals)
    assert final[0].count() == BATCHES * PER_BATCH and agree_in_one_query(*final)
    assert reads > len(windows)


@pytest.mark.parametrize(("lake", "commit"), [("local", "metadata")], indirect=True)
def test_a_cut_names_every_table_of_the_group_at_its_version(spark, stream, lake):
    for _ in range(1 + BATCHES):  # no reader: let the opening and every commit through
        assert stream.window.wait(timeout=900)
        stream.window.clear()
        stream.read_in_window.set()
    sink, query = stream.started.result(timeout=300)
    query.awaitTermination()
    sink.close()
    orders, totals = stream.orders, stream.totals
    table = lakesink.Table(orders)
    cut = DeltaCutStore(cuts_path(table.journal_path)).latest(join(lake, "chk"))
    assert cut is not None and cut.checkpoint_id == BATCHES - 1
    assert set(cut.tables) == {"orders", "totals"}
    for key, path in (("orders", orders), ("totals", totals)):
        assert cut.tables[key].location == path
        assert cut.tables[key].version == lakesink.Table(path).checkpoint(BATCHES - 1).version
    # Read as of a checkpoint, both tables of the group agree, each at that checkpoint's cut.
    for checkpoint in range(BATCHES):
        as_of = [lakesink.Table(p).arrow(checkpoint=checkpoint) for p in (orders, totals)]
        assert as_of[0].num_rows == (checkpoint + 1) * PER_BATCH
        assert agree_in_arrow(*as_of)


def test_tables_of_different_groups_are_not_read_at_one_cut(spark, tmp_path):
    """Two groups (two jobs of two tables each) and two tables of none: a group's tables
    are read together at its cut, with others' changes since; a table of another group, or
    of none, beside them is refused (no one cut holds them); tables of no group are read
    together, each version taken before either is read."""
    rows = spark.createDataFrame([(1, "x")], SCHEMA)
    store = DeltaCheckpointStore(str(tmp_path / "state"))
    groups = {}
    for job in ("a", "b"):
        sinks = {
            n: DeltaSink(spark, str(tmp_path / f"{job}{n}"), schema=SCHEMA, view_name=f"v_{job}{n}")
            for n in ("1", "2")
        }
        with CheckpointCoordinator(store, job_id=job, sinks=sinks) as coordinator:
            for sink in sinks.values():
                sink.write(rows)
            coordinator.trigger_checkpoint(None)
        groups[job] = [sink.path for sink in sinks.values()]
    alone = [str(tmp_path / name) for name in ("c", "d")]
    for path in alone:
        with DeltaSink.open(spark, path, schema=SCHEMA, view_name=f"v_{Path(path).name}") as s:
            s.write(rows)
            s.notify_checkpoint_complete(s.prepare_commit())

    assert [t.num_rows for t in lakesink.arrow(*groups["a"])] == [1, 1]  # one group: its cut
    # Another writer's change after the cut (a GDPR DELETE) shows at once, as in Delta's
    # own read: the versions after a cut that publish no checkpoint are read too.
    spark.sql(f"DELETE FROM delta.`{groups['a'][0]}` WHERE order_id = 1")
    assert [t.num_rows for t in lakesink.arrow(*groups["a"])] == [0, 1]
    assert [f.count() for f in lakesink.committed(spark, *groups["a"])] == [0, 1]
    for mixed in ([groups["a"][0], groups["b"][0]], [groups["b"][1], alone[0]]):
        with pytest.raises(ConfigurationError, match="are not all of one group"):
            lakesink.committed(spark, *mixed)
        with pytest.raises(ConfigurationError, match="are not all of one group"):
            lakesink.arrow(*mixed)
    c, d = alone
    assert read_versions([c, d]) == {c: table_version(c), d: table_version(d)}
    first, second = lakesink.committed(spark, c, d)
    assert first.count() == second.count() == 1
    with pytest.raises(ConfigurationError, match="version= reads one table"):
        lakesink.committed(spark, c, d, version=1)


def held_group(spark, tmp_path: Path) -> dict[str, str]:
    """Two tables of group ``held-group``: checkpoint 1 committed (rows 0-2), checkpoint 2
    (rows 3-5) held for an operator in both; their paths by sink id."""
    schema = "id BIGINT, item STRING"
    paths = {name: str(tmp_path / name) for name in ("orders", "totals")}
    sinks = {
        name: DeltaSink.open(spark, path, schema=schema, view_name=f"held_{name}")
        for name, path in paths.items()
    }
    for checkpoint, ids in ((1, range(0, 3)), (2, range(3, 6))):
        for sink in sinks.values():
            sink.write(spark.createDataFrame([(i, "x") for i in ids], schema))
        pre_commit_all(sinks, checkpoint)
    GlobalCommitter(sinks, group_id="held-group").commit(1)
    for sink in sinks.values():
        sink.withhold(2, TxnState.HELD, "waits for an operator")
        sink.close()
    return paths


def test_an_operators_commit_of_a_held_two_table_checkpoint_publishes_both_and_the_cut(
    spark, tmp_path
):
    """As a process: ``lakesink commit`` of one table of a group publishes the held
    checkpoint in both tables, then records the group's new cut; before it, readers see the
    group at the cut that left the checkpoint out."""
    paths = held_group(spark, tmp_path)
    before = [t.num_rows for t in lakesink.arrow(paths["orders"], paths["totals"])]
    assert before == [3, 3]

    done = subprocess.run(
        [sys.executable, "-m", "lakesink.cli", "commit", paths["orders"], "--checkpoint", "2",
         "--yes", "--master", "local[1]"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert [t.num_rows for t in lakesink.arrow(paths["orders"], paths["totals"])] == [6, 6]
    for path in paths.values():
        assert lakesink.Table(path).checkpoint(2).state is TxnState.COMMITTED
    cut = DeltaCutStore(cuts_path(lakesink.Table(paths["orders"]).journal_path)).latest(
        "held-group"
    )
    assert cut is not None and cut.checkpoint_id == 2
    for name, path in paths.items():
        # The cut names each table as the operator's commit left it: its MERGE published
        # the checkpoint, and the release of its pending files followed.
        assert cut.tables[name].version == table_version(path)
        assert cut.tables[name].version >= lakesink.Table(path).checkpoint(2).version


class Killed(BaseException):
    """The operator's command, killed."""


def test_an_operators_commit_killed_between_the_tables_is_finished_by_running_it_again(
    spark, tmp_path, monkeypatch
):
    """Killed after orders was committed and journaled, before totals' commit (so before
    any published table was brought up): the command run again settles totals, records
    the group's cut over both tables and brings both published tables up (it used to
    settle totals alone: no cut, orders' published table behind). Found by the
    crash-point enumeration."""
    paths = held_group(spark, tmp_path)
    real = DeltaSink._commit

    def killed_before_totals_commit(sink: DeltaSink, transaction: Committable) -> None:
        if sink.sink_id == "totals":
            raise Killed
        real(sink, transaction)

    monkeypatch.setattr(DeltaSink, "_commit", killed_before_totals_commit)
    with pytest.raises(Killed):
        resolve_checkpoint(spark, paths["orders"], 2, "commit")
    monkeypatch.undo()
    assert lakesink.Table(paths["orders"]).checkpoint(2).state is TxnState.COMMITTED
    # Decided (journaled before the kill), not committed.
    assert lakesink.Table(paths["totals"]).checkpoint(2).state is TxnState.COMMITTING
    assert len(published_ids(paths["orders"])) == 3  # behind: checkpoint 1 only

    resolve_checkpoint(spark, paths["orders"], 2, "commit")  # the operator, again
    for path in paths.values():
        assert sorted(published_ids(path)) == list(range(6))
    cut = DeltaCutStore(cuts_path(lakesink.Table(paths["orders"]).journal_path)).latest(
        "held-group"
    )
    assert cut is not None and cut.checkpoint_id == 2
    assert {k: t.version for k, t in cut.tables.items()} == {
        k: table_version(p) for k, p in paths.items()
    }
    assert [t.num_rows for t in lakesink.arrow(paths["orders"], paths["totals"])] == [6, 6]


def published_ids(path: str) -> list[int]:
    """The ids the table's published table holds, read by path with delta-rs."""
    from deltalake import DeltaTable

    return DeltaTable(published_path(path)).to_pyarrow_table().column("id").to_pylist()


def test_sql_readers_never_miss_a_groups_cut_view_while_it_moves(spark):
    """lakesink serve moves a group's cut view while SQL clients read its tables' views.
    Spark's CREATE OR REPLACE VIEW drops a view and creates it again: a statement that
    resolved the name in between failed (TABLE_OR_VIEW_NOT_FOUND, about one read in 15 here
    with the old statement). Reads go on until 100 succeeded, or one failed."""
    from lakesink.readers.spark import show_cut

    cut_view, member = "lakesink_cut_test_moving", "member_of_a_moving_cut"
    show_cut(spark, cut_view, 0)
    spark.sql(
        f"CREATE OR REPLACE VIEW {member} AS SELECT id FROM range(10) "
        f"WHERE id <= (SELECT checkpoint_id FROM {cut_view})"
    )
    done, moves = threading.Event(), Counter()

    def move() -> None:
        while not done.is_set():
            moves["cut"] += 1
            show_cut(spark, cut_view, moves["cut"] % 9)

    mover = threading.Thread(target=move)
    mover.start()
    failed, read = [], 0
    try:
        while read < 100 and not failed:
            try:
                (row,) = spark.sql(f"SELECT count(*) AS n FROM {member}").collect()
                assert 1 <= row.n <= 9  # the cut is always one of the values shown
                read += 1
            except Exception as exc:  # what a SQL client would be answered
                failed.append(str(exc).splitlines()[0])
    finally:
        done.set()
        mover.join()
    assert not failed, f"after {read} reads and {moves['cut']} moves: {failed[0]}"
    assert moves["cut"] >= 20, "the cut view hardly moved while the reads ran"
