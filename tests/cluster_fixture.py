"""The local Spark standalone cluster for the cluster, fault and soak tests, and their tools.

The session-scoped ``spark_cluster`` fixture runs exactly what the clusters guide's "A
local standalone cluster" section tells people to run: ``python tests/servers/cluster.py
start`` (what ``make cluster-up`` runs), jobs through ``servers.cluster.submit_command``
(the guide's ``spark-submit`` line; the driver runs the job in ``tests/faults.py``, which
takes the step markers and holds below), and ``python tests/servers/cluster.py stop`` at
the end.

``SubmittedJob`` watches a running job from outside, as an operator would: the driver's
REST API (which stages run, on which executors), the step markers the job drops
(``LAKESINK_STEP_MARKERS``), and afterwards the Spark event log, which says which task
attempts failed, why, and which ones were speculative copies.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from servers.cluster import (
    LocalCluster,
    executor_pids,
    free_port,
    load_cluster,
    submit_command,
)

from lakesink.storage.options import StorageOptions

TESTS = Path(__file__).resolve().parent
JOBS = TESTS.parent / "jobs"

# Sized for two 1-core executors: Spark's and Delta's defaults (200 shuffle partitions,
# 50 snapshot partitions) would cost seconds of task scheduling per Delta commit.
SMALL_CLUSTER_CONF = {
    "spark.sql.shuffle.partitions": "2",
    "spark.default.parallelism": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
    "spark.ui.showConsoleProgress": "false",
    # The driver's REST API shows task starts at once, not at most every 100 ms.
    "spark.ui.liveUpdate.period": "0ms",
}


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A master and two 1-core workers, each its own JVM, for the whole test session."""
    directory = tmp_path_factory.mktemp("cluster")
    command = [sys.executable, str(TESTS / "servers" / "cluster.py")]
    started = subprocess.run(
        [*command, "start", "--dir", str(directory), "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        yield load_cluster(directory)
    finally:
        subprocess.run([*command, "stop", "--dir", str(directory)], timeout=120, check=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the figures tests recorded with ``record_property("figures", ...)``.

    A test's own output stays hidden when it passes, and pytest-xdist never shows a
    worker's; recorded properties travel with the reports to the terminal.
    """
    for status in ("passed", "failed"):
        for report in terminalreporter.getreports(status):
            for name, value in report.user_properties:
                if name == "figures":
                    terminalreporter.write_line(f"{report.nodeid} ({status}): {value}")


@dataclass
class SubmittedJob:
    """A job running on the cluster through spark-submit, watched from outside."""

    process: subprocess.Popen[bytes]
    ui_port: int
    markers: Path
    events: Path
    log_file: Path
    _app_id: str | None = field(default=None, repr=False)

    # ------------------------------------------------------------ while it runs

    def api(self, path: str) -> Any:
        """GET the driver's REST API (``/api/v1/applications/<app>`` + ``path``)."""
        if self._app_id is None:
            self._app_id = self._get("/applications")[0]["id"]
        return self._get(f"/applications/{self._app_id}{path}")

    @property
    def app_id(self) -> str:
        self.api("/executors")
        assert self._app_id is not None
        return self._app_id

    def marked(self, marker: str) -> bool:
        """Whether the job passed a step marker, e.g. ``before_append@2.1``."""
        return (self.markers / marker).exists()

    def await_marker(self, marker: str, timeout_s: float = 900.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.marked(marker):
            assert self.process.poll() is None, f"the job ended before {marker}:\n{self.tail()}"
            assert time.monotonic() < deadline, f"no {marker} after {timeout_s:.0f}s"
            time.sleep(0.02)

    def release(self, held: str) -> None:
        """Let the job go on from the step it is held at (``LAKESINK_HOLD_AT``)."""
        (self.markers / f"{held}.go").touch()

    @contextmanager
    def stepped_until(
        self, matches: Callable[[dict], bool], *, held: str, before: str
    ) -> Iterator[list[dict]]:
        """Run the executors in short slices until a stage that ``matches`` has tasks on them.

        The job must be held at step ``held`` (``LAKESINK_HOLD_AT``). The executors are
        frozen (SIGSTOP), the job released, and the executors then run 10 ms at a time
        until the driver has launched tasks of such a stage: yields the executors that run
        them (REST entries), still frozen, so that a kill lands inside that stage for sure
        however short its tasks are. Whatever is still alive is thawed afterwards.
        """
        self.await_marker(f"{held}.1")
        frozen: dict[str, int] = {}
        try:
            self._freeze(frozen)
            self.release(held)
            while True:
                assert not self.marked(before), f"no matching stage ran before {before}"
                assert self.process.poll() is None, f"the job ended early:\n{self.tail()}"
                busy = self._busy(matches, frozen)
                if busy:
                    yield busy
                    return
                _signal_all(frozen.values(), signal.SIGCONT)
                time.sleep(0.01)
                # No process scan here: a scan takes tens of ms on a busy machine, time in
                # which the executors would run a short task from start to end unseen.
                _signal_all(frozen.values(), signal.SIGSTOP)
        finally:
            _signal_all(frozen.values(), signal.SIGCONT)

    def executor_pid(self, executor: dict) -> int:
        return executor_pids(self.app_id)[executor["id"]]

    def kill_driver(self) -> None:
        """SIGKILL the driver: the spark-submit JVM and the Python job, its whole group."""
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=60)

    # --------------------------------------------------------------- afterwards

    def wait(self, timeout_s: float = 1200.0) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            raise AssertionError(f"the job ran over {timeout_s:.0f}s:\n{self.tail()}") from None

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])

    def event_log(self) -> list[dict]:
        """Every event of the Spark event log (also of a driver that was killed)."""
        (path,) = [p for p in self.events.iterdir() if not p.name.startswith(".")]
        events = []
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # the last line of a killed driver's log
                break
        return events

    def _freeze(self, frozen: dict[str, int]) -> None:
        frozen.update(executor_pids(self.app_id))
        _signal_all(frozen.values(), signal.SIGSTOP)

    def _busy(self, matches: Callable[[dict], bool], frozen: dict[str, int]) -> list[dict]:
        """Frozen executors running a task of a matching stage, while every active stage
        matches; asked twice, half a second apart.

        The driver's status store trails its executors: a task that finished just before
        the freeze can still show as running, and its executor would then be killed
        idle, or running a task the driver launched next. Frozen, an executor neither
        ends nor starts a task, so what the second reading still shows is what runs.
        """
        first = self._running(matches, frozen)
        if not first:
            return []
        time.sleep(0.5)
        again = {e["id"]: e for e in self._running(matches, frozen)}
        return [again[e["id"]] for e in first if e["id"] in again]

    def _running(self, matches: Callable[[dict], bool], frozen: dict[str, int]) -> list[dict]:
        stages = self.api("/stages?status=active")
        executors = [e for e in self.api("/executors") if e["id"] != "driver"]
        if any(e["id"] not in frozen for e in executors):
            self._freeze(frozen)  # one that registered meanwhile, on a revived worker
            return []
        if not stages or not all(matches(s) for s in stages):
            return []
        running = {
            task["executorId"]
            for stage in stages
            for task in self.api(
                f"/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=10000"
            )
            if task["status"] == "RUNNING"
        }
        return [e for e in executors if e["id"] in running]

    def _get(self, path: str) -> Any:
        url = f"http://127.0.0.1:{self.ui_port}/api/v1{path}"
        deadline = time.monotonic() + 120  # a driver on a busy machine answers late
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as answer:
                    return json.load(answer)
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise
                time.sleep(0.2)


def submit_ingest(
    cluster: LocalCluster,
    work: Path,
    *arguments: str,
    conf: dict[str, str] | None = None,
    env: dict[str, str] | None = None,
    name: str = "ingest",
    storage: StorageOptions | None = None,
) -> SubmittedJob:
    """Start the ingest job on the cluster, as the clusters guide says, with an event log and UI."""
    events, markers = work / f"{name}-events", work / f"{name}-markers"
    events.mkdir(parents=True, exist_ok=True)
    ui_port = free_port()
    settings = {
        **SMALL_CLUSTER_CONF,
        "spark.ui.port": str(ui_port),
        "spark.eventLog.enabled": "true",
        "spark.eventLog.dir": str(events),
        "spark.eventLog.compress": "false",
        "spark.eventLog.rolling.enabled": "false",
        **(conf or {}),
    }
    ivy = os.environ.get("LAKESINK_IVY_DIR")
    if ivy:  # the jars cached by `make`; without it, spark-submit fetches them itself
        settings["spark.jars.ivy"] = ivy
    command = submit_command(
        cluster.master_url,
        str(TESTS / "faults.py"),  # runs the job with the faults the variables below ask for
        [str(JOBS / "ingest.py"), *arguments],
        conf=settings,
        storage=storage,
    )
    environment = {
        **{k: v for k, v in os.environ.items() if k != "LAKESINK_CRASH_AT"},
        "PYSPARK_PYTHON": sys.executable,  # the driver's and the executors' Python
        "SPARK_LOCAL_IP": "127.0.0.1",  # the driver on loopback too
        "LAKESINK_STEP_MARKERS": str(markers),
        **(env or {}),
    }
    log_file = work / f"{name}.log"
    with open(log_file, "wb") as output:
        process = subprocess.Popen(
            command,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,  # its own process group: kill_driver takes all of it
        )
    return SubmittedJob(process, ui_port, markers, events, log_file)


def stage_is(*words: str) -> Callable[[dict], bool]:
    """Match a stage of the driver's REST API by words in its name or job description."""

    def matches(stage: dict) -> bool:
        text = f"{stage.get('name', '')} {stage.get('description', '')}"
        return all(word in text for word in words)

    return matches


def lost_task_attempts(events: list[dict]) -> list[dict]:
    """Task attempts that failed because their executor was lost."""
    return [
        e
        for e in events
        if e["Event"] == "SparkListenerTaskEnd"
        and e["Task End Reason"]["Reason"] == "ExecutorLostFailure"
    ]


def stage_descriptions(events: list[dict]) -> dict[int, str]:
    """Stage id -> its name and job description, from the event log."""
    described = {}
    for event in events:
        if event["Event"] == "SparkListenerStageSubmitted":
            info, properties = event["Stage Info"], event.get("Properties") or {}
            described[info["Stage ID"]] = (
                f"{info['Stage Name']} {properties.get('spark.job.description', '')}"
            )
    return described


def _signal_all(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # killed meanwhile
            os.kill(pid, signum)
