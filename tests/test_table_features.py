"""The table features data platforms turn on for new tables: a lakesink table created with
one (by the session's default for new tables, ``spark.databricks.delta.properties.defaults.*``,
as a platform sets it; or by ``ALTER TABLE`` where Delta has no default for it) is written
exactly once in the MERGE mode, and in the metadata mode either written exactly once or
refused in one line that names the property and the way out, before anything is written.

"Exactly once": two checkpoints, the second of two appends (Delta's idempotent write skips
an append whose version is not above its app id's, so a second append of one checkpoint is
where a wrong version would lose rows), the sink reopened in between (recovery), then the
committed rows, read by Spark, ``lakesink.arrow`` and the published table (delta-rs), are
the rows written, each once, every value as written (a file whose columns Delta cannot find
by name reads as NULLs: the count alone would not tell). Every table has a
``TIMESTAMP_NTZ`` column (Delta's ``timestampNtz`` feature); the change data feed of one
made with it shows each committed row once, inserted where it is visible.

Delta refuses generated and identity columns in ``ALTER TABLE ... ADD COLUMNS``, and no
session default adds them, so no lakesink table (which lakesink creates from the schema it
is given) has one.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

import lakesink
from lakesink.delta.publish import SESSION_DEFAULTS
from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError
from lakesink.spark.settings import session_conf

SCHEMA = "id BIGINT, item STRING, at TIMESTAMP_NTZ"
Row = tuple[int, str, datetime]


def rows(ids: range) -> list[Row]:
    return [(i, f"x{i}", datetime(2024, 1, 1, 12, i % 60, 7, 123456)) for i in ids]


def open_sink(spark, path: Path, mode: str) -> DeltaSink:
    return DeltaSink.open(spark, str(path), schema=SCHEMA, commit=mode, view_name="v_features")


def write_twice(spark, path: Path, mode: str, *, defaults: dict[str, str] | None = None) -> None:
    """Checkpoint 1 (created with ``defaults``), the sink reopened, checkpoint 2 of two
    appends; then every reader reads each row once, as written."""
    settings = {f"{SESSION_DEFAULTS}{k}": v for k, v in (defaults or {}).items()}
    with session_conf(spark, settings):
        sink = open_sink(spark, path, mode)
    sink.write(spark.createDataFrame(rows(range(0, 40)), SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    sink = open_sink(spark, path, mode)
    for ids in (range(40, 70), range(70, 100)):
        sink.write(spark.createDataFrame(rows(ids), SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    expected = Counter(rows(range(100)))
    spark_rows = Counter(tuple(r) for r in lakesink.committed(spark, str(path)).collect())
    arrow = lakesink.arrow(str(path)).to_pydict()
    published = DeltaTable(lakesink.Table(str(path)).published).to_pyarrow_table().to_pydict()
    for reader, found in (
        ("lakesink.committed", spark_rows),
        ("lakesink.arrow", Counter(zip(arrow["id"], arrow["item"], arrow["at"], strict=True))),
        (
            "published table",
            Counter(zip(published["id"], published["item"], published["at"], strict=True)),
        ),
    ):
        assert found == expected, (reader, sorted(found - expected)[:3])
    states = [c.state.value for c in lakesink.Table(str(path)).checkpoints()]
    assert states == ["committed", "committed"]


def table_features(spark, path: Path) -> set[str]:
    return set(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["tableFeatures"])


# Each feature's session default, and the feature it gives a new table.
DEFAULTS = {
    "deletion vectors": ({"enableDeletionVectors": "true"}, "deletionVectors"),
    "row tracking": ({"enableRowTracking": "true"}, "rowTracking"),
    "in-commit timestamps": ({"enableInCommitTimestamps": "true"}, "inCommitTimestamp"),
    "change data feed": ({"enableChangeDataFeed": "true"}, "changeDataFeed"),
}
# delta-rs cannot commit to these: the metadata mode refuses them, naming the default.
REFUSED_BY_METADATA = {"row tracking", "in-commit timestamps"}


@pytest.mark.parametrize("mode", ["merge", "metadata"])
@pytest.mark.parametrize("feature", sorted(DEFAULTS))
def test_a_table_made_with_a_platforms_default_feature(spark, tmp_path, feature, mode):
    defaults, name = DEFAULTS[feature]
    path = tmp_path / "orders"
    if mode == "metadata" and feature in REFUSED_BY_METADATA:
        (setting,) = (f"{SESSION_DEFAULTS}{k} = {v}" for k, v in defaults.items())
        with (
            session_conf(spark, {f"{SESSION_DEFAULTS}{k}": v for k, v in defaults.items()}),
            pytest.raises(ConfigurationError, match=rf"{re.escape(setting)}.*commit='merge'"),
        ):
            open_sink(spark, path, mode)
        assert not path.exists()  # nothing made: no half-made table
        assert not (tmp_path / "_lakesink_journal").exists()
        return
    write_twice(spark, path, mode, defaults=defaults)
    assert name in table_features(spark, path)
    if name == "changeDataFeed":  # each committed row once, inserted where it is visible
        changes = (
            spark.read.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", 0)
            .load(str(path))
            .where("_lakesink_visible AND _change_type = 'insert'")
        )
        assert Counter(r.id for r in changes.collect()) == Counter(range(100))


@pytest.mark.parametrize("mode", ["merge", "metadata"])
def test_column_mapping_by_default_is_left_off_and_by_alter_table_refused(
    spark, tmp_path, mode, caplog
):
    """A lakesink table keeps its files in its partitions' folders, by their columns' own
    names, where its published table reads them: made while the session's default turns
    column mapping on, it is made without (said in a warning); a table given it by
    ``ALTER TABLE`` is refused when opened (one check for both modes, tried once: Delta
    rewrites the table each way), in one line with the way back, which works."""
    path = tmp_path / "orders"
    write_twice(spark, path, mode, defaults={"columnMapping.mode": "name"})
    assert "delta.columnMapping.mode = none despite this session's defaults" in caplog.text
    assert "columnMapping" not in table_features(spark, path)
    if mode == "metadata":
        return

    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ('delta.columnMapping.mode' = 'name')")
    way_back = "SET TBLPROPERTIES ('delta.columnMapping.mode' = 'none')"
    with pytest.raises(ConfigurationError, match=re.escape(way_back)) as refused:
        open_sink(spark, path, mode)
    assert "\n" not in str(refused.value)
    spark.sql(f"ALTER TABLE delta.`{path}` {way_back}")
    sink = open_sink(spark, path, mode)
    sink.write(spark.createDataFrame(rows(range(100, 110)), SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    assert Counter(r.id for r in lakesink.committed(spark, str(path)).collect()) == Counter(
        range(110)
    )


@pytest.mark.parametrize("mode", ["merge", "metadata"])
def test_a_check_constraint_is_kept_and_a_violating_append_writes_nothing(spark, tmp_path, mode):
    path = tmp_path / "orders"
    write_twice(spark, path, mode)
    spark.sql(f"ALTER TABLE delta.`{path}` ADD CONSTRAINT positive CHECK (id >= 0)")
    sink = open_sink(spark, path, mode)
    version = DeltaTable(str(path)).version()
    with pytest.raises(Exception, match=r"(?i)positive"):
        sink.write(spark.createDataFrame([(-1, "bad", datetime(2024, 1, 1))], SCHEMA))
    sink.close()
    assert DeltaTable(str(path)).version() == version  # no row of it landed
    sink = open_sink(spark, path, mode)  # recovery aborts the failed transaction
    sink.write(spark.createDataFrame(rows(range(100, 110)), SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()
    assert Counter(r.id for r in lakesink.committed(spark, str(path)).collect()) == Counter(
        range(110)
    )


def test_liquid_clustering_is_refused_by_delta_and_the_table_stays_written_once(spark, tmp_path):
    """Delta clusters no partitioned table, and every lakesink table is partitioned by its
    masking bit: the user's ``ALTER TABLE ... CLUSTER BY`` fails, and changes nothing."""
    path = tmp_path / "orders"
    write_twice(spark, path, "merge")
    with pytest.raises(Exception, match="CLUSTER_BY_ON_PARTITIONED_TABLE_NOT_ALLOWED"):
        spark.sql(f"ALTER TABLE delta.`{path}` CLUSTER BY (id)")
    assert "clustering" not in table_features(spark, path)
