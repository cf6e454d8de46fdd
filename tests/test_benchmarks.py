"""The benchmark suite's quick mode runs end to end and writes a complete report.

It asserts no speed (the suite reports, it does not judge): every section measured every
point of the quick suite with real numbers, each ratio is against the baseline of the same
run, and the JSON and the PNG were written. The runner itself checks, before measuring
readers, that the committed view (and the published table) and the plain table hold the
same rows (count and sum of ids), that each commit made its rows visible in both, and that
each vacuum removed exactly the aborted checkpoint's rows; this test reads those counts
back from the report. The S3 section runs on a SeaweedFS server the run starts and stops
itself; its figures are ratios to the same work on local disk.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FULL_JIT

from benchmarks.run import QUICK, SECTIONS

REPO = Path(__file__).resolve().parent.parent


# Session scope: xdist may run other modules' tests between these on the worker of the
# "bench" group, and a module-scoped run would then be made twice.
@pytest.fixture(scope="session")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, str, Path]:
    out = tmp_path_factory.mktemp("bench")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(out)]
    command += [f"--conf={key}={value}" for key, value in FULL_JIT.items()]  # it runs minutes
    result = subprocess.run(
        command,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads((out / "bench.json").read_text()), result.stdout, out


def _positive(row: dict, *keys: str) -> None:
    for key in keys:
        assert isinstance(row[key], (int, float)) and row[key] > 0, (key, row)


def _ratio_of(row: dict, ratio: str, value: str, baseline: str) -> None:
    """The ratio is of the two figures, and each figure is the median of the samples the
    run recorded for it (where the row names them by the figure's name)."""
    assert row[ratio] == pytest.approx(row[value] / row[baseline]), (ratio, row)
    for figure in (value, baseline):
        samples = row.get("samples", {}).get(figure.removesuffix("_s"))
        if samples is not None:
            assert row[figure] == pytest.approx(statistics.median(samples)), (figure, row)


@pytest.mark.slow
def test_header_names_the_machine_the_versions_and_the_load(quick_run) -> None:
    report, _, _ = quick_run
    assert report["mode"] == "quick"
    assert report["repetitions"] == QUICK.repetitions
    machine = report["machine"]
    assert machine["cores"] >= 1 and machine["memory_gib"] > 0
    for key in ("date", "cpu", "python", "java", "pyspark", "delta_spark", "lakesink_commit"):
        assert machine[key], key
    load = report["load"]  # sampled from /proc/loadavg while the run worked the machine
    assert load["samples"] >= 1 and 0 < load["min_1m"] <= load["median_1m"] <= load["max_1m"]
    assert report["duration_s"] > 0
    # The S3 figures say what they are: a local server on loopback, not a network away.
    store = report["object_store"]
    assert "SeaweedFS" in store["server"] and "127.0.0.1" in store["server"]
    assert "not network latency" in store["measures"]


@pytest.mark.slow
def test_every_section_measured_every_point_against_its_baseline(quick_run) -> None:
    report, _, _ = quick_run
    sections = report["sections"]
    assert list(sections) == list(SECTIONS)
    reps = QUICK.repetitions

    write = sections["write_path"]["rows"]
    assert [r["rows"] for r in write] == list(QUICK.write_rows)
    for row in write:
        _positive(row, "plain_append_s", "idempotent_append_s", "pre_commit_s", "commit_s")
        # Against Delta's own idempotent append, in a table of each commit mode.
        _ratio_of(row, "pre_commit_ratio", "pre_commit_s", "idempotent_append_s")
        _ratio_of(row, "metadata_pre_commit_ratio", "metadata_pre_commit_s", "idempotent_append_s")
        _positive(row, "total_ratio", "metadata_commit_s", "metadata_total_ratio")
        assert all(len(samples) == reps for samples in row["samples"].values())

    commits = sections["commit_vs_size"]["rows"]
    assert [r["rows"] for r in commits] == list(QUICK.commit_rows)
    for row in commits:
        _positive(row, "commit_s", "plain_append_s", "merge_s", "merge_rewrite_s", "files_added")
        _ratio_of(row, "ratio", "commit_s", "plain_append_s")
        _ratio_of(row, "metadata_ratio", "metadata_commit_s", "plain_append_s")
        # The insert-only MERGE: every row inserted, no committed file read or rewritten.
        assert row["rows_inserted"] == row["rows"], row
        assert row["files_removed"] == row["rows_copied"] == 0, row
        assert 0 <= row["merge_scan_s"] <= row["merge_s"], row

    history = sections["commit_vs_history"]["rows"]
    assert [r["history"] for r in history] == list(QUICK.history)
    for row in history:
        _positive(row, "commit_s", "plain_append_s", "table_files", "files_read")
        _positive(row, "metadata_commit_s", "metadata_growth")
        _ratio_of(row, "ratio", "commit_s", "plain_append_s")
        for name in ("commit", "metadata_commit", "publish", "metadata_publish"):
            assert len(row["samples"][name]) == reps, name

    readers = sections["reader"]["rows"]
    assert [(r["query"], r["table"]) for r in readers] == [
        ("scan", "committed only"),
        ("aggregate", "committed only"),
        ("scan", "+ pending and aborted"),
        ("aggregate", "+ pending and aborted"),
    ]
    committed_rows = QUICK.reader_checkpoints * QUICK.reader_rows
    for row in readers:
        # The same committed rows in both tables, before and after the masked ones came.
        assert row["rows"] == committed_rows
        _positive(row, "plain_s", "lakesink_s", "plain_files_read", "lakesink_files_read")
        _ratio_of(row, "ratio", "lakesink_s", "plain_s")
    assert [r["masked_rows"] for r in readers] == [
        0,
        0,
        2 * QUICK.reader_rows,
        2 * QUICK.reader_rows,
    ]

    vacuums = sections["vacuum"]["rows"]
    assert [r["history"] for r in vacuums] == list(QUICK.history)
    for row in vacuums:
        assert row["rows_removed"] == QUICK.history_rows  # the aborted checkpoint, no more
        _positive(row, "vacuum_s", "plain_append_s", "files_removed", "table_rows")
        _ratio_of(row, "ratio", "vacuum_s", "plain_append_s")
    assert vacuums[-1]["table_rows"] > vacuums[0]["table_rows"]

    streamed = sections["streaming"]["rows"]  # both queries' rows were checked by the run
    assert [(r["rows"], r["batches"]) for r in streamed] == [
        (n, QUICK.stream_batches) for n in QUICK.stream_rows
    ]
    for row in streamed:
        _positive(row, "foreach_batch_s", "lakesink_s")
        _ratio_of(row, "ratio", "lakesink_s", "foreach_batch_s")
        _ratio_of(row, "metadata_ratio", "metadata_s", "foreach_batch_s")
        assert all(len(samples) == reps for samples in row["samples"].values())

    whole = sections["checkpoint"]["rows"]  # every table's rows were checked by the run
    assert [(r["rows"], r["checkpoints"]) for r in whole] == [
        (n, QUICK.checkpoints) for n in QUICK.checkpoint_rows
    ]
    for row in whole:
        _positive(row, "plain_s", "lakesink_s", "metadata_s")
        _ratio_of(row, "ratio", "lakesink_s", "plain_s")
        _ratio_of(row, "metadata_ratio", "metadata_s", "plain_s")
        assert all(len(samples) == reps for samples in row["samples"].values())

    grown = sections["accumulated"]["rows"]  # both tables' rows were checked by the run
    assert QUICK.accumulated_built and set(QUICK.accumulated_built) < set(QUICK.accumulated)
    assert [(r["checkpoints"], r["written"], r["state"]) for r in grown] == [
        (n, "built directly" if n in QUICK.accumulated_built else "through the sink", state)
        for n in QUICK.accumulated
        for state in ("as committed", "after maintenance")
    ]
    for before, after in zip(grown[::2], grown[1::2], strict=True):
        assert before["rows"] == after["rows"] == QUICK.accumulated_rows
        # One file per checkpoint as committed; the vacuum's compaction merged them.
        assert before["files"] == before["checkpoints"] > after["files"] >= 1
        _positive(after, "plain_s", "lakesink_s", "maintenance_s", "written_s")
        _ratio_of(after, "ratio", "lakesink_s", "plain_s")

    stored = sections["object_store"]  # the micro-batches' committed rows were checked by the run
    work = ("pre_commit", "commit", "batch")
    assert [c["key"] for c in stored["columns"]] == [
        "rows",
        "batches",
        "local_pre_commit_s",
        "s3_pre_commit_s",
        "pre_commit_ratio",
        "local_commit_s",
        "s3_commit_s",
        "commit_ratio",
        "local_batch_s",
        "s3_batch_s",
        "batch_ratio",
    ]
    assert [(r["rows"], r["batches"]) for r in stored["rows"]] == [
        (n, QUICK.stream_batches) for n in QUICK.object_store_rows
    ]
    for row in stored["rows"]:
        for name in work:
            local, s3 = f"local_{name}_s", f"s3_{name}_s"
            _positive(row, local, s3)
            assert math.isfinite(row[local]) and math.isfinite(row[s3]), (name, row)
            _ratio_of(row, f"{name}_ratio", s3, local)
        assert sorted(row["samples"]) == sorted(f"{s}_{n}" for s in ("local", "s3") for n in work)
        assert all(len(samples) == reps for samples in row["samples"].values())

    at_cut = sections["cut"]["rows"]  # both tables' rows were checked by the run
    assert [r["rows"] for r in at_cut] == [n * QUICK.checkpoints for n in QUICK.cut_rows]
    for row in at_cut:
        _positive(row, "one_latest_s", "one_cut_s", "two_apart_s", "two_cut_s", "record_s")
        _ratio_of(row, "one_ratio", "one_cut_s", "one_latest_s")
        _ratio_of(row, "two_ratio", "two_cut_s", "two_apart_s")
        assert row["cut_commits"] == 1  # one small commit a checkpoint, to the cuts table
        assert len(row["samples"]["checkpoint"]) == QUICK.checkpoints

    ran = sections["scheduled"]["rows"]  # both jobs' rows were checked by the run
    assert [(r["rows"], r["batches"]) for r in ran] == [
        (n, QUICK.stream_batches) for n in QUICK.scheduled_rows
    ]
    for row in ran:
        _positive(row, "foreach_batch_s", "lakesink_s", "metadata_s")
        _ratio_of(row, "ratio", "lakesink_s", "foreach_batch_s")
        _ratio_of(row, "metadata_ratio", "metadata_s", "foreach_batch_s")
        assert all(len(samples) == reps for samples in row["samples"].values())

    kept = sections["published"]["rows"]  # each published table's rows were checked by the run
    point = {"size": "rows", "history": "history", "read": "query"}
    assert [(r["kind"], r[point[r["kind"]]]) for r in kept] == [
        *(("size", n) for n in QUICK.write_rows),
        *(("history", n) for n in QUICK.history),
        ("read", "scan"),
        ("read", "aggregate"),
    ]
    for row in kept:
        _positive(row, "baseline_s", "merge_s", "metadata_s")
        _ratio_of(row, "merge_ratio", "merge_s", "baseline_s")
        _ratio_of(row, "metadata_ratio", "metadata_s", "baseline_s")
        assert all(len(samples) == reps for samples in row["samples"].values())
    # The update's cost by size is the one timed inside section 1's commits, against its baseline.
    for row, written in zip(kept, write, strict=False):
        assert row["baseline_s"] == written["idempotent_append_s"]
        assert row["merge_s"] == pytest.approx(statistics.median(written["samples"]["publish"]))
    for row in (r for r in kept if r["kind"] == "read"):
        assert row["rows"] == QUICK.reader_checkpoints * QUICK.reader_rows
        assert row["masked_rows"] == 2 * QUICK.reader_rows  # in the sink tables, never shown
        assert all(row["files_read"][side] for side in ("plain", "merge", "metadata")), row

    peaks = sections["memory"]["rows"]  # each table's rows were checked by the run
    assert [r["measure"] for r in peaks] == ["heap", "jvm_rss", "python_rss"]
    for row in peaks:
        assert row["rows"] == QUICK.memory_rows and row["samples_per_action"] >= 1
        _positive(row, "append_peak_mib", "merge_peak_mib", "metadata_peak_mib")
        samples = row["samples"]
        for mode in ("merge", "metadata"):
            ratio = statistics.median(samples[f"{mode}_peak"]) / statistics.median(
                samples["append_peak"]
            )
            assert row[f"{mode}_ratio"] == pytest.approx(ratio), (mode, row)
        assert all(len(values) == reps for values in samples.values())

    # Each published table was checked to hold the plain table's rows by the run.
    purged = sections["vectors"]["rows"]
    assert [r["baseline"] for r in purged] == [
        "REORG ... PURGE",
        "the table, vectors applied",
        "the same mode, no vectors",
    ]
    for row in purged:
        for mode in ("merge", "metadata"):
            _positive(row, f"{mode}_baseline_s", f"{mode}_s")
            _ratio_of(row, f"{mode}_ratio", f"{mode}_s", f"{mode}_baseline_s")
        assert all(len(samples) == reps for samples in row["samples"].values())


@pytest.mark.slow
def test_table_and_plot_are_written(quick_run) -> None:
    report, stdout, out = quick_run
    for number, section in enumerate(report["sections"].values(), 1):
        assert f"{number}. {section['title']}" in stdout
        assert "| " + " | ".join(c["header"] for c in section["columns"]) + " |" in stdout
    assert "n/a" not in stdout  # every cell has a number
    png = (out / "bench.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000


def test_the_scale_report_replaces_its_section_of_the_page_and_nothing_else(tmp_path) -> None:
    """``make bench-scale`` writes every curve measured into its folder (each run of
    ``--curves`` leaves the others' reports) between the page's markers, each curve with
    its own run's header and figure (make test runs none of its curves: hours); a page
    without the markers is named, not written."""
    from benchmarks.harness import BenchmarkError
    from benchmarks.report import Column, Section, write_json
    from benchmarks.scale import BEGIN, END, page_text, write_page

    out = tmp_path / "out"
    out.mkdir()
    page = tmp_path / "benchmarks.md"
    page.write_text(f"# Benchmarks\n\nbefore\n\n{BEGIN}\nan older run\n{END}\n\nafter\n")

    def run(key: str, seconds: float) -> None:
        header = {
            "mode": f"scale ({key})",
            "machine": {
                "date": "2026-12-02 17:00 UTC",
                "cpu": "cpu",
                "cores": 2,
                "memory_gib": 24,
                "os": "Linux",
                "python": "3.11",
                "java": "17",
                "pyspark": "4",
                "delta_spark": "4",
                "spark_master": "local[*]",
                "lakesink_commit": "abc",
            },
            "repetitions": 3,
            "load": {"min_1m": 1.0, "median_1m": 1.5, "max_1m": 2.0},
            "duration_s": seconds,
        }
        column = Column("seconds", "time", "seconds")
        section = Section(key, f"curve {key}", "x nothing", (column,), ({"seconds": seconds},))
        write_json(out / f"scale-{key}.json", header, [section])

    run("writers", 4.0)
    run("history", 1.0)
    for text in ("", "the second time"):
        write_page(page, page_text(out, page) + text)
        content = page.read_text()
        assert content.startswith(f"# Benchmarks\n\nbefore\n\n{BEGIN}\n")
        assert content.endswith(f"{text}\n{END}\n\nafter\n")
        assert "an older run" not in content
        # In the curves' order, numbered, each with its figure.
        history, writers = content.index("1. curve history"), content.index("2. curve writers")
        assert history < content.index("(out/scale-history.png)") < writers
        assert writers < content.index("(out/scale-writers.png)")
        assert "| 1.00 s |" in content and "| 4.00 s |" in content
    bare = tmp_path / "bare.md"
    bare.write_text("# Benchmarks\n")
    with pytest.raises(BenchmarkError, match=r"bare\.md has no"):
        write_page(bare, "a run")
    assert bare.read_text() == "# Benchmarks\n"
    # The project's own page has the section the make target writes into.
    assert BEGIN in (REPO / "docs/benchmarks.md").read_text()
