"""The crash-point gate kills exactly where it says, on the changes a lake's writers make.

No Spark: a Python program and a JVM (``tests/data/gate``) make the kinds of change a
scenario's processes make under a lake, through the C library as Spark, Hadoop, delta-rs
and lakesink do: a file created in place, a temporary file renamed into place, a hard
link, a deletion, an overwrite. The gate (``tests/crashpoints/local_gate.py`` and
``gate.c``, preloaded) must see exactly those five changes, in order, and not the
temporary file's writes; and a kill before or after each must leave the folder exactly as
it was before or after that change: the files there and their bytes, checked here
against what the programs write, not against the gate's own word.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from crashpoints.harness import _finish, _start_stopped
from crashpoints.killing import kill_target
from crashpoints.local_gate import LocalGate, Plan

PROBES = Path(__file__).resolve().parent / "data" / "gate"
CHANGES = [
    "create a.parquet",
    "rename b.json",
    "link c.json",
    "delete a.parquet",
    "overwrite b.json",
]
# The folder's files (temporary ones aside) and their bytes after each change, 0: none yet.
AFTER = [
    {},
    {"a.parquet": b"a"},
    {"a.parquet": b"a", "b.json": b"b"},
    {"a.parquet": b"a", "b.json": b"b", "c.json": b"b"},
    {"b.json": b"b", "c.json": b"b"},
    {"b.json": b"B", "c.json": b"B"},  # a hard link shares the overwritten bytes
]


@pytest.fixture(scope="module")
def java_probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    classes = tmp_path_factory.mktemp("probe-classes")
    subprocess.run(["javac", "-d", str(classes), str(PROBES / "Probe.java")], check=True)
    return classes


def command(probe: str, classes: Path, lake: Path) -> list[str]:
    if probe == "python":
        return [sys.executable, str(PROBES / "probe.py"), str(lake)]
    return ["java", "-Xshare:auto", "-cp", str(classes), "Probe", str(lake)]


def files(lake: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in lake.iterdir() if not p.name.startswith(".")}


def run(probe: str, classes: Path, lake: Path, when: str | None = None, index: int = 0):
    """The probe through the gate, killed at change ``index`` if ``when``; its exit and
    what the gate saw."""
    gate = LocalGate(lake)
    env = {**os.environ, **gate.environment()}
    process, tree = _start_stopped(command(probe, classes, lake), env, lake.parent / "log")
    if when is not None:
        gate.arm(Plan(lambda: kill_target(tree.target), tree.target, when, index=index))
    os.kill(process.pid, signal.SIGCONT)
    code, _ = _finish(process, tree, timeout=120)
    return code, gate.stop()


@pytest.mark.parametrize("probe", ["python", "java"])
def test_the_gate_sees_every_change_under_the_lake_in_order_and_no_temporary_write(
    probe: str, java_probe: Path, tmp_path: Path
) -> None:
    code, seen = run(probe, java_probe, tmp_path / "lake")
    assert code == 0, (tmp_path / "log").read_text()
    assert seen.started == CHANGES
    assert seen.landed == CHANGES
    assert files(tmp_path / "lake") == AFTER[-1]


@pytest.mark.parametrize("probe", ["python", "java"])
@pytest.mark.parametrize("index", range(1, len(CHANGES) + 1))
@pytest.mark.parametrize("when", ["before", "after"])
def test_a_kill_leaves_the_lake_exactly_as_before_or_after_the_change(
    probe: str, when: str, index: int, java_probe: Path, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    code, seen = run(probe, java_probe, lake, when, index)
    assert code == -signal.SIGKILL
    assert seen.killed_at == f"{when} {index} {CHANGES[index - 1]}"
    assert files(lake) == AFTER[index - 1 if when == "before" else index]
    assert seen.proof(lake) is None


def test_the_report_says_whether_its_runs_enumerated_one_code(tmp_path):
    from crashpoints.run import _one_code

    def commit(path: str, text: str) -> str:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
        git("add", "-A")
        git("commit", "-qm", path)
        return git("rev-parse", "--short", "HEAD")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
            cwd=tmp_path, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

    def runs(*commits: str) -> list[str]:
        return [
            f"- run 2026-11-29 at {c}, `python tests/crashpoints/run.py`, 1 min" for c in commits
        ]

    git("init", "-q")
    first = commit("lakesink/sink.py", "v1")
    docs = commit("README.md", "words")  # no code changed
    report = commit("tests/crashpoints/run.py", "writes the page")  # only the report writer
    fixed = commit("lakesink/sink.py", "v2")

    said = _one_code(runs(first, docs, report), tmp_path)
    assert said.startswith("Every run above enumerated one code") and report in said
    said = _one_code(runs(first, fixed), tmp_path)
    assert said.startswith("The runs above enumerated 2 versions") and fixed in said
    said = _one_code(runs(first, f"{first} with uncommitted changes"), tmp_path)
    assert said.startswith("The runs above enumerated 2 versions") and "unknown" in said


def test_the_report_lists_only_the_runs_its_rows_come_from():
    from crashpoints.run import _standing

    def run(options: str) -> str:
        return f"- run 2026-11-29 at abc1234, `python tests/crashpoints/run.py {options}`, 1 min"

    both = run("--store local --scenario vacuum")
    merge = run("--store local --scenario vacuum --mode merge")
    metadata = run("--store local --scenario vacuum --mode metadata")
    other = run("--store s3 --scenario operator-abort")
    whole = "- run 2026-11-28 at abc1234, `make crash-points`, 300 min"

    # Both modes' rows came from `both` until each mode was run again.
    assert _standing([both, merge, other]) == [both, merge, other]
    assert _standing([both, merge, other, metadata]) == [merge, other, metadata]
    # A scenario without modes runs in a run of one mode too.
    assert _standing([run("--store s3 --scenario operator-abort --mode merge"), other]) == [other]
    assert _standing([whole, merge]) == [whole, merge]
    assert _standing([merge, whole]) == [whole]
