"""The vacuum: garbage-collect the rows of aborted and expired pending transactions.

Plan, then execute (a dry run is the plan alone, reported the same way):

1. Plan. Read the journal. Candidates are the sink's aborted transactions and its *open*
   ones older than ``expire_open_after`` whose writer is gone (``lakesink.ops.expiry``:
   open means never pre-committed, and only its live writer could still pre-commit it).
   Keep out every one already vacuumed and every one the journal shows a commit decided
   for (``committing``/``committed``: something is inconsistent, leave it to a human). An
   aborted transaction that had been pre-committed (recovery aborts those whose checkpoint
   never completed) is removed. Count the masked rows of the rest and the files holding
   them, from the table's log. Find the committed transactions whose pending partition
   still holds files (a MERGE whose release did not follow, or a rewrite that landed after
   their metadata commit, ``lakesink.delta.publish``).
2. Execute: journal the expired ones aborted, then read the journal again and keep out
   every expired one that was pre-committed in the meantime (its writer lives on, recovery
   may commit it; invariant 3).
3. Commit those committed leftovers again, the table's way (a release after a MERGE, a
   metadata commit of the rewritten files). One DELETE of exactly the
   masked rows of the remaining transactions, a predicate on partition columns only: Delta
   removes their pending partitions' files from the log without reading them, and
   concurrent appends and commits into other partitions never conflict with it; write
   conflicts are retried with backoff. One journal event per vacuumed transaction.
4. Compaction (``lakesink.ops.compact``, unless turned off): OPTIMIZE of the committed
   partition and of the journal, which gain a small file per checkpoint. The logs of
   staging tables that appends cut short left in finished transactions' pending folders
   are removed (``lakesink.delta.writer``).
5. The published table is brought up to date (``lakesink.tables.published``), and its
   purged copies of files with deletion vectors that no version a reader may read names
   are removed (the retention below).
6. Delta VACUUM (``lakesink.delta.vacuum``) with a safe retention removes the files those
   deletes (and earlier ones) and the compaction left behind: ``VACUUM ... DRY RUN`` lists
   and sizes them, then VACUUM runs for real. The retention is stretched, when needed, so
   that no file is deleted that a reader may still read: one of a version of the published
   table younger than the retention, or of the table's version in its group's newest cut.

Each step is logged at INFO. Nothing in here ever touches a visible row: the DELETE itself
says ``AND NOT _lakesink_visible``, whatever the journal said.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple
from urllib.parse import unquote

from pyspark.sql import SparkSession

from lakesink.core import Clock, SystemClock, TxnState
from lakesink.delta.committer import Committable, committer, delete_masked
from lakesink.delta.table import read_sink_table
from lakesink.delta.vacuum import local_listing, retention, run_vacuum
from lakesink.delta.writer import remove_staging_log, staging_logs
from lakesink.errors import ConfigurationError
from lakesink.ops.compact import MIN_FILES as COMPACT_MIN_FILES
from lakesink.ops.compact import Compaction, plan_compaction
from lakesink.ops.compact import compact as run_compaction
from lakesink.ops.expiry import age_text, check_expiry, expired_open, journal_expired
from lakesink.ops.metrics import MetricsExport, vacuum_run_metrics
from lakesink.ops.vacuum_report import VacuumedTransaction, VacuumReport
from lakesink.spark.settings import (
    labelled,
)
from lakesink.spark.sql import delta_path
from lakesink.storage.location import normalize
from lakesink.tables.cuts import group_cut
from lakesink.tables.deltars import PartitionFiles, partition_files
from lakesink.tables.format import (
    PENDING,
    CommitMode,
    commit_metadata,
    pending_txn_rows,
)
from lakesink.tables.history import commit_time, read_history
from lakesink.tables.journal import (
    VACUUMED_PREFIX,
    Journal,
    TransactionStatus,
)
from lakesink.tables.published import oldest_shown, publish, remove_unread_copies
from lakesink.tables.restores import journal_restores, restored_statuses

__all__ = [
    "VacuumPlan",
    "execute_vacuum",
    "plan_vacuum",
    "vacuum",
]

log = logging.getLogger(__name__)

_DECIDED = frozenset(state for state in TxnState if state.decided)


@dataclass(frozen=True, kw_only=True)
class VacuumPlan:
    """What a vacuum run would do, computed without changing anything.

    Attributes:
        table_path: The table to vacuum.
        sink_id: The sink whose journal decided what to remove.
        journal_path: That journal.
        retain_hours: The Delta VACUUM retention to use.
        short_retention: The retention is below the table's own (allowed explicitly).
        now: The moment the plan was made (for the expiry and the journal's event times).
        expired: Open transactions past the expiry whose writer is gone: to be aborted.
        targets: The transactions whose masked rows go (aborted ones and ``expired``).
        rows: Masked rows per target transaction id.
        files: The data files holding them (decoded paths).
        skipped_txn_ids: Candidates left alone: the journal shows a commit decided for
            them, or (expired ones) their writer still runs.
        already_vacuumed: Aborted transactions whose rows an earlier run removed.
        compaction: The tables to compact, with their file counts (empty: not compacting).
        unpublished: Committed transactions whose pending partition still holds files: a
            MERGE whose release did not follow, or a rewrite of that partition that landed
            after their metadata commit (``lakesink.delta.publish``, scenario 2). They are
            committed again, the table's way.
        commit_mode: The table's commit mode (how those are committed again).
        published: Whether lakesink keeps the table's published table.
        staging_logs: Finished transactions whose pending folder still holds the log of an
            append's staging table (``lakesink.delta.writer``, scenarios 1 and 4): removed.
        restored: Committed transactions whose commit a user's RESTORE undid, not journaled
            so yet (``lakesink.tables.restores``): journaled, then removed as aborted ones.
    """

    table_path: str
    sink_id: str
    journal_path: str
    retain_hours: float
    short_retention: bool
    now: datetime
    expired: tuple[TransactionStatus, ...]
    targets: tuple[TransactionStatus, ...]
    rows: dict[str, int]
    files: frozenset[str]
    skipped_txn_ids: tuple[str, ...]
    already_vacuumed: int
    compaction: tuple[Compaction, ...] = ()
    unpublished: tuple[TransactionStatus, ...] = ()
    commit_mode: CommitMode = "merge"
    published: bool = True
    staging_logs: tuple[str, ...] = ()
    restored: tuple[TransactionStatus, ...] = ()


def vacuum(
    spark: SparkSession,
    table_path: str,
    *,
    dry_run: bool = False,
    metrics: MetricsExport | None = None,
    **options: Any,
) -> VacuumReport:
    """Remove the rows of aborted and expired open transactions, then their files.

    The one vacuum: ``lakesink vacuum``, ``jobs/vacuum.py`` and ``Table.vacuum`` call it,
    with its defaults. ``plan_vacuum`` then (unless ``dry_run``) ``execute_vacuum``; a dry
    run reports what the plan would remove and changes nothing (no journal event, no
    delete, no VACUUM). It runs for real by default, because a scheduler runs it unattended
    and what it removes no reader can see: rows of aborted transactions, of open ones past
    the expiry whose writer is gone, and files Delta's retention already let go.
    Committed, pre-committed and deciding (``committing``) transactions are never touched,
    whatever their age. Safe to run while writers append and commit: the DELETE only reads
    and removes files of the aborted transactions' own partitions.

    Delta's VACUUM lists the table's folders in
    ``spark.sql.sources.parallelPartitionDiscovery.parallelism`` tasks (Spark's default:
    10000, minutes of task scheduling on one machine whatever the table's size): with a
    local master and the setting left unset, the vacuum lists in one task per core.

    Args:
        spark: A Delta-ready session.
        table_path: The lakesink table's folder.
        dry_run: Report what would be removed, change nothing.
        metrics: Where to send the run's figures (``lakesink_vacuum_last_run_*``, grouped
            by sink); a dry run sends none, and a failure to send is logged, not raised.
        **options: ``plan_vacuum``'s keyword options.

    Raises: as for ``plan_vacuum``.
    """
    started = time.monotonic()
    plan = plan_vacuum(spark, table_path, **options)
    with labelled(spark, plan.sink_id, None, "vacuum"), local_listing(spark):
        if not dry_run:
            report = execute_vacuum(spark, plan)
            if metrics is not None:
                figures = vacuum_run_metrics(report, duration_s=time.monotonic() - started)
                dataclasses.replace(metrics, grouping={"sink": report.sink_id}).send_quietly(
                    figures
                )
            return report
        # With a zero retention, the files the DELETE would remove go in the same VACUUM;
        # the listing cannot know them without the delete, so the plan's are added.
        pending = plan.files if plan.retain_hours == 0 else frozenset()
        files, size = run_vacuum(
            spark,
            plan.table_path,
            plan.retain_hours,
            short=plan.short_retention,
            dry_run=True,
            pending=pending,
        )
    return _report(plan, plan.targets, sum(plan.rows.values()), files, size, dry_run=True)


def plan_vacuum(
    spark: SparkSession,
    table_path: str,
    *,
    sink_id: str | None = None,
    journal_path: str | None = None,
    expire_open_after: timedelta = timedelta(hours=24),
    retain_hours: float | None = None,
    allow_short_retention: bool = False,
    compact: bool = True,
    compact_min_files: int = COMPACT_MIN_FILES,
    clock: Clock | None = None,
) -> VacuumPlan:
    """What a vacuum of the lakesink table at ``table_path`` would remove; changes nothing.

    Args:
        spark: A Delta-ready session.
        table_path: The lakesink table's folder.
        sink_id: The table's sink; default: the table's ``lakesink.sinkId`` property.
            Given, it must match that property.
        journal_path: The journal; default: the table's ``lakesink.journal`` property.
            Given, it must match that property.
        expire_open_after: An open transaction older than this (since its first write) is
            aborted and removed, unless its writer still runs (holds its lock file).
        retain_hours: Delta VACUUM retention; default: the table's
            ``delta.deletedFileRetentionDuration`` (168 h unless set).
        allow_short_retention: Permit a retention below that. A short retention can
            delete the files of a write in flight: use it only when nothing writes.
        compact: Also compact the committed rows and the journal (safe while writers run).
        compact_min_files: Compact a part only if it holds at least this many files.
        clock: Where "now" comes from (for the expiry and the journal's event times).

    Raises:
        TableNotFoundError: No lakesink table at ``table_path``, or no journal where the
            table says it is.
        ConfigurationError: A retention below the table's without
            ``allow_short_retention``, a non-positive expiry, or a sink id or journal
            that is not the table's.
    """
    path = normalize(table_path)
    table = read_sink_table(spark, path)
    sink_id = _matching(sink_id, table.sink_id, "sink id", path)
    given_journal = normalize(journal_path) if journal_path else None
    journal_at = _matching(given_journal, table.journal_path or None, "journal", path)
    hours, short = retention(table.properties, retain_hours, allow_short_retention, path)
    check_expiry(expire_open_after)
    journal = Journal(journal_at, create=False)
    now = datetime.fromtimestamp((clock or SystemClock()).millis() / 1000, tz=timezone.utc)
    hours = _protected(path, table.sink_id, table.journal_path, hours, now)
    statuses, restored = _with_restores(path, journal.transactions(sink_id, table_path=path))
    expired, targets, skipped, already = _candidates(
        statuses, path, sink_id, now, expire_open_after
    )
    masked = _masked(spark, path, statuses, targets)
    return VacuumPlan(
        table_path=path,
        sink_id=sink_id,
        journal_path=journal.path,
        retain_hours=hours,
        short_retention=short,
        now=now,
        expired=tuple(expired),
        targets=tuple(targets),
        rows=masked.rows,
        files=frozenset(masked.files),
        skipped_txn_ids=tuple(skipped),
        already_vacuumed=already,
        unpublished=masked.unpublished,
        commit_mode=table.commit_mode,
        published=table.published,
        staging_logs=_staging_logs(path, statuses),
        restored=tuple(restored),
        compaction=(
            _compaction(path, journal.path, compact_min_files, masked, expired, targets)
            if compact
            else ()
        ),
    )


def execute_vacuum(spark: SparkSession, plan: VacuumPlan) -> VacuumReport:
    """Carry out a plan: expire, delete the masked rows, journal, then VACUUM the files."""
    journal = Journal(plan.journal_path, create=False)
    prefix = f"vacuum {plan.table_path}"
    targets, skipped = list(plan.targets), list(plan.skipped_txn_ids)
    if plan.restored:  # first, so that nothing ever commits them again
        journal_restores(plan.table_path, journal, plan.restored)
    if plan.expired:
        journal_expired(
            journal, plan.expired, table_path=plan.table_path, now=plan.now, rows=plan.rows
        )
        # Read after the expiry events, so a writer that pre-committed an "expired"
        # transaction in the meantime is seen here and its rows kept.
        expired_ids = {s.txn_id for s in plan.expired}
        now_known = {s.txn_id: s for s in journal.transactions(plan.sink_id)}
        targets, late, _ = _sorted_out(
            [now_known.get(s.txn_id, s) for s in targets], expired_ids, prefix
        )
        skipped.extend(late)
    again = committer(plan.commit_mode, spark)
    for s in plan.unpublished:
        again.commit(Committable.of(s, plan.table_path))
    rows = _remove_rows(spark, journal, plan, targets) if targets else 0
    for txn_id in plan.staging_logs:
        remove_staging_log(plan.table_path, txn_id)
    if plan.staging_logs:
        log.info("%s: removed %d leftover staging log(s)", prefix, len(plan.staging_logs))
    compacted = run_compaction(spark, list(plan.compaction), sink_id=plan.sink_id)
    if plan.published:
        publish(plan.table_path)
        remove_unread_copies(plan.table_path, plan.retain_hours)
    files, size = run_vacuum(
        spark, plan.table_path, plan.retain_hours, short=plan.short_retention, dry_run=False
    )
    return _report(
        dataclasses.replace(plan, skipped_txn_ids=tuple(skipped), compaction=tuple(compacted)),
        targets,
        rows,
        files,
        size,
        dry_run=False,
    )


# ------------------------------------------------------------------ internals


def _with_restores(
    path: str, journaled: list[TransactionStatus]
) -> tuple[list[TransactionStatus], list[TransactionStatus]]:
    """The journal's statuses, each committed one whose commit a RESTORE undid marked so,
    and those the journal does not know to be: looked for in the table's history only when
    a committed transaction's pending partition holds files again (as a RESTORE to before
    its commit leaves it)."""
    committed = [s.txn_id for s in journaled if s.state is TxnState.COMMITTED]
    if not committed or not partition_files(path, PENDING, committed):
        return journaled, []
    statuses = restored_statuses(journaled, read_history(path))
    return statuses, [
        s for s, j in zip(statuses, journaled, strict=True) if s.restored and not j.restored
    ]


def _candidates(
    statuses: Sequence[TransactionStatus],
    path: str,
    sink_id: str,
    now: datetime,
    expire_open_after: timedelta,
) -> tuple[list[TransactionStatus], list[TransactionStatus], list[str], int]:
    """The expired open transactions, the transactions whose rows go, the ids left alone
    (expired ones whose writer runs among them), and how many were vacuumed before."""
    prefix = f"vacuum {path}"
    aborted = [s for s in statuses if s.state is TxnState.ABORTED]
    expired, live = expired_open(
        statuses, table_path=path, sink_id=sink_id, now=now, expire_open_after=expire_open_after
    )
    log.info(
        "%s: sink %r has %d aborted and %d open transaction(s) older than %s",
        prefix,
        sink_id,
        len(aborted),
        len(expired),
        age_text(expire_open_after),
    )
    targets, skipped, already = _sorted_out(
        [*aborted, *expired], {s.txn_id for s in expired}, prefix
    )
    log.info("%s: %d transaction(s) to vacuum, %d already vacuumed", prefix, len(targets), already)
    return expired, targets, [*(s.txn_id for s in live), *skipped], already


class _Masked(NamedTuple):
    """What the table's log holds of the plan's transactions' pending partitions."""

    rows: dict[str, int]  # masked rows per target transaction id
    files: set[str]  # the data files holding them (decoded paths)
    unpublished: tuple[TransactionStatus, ...]  # committed ones with files left there
    unpublished_files: int  # how many files those hold


def _masked(
    spark: SparkSession,
    path: str,
    statuses: Sequence[TransactionStatus],
    targets: Sequence[TransactionStatus],
) -> _Masked:
    """The targets' masked rows and files, and the committed leftovers, from one read of the
    table's log."""
    committed = {s.txn_id: s for s in statuses if s.state is TxnState.COMMITTED}
    wanted = [*(s.txn_id for s in targets), *committed]
    found = partition_files(path, PENDING, wanted) if wanted else {}
    counts, files = _scan(spark, path, targets, found) if targets else ({}, set())
    left = sorted(txn_id for txn_id in committed if txn_id in found)
    if left:
        log.warning(
            "vacuum %s: %d committed transaction(s) still have masked files (their commit's "
            "release did not follow, or a rewrite landed after it); committing them again",
            path,
            len(left),
        )
    return _Masked(
        rows=counts,
        files=files,
        unpublished=tuple(committed[txn_id] for txn_id in left),
        unpublished_files=sum(len(found[t].files) for t in left),
    )


def _staging_logs(path: str, statuses: Sequence[TransactionStatus]) -> tuple[str, ...]:
    """The finished transactions whose pending folder still holds a staging table's log."""
    # An open or pre-committed one may be appending still.
    finished = {s.txn_id for s in statuses if s.state.final}
    return tuple(t for t in staging_logs(path) if t in finished)


def _compaction(
    path: str,
    journal_path: str,
    min_files: int,
    masked: _Masked,
    expired: Sequence[TransactionStatus],
    targets: Sequence[TransactionStatus],
) -> tuple[Compaction, ...]:
    """What the run is to compact (``lakesink.ops.compact``)."""
    return tuple(
        plan_compaction(
            path,
            journal_path,
            min_files=min_files,
            # What the run itself adds before it compacts: the files of the leftovers it
            # publishes again, and a journal commit for its expiries and one for its
            # removals.
            added={
                "committed rows": masked.unpublished_files,
                "journal": int(bool(expired)) + int(bool(targets)),
            },
        )
    )


def _remove_rows(
    spark: SparkSession, journal: Journal, plan: VacuumPlan, targets: Sequence[TransactionStatus]
) -> int:
    """Delete the targets' masked rows, journal each target vacuumed; return the rows deleted."""
    prefix = f"vacuum {plan.table_path}"
    rows = sum(plan.rows.get(s.txn_id, 0) for s in targets)
    log.info(
        "%s: deleting %d masked row(s) of %d transaction(s) in checkpoint(s) %s",
        prefix,
        rows,
        len(targets),
        ", ".join(str(c) for c in sorted({s.checkpoint_id for s in targets})),
    )
    metadata = commit_metadata("vacuum", plan.sink_id, txn_ids=sorted(s.txn_id for s in targets))
    deleted = delete_masked(
        spark, plan.table_path, pending_txn_rows(s.txn_id for s in targets), metadata, what=prefix
    )
    if deleted != rows:  # someone else removed or added some in between
        log.warning("%s: counted %d rows, the DELETE removed %d", prefix, rows, deleted)
    journal.record(
        *(
            s.event(
                table_path=plan.table_path,
                state=TxnState.ABORTED,
                event_time=plan.now,
                detail=f"{VACUUMED_PREFIX} {plan.rows.get(s.txn_id, 0)} rows removed",
                row_count=plan.rows.get(s.txn_id, 0),
            )
            for s in targets
        )
    )
    return deleted


def _sorted_out(
    candidates: Sequence[TransactionStatus], expired_ids: set[str], prefix: str
) -> tuple[list[TransactionStatus], list[str], int]:
    """The candidates whose rows go, the ids left alone, and how many were vacuumed before."""
    targets: list[TransactionStatus] = []
    skipped: list[str] = []
    already = 0
    for status in sorted(candidates, key=lambda s: (s.checkpoint_id, s.txn_id)):
        # An expired one was open when read: any later state means its writer lives on.
        late = {TxnState.PRE_COMMITTED} if status.txn_id in expired_ids else set()
        # One a RESTORE took back was committed, and is aborted now: its rows go.
        moved_on = set() if status.restored else status.states & (_DECIDED | late)
        if moved_on:
            log.warning(
                "%s: transaction %s is aborted, yet the journal also shows it %s; "
                "its rows are left alone",
                prefix,
                status.txn_id,
                ", ".join(sorted(s.value for s in moved_on)),
            )
            skipped.append(status.txn_id)
        elif status.vacuumed:
            already += 1
        else:
            targets.append(status)
    return targets, skipped, already


def _report(
    plan: VacuumPlan,
    targets: Sequence[TransactionStatus],
    rows: int,
    files: int,
    size: int,
    *,
    dry_run: bool,
) -> VacuumReport:
    expired_ids = {s.txn_id for s in plan.expired}
    kept = 0 if plan.retain_hours == 0 else len(plan.files)
    report = VacuumReport(
        table_path=plan.table_path,
        sink_id=plan.sink_id,
        dry_run=dry_run,
        retain_hours=plan.retain_hours,
        transactions=tuple(
            VacuumedTransaction(
                txn_id=s.txn_id,
                checkpoint_id=s.checkpoint_id,
                writer_id=s.writer_id,
                rows=plan.rows.get(s.txn_id, 0),
                expired=s.txn_id in expired_ids,
            )
            for s in targets
        ),
        rows_removed=rows,
        files_removed=files,
        bytes_removed=size,
        files_kept=kept,
        kept_until=plan.now + timedelta(hours=plan.retain_hours) if kept else None,
        skipped_txn_ids=plan.skipped_txn_ids,
        compaction=plan.compaction,
        republished_txn_ids=tuple(s.txn_id for s in plan.unpublished),
    )
    log.info(
        "vacuum %s%s: %s %d row(s) of %d transaction(s), %d file(s), %d bytes",
        plan.table_path,
        " (dry run)" if dry_run else "",
        "would remove" if dry_run else "removed",
        report.rows_removed,
        len(report.transactions),
        report.files_removed,
        report.bytes_removed,
    )
    return report


def _matching(given: str | None, recorded: str | None, what: str, path: str) -> str:
    if recorded is None:
        if given is None:
            raise ConfigurationError(f"the table at {path} records no {what}; pass one")
        return given
    if given is not None and given != recorded:
        # The wrong journal could call live transactions aborted: refuse rather than guess.
        raise ConfigurationError(
            f"the table at {path} has {what} {recorded!r}, not {given!r}; "
            f"omit it or pass the recorded one"
        )
    return recorded


def _protected(path: str, sink_id: str, journal: str, hours: float, now: datetime) -> float:
    """The retention ``hours``, stretched so that VACUUM keeps every file a reader may read:
    each version of the published table younger than the retention shows a table version
    (behind the table's, after a crash), and a group's readers read the table at its
    version in the group's newest cut. A file of version v goes only once it was removed
    by a later version, so the files of the oldest such version stay while the version
    after it is younger than the retention."""
    oldest = oldest_shown(path, now - timedelta(hours=hours))
    cut = group_cut(sink_id, journal)
    if cut is not None and sink_id in cut.tables:
        version = cut.tables[sink_id].version
        oldest = version if oldest is None else min(oldest, version)
    after = None if oldest is None else commit_time(path, oldest + 1)
    if after is None:
        return hours
    needed = (now - after).total_seconds() / 3600 + 1 / 60  # a minute's margin
    if needed <= hours:
        return hours
    log.info(
        "vacuum %s: retention stretched from %g h to %.2f h: version %d is still read",
        path,
        hours,
        needed,
        oldest,
    )
    return needed


def _predicate(targets: Sequence[TransactionStatus]) -> str:
    # Partition columns only: Delta drops these transactions' pending partitions whole, from
    # the log, without reading a row, and conflict-checks only them. NOT visible, so even a
    # wrong journal cannot cost a committed row.
    return pending_txn_rows(s.txn_id for s in targets).sql()


def _scan(
    spark: SparkSession,
    path: str,
    targets: Sequence[TransactionStatus],
    partitions: Mapping[str, PartitionFiles],
) -> tuple[dict[str, int], set[str]]:
    """Masked rows per transaction, and the data files holding them (as VACUUM lists them).

    From ``partitions``, the pending partitions the table's log lists (with the targets'):
    each file's row count statistic, no data read. A file written with statistics off has
    none; then the rows are counted.
    """
    found = {s.txn_id: partitions[s.txn_id] for s in targets if s.txn_id in partitions}
    counts = {txn: f.rows for txn, f in found.items() if f.rows is not None}
    if len(counts) < len(found):
        predicate = _predicate([s for s in targets if s.txn_id not in counts])
        for row in spark.sql(
            f"SELECT {PENDING} AS txn, count(*) AS n FROM {delta_path(path)} "
            f"WHERE {predicate} GROUP BY 1"
        ).collect():
            counts[row.txn] = int(row.n)
    # The log's paths are relative and URL-encoded; VACUUM lists decoded absolute ones.
    files = {f"file:{path}/{unquote(f)}" for p in found.values() for f in p.files}
    return counts, files
