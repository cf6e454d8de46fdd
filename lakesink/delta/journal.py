"""The journal read in Spark: its events as a DataFrame, and ``fold``, which turns them
into one row per transaction in Spark SQL (the rule of ``lakesink.tables.journal``'s
``fold_events``, with more columns), for the audit to join with a table's history.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from lakesink.core import TxnState
from lakesink.tables.journal import RESTORED_PREFIX, VACUUMED_PREFIX

__all__ = ["fold", "journal_events"]


def journal_events(spark: SparkSession, path: str, *, version: int | None = None) -> DataFrame:
    """Every event of the journal at ``path`` (as of a Delta ``version`` of it, if given)."""
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", version)
    return reader.load(path)


def fold(events: DataFrame) -> DataFrame:
    """One row per transaction of the events: its state, times, counts and last report.

    Columns: ``sink_id, txn_id, checkpoint_id, writer_id, state, opened_at, updated_at,
    pre_committed_at, committed_at, aborted_at, held_at, row_count, attempts, states,
    vacuumed, restored, last_error, last_validation``.
    """
    rank = F.create_map(*[F.lit(x) for s in TxnState for x in (s.value, s.rank)])
    state, at = F.col("state"), F.col("event_time")

    def first_time(of: TxnState) -> Column:
        return F.min(F.when(state == of.value, at))

    def aborted_as(prefix: str) -> Column:
        detail = F.coalesce(F.col("detail"), F.lit(""))
        return F.bool_or((state == TxnState.ABORTED.value) & detail.startswith(prefix))

    def latest(column: str) -> Column:
        return F.max_by(column, F.when(F.col(column).isNotNull(), at))

    return events.groupBy("sink_id", "txn_id").agg(
        F.first("checkpoint_id").alias("checkpoint_id"),
        F.first("writer_id").alias("writer_id"),
        F.max_by("state", F.struct(rank[state], at, F.col("attempt"))).alias("state"),
        F.min(at).alias("opened_at"),
        F.max(at).alias("updated_at"),
        first_time(TxnState.PRE_COMMITTED).alias("pre_committed_at"),
        first_time(TxnState.COMMITTED).alias("committed_at"),
        first_time(TxnState.ABORTED).alias("aborted_at"),
        first_time(TxnState.HELD).alias("held_at"),
        F.max("row_count").alias("row_count"),
        F.max("attempt").alias("attempts"),
        F.collect_set("state").alias("states"),
        aborted_as(VACUUMED_PREFIX).alias("vacuumed"),
        aborted_as(RESTORED_PREFIX).alias("restored"),
        latest("error").alias("last_error"),
        latest("validation").alias("last_validation"),
    )
