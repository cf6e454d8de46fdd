"""The benchmark suite: what exactly-once costs compared with a plain Delta append.

    python -m benchmarks.run                # the full run: docs/bench.json, docs/bench.png
    python -m benchmarks.run --quick --out .cache/bench-quick   # CI-sized, ~1-2 minutes

One Spark session (``local[*]``, UI off), the same generated rows (cached first, so
generating them is never measured) and, in one run:

1. Write path: plain append vs pre-commit vs pre-commit + commit of N rows.
2. Commit cost vs checkpoint size.
3. Commit cost vs table history (committed checkpoints already in the table).
4. Reader overhead: committed view vs plain Delta, with and without masked rows.
5. Vacuum cost: one aborted checkpoint, in tables of growing size.
6. Micro-batch cost: StreamingSink vs Delta's idempotent foreachBatch write.
7. A whole checkpoint of two sinks through the coordinator vs two plain appends.
8. Readers of a table of many checkpoints, before and after lakesink's compaction.
9. Pre-commit, commit and a micro-batch on an S3 server vs the same work on local disk.
10. A group's tables read at one cut vs at their latest versions; what recording it costs.
11. A scheduled availableNow run into an existing table (opening included) vs foreachBatch.
12. The published table: its update after a commit (by size, by history), and reading it by
    path with Spark vs a plain Delta table.
13. Peak memory (JVM heap, JVM and Python resident sets) of a checkpoint vs an idempotent
    append of the same rows.
14. Deletion vectors in committed files (a user's DELETE): the published table's purged
    copies vs Delta's REORG PURGE, reading it vs the table with the vectors, a checkpoint
    into a table with them vs one without.

Every section that commits does so in a table of each commit mode (MERGE and metadata): the
mode is a table property, recorded when a table is created. Sections 1, 2, 3 and 12 share
their measurements: section 12's update costs are timed inside the commits of sections 1
and 3, so asking for section 12 alone measures theirs too.

Section 9 starts a SeaweedFS S3 server on loopback in the run's workspace folder (its data on
the same disk), and the run's one session then reaches it too: its ratios show what
object-store semantics cost (many small requests, conditional creates), not network latency.

Every figure is a median of repetitions and a ratio to a baseline measured in the same run
(plain Delta work; for section 9, local disk). It reports; it asserts no speed.
``--conf key=value`` passes Spark settings, so the effect of a setting can be measured with
the same suite.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from pyspark.sql import SparkSession
from servers.s3 import S3Server

from benchmarks import (
    accumulated,
    checkpoint,
    cut,
    history,
    memory,
    object_store,
    published,
    reader,
    scheduled,
    streaming,
    vectors,
    write_path,
)
from benchmarks.harness import (
    REPO,
    Folders,
    LoadSampler,
    Workspace,
    cached_rows,
    create_plain_table,
    machine,
    open_sink,
    plain_append,
)
from benchmarks.report import Section, render_text, write_json, write_png
from lakesink.errors import ConfigurationError
from lakesink.spark.session import spark_session

__all__ = ["FULL", "QUICK", "SECTIONS", "Suite", "main", "run", "warm_up"]

log = logging.getLogger("benchmarks")


@dataclass(frozen=True, kw_only=True)
class Suite:
    """The sizes of one run.

    Attributes:
        write_rows: Rows per write for sections 1 and 12 (the published table's update).
        commit_rows: Checkpoint sizes for section 2 (measured with section 1's sizes).
        history: Committed checkpoints in the table at each point of sections 3, 5 and 12.
        history_rows: Rows per checkpoint in sections 3, 5 and 12.
        reader_checkpoints: Committed checkpoints the reader tables of sections 4 and 12
            hold.
        reader_rows: Rows per checkpoint in sections 4 and 12.
        stream_rows: Rows per micro-batch in section 6.
        stream_batches: Micro-batches per query in section 6.
        checkpoint_rows: Rows per sink and checkpoint in section 7.
        checkpoints: Checkpoints per repetition in section 7.
        accumulated_rows: Rows of the tables of section 8.
        accumulated: Committed checkpoints those rows are spread over, per point.
        accumulated_built: The points of ``accumulated`` whose table is built directly in
            the layout its commits would leave, not written through a sink (section 8's
            docstring says why).
        object_store_rows: Rows per pre-commit, and per micro-batch, in section 9 (which
            takes its batches a query from ``stream_batches``).
        cut_rows: Rows per checkpoint of each table in section 10 (which takes its
            checkpoints from ``checkpoints``).
        scheduled_rows: Rows per batch in section 11 (which takes its batches a run from
            ``stream_batches``).
        memory_rows: Rows of the checkpoint whose peak memory section 13 measures.
        repetitions: Timed repetitions behind each median.
    """

    write_rows: tuple[int, ...]
    commit_rows: tuple[int, ...]
    history: tuple[int, ...]
    history_rows: int
    reader_checkpoints: int
    reader_rows: int
    stream_rows: tuple[int, ...]
    stream_batches: int
    checkpoint_rows: tuple[int, ...]
    checkpoints: int
    accumulated_rows: int
    accumulated: tuple[int, ...]
    accumulated_built: tuple[int, ...]
    object_store_rows: tuple[int, ...]
    cut_rows: tuple[int, ...]
    scheduled_rows: tuple[int, ...]
    memory_rows: int
    repetitions: int


FULL = Suite(
    write_rows=(10_000, 100_000, 1_000_000, 10_000_000),
    commit_rows=(10_000, 100_000, 1_000_000, 10_000_000),
    history=(1, 10, 100),
    history_rows=10_000,
    reader_checkpoints=10,
    reader_rows=100_000,
    stream_rows=(10_000, 100_000, 1_000_000),
    stream_batches=4,
    checkpoint_rows=(10_000, 100_000),
    checkpoints=4,
    accumulated_rows=1_000_000,
    accumulated=(10, 1_000, 5_000),
    accumulated_built=(5_000,),
    object_store_rows=(100_000, 1_000_000),
    cut_rows=(100_000, 1_000_000),
    scheduled_rows=(10_000, 100_000, 1_000_000),
    memory_rows=10_000_000,
    repetitions=3,
)
QUICK = Suite(
    write_rows=(10_000,),
    commit_rows=(10_000,),
    history=(1, 2),
    history_rows=5_000,
    reader_checkpoints=2,
    reader_rows=10_000,
    stream_rows=(10_000,),
    stream_batches=2,
    checkpoint_rows=(10_000,),
    checkpoints=2,
    accumulated_rows=50_000,
    accumulated=(10, 200),
    accumulated_built=(200,),
    object_store_rows=(10_000,),
    cut_rows=(10_000,),
    scheduled_rows=(10_000,),
    memory_rows=10_000,
    repetitions=1,
)

SESSION_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    # The full run caches 10M rows; Spark's default 1g heap would spill them to disk.
    "spark.driver.memory": "6g",
}


SECTIONS = (
    "write_path",
    "commit_vs_size",
    "commit_vs_history",
    "reader",
    "vacuum",
    "streaming",
    "checkpoint",
    "accumulated",
    "object_store",
    "cut",
    "scheduled",
    "published",
    "memory",
    "vectors",
)


def run(
    spark: SparkSession,
    suite: Suite,
    workspace: Workspace,
    sections: Sequence[str] = SECTIONS,
    server: S3Server | None = None,
) -> list[Section]:
    """Measure the ``sections`` in ``spark``; return them in the issue's order.

    ``server`` is the S3 server of section 9 (``object_store.s3_server``), which ``spark``
    must reach (built with its ``storage_options()``).

    Raises:
        ConfigurationError: Section 9 is asked for without a server.
    """
    if "object_store" in sections and server is None:
        raise ConfigurationError("the object_store section needs an S3 server (server=...)")
    warm_up(spark, workspace)
    found: dict[str, Section] = {}
    written: list[write_path.WritePoint] = []
    grown: list[history.HistoryPoint] = []
    if {"write_path", "commit_vs_size", "published"} & set(sections):
        log.info("1-2. write path and commit by size: %s rows", sorted({*suite.write_rows}))
        points = write_path.measure(
            spark, workspace, [*suite.write_rows, *suite.commit_rows], suite.repetitions
        )
        written = [points[n] for n in suite.write_rows]
        found["write_path"] = write_path.write_path_section(written)
        found["commit_vs_size"] = write_path.commit_section([points[n] for n in suite.commit_rows])
    if {"commit_vs_history", "vacuum", "published"} & set(sections):
        small = cached_rows(spark, suite.history_rows)
        log.info("3, 5. commit and vacuum vs history: %s checkpoints", list(suite.history))
        grown = history.measure(
            spark, workspace, small, suite.history_rows, suite.history, suite.repetitions
        )
        small.unpersist()
        found["commit_vs_history"] = history.commit_history_section(grown, suite.history_rows)
        found["vacuum"] = history.vacuum_section(grown, suite.history_rows)
    if "reader" in sections:
        rows = cached_rows(spark, suite.reader_rows)
        log.info(
            "4. readers: %d checkpoints of %d rows", suite.reader_checkpoints, suite.reader_rows
        )
        read = reader.measure(
            spark, workspace, rows, suite.reader_rows, suite.reader_checkpoints, suite.repetitions
        )
        rows.unpersist()
        found["reader"] = reader.reader_section(read)
    if "streaming" in sections:
        log.info("6. micro-batches of %s rows", list(suite.stream_rows))
        streamed = streaming.measure(
            spark, workspace, suite.stream_rows, suite.stream_batches, suite.repetitions
        )
        found["streaming"] = streaming.streaming_section(streamed)
    if "checkpoint" in sections:
        log.info("7. checkpoints of two sinks, %s rows each", list(suite.checkpoint_rows))
        whole = checkpoint.measure(
            spark, workspace, suite.checkpoint_rows, suite.checkpoints, suite.repetitions
        )
        found["checkpoint"] = checkpoint.checkpoint_section(whole)
    if "accumulated" in sections:
        rows = cached_rows(spark, suite.accumulated_rows)
        log.info("8. readers over %s checkpoints", list(suite.accumulated))
        many = accumulated.measure(
            spark,
            workspace,
            rows,
            suite.accumulated,
            suite.repetitions,
            built=suite.accumulated_built,
        )
        rows.unpersist()
        found["accumulated"] = accumulated.accumulated_section(many)
    if "object_store" in sections:
        assert server is not None
        log.info("9. on S3 vs local disk: %s rows", list(suite.object_store_rows))
        stored = object_store.measure(
            spark,
            workspace,
            server,
            suite.object_store_rows,
            suite.stream_batches,
            suite.repetitions,
        )
        found["object_store"] = object_store.object_store_section(stored)
    if "cut" in sections:
        log.info("10. a group's tables at one cut: %s rows a checkpoint", list(suite.cut_rows))
        at_cut = cut.measure(spark, workspace, suite.cut_rows, suite.checkpoints, suite.repetitions)
        found["cut"] = cut.cut_section(at_cut)
    if "scheduled" in sections:
        log.info("11. scheduled runs into existing tables: %s rows", list(suite.scheduled_rows))
        ran = scheduled.measure(
            spark, workspace, suite.scheduled_rows, suite.stream_batches, suite.repetitions
        )
        found["scheduled"] = scheduled.scheduled_section(ran)
    if "published" in sections:
        rows = cached_rows(spark, suite.reader_rows)
        log.info(
            "12. published tables: %d checkpoints of %d rows",
            suite.reader_checkpoints,
            suite.reader_rows,
        )
        reads = published.measure(
            spark, workspace, rows, suite.reader_rows, suite.reader_checkpoints, suite.repetitions
        )
        rows.unpersist()
        found["published"] = published.published_section(written, grown, reads, suite.history_rows)
    if "memory" in sections:
        log.info("13. peak memory of a checkpoint of %d rows", suite.memory_rows)
        peaks = memory.measure(spark, workspace, suite.memory_rows, suite.repetitions)
        found["memory"] = memory.memory_section(peaks)
    if "vectors" in sections:
        rows = cached_rows(spark, suite.reader_rows)
        log.info(
            "14. deletion vectors: %d checkpoints of %d rows",
            suite.reader_checkpoints,
            suite.reader_rows,
        )
        points = vectors.measure(
            spark, workspace, rows, suite.reader_rows, suite.reader_checkpoints, suite.repetitions
        )
        rows.unpersist()
        found["vectors"] = vectors.vectors_section(points)
    return [found[key] for key in SECTIONS if key in sections]


def warm_up(spark: SparkSession, workspace: Folders) -> None:
    """One untimed round of everything, so the JVM's first-use costs are not measured."""
    folder = workspace.folder("warm-up")
    rows = cached_rows(spark, 1_000)
    create_plain_table(spark, f"{folder}/plain", rows.schema)
    plain_append(rows, f"{folder}/plain")
    with open_sink(spark, f"{folder}/events", rows.schema) as sink:
        sink.write(rows)
        sink.notify_checkpoint_complete(sink.prepare_commit())
    rows.unpersist()
    workspace.drop(folder)


def _conf(pairs: list[str]) -> dict[str, str]:
    conf = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigurationError(f"--conf {pair!r} is not key=value")
        conf[key.strip()] = value.strip()
    return conf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="CI-sized data, fewer repetitions")
    parser.add_argument("--out", type=Path, help="folder for bench.json and bench.png")
    parser.add_argument("--repetitions", type=int, help="override the suite's repetitions")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=SECTIONS,
        default=list(SECTIONS),
        metavar="SECTION",
        help=f"measure only these ({', '.join(SECTIONS)}; default: all)",
    )
    parser.add_argument("--work-dir", help="where the tables go (default: system temp)")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE", help="a Spark setting"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("lakesink").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)  # a line per listener callback
    suite = QUICK if args.quick else FULL
    if args.repetitions:
        suite = Suite(**{**asdict(suite), "repetitions": args.repetitions})
    out = args.out or (REPO / (".cache/bench-quick" if args.quick else "docs"))
    conf = _conf(args.conf)

    started = time.perf_counter()
    store: dict[str, str] = {}
    with ExitStack() as stack:  # ends in reverse: the session, the S3 server, the workspace
        workspace = Workspace(args.work_dir)
        stack.callback(workspace.close)
        server = None
        if "object_store" in args.sections:  # before the session, which must reach it
            server = stack.enter_context(object_store.s3_server(workspace))
            store = object_store.describe(server)
        spark = spark_session(
            app_name="lakesink-bench",
            conf={**SESSION_CONF, **conf},
            ivy_dir=os.environ.get("LAKESINK_IVY_DIR"),
            storage=server.storage_options() if server else None,
        )
        stack.callback(spark.stop)
        spark.sparkContext.setLogLevel("ERROR")
        about = machine(spark)
        with LoadSampler() as load:
            sections = run(spark, suite, workspace, args.sections, server)
    header = {
        "mode": "quick" if args.quick else "full",
        "machine": about,
        "repetitions": suite.repetitions,
        "suite": asdict(suite),
        "conf": conf,
        **({"object_store": store} if store else {}),
        "load": load.summary(),
        "duration_s": round(time.perf_counter() - started, 1),
    }
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "bench.json", header, sections)
    write_png(out / "bench.png", header, sections)
    print(render_text(header, sections))
    print(f"\nwritten: {out / 'bench.json'}, {out / 'bench.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
