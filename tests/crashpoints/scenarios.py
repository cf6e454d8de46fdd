"""The scenarios the crash-point harness kills at every durable write, and what each must end as.

Each scenario is a program with up to two phases, run as its own process:

- ``setup`` builds the state the scenario starts from (a held checkpoint, an old table, a
  dead writer's lease); it is run once and never killed, and its lake is copied for each
  crash point;
- ``run`` is what a user or scheduler runs, and runs again after a crash: it is killed at a
  durable write, then started again, and must then finish (exit 0).

``python tests/crashpoints/scenarios.py NAME PHASE --lake LAKE --commit MODE``

What each must end as (``expected``) is checked by the harness with delta-rs, not by these
programs: the user ids visible in each table, each exactly once.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = "id BIGINT, item STRING"
TABLES = ("orders", "totals")
ORDERS_RAW = "order_id BIGINT, customer STRING, amount DOUBLE, ordered_at STRING"


@dataclass(frozen=True)
class Scenario:
    """One scenario: its phases, the commit modes it runs in, and what its tables end as.

    Attributes:
        name: As the harness and its report name it.
        modes: The commit modes it runs in (None: it does not commit).
        expected: Per table (a folder of the lake), the ids visible when it is done.
        setup: Whether it has a setup phase.
        summary: What it does, for the report.
        id_column: The user column that holds the ids.
        one_cut: Two tables of a group, and how many rows of the first each row of the
            second goes with: read together (at one cut) they agree, even right after a
            kill between their publishes.
    """

    name: str
    modes: tuple[str | None, ...]
    expected: dict[str, tuple[int, ...]]
    setup: bool = False
    summary: str = ""
    id_column: str = "id"
    one_cut: tuple[str, str, int] | None = None


def _ids(*ranges: range) -> tuple[int, ...]:
    return tuple(i for r in ranges for i in r)


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "first-open",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 4))},
            summary="a sink's first open (table, journal, view) and first checkpoint",
        ),
        Scenario(
            "micro-batch",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 5))},
            setup=True,
            summary="a streaming micro-batch (jobs/ingest.py, availableNow, file source)",
            id_column="order_id",
        ),
        Scenario(
            "two-table",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 3)), "totals": _ids(range(1, 2))},
            setup=True,
            summary="a two-table checkpoint of the checkpoint coordinator",
            one_cut=("orders", "totals", 2),
        ),
        Scenario(
            "operator-commit",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 4), range(4, 7)), "totals": _ids(range(1, 4), range(4, 7))},
            setup=True,
            one_cut=("orders", "totals", 1),
            summary="`lakesink commit` of a held checkpoint",
        ),
        Scenario(
            "operator-abort",
            (None,),
            {"orders": _ids(range(1, 4)), "totals": _ids(range(1, 4))},
            setup=True,
            one_cut=("orders", "totals", 1),
            summary="`lakesink abort` of a held checkpoint",
        ),
        Scenario(
            "vacuum",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 4), range(7, 10))},
            setup=True,
            summary="`lakesink vacuum`: aborted rows removed, committed rows and the journal "
            "compacted",
        ),
        Scenario(
            "migrate-table",
            (None,),
            {"orders": _ids(range(1, 4))},
            setup=True,
            summary="`lakesink migrate-table` of a format-2 table",
        ),
        Scenario(
            "lease-takeover",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 4), range(4, 7))},
            setup=True,
            summary="a writer takes over the lease (lock) of one that died pre-committed",
        ),
        Scenario(
            "merge-schema",
            ("merge", "metadata"),
            {"orders": _ids(range(1, 4), range(4, 7))},
            setup=True,
            summary="a writer adds a column (merge_schema) and commits a checkpoint",
        ),
    )
}


# ---------------------------------------------------------------- the programs


def _spark():  # type: ignore[no-untyped-def]
    from lakesink.spark.session import spark_session

    spark = spark_session(master="local[1]", app_name="lakesink-crash-points")
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _rows(spark, ids: range, item: str = "x"):  # type: ignore[no-untyped-def]
    return spark.createDataFrame([(i, f"{item}{i}") for i in ids], SCHEMA)


def _join(lake: str, name: str) -> str:
    from lakesink.storage.location import join

    return join(lake, name)


def _committed_checkpoints(table: str) -> set[int]:
    """The sink's checkpoints its journal says are committed (the app's own position)."""
    import lakesink

    return {
        c.checkpoint_id for c in lakesink.Table(table).checkpoints() if c.state.value == "committed"
    }


def _sink(spark, table: str, mode: str, **options):  # type: ignore[no-untyped-def]
    from lakesink.delta.sink import DeltaSink

    return DeltaSink.open(spark, table, schema=SCHEMA, commit=mode, **options)


def _write_batches(spark, table: str, mode: str, batches: list[range], **options) -> None:  # type: ignore[no-untyped-def]
    """A standalone job that writes each batch as one checkpoint, exactly once.

    Its position is the number of checkpoints the journal says are committed: recovery
    (in ``open``) commits what was pre-committed and aborts the rest, so the batches after
    that many are the ones still to write.
    """
    with _sink(spark, table, mode, **options) as sink:
        done = len(_committed_checkpoints(table))
        for batch in batches[done:]:
            sink.write(_rows(spark, batch))
            sink.notify_checkpoint_complete(sink.prepare_commit())


def first_open(lake: str, mode: str) -> None:
    spark = _spark()
    _write_batches(spark, _join(lake, "orders"), mode, [range(1, 4)])


def _landing(lake: str, files: int, per_file: int) -> Path:
    """Landing files of orders 1..files*per_file (JSON lines), local even for an S3 lake."""
    folder = Path(os.environ["CRASH_POINT_LOCAL"]) / "landing"
    folder.mkdir(parents=True, exist_ok=True)
    order = 1
    for n in range(files):
        lines = []
        for _ in range(per_file):
            customer = f"c{order % 2}"
            lines.append(json.dumps({"order_id": order, "customer": customer, "amount": 1.0}))
            order += 1
        (folder / f"orders-{n:03d}.json").write_text("\n".join(lines) + "\n")
    return folder


def micro_batch_setup(lake: str, mode: str) -> None:
    _landing(lake, files=1, per_file=4)


def micro_batch(lake: str, mode: str) -> None:
    command = [
        sys.executable,
        str(ROOT / "jobs" / "ingest.py"),
        "--master",
        "local[1]",
        "--landing",
        str(Path(os.environ["CRASH_POINT_LOCAL"]) / "landing"),
        "--table",
        _join(lake, "orders"),
        "--state",
        _join(lake, "state"),
        "--commit",
        mode,
    ]
    # The job as a scheduler runs it; its exit status is the scenario's.
    sys.exit(subprocess.run(command).returncode)


def two_table_setup(lake: str, mode: str) -> None:
    _landing(lake, files=1, per_file=2)


def two_table(lake: str, mode: str) -> None:
    from pyspark.sql import functions as F

    from lakesink.core import CheckpointCoordinator, Pacing
    from lakesink.delta.sink import DeltaSink
    from lakesink.sources.landing import LandingFolder
    from lakesink.tables.checkpoints import DeltaCheckpointStore

    spark = _spark()
    raw = spark.createDataFrame([], ORDERS_RAW).schema
    landing = str(Path(os.environ["CRASH_POINT_LOCAL"]) / "landing")
    source = LandingFolder(spark, landing, file_format="json", schema=raw)
    sinks = {
        "orders": DeltaSink(spark, _join(lake, "orders"), schema=SCHEMA, commit=mode),
        "totals": DeltaSink(spark, _join(lake, "totals"), schema=SCHEMA, commit=mode),
    }

    def process(frame) -> int:  # type: ignore[no-untyped-def]
        orders = frame.select(F.col("order_id").alias("id"), F.col("customer").alias("item"))
        sinks["orders"].write(orders)
        # One total a checkpoint (a file of 2 orders), numbered by the file from 1.
        first = frame.agg(F.min("order_id")).first()[0]
        batch = (first + 1) // 2
        sinks["totals"].write(_rows(spark, range(batch, batch + 1), "total"))
        return orders.count()

    store = DeltaCheckpointStore(_join(lake, "state"))
    with CheckpointCoordinator(store, job_id="crash", sinks=sinks) as job:
        job.run(source, process, pacing=Pacing(max_items=1))


def _held(spark, lake: str, mode: str) -> None:  # type: ignore[no-untyped-def]
    """A group of two tables (as one job's): checkpoint 1 committed in both and its cut
    recorded, checkpoint 2 pre-committed and held for an operator in both (as the
    validation gate of one table holds a checkpoint in every table of its job)."""
    from lakesink.core import TxnState
    from lakesink.core.checkpointing import GlobalCommitter, pre_commit_all

    sinks = {
        name: _sink(spark, _join(lake, name), mode or "merge") for name in ("orders", "totals")
    }
    for checkpoint, batch in ((1, range(1, 4)), (2, range(4, 7))):
        for sink in sinks.values():
            sink.write(_rows(spark, batch))
        pre_commit_all(sinks, checkpoint)
    GlobalCommitter(sinks, group_id="held-job").commit(1)
    for sink in sinks.values():
        sink.withhold(2, TxnState.HELD, "waits for an operator")
        sink.close()


def operator_setup(lake: str, mode: str) -> None:
    _held(_spark(), lake, mode)


def _lakesink(*args: str) -> None:
    command = [sys.executable, "-m", "lakesink.cli", *args]
    sys.exit(subprocess.run(command).returncode)


def operator_commit(lake: str, mode: str) -> None:
    _lakesink("commit", _join(lake, "orders"), "--checkpoint", "2", "--mode", mode, "--yes")


def operator_abort(lake: str, mode: str) -> None:
    _lakesink("abort", _join(lake, "orders"), "--checkpoint", "2", "--yes")


def vacuum_setup(lake: str, mode: str) -> None:
    """Checkpoint 1 committed, 2 aborted (rows masked), 3 committed; many journal files."""
    spark = _spark()
    table = _join(lake, "orders")
    with _sink(spark, table, mode) as sink:
        for batch, commit in ((range(1, 4), True), (range(4, 7), False), (range(7, 10), True)):
            sink.write(_rows(spark, batch))
            checkpoint = sink.prepare_commit()
            if commit:
                sink.notify_checkpoint_complete(checkpoint)
            else:
                sink.withhold(checkpoint, _aborted(), "aborted for the vacuum to remove")


def _aborted():  # type: ignore[no-untyped-def]
    from lakesink.core import TxnState

    return TxnState.ABORTED


def vacuum(lake: str, mode: str) -> None:
    _lakesink(
        "vacuum",
        _join(lake, "orders"),
        "--retain-hours",
        "0",
        "--allow-short-retention",
        "--compact-min-files",
        "2",
    )


def migrate_setup(lake: str, mode: str) -> None:
    """A table laid out as format 1 did: partitioned by checkpoint and transaction id, each
    row carrying both (its committed rows' transaction ids made up: only a pending row's
    says which transaction it belongs to)."""
    from pyspark.sql import functions as F

    from lakesink.tables.format import CHECKPOINT_ID, FORMAT_PROPERTY, VISIBLE

    spark = _spark()
    table = _join(lake, "orders")
    _write_batches(spark, table, "merge", [range(1, 4)])
    txn_id = F.concat(F.lit("migrated-"), F.col(CHECKPOINT_ID).cast("string"))
    (
        spark.read.format("delta")
        .load(table)
        .select(CHECKPOINT_ID, txn_id.alias("_lakesink_txn_id"), VISIBLE, "id", "item")
        .write.format("delta")
        .mode("overwrite")
        .option("overwriteSchema", "true")
        .partitionBy(CHECKPOINT_ID, "_lakesink_txn_id")
        .save(table)
    )
    spark.sql(f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('{FORMAT_PROPERTY}' = '1')")


def migrate_table(lake: str, mode: str) -> None:
    _lakesink("migrate-table", _join(lake, "orders"))


def lease_setup(lake: str, mode: str) -> None:
    """A writer that pre-committed checkpoint 2 and died holding its lock or lease."""
    spark = _spark()
    table = _join(lake, "orders")
    sink = _sink(spark, table, mode)
    sink.write(_rows(spark, range(1, 4)))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(_rows(spark, range(4, 7)))
    sink.prepare_commit()
    os._exit(0)  # no release, no close: as a process that died


def lease_takeover(lake: str, mode: str) -> None:
    spark = _spark()
    _write_batches(spark, _join(lake, "orders"), mode, [range(1, 4), range(4, 7)])


def merge_schema_setup(lake: str, mode: str) -> None:
    spark = _spark()
    _write_batches(spark, _join(lake, "orders"), mode, [range(1, 4)])


def merge_schema(lake: str, mode: str) -> None:
    from lakesink.delta.sink import DeltaSink

    spark = _spark()
    table = _join(lake, "orders")
    wider = f"{SCHEMA}, note STRING"
    with DeltaSink.open(spark, table, schema=wider, commit=mode, merge_schema=True) as sink:
        if len(_committed_checkpoints(table)) < 2:
            rows = [(i, f"x{i}", "added") for i in range(4, 7)]
            sink.write(spark.createDataFrame(rows, wider))
            sink.notify_checkpoint_complete(sink.prepare_commit())


PROGRAMS: dict[tuple[str, str], Callable[[str, str], None]] = {
    ("first-open", "run"): first_open,
    ("micro-batch", "setup"): micro_batch_setup,
    ("micro-batch", "run"): micro_batch,
    ("two-table", "setup"): two_table_setup,
    ("two-table", "run"): two_table,
    ("operator-commit", "setup"): operator_setup,
    ("operator-commit", "run"): operator_commit,
    ("operator-abort", "setup"): operator_setup,
    ("operator-abort", "run"): operator_abort,
    ("vacuum", "setup"): vacuum_setup,
    ("vacuum", "run"): vacuum,
    ("migrate-table", "setup"): migrate_setup,
    ("migrate-table", "run"): migrate_table,
    ("lease-takeover", "setup"): lease_setup,
    ("lease-takeover", "run"): lease_takeover,
    ("merge-schema", "setup"): merge_schema_setup,
    ("merge-schema", "run"): merge_schema,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenario", choices=sorted(SCENARIOS))
    parser.add_argument("phase", choices=["setup", "run"])
    parser.add_argument("--lake", required=True)
    parser.add_argument("--commit", default="merge")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    PROGRAMS[(args.scenario, args.phase)](args.lake, args.commit)


if __name__ == "__main__":
    main()
