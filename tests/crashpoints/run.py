"""``make crash-points``: every change of every scenario to its lake, killed before and after.

    python tests/crashpoints/run.py [--store local|s3] [--scenario NAME] [--mode MODE]
                                    [--jobs N] [--report docs/reliability.md]
    python tests/crashpoints/run.py --resume --report docs/reliability.md

For each scenario, commit mode and store it counts the changes of an unharmed run (files
created, overwritten, renamed, linked or deleted; objects put, copied or deleted), then
kills a run before and after each of them, restarts it and checks the lake (see
``harness``). It prints a line per crash point, then a table: scenario, change k, what
it was, before/after and how the kill was made, outcome; with ``--report`` it writes the
table into that page, between its ``crash-points`` markers. A run of some scenarios or
stores replaces their rows there and keeps the others' (the page lists each run behind the
table, and what is not enumerated yet); ``make crash-points``, the whole enumeration,
replaces them all. The whole enumeration takes hours: ``--resume`` runs, one at a time, what
the page holds no rows of the current code for, and writes the page after each, so that a
stopped enumeration goes on where it stopped. Exit 0 when every restart ended exactly once.

The S3 store starts a SeaweedFS server and the fault proxy (mitmproxy, from
``.cache/tools/mitmproxy``: ``make crash-points`` installs it) on loopback and stops both.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from functools import partial
from itertools import pairwise
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from crashpoints.harness import (
    Harness,
    LocalStore,
    Outcome,
    S3FaultProxy,
    S3Store,
    crash_points,
)
from crashpoints.scenarios import SCENARIOS
from jvm_archive import java_options

ROOT = Path(__file__).resolve().parents[2]
MITMDUMP = ROOT / ".cache" / "tools" / "mitmproxy" / "bin" / "mitmdump"
MARKERS = ("<!-- crash-points:start -->", "<!-- crash-points:end -->")


def _run_store(store_name: str, args: argparse.Namespace, work: Path) -> list[Outcome]:
    if store_name == "local":
        return _enumerate(Harness(LocalStore(work), work), args)
    from servers.cluster import free_port
    from servers.s3 import create_bucket, start_server, stop_server

    server_dir = work / "s3-server"
    server = start_server(server_dir, port=free_port())
    proxy = None
    try:
        create_bucket(server, "crash-points")
        with server.exported():
            proxy = S3FaultProxy(MITMDUMP, server.endpoint, work / "proxy")
            return _enumerate(Harness(S3Store("crash-points", proxy, work), work), args)
    finally:
        if proxy is not None:
            proxy.stop()
        stop_server(server_dir)


def _enumerate(harness: Harness, args: argparse.Namespace) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for name in args.scenario or sorted(SCENARIOS):
        scenario = SCENARIOS[name]
        modes = [m for m in scenario.modes if not args.mode or m in (args.mode, None)]
        for mode in modes:
            started = time.monotonic()
            changes = harness.count(name, mode)
            print(f"{name} {mode or '-'} {harness.store.name}: {len(changes)} changes", flush=True)
            points = crash_points(harness.store.name, len(changes))
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                for outcome in pool.map(partial(harness.crash, name, mode), points):
                    row = outcome.row()
                    print(
                        "  "
                        + "  ".join(f"{row[k]}" for k in ("point", "change", "killed", "outcome")),
                        flush=True,
                    )
                    outcomes.append(outcome)
            print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
    return outcomes


COLUMNS = ("scenario", "mode", "store", "point", "change", "killed", "outcome")
Row = dict[str, str]


def _row(outcome: Outcome) -> Row:
    return {key: str(value) for key, value in outcome.row().items()}


def _key(row: Row) -> tuple[str, str, str]:
    """What a run enumerates together: a scenario, in one mode, on one store."""
    return row["scenario"], row["mode"], row["store"]


def _table(rows: list[Row]) -> str:
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for row in rows:
        lines.append(
            "| " + " | ".join(f"`{row[c]}`" if c == "change" else row[c] for c in COLUMNS) + " |"
        )
    return "\n".join(lines)


def _summary(rows: list[Row]) -> str:
    reached = Counter(_key(r) for r in rows if r["killed"] != "not reached")
    passed = Counter(
        _key(r) for r in rows if r["killed"] != "not reached" and r["outcome"] == "exactly once"
    )
    unreached = Counter(_key(r) for r in rows if r["killed"] == "not reached")
    lines = [
        "| scenario | mode | store | crash points reached | exactly once | not reached |",
        "|---|---|---|---:|---:|---:|",
    ]
    for k in sorted(set(map(_key, rows))):
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | {reached[k]} | {passed[k]} | {unreached[k]} |")
    return "\n".join(lines)


def _combinations(stores: list[str]) -> list[tuple[str, str, str]]:
    """Every (scenario, mode, store) the enumeration covers."""
    return [
        (name, mode or "-", store)
        for name, scenario in sorted(SCENARIOS.items())
        for mode in scenario.modes
        for store in stores
    ]


def _marked(text: str) -> tuple[int, int]:
    """Where the page's part between its markers starts and ends (the markers included)."""
    return text.index(MARKERS[0]), text.index(MARKERS[1]) + len(MARKERS[1])


def _page_runs(section: str) -> tuple[list[str], list[Row]]:
    """The runs listed on the page, and the rows of its table of every crash point.

    The enumeration takes hours: runs of some scenarios or stores add up on the page, each
    replacing the rows of what it ran again.
    """
    runs = [line for line in section.splitlines() if line.startswith("- run ")]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == len(COLUMNS) and cells[0] != "scenario":
            rows.append(dict(zip(COLUMNS, [c.strip("`") for c in cells], strict=True)))
    return runs, rows


# What a run's rows speak for: the code it ran and the harness that placed its kills (this
# file only writes the report).
CODE_PATHS = ("lakesink", "jobs", "tests/crashpoints", "tests/faults.py")
REPORT_WRITER = "tests/crashpoints/run.py"


def _code_commit() -> str:
    """The commit whose code the run enumerated: rows of several runs add up on the page, and
    a row enumerated before a fix to lakesink does not speak for the code after it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()

    changed = git("status", "--porcelain", "--", *CODE_PATHS, f":(exclude){REPORT_WRITER}")
    return git("rev-parse", "--short", "HEAD") + (" with uncommitted changes" if changed else "")


def _code(commit: str, root: Path = ROOT) -> str | None:
    """The code a run enumerated at ``commit``: a digest of its ``CODE_PATHS`` files (None:
    the run had uncommitted changes, or this clone lacks the commit)."""
    if " " in commit:
        return None
    listing = subprocess.run(
        ["git", "ls-tree", "-r", commit, "--", *CODE_PATHS],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip
    if listing.returncode != 0:
        return None
    files = [line for line in listing.stdout.splitlines() if not line.endswith(REPORT_WRITER)]
    return hashlib.sha256("\n".join(files).encode()).hexdigest()[:12]


def _run_commit(run: str) -> str | None:
    """The commit a run listed on the page names (with " with uncommitted changes", if so)."""
    found = re.search(r" at (\w+( with uncommitted changes)?),", run)
    return found[1] if found else None


def _one_code(runs: list[str], root: Path = ROOT) -> str:
    """Whether the runs behind the table enumerated one code, and which."""
    commits = [commit for run in runs if (commit := _run_commit(run))]
    codes: dict[str | None, list[str]] = {}
    for commit in commits:
        codes.setdefault(_code(commit, root), []).append(commit)
    paths = ", ".join(f"`{p}`" for p in CODE_PATHS)
    if len(codes) == 1 and None not in codes:
        ((code, at),) = codes.items()
        return (
            f"Every run above enumerated one code ({paths} the same at "
            f"{', '.join(dict.fromkeys(at))}; digest {code})."
        )
    groups = "; ".join(
        f"{code or 'unknown'}: {', '.join(dict.fromkeys(at))}" for code, at in codes.items()
    )
    return f"The runs above enumerated {len(codes)} versions of {paths} ({groups})."


def _covers(run: str) -> set[tuple[str, str, str]]:
    """The (scenario, mode, store) a run listed on the page enumerated, read from its command."""
    command = re.search(r"`([^`]*)`", run)
    words = command[1].split() if command else []
    given: dict[str, set[str]] = {}
    for option, value in pairwise(words):
        if option.startswith("--"):
            given.setdefault(option.removeprefix("--"), set()).add(value)
    return {
        (name, mode, store)
        for name, mode, store in _combinations(["local", "s3"])
        if name in given.get("scenario", {name})
        and store in given.get("store", {store})
        and mode in given.get("mode", {mode}) | {"-"}  # a scenario without modes runs in each
    }


def _standing(runs: list[str]) -> list[str]:
    """The runs some row of the table still comes from: a run whose every scenario, mode and
    store later runs enumerated again speaks for no row, and its code no longer counts."""
    kept, later = [], set()
    for run in reversed(runs):
        covers = _covers(run)
        if not covers <= later:
            kept.append(run)
        later |= covers
    return kept[::-1]


def _behind(page: Path, code: str, root: Path = ROOT) -> list[tuple[str, str, str]]:
    """What a resumed enumeration still has to run: every (scenario, mode, store) whose rows on
    the page were enumerated at another code, or are not there."""
    text = page.read_text()
    runs, _ = _page_runs(text[slice(*_marked(text))])
    latest = {combo: _run_commit(run) for run in _standing(runs) for combo in _covers(run)}
    codes = {commit: _code(commit, root) for commit in set(latest.values()) if commit}
    return [
        combo
        for combo in _combinations(["local", "s3"])
        if (commit := latest.get(combo)) is None or codes.get(commit) != code
    ]


def _section(runs: list[str], rows: list[Row]) -> str:
    """The page's part between its markers: the runs, whether they enumerated one code, what
    is left, the summary and every crash point."""
    done = set(map(_key, rows))
    missing = [c for c in _combinations(["local", "s3"]) if c not in done]
    left = (
        "Not enumerated yet: " + ", ".join(f"{s} ({m}, {st})" for s, m, st in missing) + "."
        if missing
        else "Every scenario, in each of its modes, on both stores."
    )
    return (
        f"{MARKERS[0]}\n\nThe runs behind this table, the latest last:\n\n"
        + "\n".join(runs)
        + f"\n\n{_one_code(runs)}\n\n{left}\n\n{_summary(rows)}"
        f"\n\n<details><summary>Every crash point</summary>\n\n{_table(rows)}"
        f"\n\n</details>\n\n{MARKERS[1]}"
    )


def _write_report(
    page: Path, outcomes: list[Outcome], took_s: float, chosen: list[str], commit: str
) -> None:
    text = page.read_text()
    start, end = _marked(text)
    earlier_runs, earlier_rows = _page_runs(text[start:end])
    new_rows = [_row(o) for o in outcomes]
    ran = set(map(_key, new_rows))
    rows = sorted([r for r in earlier_rows if _key(r) not in ran] + new_rows, key=_key)
    command = (
        " ".join(["python tests/crashpoints/run.py", *chosen]) if chosen else "make crash-points"
    )
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    reached = [o for o in outcomes if o.killed_at is not None]
    run = (
        f"- run {stamp} at {commit}, `{command}`, {took_s / 60:.0f} min on 2 cores: "
        f"{len(reached)} crash points reached, {sum(o.ok for o in reached)} restarts ended "
        f"exactly once; {len(outcomes) - len(reached)} not reached."
    )
    runs = _standing([*earlier_runs, run])
    if not chosen:  # the whole enumeration: nothing earlier stands beside it
        runs, rows = [run], new_rows
    page.write_text(text[:start] + _section(runs, rows) + text[end:])


def _parts(args: argparse.Namespace, commit: str) -> list[argparse.Namespace]:
    """The runs to make: the one the options ask for, or with ``--resume`` one per scenario,
    mode and store the page holds no rows of this code for (each reported as it ends)."""
    if not args.resume:
        return [args]
    code = _code(commit)
    if code is None:
        raise SystemExit(
            f"run.py --resume: the code has uncommitted changes ({commit}); commit them first, "
            "so that the page can name the code its rows come from"
        )
    return [
        argparse.Namespace(
            **{
                **vars(args),
                "store": [store],
                "scenario": [name],
                "mode": None if mode == "-" else mode,
            }
        )
        for name, mode, store in _behind(args.report, code)
    ]


def _enumerate_and_report(args: argparse.Namespace, work: Path, commit: str) -> list[Outcome]:
    started = time.monotonic()
    outcomes: list[Outcome] = []
    for store in args.store or ["local", "s3"]:
        outcomes += _run_store(store, args, work / store)
    if args.report:
        chosen = [
            f"--{option} {value}"
            for option, values in (("store", args.store), ("scenario", args.scenario))
            for value in values or []
        ] + ([f"--mode {args.mode}"] if args.mode else [])
        _write_report(args.report, outcomes, time.monotonic() - started, chosen, commit)
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=("local", "s3"), action="append")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--mode", choices=("merge", "metadata"))
    parser.add_argument("--jobs", type=int, default=2, help="crash points at once (default 2)")
    parser.add_argument("--report", type=Path, help="a page to write the table into")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run every scenario, mode and store whose rows on the --report page come from "
        "another code (or are missing), one at a time, writing the page after each",
    )
    parser.add_argument("--work", type=Path, help="a folder to keep the runs in")
    args = parser.parse_args()
    if args.resume and (not args.report or args.store or args.scenario or args.mode):
        parser.error(
            "--resume reads what to run from the page: give --report PAGE, and no --store, "
            "--scenario or --mode"
        )
    os.environ.setdefault("JAVA_TOOL_OPTIONS", java_options())  # as the tests' JVMs
    work = args.work or Path(tempfile.mkdtemp(prefix="lakesink-crash-points-"))
    commit = _code_commit()  # at the start: the tree may move on during hours of runs
    started = time.monotonic()
    outcomes: list[Outcome] = []
    parts = _parts(args, commit)
    if args.resume and not parts:
        print(f"every row on {args.report} was enumerated at this code ({commit}): nothing to run")
    for number, part in enumerate(parts, 1):
        if args.resume:
            print(f"[{number}/{len(parts)}] {part.scenario[0]} {part.mode or '-'} {part.store[0]}")
        outcomes += _enumerate_and_report(part, work / str(number), commit)
    took = time.monotonic() - started
    print("\n" + _summary([_row(o) for o in outcomes]))
    failed = [o for o in outcomes if not o.ok]
    for outcome in failed:
        print(
            f"FAILED {outcome.scenario} {outcome.mode} {outcome.store} {outcome.point}: "
            f"{outcome.problems}"
        )
    print(
        f"{len(outcomes)} crash points, {len(failed)} failed, {took / 60:.0f} min; runs in {work}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
