"""The vacuum job: garbage-collect the rows of aborted and expired pending transactions.

Steps, each logged at INFO:

1. Read the journal. Candidates are the sink's aborted transactions and its *open* ones
   older than ``expire_open_after`` whose writer is gone (open means never pre-committed,
   and only its live writer could still pre-commit it: a restarted writer aborts its own
   leftovers). The expired ones are first recorded aborted in the journal.
2. Keep out every one already vacuumed, every one the journal shows a commit decided for
   (``committing``/``committed``: something is inconsistent, leave it to a human), and
   every expired one that was pre-committed after the journal was read (its writer lives
   on, recovery may commit it; invariant 3). An aborted transaction that had been
   pre-committed (recovery aborts those whose checkpoint never completed) is removed.
3. One DELETE of exactly the masked rows of the remaining transactions, pinned to their
   partitions, so concurrent blind appends into other partitions never conflict with it;
   write conflicts are retried with backoff. One journal event per vacuumed transaction.
4. Delta VACUUM with a safe retention removes the files those deletes (and earlier ones)
   left behind: ``VACUUM ... DRY RUN`` lists and sizes them, then VACUUM runs for real.

Nothing in here ever touches a visible row: the DELETE itself says ``AND NOT
_lakesink_visible``, whatever the journal said.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from urllib.parse import unquote

from pyspark.sql import SparkSession

from lakesink.delta_sink import (
    CHECKPOINT_ID,
    JOURNAL_PROPERTY,
    SINK_ID_PROPERTY,
    TXN_ID,
    VISIBLE,
    CommitRetry,
    commit_metadata,
    retry_on_conflict,
    session_commit_metadata,
    writer_lock,
)
from lakesink.errors import ConfigurationError, TableNotFoundError
from lakesink.journal import Journal, JournalEntry, TransactionStatus, TxnState
from lakesink.protocol import Clock, SystemClock
from lakesink.sql import delta_path, string_literal

__all__ = ["VACUUMED_PREFIX", "VacuumReport", "VacuumedTransaction", "vacuum"]

log = logging.getLogger(__name__)

# The journal detail that marks a transaction's rows as removed ("vacuumed: 3 rows removed").
VACUUMED_PREFIX = "vacuumed:"
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"
RETENTION_CHECK_CONF = "spark.databricks.delta.retentionDurationCheck.enabled"
DEFAULT_RETENTION_HOURS = 168.0  # Delta's default for delta.deletedFileRetentionDuration
_HOURS_PER_UNIT = {
    "week": 168.0,
    "day": 24.0,
    "hour": 1.0,
    "minute": 1 / 60,
    "second": 1 / 3600,
    "millisecond": 1 / 3_600_000,
    "microsecond": 1 / 3_600_000_000,
}
_DECIDED = frozenset({TxnState.COMMITTING.value, TxnState.COMMITTED.value})


@dataclass(frozen=True, kw_only=True)
class VacuumedTransaction:
    """One transaction whose masked rows were (or, in a dry run, would be) removed."""

    txn_id: str
    checkpoint_id: int
    writer_id: str
    rows: int
    expired: bool  # an open transaction past the expiry, aborted by this run


@dataclass(frozen=True, kw_only=True)
class VacuumReport:
    """What one vacuum run removed (or, with ``dry_run``, would remove).

    Attributes:
        table_path: The table vacuumed.
        sink_id: The sink whose journal decided what to remove.
        dry_run: True if nothing was changed.
        retain_hours: The Delta VACUUM retention used.
        transactions: The transactions whose rows were removed, by checkpoint id.
        rows_removed: Rows deleted (the DELETE's own count; a dry run counts them).
        files_removed: Data files Delta VACUUM deleted from storage (all of the table's
            files past the retention, not only this run's).
        bytes_removed: Their total size.
        skipped_txn_ids: Candidates left alone: the journal shows a commit decided for
            them, or (expired ones) their writer still runs or pre-committed them after
            this run read the journal.
    """

    table_path: str
    sink_id: str
    dry_run: bool
    retain_hours: float
    transactions: tuple[VacuumedTransaction, ...]
    rows_removed: int
    files_removed: int
    bytes_removed: int
    skipped_txn_ids: tuple[str, ...] = ()

    @property
    def txn_ids(self) -> tuple[str, ...]:
        """The ids of the vacuumed transactions."""
        return tuple(t.txn_id for t in self.transactions)

    @property
    def expired_txn_ids(self) -> tuple[str, ...]:
        """The ids of the open transactions this run expired."""
        return tuple(t.txn_id for t in self.transactions if t.expired)

    def as_dict(self) -> dict[str, object]:
        """The report as plain JSON-ready data."""
        return asdict(self)


def vacuum(
    spark: SparkSession,
    table_path: str,
    *,
    sink_id: str | None = None,
    journal_path: str | None = None,
    expire_open_after: timedelta = timedelta(hours=24),
    retain_hours: float | None = None,
    allow_short_retention: bool = False,
    dry_run: bool = False,
    clock: Clock | None = None,
) -> VacuumReport:
    """Remove the rows of aborted and expired open transactions, then their files.

    Committed, pre-committed and deciding (``committing``) transactions are never touched,
    whatever their age. Safe to run while writers append and commit: the DELETE only reads
    and removes files of the aborted transactions' own partitions.

    Delta's VACUUM lists the table's folders in
    ``spark.sql.sources.parallelPartitionDiscovery.parallelism`` tasks (10000 by default);
    on a single machine set it near the core count, or each VACUUM takes minutes.

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
        dry_run: Compute the same report but change nothing (no journal event, no delete,
            no VACUUM).
        clock: Where "now" comes from (for the expiry and the journal's event times).

    Returns:
        What was (or would be) removed.

    Raises:
        TableNotFoundError: No lakesink table at ``table_path``, or no journal where the
            table says it is.
        ConfigurationError: A retention below the table's without
            ``allow_short_retention``, a non-positive expiry, or a sink id or journal
            that is not the table's.
    """
    path = str(Path(table_path).resolve())
    properties = _lakesink_properties(spark, path)
    sink_id = _matching(sink_id, properties[SINK_ID_PROPERTY], "sink id", path)
    given_journal = str(Path(journal_path).resolve()) if journal_path else None
    journal_at = _matching(given_journal, properties.get(JOURNAL_PROPERTY), "journal", path)
    hours, short = _retention(properties, retain_hours, allow_short_retention, path)
    if expire_open_after <= timedelta(0):
        raise ConfigurationError(
            f"expire_open_after must be positive, got {expire_open_after}; an open "
            "transaction younger than that may still be written to"
        )
    journal = Journal(spark, journal_at, create=False)
    now = datetime.fromtimestamp((clock or SystemClock()).millis() / 1000, tz=timezone.utc)
    prefix = f"vacuum {path}{' (dry run)' if dry_run else ''}"

    # 1. Candidates, from the journal's folded states.
    statuses = journal.transactions(sink_id)
    aborted = [s for s in statuses if s.state is TxnState.ABORTED]
    expired, live = [], []
    for s in statuses:
        if s.state is TxnState.OPEN and now - s.opened_at > expire_open_after:
            # A live writer may still pre-commit its open transaction, however old; only
            # a writer that is gone (its lock released or stale) has abandoned it.
            held = writer_lock(path, sink_id, s.writer_id).is_held()
            (live if held else expired).append(s)
    for s in live:
        log.warning(
            "%s: open transaction %s (checkpoint %d) is %s old, but writer %r is still "
            "running; it is not expired",
            prefix,
            s.txn_id,
            s.checkpoint_id,
            _age(now - s.opened_at),
            s.writer_id,
        )
    log.info(
        "%s: sink %r has %d aborted and %d open transaction(s) older than %s",
        prefix,
        sink_id,
        len(aborted),
        len(expired),
        expire_open_after,
    )
    if expired and not dry_run:
        log.info("%s: marking %d expired open transaction(s) aborted", prefix, len(expired))
        journal.record(
            *(
                _entry(s, path, now, f"expired by vacuum after {_age(now - s.opened_at)}")
                for s in expired
            )
        )

    # 2. Read after the expiry events, so a writer that pre-committed an "expired"
    # transaction in the meantime is seen here and its rows kept.
    candidates = [*aborted, *expired]
    expired_ids = {s.txn_id for s in expired}
    history = _history(journal, sink_id, [s.txn_id for s in candidates])
    targets: list[TransactionStatus] = []
    skipped = [s.txn_id for s in live]
    already = 0
    for status in sorted(candidates, key=lambda s: (s.checkpoint_id, s.txn_id)):
        seen, vacuumed = history.get(status.txn_id, (frozenset(), False))
        # An expired one was open when read: any later state means its writer lives on.
        late = {TxnState.PRE_COMMITTED.value} if status.txn_id in expired_ids else set()
        moved_on = _DECIDED | late
        if seen & moved_on:
            log.warning(
                "%s: transaction %s is aborted, yet the journal also shows it %s; "
                "its rows are left alone",
                prefix,
                status.txn_id,
                ", ".join(sorted(seen & moved_on)),
            )
            skipped.append(status.txn_id)
        elif vacuumed:
            already += 1
        else:
            targets.append(status)
    log.info("%s: %d transaction(s) to vacuum, %d already vacuumed", prefix, len(targets), already)

    # 3. Rows: count per transaction, then (unless a dry run) delete and journal.
    predicate = _predicate(targets)
    counts, files = _scan(spark, path, predicate) if targets else ({}, set())
    rows = sum(counts.values())
    if targets and not dry_run:
        log.info(
            "%s: deleting %d masked row(s) of %d transaction(s) in checkpoint(s) %s",
            prefix,
            rows,
            len(targets),
            ", ".join(str(c) for c in sorted({s.checkpoint_id for s in targets})),
        )
        metadata = commit_metadata("vacuum", sink_id, txn_ids=sorted(s.txn_id for s in targets))
        deleted = _delete(spark, path, predicate, metadata, prefix)
        if deleted != rows:  # someone else removed or added some in between
            log.warning("%s: counted %d rows, the DELETE removed %d", prefix, rows, deleted)
        rows = deleted
        journal.record(
            *(
                _entry(s, path, now, f"{VACUUMED_PREFIX} {counts.get(s.txn_id, 0)} rows removed")
                for s in targets
            )
        )

    # 4. Files. With a zero retention the files the DELETE just removed go in this same
    # VACUUM; a dry run did not delete them, so it adds them to the listing itself.
    pending = files if dry_run and hours == 0 else set()
    file_count, size = _vacuum_files(spark, path, hours, short, dry_run, pending, prefix)

    report = VacuumReport(
        table_path=path,
        sink_id=sink_id,
        dry_run=dry_run,
        retain_hours=hours,
        transactions=tuple(
            VacuumedTransaction(
                txn_id=s.txn_id,
                checkpoint_id=s.checkpoint_id,
                writer_id=s.writer_id,
                rows=counts.get(s.txn_id, 0),
                expired=s.txn_id in expired_ids,
            )
            for s in targets
        ),
        rows_removed=rows,
        files_removed=file_count,
        bytes_removed=size,
        skipped_txn_ids=tuple(skipped),
    )
    log.info(
        "%s: %s %d row(s) of %d transaction(s), %d file(s), %d bytes",
        prefix,
        "would remove" if dry_run else "removed",
        report.rows_removed,
        len(report.transactions),
        report.files_removed,
        report.bytes_removed,
    )
    return report


# ------------------------------------------------------------------ internals


def _lakesink_properties(spark: SparkSession, path: str) -> dict[str, str]:
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, path):
        raise TableNotFoundError(
            f"no Delta table at {path}: pass the folder of a table written by lakesink"
        )
    detail = spark.sql(f"DESCRIBE DETAIL {delta_path(path)}").first()
    properties = dict((detail["properties"] if detail else None) or {})
    if SINK_ID_PROPERTY not in properties:
        raise TableNotFoundError(
            f"the Delta table at {path} is not a lakesink table (no {SINK_ID_PROPERTY} "
            "property): the vacuum job only removes rows lakesink masked"
        )
    return properties


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


def _retention(
    properties: dict[str, str], retain_hours: float | None, allow_short: bool, path: str
) -> tuple[float, bool]:
    """The VACUUM retention in hours, and whether it is below the table's own."""
    configured = properties.get(RETENTION_PROPERTY)
    table_hours = _interval_hours(configured) if configured else DEFAULT_RETENTION_HOURS
    hours = table_hours if retain_hours is None else float(retain_hours)
    if hours < 0:
        raise ConfigurationError(f"retain_hours must not be negative, got {retain_hours}")
    short = hours < table_hours
    if short and not allow_short:
        raise ConfigurationError(
            f"retain_hours={retain_hours:g} is below the table's {RETENTION_PROPERTY} "
            f"({table_hours:g} h) at {path}: a short retention can delete the files of a "
            "write in flight or of a snapshot a reader still uses. Pass "
            "allow_short_retention=True (--allow-short-retention) only when nothing writes"
        )
    return hours, short


def _interval_hours(interval: str) -> float:
    """``interval 1 week`` / ``168 hours`` / ``interval 1 day 12 hours`` -> hours."""
    parts = re.findall(r"(\d+(?:\.\d+)?)\s*([a-z]+?)s?\b", interval.lower())
    known = [(float(n), unit) for n, unit in parts if unit in _HOURS_PER_UNIT]
    if not known:
        raise ConfigurationError(
            f"cannot read {RETENTION_PROPERTY}={interval!r}; pass retain_hours explicitly"
        )
    return sum(n * _HOURS_PER_UNIT[unit] for n, unit in known)


def _history(
    journal: Journal, sink_id: str, txn_ids: Sequence[str]
) -> dict[str, tuple[frozenset[str], bool]]:
    """Per transaction: every state it was ever in, and whether it was vacuumed already.

    From the raw events, since the folded state hides both ("aborted" outranks the rest).
    """
    if not txn_ids:
        return {}
    rows = journal.spark.sql(
        f"""
        SELECT txn_id,
          collect_set(state) AS states,
          bool_or(state = {string_literal(TxnState.ABORTED.value)}
                  AND coalesce(detail, '') LIKE {string_literal(VACUUMED_PREFIX + "%")})
            AS vacuumed
        FROM {delta_path(journal.path)}
        WHERE sink_id = {string_literal(sink_id)} AND txn_id IN ({_strings(txn_ids)})
        GROUP BY txn_id
        """
    ).collect()
    return {r.txn_id: (frozenset(r.states), bool(r.vacuumed)) for r in rows}


def _predicate(targets: Sequence[TransactionStatus]) -> str:
    # Both partition columns pinned, so Delta reads (and conflict-checks) only these
    # transactions' files; NOT visible so even a wrong journal cannot cost a committed row.
    checkpoints = ", ".join(str(c) for c in sorted({s.checkpoint_id for s in targets}))
    return (
        f"{TXN_ID} IN ({_strings(s.txn_id for s in targets)}) "
        f"AND {CHECKPOINT_ID} IN ({checkpoints}) AND NOT {VISIBLE}"
    )


def _scan(spark: SparkSession, path: str, predicate: str) -> tuple[dict[str, int], set[str]]:
    """Masked rows per transaction, and the data files holding them (decoded URIs)."""
    rows = spark.sql(
        f"SELECT {TXN_ID} AS txn_id, _metadata.file_path AS file, count(*) AS n "
        f"FROM {delta_path(path)} WHERE {predicate} GROUP BY 1, 2"
    ).collect()
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.txn_id] = counts.get(row.txn_id, 0) + int(row.n)
    # _metadata.file_path is URL-encoded; VACUUM lists decoded paths: compare like with like.
    return counts, {unquote(row.file) for row in rows}


def _delete(spark: SparkSession, path: str, predicate: str, metadata: str, prefix: str) -> int:
    statement = f"DELETE FROM {delta_path(path)} WHERE {predicate}"

    def run() -> int:
        # Idempotent: a retry deletes what is still there, which may be nothing.
        with session_commit_metadata(spark, metadata):
            result = spark.sql(statement).first()
        # Delta 4.4 answers one row, num_affected_rows (older docs say num_deleted_rows).
        metrics = result.asDict() if result else {}
        return int(metrics.get("num_affected_rows", metrics.get("num_deleted_rows")) or 0)

    return retry_on_conflict(run, retry=CommitRetry(), what=f"{prefix}: DELETE")


def _vacuum_files(
    spark: SparkSession,
    path: str,
    hours: float,
    short: bool,
    dry_run: bool,
    pending: set[str],
    prefix: str,
) -> tuple[int, int]:
    """Run VACUUM DRY RUN (and VACUUM unless ``dry_run``); return files and bytes."""
    statement = f"VACUUM {delta_path(path)} RETAIN {_number(hours)} HOURS"
    previous = spark.conf.get(RETENTION_CHECK_CONF, None)
    if short:  # only for these two commands; restored below whatever happens
        spark.conf.set(RETENTION_CHECK_CONF, "false")
    try:
        files = {row.path for row in spark.sql(f"{statement} DRY RUN").collect()} | pending
        size = sum(_file_size(spark, f) for f in files)  # before VACUUM deletes them
        log.info(
            "%s: VACUUM RETAIN %g HOURS: %d file(s), %d bytes%s",
            prefix,
            hours,
            len(files),
            size,
            "" if dry_run else ", deleting",
        )
        if not dry_run:
            spark.sql(statement).collect()
    finally:
        if short:
            if previous is None:
                spark.conf.unset(RETENTION_CHECK_CONF)
            else:
                spark.conf.set(RETENTION_CHECK_CONF, previous)
    return len(files), size


def _file_size(spark: SparkSession, uri: str) -> int:
    """Size of a file VACUUM lists (a decoded path, ``file:`` or another Hadoop scheme)."""
    local = re.sub(r"^file:(//)?", "", uri)
    if not re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", local):
        try:
            return os.stat(local).st_size
        except FileNotFoundError:  # already gone (another vacuum): nothing to count
            return 0
    try:
        hadoop_path = spark._jvm.org.apache.hadoop.fs.Path(uri)  # type: ignore[union-attr]
        conf = spark._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        return int(hadoop_path.getFileSystem(conf).getFileStatus(hadoop_path).getLen())
    except Exception as exc:  # a size is only reported, never worth failing the vacuum for
        log.warning("cannot read the size of %s: %s", uri, exc)
        return 0


def _entry(status: TransactionStatus, path: str, now: datetime, detail: str) -> JournalEntry:
    return JournalEntry(
        sink_id=status.sink_id,
        table_path=path,
        checkpoint_id=status.checkpoint_id,
        txn_id=status.txn_id,
        writer_id=status.writer_id,
        state=TxnState.ABORTED,
        event_time=now,
        detail=detail,
    )


def _strings(values: Iterable[str]) -> str:
    return ", ".join(string_literal(v) for v in values)


def _number(value: float) -> str:
    # A plain decimal: Spark SQL's RETAIN takes no exponent notation such as 1e-05.
    return f"{value:.6f}".rstrip("0").rstrip(".")


def _age(age: timedelta) -> str:
    return f"{age.total_seconds() / 3600:.1f} h"
