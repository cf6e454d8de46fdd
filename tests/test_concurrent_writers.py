"""Two writer processes of one table, the vacuum racing them, on local disk (committing by
MERGE) and on S3 (committing by metadata).

Each writer is a process of its own with its own Spark driver (what two jobs on two
machines are: on S3 nothing but the store's conditional writes keeps their Delta commits
apart). Each commits checkpoints of its own order ids, and once aborts a transaction of
"poison" ids (written, then the sink closed before its checkpoint). Meanwhile this process
runs the vacuum over the table again and again: it deletes aborted rows and compacts the
committed partition and the journal while both writers append and commit. Each writer
goes on after its abort only once a vacuum run has begun since (a marker file each way),
so the vacuum's removal lands between the writer's commits, as the table's log shows.

How the test knows nothing was lost or duplicated: at the end the committed rows are
exactly the ids of every checkpoint the writers reported committed, each once; no poison
id is visible and none is left in the table after a last vacuum; each writer's journal
states agree with what it reported; and the audit's exactly-once checks pass.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest

from lakesink import committed
from lakesink.core import TxnState
from lakesink.delta.sink import DeltaSink
from lakesink.ops.audit import audit_table, raise_on_failures
from lakesink.ops.status import sink_status
from lakesink.ops.vacuum import vacuum
from lakesink.storage.location import join
from lakesink.tables.history import read_history

pytestmark = pytest.mark.slow

SCHEMA = "order_id BIGINT, writer STRING"
CHECKPOINTS, ROWS = 3, 10
# Between vacuum runs: back to back, they starve the two writers of the 2 cores.
VACUUM_PAUSE_S = 3.0
WRITERS = {"a": 1_000, "b": 2_000}  # each writer's first order id
POISON = 9_000  # only ever in aborted transactions

WRITER = """
import os, sys, time
from lakesink import spark_session
from lakesink.delta.sink import DeltaSink
table, writer, first, checkpoints, rows, poison, commit, signals = sys.argv[1:9]
first, checkpoints, rows, poison = int(first), int(checkpoints), int(rows), int(poison)
spark = spark_session(master="local[1]", conf={"spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1", "spark.databricks.delta.snapshotPartitions": "1"})
schema = "order_id BIGINT, writer STRING"
def frame(ids):
    return spark.createDataFrame([(i, writer) for i in ids], schema)
def open_sink():
    return DeltaSink.open(spark, table, writer_id=writer, view_name="v_" + writer, commit=commit)
sink = open_sink()
for k in range(checkpoints):
    ids = range(first + k * rows, first + (k + 1) * rows)
    sink.write(frame(ids))
    checkpoint = sink.prepare_commit()
    sink.notify_checkpoint_complete(checkpoint)
    print("committed", checkpoint, ids.start, ids.stop, flush=True)
    if k == 1:  # an abandoned transaction for the vacuum to remove
        sink.write(frame(range(poison, poison + rows)))
        sink.close()
        print("aborted", flush=True)
        sink = open_sink()
        # Wait until the test's vacuum has run since the abort: its removal then lands
        # between this writer's commits.
        open(os.path.join(signals, "aborted-" + writer), "w").close()
        deadline = time.monotonic() + 600
        while not os.path.exists(os.path.join(signals, "go-" + writer)):
            assert time.monotonic() < deadline, "no vacuum ran after the abort"
            time.sleep(0.1)
sink.close()
"""


def test_two_writer_processes_and_a_racing_vacuum_keep_every_row_once(spark, lake, tmp_path):
    table = join(lake, "orders")
    # One commit mode a store, no more runs: the MERGE on local disk, metadata on S3.
    commit = "metadata" if lake.startswith("s3a://") else "merge"
    DeltaSink.open(spark, table, schema=SCHEMA, view_name="v_race", commit=commit).close()
    logs = {w: open(tmp_path / f"{w}.err", "w") for w in WRITERS}  # noqa: SIM115
    writers = {
        w: subprocess.Popen(
            [sys.executable, "-c", WRITER, table, w]
            + [str(n) for n in (first, CHECKPOINTS, ROWS, POISON + first)]
            + [commit, str(tmp_path)],
            stdout=subprocess.PIPE,
            stderr=logs[w],
            text=True,
            env=os.environ.copy(),
        )
        for w, first in WRITERS.items()
    }
    removed = 0
    try:
        deadline = time.monotonic() + 900
        while any(p.poll() is None for p in writers.values()) and time.monotonic() < deadline:
            aborted = [w for w in WRITERS if (tmp_path / f"aborted-{w}").exists()]
            removed += vacuum(spark, table, compact_min_files=2).rows_removed
            for w in aborted:  # this run began after the abort: the writer goes on
                (tmp_path / f"go-{w}").touch()
            time.sleep(VACUUM_PAUSE_S)
    finally:
        for process in writers.values():
            if process.poll() is None:
                process.kill()
            process.wait()
        for log in logs.values():
            log.close()
    outputs = {w: p.stdout.read().splitlines() for w, p in writers.items()}
    for w, process in writers.items():
        assert process.returncode == 0, (tmp_path / f"{w}.err").read_text()[-3000:]
    removed += vacuum(spark, table, compact_min_files=2).rows_removed

    expected: Counter[int] = Counter()
    for lines in outputs.values():
        for line in lines:
            if line.startswith("committed"):
                _, _, start, stop = line.split()
                expected.update(range(int(start), int(stop)))
    assert sum(expected.values()) == len(WRITERS) * CHECKPOINTS * ROWS
    visible = Counter(r.order_id for r in committed(spark, table).collect())
    assert visible == expected, "a committed row was lost or duplicated"
    raw = spark.read.format("delta").load(table)
    assert raw.where(f"order_id >= {POISON}").count() == 0, "aborted rows were left behind"
    assert removed == len(WRITERS) * ROWS
    # The race, from the table's log: a change the vacuum made (its DELETE of aborted
    # rows, a compaction) landed between two of the writers' commits.
    history = read_history(table)
    writes = [e.version for e in history if e.lakesink in ("write", "commit")]
    by_vacuum = [e.version for e in history if e.lakesink in ("vacuum", "compact")]
    assert any(writes[0] < v < writes[-1] for v in by_vacuum), (
        f"the vacuum did not race the writers: its versions {by_vacuum}, theirs {writes}"
    )

    status = sink_status(table)
    for w in WRITERS:
        mine = [t for t in (*status.committed, *status.aborted) if t.writer_id == w]
        assert Counter(t.state for t in mine) == {
            TxnState.COMMITTED: CHECKPOINTS,
            TxnState.ABORTED: 1,
        }
    assert status.pending == () and status.held == ()
    # The auditors' checks (what notebooks/audit.ipynb runs) agree, on either store.
    report = audit_table(spark, table)
    assert len(report.timeline) == len(WRITERS) * (CHECKPOINTS + 1)
    raise_on_failures([report])
