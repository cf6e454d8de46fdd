"""``make crash-points``: every durable write of every scenario, killed before and after.

    python tests/crashpoints/run.py [--store local|s3] [--scenario NAME] [--mode MODE]
                                    [--jobs N] [--report docs/reliability.md]

For each scenario, commit mode and store it counts the writes of an unharmed run, then
kills a run before and after each of them, restarts it and checks the lake (see
``harness``). It prints a line per crash point, then a table: scenario, write k, what it
was, before/after, outcome; with ``--report`` it writes the table into that page, between
its ``crash-points`` markers. Exit 0 when every restart ended exactly once.

The S3 store starts a SeaweedFS server and the fault proxy (mitmproxy, from
``.cache/tools/mitmproxy``: ``make crash-points`` installs it) on loopback and stops both.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from functools import partial
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
            writes = harness.count(name, mode)
            print(f"{name} {mode or '-'} {harness.store.name}: {len(writes)} writes", flush=True)
            points = crash_points(harness.store.name, len(writes))
            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                for outcome in pool.map(partial(harness.crash, name, mode), points):
                    row = outcome.row()
                    print(
                        "  "
                        + "  ".join(f"{row[k]}" for k in ("point", "write", "killed", "outcome")),
                        flush=True,
                    )
                    outcomes.append(outcome)
            print(f"  ({time.monotonic() - started:.0f} s)", flush=True)
    return outcomes


def _table(outcomes: list[Outcome]) -> str:
    columns = ("scenario", "mode", "store", "point", "write", "killed", "outcome")
    lines = [
        "| " + " | ".join(columns) + " |",
        "|" + "|".join("---" for _ in columns) + "|",
    ]
    for outcome in outcomes:
        row = outcome.row()
        lines.append(
            "| "
            + " | ".join(f"`{row[c]}`" if c == "write" else str(row[c]) for c in columns)
            + " |"
        )
    return "\n".join(lines)


def _summary(outcomes: list[Outcome]) -> str:
    per = Counter((o.scenario, o.mode or "-", o.store) for o in outcomes)
    bad = Counter((o.scenario, o.mode or "-", o.store) for o in outcomes if not o.ok)
    raced = Counter((o.scenario, o.mode or "-", o.store) for o in outcomes if o.landed_first)
    lines = [
        "| scenario | mode | store | crash points | exactly once | before-kills a write beat |",
        "|---|---|---|---:|---:|---:|",
    ]
    for key in sorted(per):
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {per[key]} | {per[key] - bad[key]} | "
            f"{raced[key]} |"
        )
    return "\n".join(lines)


def _write_report(page: Path, outcomes: list[Outcome], took_s: float, chosen: list[str]) -> None:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    failed = sum(not o.ok for o in outcomes)
    # A run of some stores, scenarios or one mode says so: it is not the whole enumeration.
    command = "make crash-points"
    if chosen:
        command = " ".join(["python tests/crashpoints/run.py", *chosen])
    body = (
        f"{MARKERS[0]}\n\nThe latest run ({stamp}, `{command}`, {took_s / 60:.0f} min "
        f"on 2 cores): {len(outcomes)} crash points, {len(outcomes) - failed} restarts ended "
        f"exactly once.\n\n{_summary(outcomes)}\n\n<details><summary>Every crash point"
        f"</summary>\n\n{_table(outcomes)}\n\n</details>\n\n{MARKERS[1]}"
    )
    text = page.read_text()
    start, end = text.index(MARKERS[0]), text.index(MARKERS[1]) + len(MARKERS[1])
    page.write_text(text[:start] + body + text[end:])
    (page.with_suffix(".json")).write_text(json.dumps([o.row() for o in outcomes], indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--store", choices=("local", "s3"), action="append")
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), action="append")
    parser.add_argument("--mode", choices=("merge", "metadata"))
    parser.add_argument("--jobs", type=int, default=2, help="crash points at once (default 2)")
    parser.add_argument("--report", type=Path, help="a page to write the table into")
    parser.add_argument("--work", type=Path, help="a folder to keep the runs in")
    args = parser.parse_args()
    os.environ.setdefault("JAVA_TOOL_OPTIONS", java_options())  # as the tests' JVMs
    work = args.work or Path(tempfile.mkdtemp(prefix="lakesink-crash-points-"))
    started = time.monotonic()
    outcomes: list[Outcome] = []
    for store in args.store or ["local", "s3"]:
        outcomes += _run_store(store, args, work / store)
    took = time.monotonic() - started
    print("\n" + _summary(outcomes))
    failed = [o for o in outcomes if not o.ok]
    for outcome in failed:
        print(
            f"FAILED {outcome.scenario} {outcome.mode} {outcome.store} {outcome.point}: "
            f"{outcome.problems}"
        )
    if args.report:
        chosen = [
            f"--{option} {value}"
            for option, values in (("store", args.store), ("scenario", args.scenario))
            for value in values or []
        ] + ([f"--mode {args.mode}"] if args.mode else [])
        _write_report(args.report, outcomes, took, chosen)
    print(
        f"{len(outcomes)} crash points, {len(failed)} failed, {took / 60:.0f} min; runs in {work}"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
