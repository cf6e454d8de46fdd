"""Compaction: merge the small files lakesink's tables gain at every checkpoint.

Each commit's MERGE writes its checkpoint's rows into the sink table's committed partition
as a new file or two, and each checkpoint appends a small file to the journal (and to a
job's checkpoint table). Left alone, a table that checkpoints every minute holds thousands
of tiny files within days and every reader opens them all. Delta's ``OPTIMIZE`` rewrites
them into few large files. (The journal and the checkpoint table also compact themselves
whenever an append leaves more than ``COMPACT_EVERY`` files, ``lakesink.tables.deltars``:
``lakesink status`` and a sink's opening read them whole, vacuumed or not.)

Safe while writers run: ``OPTIMIZE`` commits with ``dataChange = false``, which Delta checks
at snapshot isolation, so files other writers add meanwhile never conflict with it. It
reads only the files it rewrites: of a sink table, the committed partition alone (the
``WHERE`` names the masking bit, a partition column), which no pre-commit, commit or vacuum
removes files from. A downstream stream of the table skips its commits (no data changed).

Plan, then execute: the plan counts each table's files from its log (delta-rs, no Spark
job), and a dry run is the plan alone.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from pyspark.sql import SparkSession

from lakesink.spark.settings import (
    default_parallelism,
    labelled,
    session_commit_metadata,
    session_conf,
)
from lakesink.spark.sql import delta_path
from lakesink.storage.files import is_delta_table
from lakesink.tables.deltars import file_sizes
from lakesink.tables.format import COMMITTED_ROWS, commit_metadata

__all__ = ["MIN_FILES", "Compaction", "compact", "plan_compaction"]

log = logging.getLogger(__name__)

# Below this many files a part is left alone: readers barely notice a few files, and an
# OPTIMIZE costs Spark jobs (seconds) even when it finds nothing to merge.
MIN_FILES = 8
# Delta's OPTIMIZE aims at files of 1 GiB, so a part smaller than that becomes one file,
# which every reader then scans with one task however many cores it has: compacted that
# way, a table of a million rows read 1.2x slower than the same rows in two files. Files of
# an even share of the part per core keep every core reading, as the rows' first writer
# did; never under what Spark reckons opening a file costs (below it, more files cost more
# than they spread), never over Delta's 1 GiB.
MAX_FILE_BYTES = 1 << 30
MIN_FILE_BYTES = 4 << 20  # spark.sql.files.openCostInBytes' default


@dataclass(frozen=True, kw_only=True)
class Compaction:
    """One table's compaction: planned (``files_before`` only) or done.

    Attributes:
        path: The table.
        what: ``committed rows`` (of a sink table) or ``journal``.
        predicate: The part of the table OPTIMIZE compacts (empty: all of it).
        files_before: Data files in the compacted part when it is compacted (a plan
            counts in those its run adds first).
        bytes_before: Their bytes when planned (what sizes the files OPTIMIZE writes).
        files_removed: Files OPTIMIZE rewrote (0 in a dry run, or when nothing was small).
        files_added: The files it wrote in their place.
    """

    path: str
    what: str
    predicate: str = ""
    files_before: int
    bytes_before: int
    files_removed: int = 0
    files_added: int = 0


def plan_compaction(
    table_path: str,
    journal_path: str | None,
    *,
    min_files: int = MIN_FILES,
    added: Mapping[str, int] | None = None,
) -> list[Compaction]:
    """What a compaction of a sink table would merge, with file counts; changes nothing.

    The sink table's committed partition, and its journal if there is one, each only if it
    holds at least ``min_files`` files. ``added``: files a run adds to a part (by
    ``Compaction.what``) before it compacts, counted in, so that a dry run says what the
    run would rewrite.
    """
    added = added or {}
    committed = file_sizes(table_path, COMMITTED_ROWS)
    parts = [
        Compaction(
            path=table_path,
            what="committed rows",
            predicate=COMMITTED_ROWS.sql(),
            files_before=len(committed) + added.get("committed rows", 0),
            bytes_before=sum(committed),
        )
    ]
    if journal_path and is_delta_table(journal_path):
        journal = file_sizes(journal_path)
        parts.append(
            Compaction(
                path=journal_path,
                what="journal",
                files_before=len(journal) + added.get("journal", 0),
                bytes_before=sum(journal),
            )
        )
    for part in parts:
        if part.files_before < min_files:
            log.info(
                "the %s of %s has %d file(s), fewer than %d: not compacted",
                part.what,
                part.path,
                part.files_before,
                min_files,
            )
    return [part for part in parts if part.files_before >= min_files]


def compact(spark: SparkSession, plan: list[Compaction], *, sink_id: str) -> list[Compaction]:
    """OPTIMIZE each planned table; return what each did."""
    done = []
    for part in plan:
        where = f" WHERE {part.predicate}" if part.predicate else ""
        metadata = commit_metadata("compact", sink_id)
        target = file_target(part.bytes_before, default_parallelism(spark))
        sizes = {  # files of half the target or more are left as they are
            "spark.databricks.delta.optimize.maxFileSize": str(target),
            "spark.databricks.delta.optimize.minFileSize": str(target // 2),
        }
        with (
            session_commit_metadata(spark, metadata),
            session_conf(spark, sizes),
            labelled(spark, sink_id, None, "compact"),
        ):
            metrics = spark.sql(f"OPTIMIZE {delta_path(part.path)}{where}").first()
        stats = metrics["metrics"] if metrics else None
        removed = int(stats["numFilesRemoved"]) if stats else 0
        added = int(stats["numFilesAdded"]) if stats else 0
        log.info(
            "compacted the %s of %s: %d file(s) rewritten into %d (of %d)",
            part.what,
            part.path,
            removed,
            added,
            part.files_before,
        )
        done.append(dataclasses.replace(part, files_removed=removed, files_added=added))
    return done


def file_target(part_bytes: int, cores: int) -> int:
    """The size of the files a compaction of ``part_bytes`` writes for readers of ``cores``
    cores: a share per core, within ``MIN_FILE_BYTES`` and Delta's 1 GiB."""
    cores = max(1, cores)
    # A bin closes once the next file would overflow it, so bins of exactly a share would
    # leave a sliver more files than cores; 5% of slack takes it up when the files are small,
    # which is when compaction runs.
    share = -(-part_bytes // cores) + part_bytes // 20
    return max(MIN_FILE_BYTES, min(MAX_FILE_BYTES, share))
