"""A checkpoint table of format 1 (lakesink 0.1): refused with a clear error, then migrated.

The job runs two checkpoints, then its checkpoint table is rewritten the way lakesink 0.1
kept it (``files``, ``quarantined`` and ``row_count`` columns, no format property). How the
tests know nothing is lost: the migrated records equal the ones written before, and the
job resumed after the migration reads only the files it had not consumed, each order once.
"""

from __future__ import annotations

import json
import shutil
from collections import Counter
from pathlib import Path

import pytest

from lakesink import committed
from lakesink.cli import main
from lakesink.core import CheckpointCoordinator, Pacing
from lakesink.delta.sink import DeltaSink
from lakesink.errors import FormatVersionError, TableNotFoundError
from lakesink.jobs.ingest import RAW_SCHEMA
from lakesink.sources.landing import LandingFolder
from lakesink.tables.checkpoints import DeltaCheckpointStore, checkpoints_path

FORMAT_1_SCHEMA = (
    "job_id STRING NOT NULL, checkpoint_id BIGINT NOT NULL, completed_at TIMESTAMP NOT NULL, "
    "source_position STRING NOT NULL, sink_states STRING NOT NULL, files STRING NOT NULL, "
    "quarantined STRING NOT NULL, row_count BIGINT NOT NULL"
)


def add_files(landing: Path, first: int, count: int) -> None:
    for n in range(first, first + count):
        order = {"order_id": n, "customer": "c", "amount": 1.0, "ordered_at": None}
        (landing / f"{n:04d}.json").write_text(json.dumps(order) + "\n")


def run_job(spark, work: Path) -> int:
    raw = spark.createDataFrame([], RAW_SCHEMA).schema
    source = LandingFolder(spark, str(work / "landing"), file_format="json", schema=raw)
    sink = DeltaSink(spark, str(work / "orders"), schema=raw, view_name="v_migrate")
    store = DeltaCheckpointStore(str(work / "state"))

    def process(frame) -> int:
        sink.write(frame)
        return frame.count()

    with CheckpointCoordinator(store, job_id="ingest", sinks={"orders": sink}) as job:
        return job.run(source, process, pacing=Pacing(max_items=2))


def downgrade(spark, work: Path) -> None:
    """Rewrite the checkpoint table as lakesink 0.1 kept it."""
    path = checkpoints_path(str(work / "state"))
    rows = [
        (
            r.job_id,
            r.checkpoint_id,
            r.completed_at,
            r.source_position,
            json.dumps(dict(r.sink_states)),
            json.dumps(list(r.items)),
            json.dumps([[q.item, q.reason] for q in r.quarantined]),
            r.rows,
        )
        for r in DeltaCheckpointStore(str(work / "state")).history("ingest")
    ]
    shutil.rmtree(path)
    spark.createDataFrame(rows, FORMAT_1_SCHEMA).write.format("delta").save(path)


@pytest.fixture
def work(spark, tmp_path: Path) -> Path:
    (tmp_path / "landing").mkdir()
    add_files(tmp_path / "landing", 1, 4)
    assert run_job(spark, tmp_path) == 2
    return tmp_path


def test_a_format_1_checkpoint_table_is_refused_then_migrated_and_the_job_resumes(
    spark, work, capsys
):
    state = str(work / "state")
    before = DeltaCheckpointStore(state).history("ingest")
    downgrade(spark, work)

    with pytest.raises(FormatVersionError, match=r"format 1.*lakesink migrate-checkpoints"):
        DeltaCheckpointStore(state)

    assert main(["migrate-checkpoints", state, "--dry-run"]) == 0
    assert "DRY RUN: would be" in capsys.readouterr().out
    with pytest.raises(FormatVersionError):  # the dry run changed nothing
        DeltaCheckpointStore(state)

    assert main(["migrate-checkpoints", state]) == 0
    assert "2 checkpoint record(s) of job(s) ingest" in capsys.readouterr().out
    assert DeltaCheckpointStore(state).history("ingest") == before
    assert (work / "state" / "checkpoints.format1" / "_delta_log").is_dir()
    assert main(["migrate-checkpoints", state]) == 0
    assert "nothing to do" in capsys.readouterr().out

    add_files(work / "landing", 5, 2)
    assert run_job(spark, work) == 1  # only the two new files
    ids = Counter(r.order_id for r in committed(spark, str(work / "orders")).collect())
    assert ids == Counter(range(1, 7))


def test_a_migration_cut_short_is_refused_by_the_job_and_finished_by_running_it_again(
    spark, work, capsys
):
    state = work / "state"
    before = DeltaCheckpointStore(str(state)).history("ingest")
    downgrade(spark, work)
    main(["migrate-checkpoints", str(state)])
    # As if it had died between renaming the old table away and the new one into place.
    (state / "checkpoints").rename(state / "checkpoints.migrating")

    with pytest.raises(TableNotFoundError, match=r"being migrated.*migrate-checkpoints"):
        DeltaCheckpointStore(str(state))

    assert main(["migrate-checkpoints", str(state)]) == 0
    assert "finished a migration that was cut short" in capsys.readouterr().out
    assert DeltaCheckpointStore(str(state)).history("ingest") == before
