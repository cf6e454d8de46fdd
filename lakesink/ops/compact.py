"""Compaction: merge the small files lakesink's tables gain at every checkpoint.

Each commit's MERGE writes its checkpoint's rows into the sink table's committed partition
as a new file or two, and each checkpoint appends a small file to the journal (and to a
job's checkpoint table). Left alone, a table that checkpoints every minute holds thousands
of tiny files within days and every reader opens them all. Delta's ``OPTIMIZE`` rewrites
them into few large files.

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

from lakesink.spark.settings import labelled, session_commit_metadata
from lakesink.spark.sql import delta_path
from lakesink.storage.files import is_delta_table
from lakesink.tables.deltars import file_count
from lakesink.tables.format import COMMITTED_ROWS, commit_metadata

__all__ = ["MIN_FILES", "Compaction", "compact", "plan_compaction"]

log = logging.getLogger(__name__)

# Below this many files a part is left alone: readers barely notice a few files, and an
# OPTIMIZE costs Spark jobs (seconds) even when it finds nothing to merge.
MIN_FILES = 8


@dataclass(frozen=True, kw_only=True)
class Compaction:
    """One table's compaction: planned (``files_before`` only) or done.

    Attributes:
        path: The table.
        what: ``committed rows`` (of a sink table) or ``journal``.
        predicate: The part of the table OPTIMIZE compacts (empty: all of it).
        files_before: Data files in the compacted part when it is compacted (a plan
            counts in those its run adds first).
        files_removed: Files OPTIMIZE rewrote (0 in a dry run, or when nothing was small).
        files_added: The files it wrote in their place.
    """

    path: str
    what: str
    predicate: str = ""
    files_before: int
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
    parts = [
        Compaction(
            path=table_path,
            what="committed rows",
            predicate=COMMITTED_ROWS.sql(),
            files_before=file_count(table_path, COMMITTED_ROWS) + added.get("committed rows", 0),
        )
    ]
    if journal_path and is_delta_table(journal_path):
        parts.append(
            Compaction(
                path=journal_path,
                what="journal",
                files_before=file_count(journal_path) + added.get("journal", 0),
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
        with session_commit_metadata(spark, metadata), labelled(spark, sink_id, None, "compact"):
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
