"""``lakesink status``: where each sink (and a job) stands, read without Spark."""

from __future__ import annotations

import argparse
from datetime import datetime, timezone
from typing import Any

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    add_verbose_option,
    reachable,
    write_reports,
)
from lakesink.cli.output import Output

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "status",
        help="where each sink stands: last commit, pending and aborted transactions",
        description="Per sink: its published table (the committed rows alone, for any "
        "engine that reads Delta by path), the last committed checkpoint, committed rows, "
        "and every "
        "pending (open, pre-committed, committing), held (failed validation) and aborted "
        "transaction with its age, rows, last error and validation result, by checkpoint "
        "id (the same ids as the job's checkpoints and the journal). With --state, also the "
        "job's last checkpoint and quarantined input. Read from the tables' logs with "
        "delta-rs: no Spark, no JVM. Exit 0, 2 when a table is not a lakesink table, 78 "
        "when its store refuses access or does not answer.",
    )
    parser.add_argument("table", nargs="+", help="path of a lakesink table")
    parser.add_argument("--state", help="a job's --state folder: show its quarantined input")
    parser.add_argument("--job-id", default="ingest", help="job name (default: ingest)")
    parser.add_argument(
        "--report",
        metavar="DIR",
        help="write a Great Expectations Data Docs page of each held checkpoint's "
        "validation into DIR (open it in a browser)",
    )
    add_json_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(func=_status)


def _status(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.status import job_status, sink_status

    now = datetime.now(timezone.utc)
    reachable(*args.table, args.state)
    statuses = [sink_status(table) for table in args.table]
    reports = [status.as_dict(now) for status in statuses]
    job = job_status(args.state, args.job_id) if args.state else None
    if args.report:
        from lakesink.core.validation import ValidationReport

        for status in statuses:
            held = [
                (t, ValidationReport.from_json(t.last_validation) if t.last_validation else None)
                for t in status.held
            ]
            write_reports(held, status.table_path, args.report)
    out.show({"sinks": reports, "job": job}, lambda: _text(reports, job))
    return 0


def _text(reports: list[dict[str, Any]], job: dict[str, Any] | None) -> str:
    lines = []
    for report in reports:
        lines.append(
            f"sink {report['sink_id']}  ({report['table']}, commits by {report['commit_mode']})"
        )
        published = report["published"]
        if published is None:
            lines.append("  published table: off (lakesink.published = false)")
        elif published["version"] is None:
            lines.append(
                "  published table: not created yet (the next open, commit or vacuum does)"
            )
        else:
            lines.extend(_published_lines(report["table"], published))
        lines.append(
            f"  last committed checkpoint: {_or_none_yet(report['last_committed_checkpoint'])}"
            f"   committed rows: {report['committed_rows']}"
        )
        for kind in ("pending", "held", "aborted"):
            rows = report[kind]
            lines.append(f"  {kind}: {len(rows)}")
            for txn in rows:
                error = f"  error: {txn['last_error']}" if txn["last_error"] else ""
                # An aborted one says what became of it (its rows are gone, or undone).
                state = next((k for k in ("vacuumed", "restored") if txn[k]), txn["state"])
                lines.append(
                    f"    checkpoint {txn['checkpoint_id']:>5}  {state:<13} "
                    f"writer {txn['writer_id']:<8} age {txn['age_seconds']:>9.1f}s "
                    f"rows {_rows(txn['rows'])}{error}"
                )
                if txn["validation"] and kind != "aborted":
                    lines.append(f"      {txn['validation']}")
    if job is not None:
        lines.append(f"job {job['job_id']}  ({job['state']})")
        lines.append(f"  last completed checkpoint: {job['last_completed_checkpoint']}")
        lines.append(f"  quarantined input: {len(job['quarantined'])}")
        for q in job["quarantined"]:
            lines.append(f"    checkpoint {q['checkpoint_id']:>5}  {q['item']}: {q['reason']}")
    return "\n".join(lines)


def _published_lines(table: str, published: dict[str, Any]) -> list[str]:
    """Where the published table stands, and what to run when it is behind."""
    behind, gone = published["versions_behind"], published["gone_files"]
    lines = [
        f"  published table: {published['path']}  (version {published['version']}, "
        + ("up to date" if behind == 0 else f"{behind} table version(s) behind")
        + ")"
    ]
    if gone:
        lines.append(
            f"    it names {len(gone)} file(s) that are gone (a VACUUM removed them), so "
            f"reading it fails: run lakesink publish {table}"
        )
    elif behind:
        lines.append(f"    the next commit or vacuum brings it up; now: lakesink publish {table}")
    return lines


def _or_none_yet(checkpoint: int | None) -> str:
    return "none yet" if checkpoint is None else str(checkpoint)


def _rows(rows: int | None) -> str:
    # Counted at the pre-commit (or from the table's masked rows): an open transaction has none.
    return "not counted yet" if rows is None else str(rows)
