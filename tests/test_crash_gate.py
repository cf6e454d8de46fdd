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


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def _commit(repo: Path, path: str, text: str) -> str:
    """Commits ``text`` as ``path`` in the git repository ``repo`` (made on first use)."""
    if not (repo / ".git").exists():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q")
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", path)
    return _git(repo, "rev-parse", "--short", "HEAD")


def _run(commit: str, options: str = "") -> str:
    """A run's line as the report lists it."""
    command = f"python tests/crashpoints/run.py {options}".strip()
    return f"- run 2026-11-29 at {commit}, `{command}`, 1 min on 2 cores: 1 crash point."


def test_the_report_says_whether_its_runs_enumerated_one_code(tmp_path):
    from crashpoints.run import _one_code

    first = _commit(tmp_path, "lakesink/sink.py", "v1")
    docs = _commit(tmp_path, "README.md", "words")  # no code changed
    report = _commit(tmp_path, "tests/crashpoints/run.py", "writes the page")  # the writer only
    fixed = _commit(tmp_path, "lakesink/sink.py", "v2")

    def said(*commits: str) -> str:
        return _one_code([_run(c) for c in commits], tmp_path)

    assert said(first, docs, report).startswith("Every run above enumerated one code")
    assert report in said(first, docs, report)
    assert said(first, fixed).startswith("The runs above enumerated 2 versions")
    assert fixed in said(first, fixed)
    uncommitted = said(first, f"{first} with uncommitted changes")
    assert uncommitted.startswith("The runs above enumerated 2 versions")
    assert "unknown" in uncommitted


def test_the_report_lists_only_the_runs_its_rows_come_from():
    from crashpoints.run import _standing

    both = _run("abc1234", "--store local --scenario vacuum")
    merge = _run("abc1234", "--store local --scenario vacuum --mode merge")
    metadata = _run("abc1234", "--store local --scenario vacuum --mode metadata")
    other = _run("abc1234", "--store s3 --scenario operator-abort")
    whole = "- run 2026-11-28 at abc1234, `make crash-points`, 300 min"

    # Both modes' rows came from `both` until each mode was run again.
    assert _standing([both, merge, other]) == [both, merge, other]
    assert _standing([both, merge, other, metadata]) == [merge, other, metadata]
    # A scenario without modes runs in a run of one mode too.
    one_mode = _run("abc1234", "--store s3 --scenario operator-abort --mode merge")
    assert _standing([one_mode, other]) == [other]
    assert _standing([whole, merge]) == [whole, merge]
    assert _standing([merge, whole]) == [whole]


def test_a_resumed_enumeration_runs_what_the_page_holds_no_rows_of_this_code_for(tmp_path):
    from crashpoints.run import MARKERS, _behind, _code, _combinations

    repo = tmp_path / "repo"
    old = _commit(repo, "lakesink/sink.py", "v1")
    new = _commit(repo, "lakesink/sink.py", "v2")
    page = tmp_path / "reliability.md"
    runs = [
        _run(old, "--store local --scenario vacuum"),
        _run(new, "--store local --scenario vacuum --mode merge"),
        _run(new, "--store s3 --scenario operator-abort"),
        _run(f"{new} with uncommitted changes", "--store s3 --scenario migrate-table"),
    ]
    page.write_text(f"# Reliability\n\n{MARKERS[0]}\n\n" + "\n".join(runs) + f"\n\n{MARKERS[1]}\n")

    behind = _behind(page, _code(new, repo), repo)

    done = {("vacuum", "merge", "local"), ("operator-abort", "-", "s3")}
    assert set(_combinations(["local", "s3"])) - set(behind) == done
    assert ("vacuum", "metadata", "local") in behind  # its rows are the old code's
    assert ("migrate-table", "-", "s3") in behind  # uncommitted: no code to name
