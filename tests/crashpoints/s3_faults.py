"""A mitmproxy addon: counts the changes to the S3 server and kills the writer at one of them.

Loaded by ``mitmdump`` in reverse-proxy mode in front of the test S3 server (loopback
only); the crash-point harness points a scenario's ``AWS_ENDPOINT_URL`` at the proxy. A
change is a request that creates, replaces or deletes an object: a PUT (an upload, a copy,
a conditional create, an overwrite of an object the run did not write itself), the POST
that completes a multipart upload, a DELETE, a multi-object delete. Parts are not changes
of their own, nor is a PUT to a key the run wrote before (a lease's renewals, whose number
depends on how long the run takes). Every such request counts, answered or refused, in
the count run and the kill run alike, so change k is the same request in both.

What to do is read from the JSON file ``$CRASH_POINT_PLAN`` whenever it changes: a plan
per lake, by its key ``prefix`` (only writes under it count, numbered per plan
``generation``), each with ``kill`` (what ``killing.kill_target`` kills: the
writer and every process it started), ``when``
(``before``: kill and never forward the request; ``after``: forward it, and once the store
answered, kill and drop the answer, so the write landed and its writer never learned it),
``index`` (the k-th write, 1-based) or ``pattern`` (the first key matching it), and ``log``:
a file that gets a JSON line per write and per kill. This file imports the standard
library, mitmproxy and ``killing`` only (it runs in mitmproxy's own environment).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

from mitmproxy import http

sys.path.insert(0, str(Path(__file__).resolve().parent))
from killing import kill_target


class CrashPoints:
    def __init__(self) -> None:
        self.plan_file = Path(os.environ["CRASH_POINT_PLAN"])
        self.plans: dict[str, dict] = {}  # by prefix
        self.mtime = 0.0
        self.counts: dict[tuple[str, object], int] = {}  # by prefix and generation
        self.killed: set[tuple[str, object]] = set()
        self.written: dict[tuple[str, object], set[str]] = {}

    def _reload(self) -> None:
        try:
            mtime = self.plan_file.stat().st_mtime_ns
        except FileNotFoundError:
            return
        if mtime != self.mtime:
            self.mtime = mtime
            self.plans = json.loads(self.plan_file.read_text())

    def _plan_of(self, flow: http.HTTPFlow) -> tuple[dict, str, str] | None:
        """The plan of a change to a key under a planned prefix, what the change is, and the
        key below the prefix (a multi-object delete: the prefix of the bucket's request)."""
        request = flow.request
        op = _change(request)
        if op is None:
            return None
        key = unquote(urlsplit(request.path).path).lstrip("/")
        if op == "delete-many":  # the keys are in the body: named by the first
            found = re.search(rb"<Key>([^<]*)</Key>", request.content or b"")
            key = key.rstrip("/") + "/" + (found.group(1).decode() if found else "")
        for prefix, plan in self.plans.items():
            if key.startswith(prefix):
                return plan, op, key[len(prefix) :]
        return None

    def _log(self, plan: dict, record: dict) -> None:
        with open(plan["log"], "a") as out:
            out.write(json.dumps(record) + "\n")

    def _matches(self, plan: dict, run: tuple[str, object], index: int, key: str) -> bool:
        if run in self.killed or "kill" not in plan:
            return False
        if plan.get("index") is not None:
            return plan["index"] == index
        pattern = plan.get("pattern")
        return pattern is not None and re.search(pattern, key) is not None

    def _kill(self, flow: http.HTTPFlow, plan: dict, run: tuple[str, object], what: str) -> None:
        # Logged first: the harness reads the log as soon as the killed process is gone.
        self._log(plan, {"killed": what})
        self.killed.add(run)
        kill_target(plan["kill"])
        flow.kill()

    def request(self, flow: http.HTTPFlow) -> None:
        self._reload()
        found = self._plan_of(flow)
        if found is None:
            return
        plan, op, key = found
        run = (plan["prefix"], plan["generation"])
        written = self.written.setdefault(run, set())
        if op == "put" and key in written:  # a lease's renewal
            return
        written.add(key)
        if op == "put" and flow.request.headers.get("x-amz-copy-source"):
            op = "copy"
        change = f"{op} {key}"
        index = self.counts[run] = self.counts.get(run, 0) + 1
        flow.metadata["crash_point"] = (plan, run, index, change)
        self._log(plan, {"started": change, "n": index})
        if plan.get("when") == "before" and self._matches(plan, run, index, key):
            self._kill(flow, plan, run, f"before {index} {change}")

    def response(self, flow: http.HTTPFlow) -> None:
        found = flow.metadata.get("crash_point")
        if found is None:
            return
        plan, run, index, change = found
        status = flow.response.status_code if flow.response else None
        self._log(plan, {"landed": change, "n": index, "status": status})
        if plan.get("when") == "after" and self._matches(plan, run, index, change.split(" ", 1)[1]):
            self._kill(flow, plan, run, f"after {index} {change}")


def _change(request: http.Request) -> str | None:
    """What a request changes: ``put``, ``complete`` (a multipart upload), ``delete``,
    ``delete-many``; None for a read or a part of an upload."""
    if request.method == "PUT" and "partNumber" not in request.query:
        return "put"
    if request.method == "POST" and "uploadId" in request.query:
        return "complete"
    if request.method == "POST" and "delete" in request.query:
        return "delete-many"
    if request.method == "DELETE" and "uploadId" not in request.query:
        return "delete"
    return None


addons = [CrashPoints()]
