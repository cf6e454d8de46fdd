"""A ``DeltaSink``'s options (delta-rs's style: one typed, keyword-only dataclass), and the
checks of what a user names through them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lakesink.core import TransactionTimeout
from lakesink.errors import ConfigurationError
from lakesink.spark.settings import CommitRetry
from lakesink.spark.sql import quote_name
from lakesink.tables.format import CommitMode, check_commit_mode

if TYPE_CHECKING:
    from lakesink.spark.validation import ValidationGate

__all__ = ["SinkOptions", "sink_options", "view_name_for"]


@dataclass(frozen=True, kw_only=True)
class SinkOptions:
    """How a ``DeltaSink`` is named, journaled, audited and committed.

    Attributes:
        sink_id: Names the sink in the journal and the table; default: the folder's name.
            A table belongs to one sink id.
        writer_id: Identifies this writer among the sink's concurrent writers; a restarted
            writer must reuse its id to recover its transactions.
        journal_path: The journal table; default ``$LAKESINK_JOURNAL`` or
            ``_lakesink_journal`` beside the table's folder.
        view_name: Catalog name of the committed view; default: the sink id.
        table_name: Also register the raw table under this catalog name.
        validation: Audit each checkpoint's pending rows with this Great Expectations
            gate before they can be committed (``lakesink.spark.validation``). Its suite
            must only name columns the table has.
        commit_retry: How commits retry Delta write conflicts.
        timeout: A transaction timeout, for the warnings and recovery options it brings.
        partition_by: User columns to partition a new table by (a date, a region), after
            lakesink's own partition columns; kept through commits and compaction. Fixed
            when the table is created: given for an existing table, it must be the table's.
        commit: How a commit makes its rows visible, recorded on the table when it is
            created (``lakesink.commitMode``); default: the table's, ``"merge"`` for a new
            one. ``"merge"``: a Delta MERGE writes them into the committed partition
            (seconds, one read and one write of the rows; undone by RESTORE; idempotent by
            Delta's own txn version). ``"metadata"``: one delta-rs commit moves the
            transaction's files into the committed partition, no row read or written
            (milliseconds, flat in rows, on local disk); tables with row tracking or
            deletion vectors are refused (``lakesink.delta.publish``). Given for an
            existing table, it must be the table's (the error says how to switch).
        merge_schema: Add the columns ``schema`` has and an existing table lacks, as
            Delta's ``mergeSchema`` does (nullable columns only; rows written before read
            them as null). A dropped column or a changed type is still refused.
        published: Whether lakesink keeps the table's published table, the committed rows
            alone for any engine by path (``lakesink.Table(path).published``); recorded on
            the table when it is created (``lakesink.published``); default: the table's,
            kept for a new one. ``False`` is the explicit way to go without one.
    """

    sink_id: str | None = None
    writer_id: str = "0"
    journal_path: str | None = None
    view_name: str | None = None
    table_name: str | None = None
    validation: ValidationGate | None = None
    commit_retry: CommitRetry = field(default_factory=CommitRetry)
    timeout: TransactionTimeout | None = None
    partition_by: tuple[str, ...] | None = None
    commit: CommitMode | None = None
    merge_schema: bool = False
    published: bool | None = None

    def __post_init__(self) -> None:
        if self.commit is not None:
            check_commit_mode(self.commit)


def sink_options(options: SinkOptions | None, fields: dict[str, Any]) -> SinkOptions:
    """``options`` (default: the defaults) with ``fields`` set one by one, each a known option."""
    options = options or SinkOptions()
    if not fields:
        return options
    known = {f.name for f in dataclasses.fields(SinkOptions)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ConfigurationError(
            f"unknown sink option(s) {', '.join(unknown)}; the options are "
            f"{', '.join(sorted(known))}"
        )
    return dataclasses.replace(options, **fields)


def view_name_for(view_name: str | None, sink_id: str) -> str:
    """The committed view's catalog name, checked: ``view_name``, else the sink id."""
    if view_name is not None:
        quote_name(view_name, what="view name")
        return view_name
    if "." in sink_id:  # would name a view in another database, created on the fly
        raise ConfigurationError(
            f"the sink id {sink_id!r} (the view name by default) holds a dot; "
            "pass view_name= with a name of letters, digits and _"
        )
    quote_name(sink_id, what="view name (by default the sink id)")
    return sink_id
