"""The checkpoint coordinator over real Delta sinks and a landing folder, crashed and
restarted in this process (the engine-free logic is in ``tests/core``; the streaming job's
real-process kills are in ``test_ingest_crash.py``).

A crash is an exception from the coordinator's step hook; the restart is a new coordinator
over the same state folder, table and landing folder. How the test knows nothing is lost
or duplicated: every order is committed once, and ``lakesink checkpoints``, ``lakesink
status`` and the journal name the same checkpoint ids.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from lakesink import committed
from lakesink.cli import main
from lakesink.core import CheckpointCoordinator, Pacing, TxnState, step_hook
from lakesink.delta.sink import DeltaSink
from lakesink.jobs.ingest import ORDERS_SCHEMA, RAW_SCHEMA, transform
from lakesink.sources.landing import LandingFolder
from lakesink.tables.checkpoints import DeltaCheckpointStore
from lakesink.tables.journal import Journal, default_journal_path


class Crash(BaseException):
    """A process death at a protocol step."""


def run_job(spark, work: Path, crash_at: tuple[str, int] | None = None) -> None:
    def hook(step: str, checkpoint_id: int) -> None:
        if (step, checkpoint_id) == crash_at:
            raise Crash(f"{step}@{checkpoint_id}")

    sinks = {
        "orders": DeltaSink(spark, str(work / "orders"), schema=ORDERS_SCHEMA, view_name="v_co")
    }
    raw = spark.createDataFrame([], RAW_SCHEMA).schema
    source = LandingFolder(spark, str(work / "landing"), file_format="json", schema=raw)
    store = DeltaCheckpointStore(str(work / "state"))

    def process(frame) -> int:
        orders = transform(frame)
        sinks["orders"].write(orders)
        return orders.count()

    with step_hook(hook):
        job = CheckpointCoordinator(store, job_id="landing", sinks=sinks)
    try:
        job.run(source, process, pacing=Pacing(max_items=1))
    except Crash:
        store.job_lock("landing").release()  # the process died: its locks go with it
        for sink in sinks.values():
            sink._release()
        return
    job.close()


def test_crashes_before_and_after_the_record_and_every_tool_names_the_same_ids(
    spark, tmp_path, capsys
):
    landing = tmp_path / "landing"
    landing.mkdir()
    for n in range(3):
        (landing / f"f{n}.json").write_text(
            "".join(json.dumps({"order_id": n * 10 + i, "customer": "c"}) + "\n" for i in range(5))
        )
    run_job(spark, tmp_path, ("after_record", 2))  # 1 committed; 2 recorded, not committed
    run_job(spark, tmp_path, ("after_pre_commit", 3))  # 2 committed on restart; 3 not recorded
    run_job(spark, tmp_path)  # 3 aborted; its file is read again as checkpoint 4

    ids = Counter(r.order_id for r in committed(spark, str(tmp_path / "orders")).collect())
    assert ids == Counter(n * 10 + i for n in range(3) for i in range(5))

    assert (
        main(["checkpoints", "--state", str(tmp_path / "state"), "--job-id", "landing", "--json"])
        == 0
    )
    assert [r["checkpoint_id"] for r in json.loads(capsys.readouterr().out)] == [1, 2, 4]
    assert main(["status", str(tmp_path / "orders"), "--json"]) == 0
    (status,) = json.loads(capsys.readouterr().out)["sinks"]
    assert status["last_committed_checkpoint"] == 4
    assert [t["checkpoint_id"] for t in status["aborted"]] == [3]
    journal = Journal(default_journal_path(str(tmp_path / "orders")), create=False)
    done = [
        t.checkpoint_id for t in journal.transactions("orders") if t.state is TxnState.COMMITTED
    ]
    assert done == [1, 2, 4]
