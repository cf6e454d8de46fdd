"""Prometheus metrics of lakesink sinks, folded from their journals: no Spark, no JVM.

Every sink metric carries the labels ``sink`` (the sink id) and ``table`` (its path):

- ``lakesink_oldest_pending_age_seconds``: age of the oldest transaction not yet committed,
  aborted or held (0 when none): alert when it outgrows a few checkpoint intervals.
- ``lakesink_pending_checkpoints`` / ``lakesink_held_checkpoints``: checkpoints waiting
  for their commit / held by the validation gate for an operator.
- ``lakesink_committed_checkpoints_total`` / ``lakesink_aborted_checkpoints_total``.
- ``lakesink_committed_rows_total``.
- ``lakesink_last_committed_checkpoint``, ``lakesink_last_commit_timestamp_seconds``.
- ``lakesink_commit_latency_seconds``: histogram of pre-commit (or the validation gate's
  hold) to visible, per transaction.
- ``lakesink_vacuumed_transactions_total`` / ``lakesink_vacuumed_rows_total``: what the
  vacuum job removed.

The vacuum job adds its run's figures (``lakesink_vacuum_last_run_*``, see
``vacuum_run_metrics``). Counters are counts over the whole journal, so they only grow.

They reach Prometheus through node_exporter's textfile collector (a ``.prom`` file, written
whole and renamed into place) or a Pushgateway (``MetricsExport``). Give each job its own
file: the collector refuses a series that two files both hold.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway, write_to_textfile
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from lakesink.core import TxnState
from lakesink.errors import ConfigurationError, MetricsExportError
from lakesink.ops.status import SinkStatus, sink_status
from lakesink.storage.location import normalize

if TYPE_CHECKING:
    from lakesink.ops.vacuum_report import VacuumReport
    from lakesink.tables.journal import TransactionStatus

__all__ = [
    "LATENCY_BUCKETS",
    "JournalCollector",
    "MetricsExport",
    "sink_registry",
    "vacuum_run_metrics",
]

log = logging.getLogger(__name__)

# Seconds from pre-commit to visible: a commit is a Delta MERGE (seconds); one held back by
# a crash waits for the restart (minutes to hours).
LATENCY_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0, 3600.0)
_LABELS = ("sink", "table")


def _utc_now() -> datetime:
    return datetime.now(timezone.utc)


class JournalCollector(Collector):
    """Collects the sink metrics of the tables at ``paths`` each time it is asked.

    Args:
        paths: lakesink tables' folders.
        clock: The time now (tests set it); pending ages are measured against it.
    """

    def __init__(
        self,
        paths: Sequence[str],
        *,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self._paths = [normalize(p) for p in paths]
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        statuses = [sink_status(path) for path in self._paths]
        families = _families()
        for status in statuses:
            _add_sink(families, status, now)
        yield from families.values()


def sink_registry(
    paths: Sequence[str], *, clock: Callable[[], datetime] = _utc_now
) -> CollectorRegistry:
    """A registry holding the sink metrics of the tables at ``paths`` (see the collector)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(JournalCollector(paths, clock=clock))
    return registry


def vacuum_run_metrics(
    report: VacuumReport, *, duration_s: float, finished_at: float | None = None
) -> CollectorRegistry:
    """A registry with one vacuum run's figures (``lakesink_vacuum_last_run_*``).

    Args:
        report: What the run did (not a dry run's report: it changed nothing).
        duration_s: Its wall time.
        finished_at: When it ended, in seconds since the epoch (default now).
    """
    registry = CollectorRegistry(auto_describe=False)
    figures = {
        "timestamp_seconds": ("When the last vacuum run ended.", finished_at or time.time()),
        "duration_seconds": ("Wall time of the last vacuum run.", duration_s),
        "transactions_removed": (
            "Aborted or expired transactions whose rows the last vacuum run removed.",
            len(report.transactions),
        ),
        "rows_removed": ("Rows the last vacuum run removed.", report.rows_removed),
        "files_removed": ("Data files the last vacuum run deleted.", report.files_removed),
        "bytes_removed": ("Bytes the last vacuum run deleted.", report.bytes_removed),
        "files_compacted": (
            "Small files the last vacuum run's compaction rewrote.",
            sum(part.files_removed for part in report.compaction),
        ),
    }
    for name, (text, value) in figures.items():
        gauge = Gauge(f"lakesink_vacuum_last_run_{name}", text, _LABELS, registry=registry)
        gauge.labels(report.sink_id, report.table_path).set(value)
    return registry


@dataclass(frozen=True, kw_only=True)
class MetricsExport:
    """Where a job (or ``lakesink metrics``) sends its metrics.

    Attributes:
        textfile: A ``.prom`` file in node_exporter's textfile-collector folder; written
            whole to a temporary file and renamed into place, so a scrape never reads half.
        push_gateway: A Prometheus Pushgateway's address (``http://host:9091``).
        job: The Pushgateway's ``job`` label, which groups (and replaces) what is pushed.
        grouping: Further grouping labels on the Pushgateway (e.g. ``{"sink": "orders"}``).

    Raises:
        ConfigurationError: ``textfile`` does not end in ``.prom`` (the collector would
            skip it) or its folder does not exist.
    """

    textfile: str | None = None
    push_gateway: str | None = None
    job: str = "lakesink"
    grouping: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.textfile is None:
            return
        path = Path(self.textfile)
        if path.suffix != ".prom":
            raise ConfigurationError(
                f"metrics file {self.textfile} must end in .prom: node_exporter's textfile "
                "collector reads only *.prom files"
            )
        if not path.resolve().parent.is_dir():
            raise ConfigurationError(
                f"metrics file {self.textfile}: folder {path.resolve().parent} does not exist; "
                "create it (it is the textfile collector's --collector.textfile.directory)"
            )

    @property
    def enabled(self) -> bool:
        """Whether it sends anything anywhere."""
        return bool(self.textfile or self.push_gateway)

    def send(self, registry: CollectorRegistry) -> None:
        """Write the registry's metrics to the textfile and push them to the gateway.

        Raises:
            ConfigurationError: The file could not be written, or the gateway's address is
                not a URL.
            MetricsExportError: The gateway refused or did not answer (try later).
        """
        if self.textfile:
            try:
                write_to_textfile(str(self.textfile), registry)
            except OSError as error:
                raise ConfigurationError(
                    f"cannot write metrics file {self.textfile}: {error.strerror or error}"
                ) from error
        if self.push_gateway:
            try:
                push_to_gateway(
                    self.push_gateway,
                    job=self.job,
                    registry=registry,
                    # prometheus_client only reads it, but types it as a dict
                    grouping_key=self.grouping,  # type: ignore[arg-type]
                )
            except ValueError as error:
                raise ConfigurationError(
                    f"Pushgateway address {self.push_gateway!r} is not a URL: {error}; "
                    "give it as http://host:9091"
                ) from error
            except OSError as error:  # urllib's URLError and HTTPError are OSErrors
                raise MetricsExportError(
                    f"cannot push metrics to the Pushgateway at {self.push_gateway}: {error}; "
                    "check that it runs, then try again"
                ) from error

    def send_quietly(self, registry: CollectorRegistry) -> None:
        """``send``, logging a failure instead of raising: metrics never stop a pipeline."""
        try:
            self.send(registry)
        except Exception:  # a metrics outage (or a bad journal read) must not fail a commit
            log.warning("metrics not exported", exc_info=True)


def _families() -> dict[str, Metric]:
    gauges = {
        "oldest_pending_age_seconds": "Age of the oldest transaction not yet committed, "
        "aborted or held (0 when none).",
        "pending_checkpoints": "Checkpoints pre-committed or open, waiting for their commit.",
        "held_checkpoints": "Checkpoints the validation gate held for an operator.",
        "last_committed_checkpoint": "Id of the newest committed checkpoint.",
        "last_commit_timestamp_seconds": "When the newest commit made rows visible.",
    }
    counters = {
        "committed_checkpoints": "Checkpoints committed.",
        "aborted_checkpoints": "Checkpoints aborted.",
        "committed_rows": "Rows committed (visible to readers).",
        "vacuumed_transactions": "Aborted or expired transactions whose rows the vacuum removed.",
        "vacuumed_rows": "Rows the vacuum removed.",
    }
    families: dict[str, Metric] = {}
    for name, text in gauges.items():
        families[name] = GaugeMetricFamily(f"lakesink_{name}", text, labels=_LABELS)
    for name, text in counters.items():
        families[name] = CounterMetricFamily(f"lakesink_{name}", text, labels=_LABELS)
    families["commit_latency_seconds"] = HistogramMetricFamily(
        "lakesink_commit_latency_seconds",
        "Seconds from a transaction's pre-commit to its rows being visible.",
        labels=_LABELS,
    )
    return families


def _add_sink(families: dict[str, Metric], status: SinkStatus, now: datetime) -> None:
    labels = [status.sink_id, status.table_path]

    def put(name: str, value: float) -> None:
        families[name].add_metric(labels, float(value))  # type: ignore[attr-defined]

    committed = status.committed
    commit_times = [t.first_at[TxnState.COMMITTED] for t in committed]
    put(
        "oldest_pending_age_seconds",
        max(((now - t.opened_at).total_seconds() for t in status.pending), default=0.0),
    )
    put("pending_checkpoints", _checkpoints(status.pending))
    put("held_checkpoints", _checkpoints(status.held))
    if status.last_committed_checkpoint is not None:
        put("last_committed_checkpoint", status.last_committed_checkpoint)
        put("last_commit_timestamp_seconds", max(commit_times).timestamp())
    put("committed_checkpoints", _checkpoints(committed))
    put("aborted_checkpoints", _checkpoints(status.aborted))
    put("committed_rows", status.committed_rows)
    vacuumed = [t for t in status.aborted if t.vacuumed]
    put("vacuumed_transactions", len(vacuumed))
    put("vacuumed_rows", sum(t.row_count or 0 for t in vacuumed))
    # From its pre-commit record, which holds it when the validation gate does: a held
    # checkpoint an operator committed counts as every other committed one does.
    staged = [
        (t, min(t.first_at[s] for s in (TxnState.PRE_COMMITTED, TxnState.HELD) if s in t.first_at))
        for t in committed
        if t.states & {TxnState.PRE_COMMITTED, TxnState.HELD}
    ]
    latencies = [(t.first_at[TxnState.COMMITTED] - at).total_seconds() for t, at in staged]
    families["commit_latency_seconds"].add_metric(  # type: ignore[attr-defined]
        labels, _buckets(latencies), sum_value=sum(latencies)
    )


def _checkpoints(transactions: Iterable[TransactionStatus]) -> int:
    return len({t.checkpoint_id for t in transactions})


def _buckets(values: Sequence[float]) -> list[tuple[str, float]]:
    """Cumulative counts per upper bound, ``+Inf`` last, as the exposition format has them."""
    counts = [(str(bound), float(sum(v <= bound for v in values))) for bound in LATENCY_BUCKETS]
    return [*counts, ("+Inf", float(len(values)))]
