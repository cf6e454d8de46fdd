"""lakesink's own Delta commits through delta-rs: a pre-commit's ``txn`` action, a metadata
commit's moved files, the release of a published transaction's pending files, a published
table's updates.

Each goes through ``commit``, which finds the version it landed at by a nonce in its
``userMetadata`` and then does what Spark does after its own commits and delta-rs does not:

- **a checksum** (``<version>.crc``): the one before it, updated by what this commit added,
  removed and recorded (``updated_checksum``). Without one, Spark's next write to the table
  first rebuilds its protocol, metadata and checksum with Spark jobs (a sixth of a
  checkpoint's time at 100k rows), and with a checksum that lacks the list of files Delta
  keeps for a table of up to 50 (``allFiles``), it rebuilds that list from the whole log.
- **a log checkpoint** at Spark's interval (``delta.checkpointInterval``, 10): in a table
  where Spark's and lakesink's commits alternate, the multiples of 10 may all be
  lakesink's, and the log would grow without one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import time
import uuid
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable
from deltalake.transaction import (
    AddAction,
    CommitProperties,
    PostCommitHookProperties,
    RemoveAction,
    Transaction,
)

from lakesink.errors import CommitFailedError
from lakesink.storage.files import create_file, read_bytes
from lakesink.storage.location import join
from lakesink.tables.deltars import delta_table
from lakesink.tables.history import commit_actions

__all__ = [
    "CHECKPOINT_INTERVAL",
    "SPARK_ONLY_FEATURES",
    "Landed",
    "commit",
    "unwritable_features",
    "updated_checksum",
]

log = logging.getLogger(__name__)

# Delta's default checkpoint interval (delta.checkpointInterval), which Spark writes at.
CHECKPOINT_INTERVAL = 10
# Delta keeps a table's transactions in its checksum up to this many app ids
# (spark.databricks.delta.setTransactionsInCrc.maxAllowed); past it, none.
CHECKSUM_TRANSACTIONS = 100
_NONCE = "nonce"
# What a checksum holds that ``updated_checksum`` knows how to carry over; a checksum with
# anything else (deletion vector counts, in-commit timestamps) is not guessed at: none is
# written, and Spark rebuilds it as it would have.
_CARRIED = frozenset(
    {
        *("txnId", "tableSizeBytes", "numFiles", "numMetadata", "numProtocol", "metadata"),
        *("protocol", "setTransactions", "domainMetadata", "histogramOpt", "allFiles"),
        "fileSizeHistogram",
    }
)


# Table features delta-rs cannot commit to (it refuses the commit): platforms turn them on
# for new tables (spark.databricks.delta.properties.defaults.enableRowTracking,
# ...enableInCommitTimestamps), and Spark writes such tables every day.
SPARK_ONLY_FEATURES = frozenset({"rowTracking", "domainMetadata", "inCommitTimestamp"})
# How delta-rs names the features it refuses: "Unsupported table features required: [A, B]".
_UNSUPPORTED = re.compile(r"[Uu]nsupported table features required: \[([^\]]*)\]")


def unwritable_features(error: BaseException) -> list[str]:
    """The table features a delta-rs commit was refused for (in Delta's own spelling,
    ``rowTracking``), or [] if it was refused for something else."""
    found = _UNSUPPORTED.search(str(error))
    if found is None:
        return []
    names = [n.strip() for n in found.group(1).split(",") if n.strip()]
    return [n[:1].lower() + n[1:] for n in names]


@dataclass(frozen=True)
class Landed:
    """Where a commit landed: its version, and the paths commits between the read it was
    based on and it removed (a concurrent rewrite that Delta's conflict check let pass)."""

    version: int
    removed_between: frozenset[str]


def commit(
    path: str,
    table: DeltaTable,
    actions: Sequence[AddAction | RemoveAction],
    user_metadata: Mapping[str, Any],
    *,
    transactions: Iterable[tuple[str, int]] = (),
    retries: int | None = None,
) -> Landed:
    """Commit ``actions`` (and a ``txn`` action per (app id, version) of ``transactions``)
    to the Delta table at ``path``, read as ``table``; carry its checksum over and
    checkpoint its log when due.

    ``retries``: how many times delta-rs may rebase the commit onto commits that landed
    first (None: its default). With 0 it lands right after ``table``'s version or not at
    all.

    Raises:
        deltalake.exceptions.CommitFailedError: A conflict; nothing landed.
        CommitFailedError: delta-rs reported the commit, but no version carries it.
    """
    read_version = table.version()
    nonce = uuid.uuid4().hex
    now_ms = int(time.time() * 1000)
    table.create_write_transaction(
        list(actions),
        mode="append",
        schema=table.schema(),
        partition_by=table.metadata().partition_columns,
        commit_properties=CommitProperties(
            custom_metadata={
                "userMetadata": json.dumps({**user_metadata, _NONCE: nonce}, sort_keys=True)
            },
            app_transactions=[Transaction(app, version, now_ms) for app, version in transactions]
            or None,
            max_commit_retries=retries,
        ),
        # At Spark's interval, not delta-rs' (100): below
        post_commithook_properties=PostCommitHookProperties(create_checkpoint=False),
    )
    landed, committed = _find(path, read_version, nonce)
    ours = {a.path for a in actions if isinstance(a, RemoveAction)}
    if not ours & landed.removed_between:  # else its removals are not all the last ones
        _write_checksum(path, landed.version, committed)
    interval = int(
        table.metadata().configuration.get("delta.checkpointInterval", CHECKPOINT_INTERVAL)
    )
    if landed.version % interval == 0:
        checkpointed = delta_table(path, version=landed.version)
        checkpointed.create_checkpoint()
        checkpointed.cleanup_metadata()  # log files past the retention, as Spark's do
    return landed


def _find(path: str, read_version: int, nonce: str) -> tuple[Landed, list[dict[str, Any]]]:
    """The version after ``read_version`` whose commit carries ``nonce``, the paths the
    versions between removed, and that commit's actions."""
    removed: set[str] = set()
    version = read_version + 1
    while True:
        try:
            actions = commit_actions(path, version)
        except FileNotFoundError:
            raise CommitFailedError(
                f"committing to {path}: delta-rs reported its commit, but no log version "
                f"after {read_version} carries it; run it again (it is idempotent)"
            ) from None
        info: dict[str, Any] = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        if nonce in str(info.get("userMetadata", "")):
            return Landed(version, frozenset(removed)), actions
        removed |= {a["remove"]["path"] for a in actions if "remove" in a}
        version += 1


def _write_checksum(path: str, version: int, actions: list[dict[str, Any]]) -> None:
    """The checksum of ``version``: the one before it, updated by its actions (none written
    without one before it, or with one this module does not know how to carry over)."""
    log_folder = join(path, "_delta_log")
    try:
        before = json.loads(read_bytes(join(log_folder, f"{version - 1:020d}.crc")))
    except (FileNotFoundError, ValueError):
        return
    checksum = updated_checksum(before, actions)
    if checksum is None:
        return
    # Never over another's: only this commit made the version, any file there is its.
    with contextlib.suppress(FileExistsError):
        create_file(join(log_folder, f"{version:020d}.crc"), json.dumps(checksum).encode())


def updated_checksum(
    before: Mapping[str, Any], actions: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    """A Delta checksum (``.crc``) updated by a commit's actions, as Delta derives its own:
    files and bytes, the file size histogram, the list of files if it keeps one, the
    transactions. None when ``before`` holds what cannot be carried over.

    Each added path is new and each removed one was live (what lakesink's commits do: they
    move files, never add one twice).
    """
    if not isinstance(before, Mapping) or set(before) - _CARRIED:
        return None
    checksum = {k: v for k, v in before.items() if k != "txnId"}
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    if any(r.get("size") is None for r in removes):
        return None  # a removal without its size: the bytes left are unknown
    checksum["numFiles"] = before["numFiles"] + len(adds) - len(removes)
    checksum["tableSizeBytes"] = (
        before["tableSizeBytes"] + sum(a["size"] for a in adds) - sum(r["size"] for r in removes)
    )
    for key in ("fileSizeHistogram", "histogramOpt"):
        if isinstance(before.get(key), Mapping):
            checksum[key] = _histogram(before[key], adds, removes)
    files = before.get("allFiles")
    if isinstance(files, list):
        gone = {r["path"] for r in removes}
        # As Delta lists a file it read from the log: each field as the log has it (a null
        # left out would read back as an empty map), no data change.
        kept = [f for f in files if f["path"] not in gone]
        checksum["allFiles"] = kept + [a | {"dataChange": False} for a in adds]
        if len(checksum["allFiles"]) != checksum["numFiles"]:
            checksum.pop("allFiles")  # a path spelled otherwise in the two: Spark rebuilds it
    recorded = [a["txn"] for a in actions if "txn" in a]
    if recorded and isinstance(before.get("setTransactions"), list):
        by_app = {t["appId"]: t for t in before["setTransactions"]}
        by_app.update({t["appId"]: t for t in recorded})
        if len(by_app) <= CHECKSUM_TRANSACTIONS:
            checksum["setTransactions"] = list(by_app.values())
        else:
            checksum.pop("setTransactions")
    return checksum


def _histogram(
    before: Mapping[str, Any],
    adds: Sequence[Mapping[str, Any]],
    removes: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    bounds: list[int] = list(before["sortedBinBoundaries"])
    counts, sizes = list(before["fileCounts"]), list(before["totalBytes"])
    for files, sign in ((adds, 1), (removes, -1)):
        for f in files:
            at = bisect_right(bounds, f["size"]) - 1
            counts[at] += sign
            sizes[at] += sign * f["size"]
    return {**before, "fileCounts": counts, "totalBytes": sizes}
