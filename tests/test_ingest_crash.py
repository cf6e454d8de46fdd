"""The ingest job, a streaming query, as a real process killed with SIGKILL at each point.

One chain of runs over one landing folder: each run restarts from what the previous one
left and is itself killed at the next point; a last run finishes. The points: after a
batch's pre-commit, before Spark's commit log entry (the batch is replayed: a new
transaction under the same batch id); after the commit log entry, before lakesink's commit
(committed on restart); and during the commit's MERGE, in the recovery of a restart that
has no new input. The chain runs on local disk with the MERGE commit and on the S3 server
with the metadata commit. Kafka gets its own chain over a real broker. (A kill during a batch's
write is one more replay; ``test_delta_sink.py`` crashes every sink step in process.)

How the tests know nothing is lost or duplicated: each run really died by the signal at
its point (exit status -9, the crash log line); right after each kill the committed view
holds whole batches only (a prefix of the order ids, each once, since every batch takes
the next two files); after the last run every generated order is committed exactly once,
in both sinks. And every tool names the same checkpoint ids: Spark's commit log,
``lakesink status`` and both sinks' journals.

A downstream streaming query (``lakesink.readers.spark.committed_stream`` into a plain
Delta table) runs after every run of the chain, killed or not: each time, its table holds
exactly the orders the committed view holds, each once, never a pending or aborted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from kafka_fixture import produce
from s3_fixture import STORES, s3_uri

from lakesink import committed
from lakesink.cli.exits import EXIT_BAD_INPUT
from lakesink.core import TxnState
from lakesink.readers.spark import committed_stream
from lakesink.storage.location import join
from lakesink.streaming import recorded_batch
from lakesink.tables.history import table_version
from lakesink.tables.journal import Journal

pytestmark = pytest.mark.slow

TESTS = Path(__file__).resolve().parent
JOBS = TESTS.parent / "jobs"
ORDERS, FILES = 150, 6  # 25 orders a file, 2 files a batch: batches 0, 1, 2 of 50 each
PER_CHECKPOINT = 50
# The kills, in the order the chain makes them (each run's restart recovers the one before),
# and how many whole batches the committed view may hold right after each.
CRASH_POINTS = {
    "after_pre_commit@1": {1},  # pre-committed, not in Spark's commit log: replayed
    # The restart runs batch 1 again and 2; 2 is in Spark's commit log, not committed yet.
    "after_record@2": {2},
    # The restart has no new input: its recovery commits batch 2, and dies in the MERGE,
    # which is one Delta commit, so 2 is either all there or not at all.
    "before_publish@2+200": {2, 3},
}
RECORDED = [0, 1, 2]
ABORTED = [1]  # the first attempt of batch 1, in both sinks


def ingest_command(
    tmp_path: Path, *extra: str, source: tuple[str, ...] = (), lake: str | None = None
) -> list[str]:
    """The ingest job over ``tmp_path``'s landing folder, two sinks; or over ``source``,
    the orders sink alone. Its tables and state are in ``lake`` (default ``tmp_path``). It
    runs in ``tests/faults.py``, which kills or holds it where the environment says."""
    lake = lake or str(tmp_path)
    totals = () if source else ("--totals-table", join(lake, "totals"))
    return [
        sys.executable,
        str(TESTS / "faults.py"),
        str(JOBS / "ingest.py"),
        "--master",
        "local[2]",
        *(source or ("--landing", str(tmp_path / "landing"))),
        "--table",
        join(lake, "orders"),
        *totals,
        "--state",
        join(lake, "state"),
        "--files-per-checkpoint",
        "2",
        *extra,
    ]


def ingest(
    tmp_path: Path,
    crash_at: str | None = None,
    *extra: str,
    source: tuple[str, ...] = (),
    lake: str | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "LAKESINK_CRASH_AT"}
    if crash_at:
        env["LAKESINK_CRASH_AT"] = crash_at
    command = ingest_command(tmp_path, *extra, source=source, lake=lake)
    return subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)


def generate(tmp_path: Path, orders: int = ORDERS, files: int = FILES) -> None:
    subprocess.run(
        [
            sys.executable,
            str(JOBS / "generate_orders.py"),
            "--landing",
            str(tmp_path / "landing"),
            "--orders",
            str(orders),
            "--files",
            str(files),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


@dataclass(frozen=True)
class Kill:
    """One run of the chain, killed at ``point``, and the committed order ids it left."""

    point: str
    run: subprocess.CompletedProcess[str]
    committed_ids: Counter[int]  # read as readers of the job's two tables read: at their cut
    latest_ids: Counter[int]  # the orders table's committed rows at its latest version
    downstream_ids: Counter[int]  # what the downstream query's table held after it ran


@dataclass(frozen=True)
class Chain:
    work: Path  # the landing folder's, on local disk
    lake: str  # the tables' and the state's: local, or on the S3 server
    kills: dict[str, Kill]
    last_run: subprocess.CompletedProcess[str]
    committed_ids: Counter[int]
    committed_totals: int | None  # None: a chain without the totals sink
    downstream_ids: Counter[int]


def committed_ids(spark, lake: str, *, latest: bool = False) -> Counter[int]:
    orders = join(lake, "orders")
    version = table_version(orders) if latest else None
    return Counter(r.order_id for r in committed(spark, orders, version=version).collect())


def downstream(spark, tmp_path: Path, lake: str) -> Counter[int]:
    """Run the downstream query over what the orders table holds now; return its table's ids."""
    silver = tmp_path / "silver"
    query = (
        committed_stream(spark, join(lake, "orders"))
        .writeStream.format("delta")
        .option("checkpointLocation", str(tmp_path / "silver-checkpoint"))
        .trigger(availableNow=True)
        .start(str(silver))
    )
    query.awaitTermination(600)
    assert query.exception() is None, query.exception()
    return Counter(r.order_id for r in spark.read.format("delta").load(str(silver)).collect())


def run_chain(
    spark, tmp_path: Path, points, source: tuple[str, ...] = (), *extra: str, lake: str = ""
) -> Chain:
    """Run the job once per crash point, each run killed there, then once to the end; the
    downstream query after each run. Tables and state go to ``lake`` (default ``tmp_path``)."""
    lake = lake or str(tmp_path)
    kills = {}
    for point in points:
        run = ingest(tmp_path, point, *extra, source=source, lake=lake)
        kills[point] = Kill(
            point=point,
            run=run,
            committed_ids=committed_ids(spark, lake),
            latest_ids=committed_ids(spark, lake, latest=True),
            downstream_ids=downstream(spark, tmp_path, lake),
        )
    last_run = ingest(tmp_path, None, *extra, source=source, lake=lake)
    totals = None
    if not source:
        totals = committed(spark, join(lake, "totals")).groupBy().sum("orders").first()[0]
    return Chain(
        work=tmp_path,
        lake=lake,
        kills=kills,
        last_run=last_run,
        committed_ids=committed_ids(spark, lake),
        committed_totals=totals,
        downstream_ids=downstream(spark, tmp_path, lake),
    )


# Each store with one commit mode: every kill hits both stores and both modes, in two chains
# rather than four.
CHAINS = list(zip(STORES, ("merge", "metadata"), strict=True))


# Session scope, one xdist group per chain: each chain runs once even if xdist interleaves
# other modules' tests on its worker, and the two chains run on two workers.
@pytest.fixture(
    scope="session",
    params=[
        pytest.param(
            (store, commit),
            id=f"{store}-{commit}",
            marks=pytest.mark.xdist_group(f"ingest_crash_{store}"),
        )
        for store, commit in CHAINS
    ],
)
def chain(spark, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Chain:
    """The chain with its tables and state on local disk, committed by MERGE; then on the S3
    server, committed by metadata (``--commit metadata``)."""
    store, commit = request.param
    tmp_path = tmp_path_factory.mktemp("ingest-crash")
    generate(tmp_path)
    lake = s3_uri("ingest-crash") if store == "s3" else str(tmp_path)
    return run_chain(spark, tmp_path, CRASH_POINTS, (), "--commit", commit, lake=lake)


@pytest.fixture(scope="session")
def kafka_chain(spark, kafka_broker, tmp_path_factory: pytest.TempPathFactory) -> Chain:
    """The same orders as messages of a topic; one run killed before the commit log."""
    tmp_path = tmp_path_factory.mktemp("ingest-crash-kafka")
    generate(tmp_path)
    lines = [
        line
        for f in sorted((tmp_path / "landing").iterdir())
        for line in f.read_text().splitlines()
    ]
    produce(spark, kafka_broker, "orders", lines, partition=0)  # in order: batches are prefixes
    source = ("--kafka", kafka_broker.bootstrap_servers, "--topic", "orders")
    return run_chain(
        spark,
        tmp_path,
        ["after_pre_commit@1"],
        source,
        "--records-per-checkpoint",
        str(PER_CHECKPOINT),
    )


def assert_killed_leaving_whole_batches(kill: Kill, allowed: set[int]) -> None:
    """The run died by SIGKILL at its point, and left only whole batches visible, once."""
    assert kill.run.returncode == -signal.SIGKILL, kill.run.stderr[-3000:]
    step, checkpoint = kill.point.split("+")[0].split("@")
    assert f"crash injection: SIGKILL at {step} of checkpoint {checkpoint}" in kill.run.stderr
    assert max(kill.committed_ids.values(), default=1) == 1, "an order was committed twice"
    whole = len(kill.committed_ids) // PER_CHECKPOINT
    assert set(kill.committed_ids) == set(range(1, whole * PER_CHECKPOINT + 1)), (
        f"the kill at {kill.point} left part of a batch visible"
    )
    assert whole in allowed, f"{whole} batches committed after the kill at {kill.point}"


def assert_every_order_once(chain: Chain) -> None:
    assert chain.last_run.returncode == 0, chain.last_run.stderr[-3000:]
    assert set(chain.committed_ids) == set(range(1, ORDERS + 1)), "an order was lost"
    assert max(chain.committed_ids.values()) == 1, "an order was committed twice"


@pytest.mark.parametrize("point", list(CRASH_POINTS))
def test_killed_ingest_restarts_and_commits_every_order_once(chain: Chain, point: str) -> None:
    assert_killed_leaving_whole_batches(chain.kills[point], CRASH_POINTS[point])
    assert_every_order_once(chain)  # after the restarts that followed
    assert chain.committed_totals == ORDERS  # the second sink of the same batches


def test_a_downstream_stream_gets_every_committed_order_exactly_once(spark, chain: Chain) -> None:
    # After each kill, pending rows (a pre-committed batch 1), aborted ones (its first
    # attempt) and a half-done recovery were in the table: the stream took none of them.
    # A stream reads each commit as it lands, so a kill after the orders' publish and
    # before the cut leaves it one batch ahead of the job's cut (readers of both tables).
    for kill in chain.kills.values():
        assert kill.downstream_ids == kill.latest_ids, kill.point
        ahead = kill.latest_ids - kill.committed_ids
        assert not kill.committed_ids - kill.latest_ids, kill.point
        assert len(ahead) in (0, PER_CHECKPOINT), kill.point
    raw = spark.read.format("delta").load(join(chain.lake, "orders"))
    assert raw.where("NOT _lakesink_visible").count() > 0  # masked rows were there to skip
    assert chain.downstream_ids == chain.committed_ids
    assert set(chain.downstream_ids) == set(range(1, ORDERS + 1))
    assert max(chain.downstream_ids.values()) == 1


def test_a_killed_kafka_query_replays_its_batch_and_commits_every_record_once(
    kafka_chain: Chain,
) -> None:
    (kill,) = kafka_chain.kills.values()
    assert_killed_leaving_whole_batches(kill, {1})
    assert_every_order_once(kafka_chain)


def test_the_commit_log_the_status_and_the_journals_name_the_same_checkpoint_ids(
    spark, chain: Chain, capsys
) -> None:
    from lakesink.cli import main

    # Spark's commit log is the checkpoint record: its batch ids are the checkpoint ids.
    assert recorded_batch(spark, join(chain.lake, "state", "ingest")) == RECORDED[-1]
    printed = [
        line.split(":")[0] for r in [*chain.kills.values()] for line in r.run.stdout.splitlines()
    ]
    assert {p for p in printed if p.startswith("batch ")} <= {f"batch {i}" for i in RECORDED}

    for sink in ("orders", "totals"):
        assert main(["status", join(chain.lake, sink), "--json"]) == 0
        (status,) = json.loads(capsys.readouterr().out)["sinks"]
        assert status["last_committed_checkpoint"] == RECORDED[-1]
        assert status["pending"] == [] and status["held"] == []
        assert sorted({t["checkpoint_id"] for t in status["aborted"]}) == ABORTED
        journal = Journal(join(chain.lake, "_lakesink_journal"), create=False)
        committed_ids = [
            t.checkpoint_id for t in journal.transactions(sink) if t.state is TxnState.COMMITTED
        ]
        assert committed_ids == RECORDED


def assert_refused_as_another_sources(run: subprocess.CompletedProcess[str], says: str) -> None:
    """Refused before Spark starts, exit 2, in one line that names both sources."""
    assert run.returncode == EXIT_BAD_INPUT, run.stderr[-3000:]
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith("lakesink ingest: --state ") and says in line, line


# Each direction with the chain that already ran: one test with both chains would run in an
# xdist group of its own, which builds both chains again.
def test_the_state_of_a_landing_query_is_refused_to_a_kafka_run(chain: Chain) -> None:
    kafka = ("--kafka", "127.0.0.1:9", "--topic", "orders")  # a closed port: never reached
    run = ingest(chain.work, None, source=kafka, lake=chain.lake)
    says = "a landing folder (Spark's file source), not of Kafka topic orders"
    assert_refused_as_another_sources(run, says)


def test_the_state_of_a_kafka_query_is_refused_to_a_landing_run(kafka_chain: Chain) -> None:
    run = ingest(kafka_chain.work, None, lake=kafka_chain.lake)
    assert_refused_as_another_sources(run, "Kafka topic orders, not of the landing folder")
