"""Locations: one spelling per place, local or on an object store (no file system touched)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lakesink.storage.location import (
    is_uri,
    join,
    name,
    normalize,
    parent,
    relative_to_parent,
    resolve_relative,
    scheme,
)


def test_a_local_path_becomes_absolute_and_file_uris_are_local(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert normalize("orders") == str(tmp_path / "orders")
    assert normalize(Path("a/../orders/")) == str(tmp_path / "orders")
    assert normalize(f"file://{tmp_path}/orders") == str(tmp_path / "orders")
    assert normalize(f"file:{tmp_path}/orders") == str(tmp_path / "orders")
    assert not is_uri(f"file:///{tmp_path}") and scheme(str(tmp_path)) is None


@pytest.mark.parametrize(
    ("given", "canonical"),
    [
        ("s3a://bucket/lake/orders", "s3a://bucket/lake/orders"),
        ("s3://bucket/lake/orders/", "s3a://bucket/lake/orders"),
        ("S3N://bucket/lake//./orders", "s3a://bucket/lake/orders"),
        ("gs://bucket/orders", "gs://bucket/orders"),
        ("abfss://lake@account.dfs.core.windows.net/orders", None),
        ("s3a://bucket", "s3a://bucket"),
    ],
)
def test_a_uri_keeps_its_place_in_one_spelling(given, canonical):
    assert normalize(given) == (canonical or given)
    assert is_uri(given)


@pytest.mark.parametrize("bad", ["s3a://", "s3a:///key", "gs://bucket/../other"])
def test_a_uri_without_a_bucket_or_climbing_out_of_it_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="bucket"):
        normalize(bad)


@pytest.mark.parametrize("root", ["/data/lake", "s3a://bucket/lake"])
def test_join_parent_and_name_agree_locally_and_on_a_store(root):
    table = join(root, "orders")
    assert parent(table) == root
    assert name(table) == "orders"
    assert join(root, "state", "ingest") == f"{root}/state/ingest"
    assert parent("s3a://bucket") == "s3a://bucket"


@pytest.mark.parametrize("root", ["/data/lake", "s3a://bucket/lake"])
def test_a_journal_beside_its_table_is_recorded_relative_and_moves_with_it(root):
    table, journal = join(root, "orders"), join(root, "_lakesink_journal")
    recorded = relative_to_parent(journal, table)
    assert recorded == "../_lakesink_journal"
    moved = join("s3a://other/backup", "orders")
    assert resolve_relative(moved, recorded) == "s3a://other/backup/_lakesink_journal"


def test_a_journal_elsewhere_is_recorded_whole():
    assert relative_to_parent("/data/journals/j", "/data/lake/orders") is None
    assert relative_to_parent("s3a://b/lake/j", "/data/lake/orders") is None
    assert resolve_relative("/data/lake/orders", "/data/journals/j") == "/data/journals/j"
