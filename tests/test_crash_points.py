"""Crash points of a sink's life, as processes killed with SIGKILL at a real write.

The fixed subset of ``make crash-points`` (``tests/crashpoints``, where the harness and the
scenarios are) that CI runs: every scenario on local disk, killed at the write that matters
most to it, and the creation, micro-batch and commit scenarios on the S3 server through the
fault proxy. Each kill is aimed at the first change whose path matches a pattern, while it
waits to run or once it ran; then the scenario runs again and must exit 0.

How each test knows nothing is lost or duplicated: the kill really landed at that change
(the observer says where, and the run died by SIGKILL), and after the restart a reader that
is not lakesink (delta-rs) finds each of the scenario's ids visible exactly once in each
table, every masked row belongs to a transaction the journal aborted, every transaction in
the journal is finished, and ``lakesink status`` answers (``crashpoints.harness.check``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from crashpoints.harness import CrashPoint, Harness, LocalStore, S3FaultProxy, S3Store
from s3_fixture import BUCKET

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
MITMDUMP = ROOT / ".cache" / "tools" / "mitmproxy" / "bin" / "mitmdump"
TABLE_COMMIT = r"^orders/_delta_log/\d{20}\.json$"
# The published table's log, in the committed partition's folder of orders.
PUBLISHED_COMMIT = (
    r"^orders/_lakesink_visible=true/_lakesink_pending=__HIVE_DEFAULT_PARTITION__"
    r"/_delta_log/0{19}1\.json$"
)


# A transaction's pending partition, where its appends' staging tables are.
PENDING_FOLDER = r"_lakesink_visible=false/_lakesink_pending=[0-9a-f]{32}"


def table_version(number: int) -> str:
    """The commit file of version ``number`` of orders (a first checkpoint's table versions:
    0 the table, 1 its append (with its txn action), 2 its commit, 3 a MERGE's release)."""
    return rf"^orders/_delta_log/0{{19}}{number}\.json$"


# (scenario, commit mode, store, where to kill): why each point.
SUBSET = [
    # A kill right after a new table's first commit (journal-first: its journal exists).
    (
        "first-open",
        "merge",
        "local",
        CrashPoint("after", pattern=r"^orders/_delta_log/0{20}\.json$"),
    ),
    (
        "first-open",
        "metadata",
        "s3",
        CrashPoint("after", pattern=r"^orders/_delta_log/0{20}\.json$"),
    ),
    # A kill while the journal's first commit is being written: it leaves a Delta log
    # holding a temporary file only.
    (
        "first-open",
        "metadata",
        "local",
        CrashPoint("before", pattern=r"^_lakesink_journal/_delta_log/0{20}\.json$"),
    ),
    # Spark recorded the batch (its commit log), lakesink had not committed it yet.
    ("micro-batch", "metadata", "local", CrashPoint("after", pattern=r"^state/ingest/commits/0$")),
    # Spark's first offsets entry written, not yet renamed into place: Spark refused the
    # location at every restart until lakesink removed the leftover.
    ("micro-batch", "merge", "local", CrashPoint("before", pattern=r"^state/ingest/offsets/0$")),
    ("micro-batch", "merge", "s3", CrashPoint("after", pattern=r"^state/ingest/commits/0$")),
    # The checkpoint is recorded and published in orders, not yet in totals.
    ("two-table", "metadata", "local", CrashPoint("after", pattern=table_version(2))),
    # Appended (its rows masked, its txn action in the log), not yet pre-committed in the
    # journal: the restart aborts it, its rows stay masked.
    ("first-open", "metadata", "local", CrashPoint("after", pattern=table_version(1))),
    # The MERGE landed, its pending files not yet released: the restart's commit finds the
    # MERGE recorded (its txn version) and only releases.
    ("first-open", "merge", "s3", CrashPoint("after", pattern=table_version(2))),
    ("first-open", "merge", "local", CrashPoint("before", pattern=table_version(3))),
    # Spark wrote an append's staging table, the sink's commit did not add its files yet:
    # the restart aborts the open transaction, its files are in no version of the table.
    (
        "first-open",
        "metadata",
        "local",
        CrashPoint("after", pattern=rf"^orders/{PENDING_FOLDER}/_delta_log/0{{20}}\.json$"),
    ),
    # The table committed, its published table not yet brought up: the restart's open does.
    ("first-open", "merge", "local", CrashPoint("before", pattern=PUBLISHED_COMMIT)),
    ("first-open", "metadata", "s3", CrashPoint("after", pattern=PUBLISHED_COMMIT)),
    # The operator's commit landed in the table; the journal does not say so yet.
    ("operator-commit", "merge", "local", CrashPoint("after", pattern=TABLE_COMMIT)),
    ("operator-commit", "metadata", "s3", CrashPoint("after", pattern=TABLE_COMMIT)),
    (
        "operator-abort",
        None,
        "local",
        CrashPoint("after", pattern=r"^_lakesink_journal/_delta_log/\d{20}\.json$"),
    ),
    # The vacuum deleted the aborted rows; the journal does not say they are gone yet.
    ("vacuum", "metadata", "local", CrashPoint("after", pattern=TABLE_COMMIT)),
    # The table was rewritten in the new layout; its format property not yet changed.
    ("migrate-table", None, "local", CrashPoint("after", pattern=TABLE_COMMIT)),
    # The dead writer's lock is being taken over.
    (
        "lease-takeover",
        "merge",
        "local",
        CrashPoint("before", pattern=r"^orders/_lakesink_writer_0\.lock$"),
    ),
    # The new column is in the table's schema; nothing of the checkpoint written yet.
    ("merge-schema", "merge", "local", CrashPoint("after", pattern=TABLE_COMMIT)),
]


@pytest.fixture(scope="module")
def harnesses(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest):
    """A harness per store, each making a scenario's setup once for the module."""
    work = tmp_path_factory.mktemp("crash-points")
    found = {"local": Harness(LocalStore(work / "local"), work / "local")}
    proxy = None
    if any(store == "s3" for _, _, store, _ in SUBSET):
        if not MITMDUMP.exists():
            pytest.fail(f"{MITMDUMP} is missing: make test installs it (make {MITMDUMP})")
        server = request.getfixturevalue("s3_server")
        proxy = S3FaultProxy(MITMDUMP, server.endpoint, work / "proxy")
        found["s3"] = Harness(S3Store(BUCKET, proxy, work / "s3"), work / "s3")
    yield found
    if proxy is not None:
        proxy.stop()


@pytest.mark.parametrize(
    ("scenario", "mode", "store", "point"),
    [
        # One worker per store runs its points: a scenario's setup is then made once.
        pytest.param(*case, marks=pytest.mark.xdist_group(f"crash-points-{case[2]}"))
        for case in SUBSET
    ],
    ids=[f"{s}-{m or 'none'}-{st}-{p.when}" for s, m, st, p in SUBSET],
)
def test_a_kill_at_a_write_then_a_restart_ends_exactly_once(
    harnesses, scenario: str, mode: str | None, store: str, point: CrashPoint
) -> None:
    outcome = harnesses[store].crash(scenario, mode, point)
    assert outcome.killed_at is not None, f"no write matched {point.pattern}"
    when, _, change = outcome.killed_at.split(" ", 2)
    assert when == point.when and re.search(point.pattern or "", change.split(" ", 1)[1])
    assert outcome.kill_exit == -9, outcome.problems
    assert outcome.restart_exit == 0, outcome.problems
    assert outcome.ok, outcome.problems
