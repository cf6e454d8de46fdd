"""``lakesink checkpoints``: the checkpoint history of a job, read without Spark."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakesink.cli.commands.common import (
    Subparsers,
    add_json_option,
    add_verbose_option,
    reachable,
)
from lakesink.cli.output import Output

if TYPE_CHECKING:
    from lakesink.core import CheckpointRecord

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "checkpoints",
        help="the checkpoint history of a job",
        description="Every completed checkpoint of a job: its id, time, the input items it "
        "consumed (files), rows and quarantined input.",
    )
    parser.add_argument("--state", required=True, help="the job's --state folder")
    parser.add_argument("--job-id", default="ingest", help="job name (default: ingest)")
    add_json_option(parser)
    add_verbose_option(parser)
    parser.set_defaults(func=_checkpoints)


def _checkpoints(args: argparse.Namespace, out: Output) -> int:
    from lakesink.tables.checkpoints import checkpoints_path, read_history

    (state,) = reachable(args.state)
    records = read_history(checkpoints_path(state), args.job_id)
    out.show([r.as_dict() for r in records], lambda: _text(records))
    return 0


def _text(records: Sequence[CheckpointRecord]) -> str:
    lines = [
        f"{'checkpoint':>10}  {'completed at (UTC)':<26} {'items':>5} {'rows':>8}  quarantined"
    ]
    for r in records:
        quarantined = ", ".join(f"{q.item} ({q.reason})" for q in r.quarantined)
        rows = "uncounted" if r.rows is None else r.rows
        lines.append(
            f"{r.checkpoint_id:>10}  {r.completed_at:%Y-%m-%d %H:%M:%S.%f}  "
            f"{len(r.items):>5} {rows:>8}  {quarantined}"
        )
    return "\n".join(lines)
