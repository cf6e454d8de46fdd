"""Crash points enumerated: a scenario killed with SIGKILL before and after each change.

For one scenario, commit mode and store:

1. **Count.** The scenario's ``run`` phase runs once, unharmed, while an observer records
   every change under its lake (a file created, overwritten, renamed or linked into place,
   deleted): a gate preloaded into every process on local disk (``local_gate``, which
   holds each change until it answers), a fault-injecting proxy in front of the S3 server
   (``s3_faults``, each PUT, copy, multipart completion and DELETE).
2. **Kill.** For each change k, twice: the phase runs again in a fresh copy of the lake and
   the observer kills its process tree with SIGKILL while change k waits to run
   (*before*: it never ran), or once it ran and before its process learned it (*after*).
3. **Restart.** The phase runs again, unharmed, as a scheduler would (a run that exits 75,
   "try later", as a command refused by a dead writer's lease that has not run out yet, is
   run again); it must exit 0 within ``RESTART_TIMEOUT_S`` (never stuck).
4. **Check**, with an independent reader (delta-rs) and the journal: each table's visible
   ids are exactly the scenario's, each once; every row still masked belongs to a
   transaction the journal says is aborted; every transaction in the journal is finished
   (committed or aborted); and ``lakesink status`` answers.

The kill can also be aimed at the first change whose path matches a pattern (the fixed subset
``make test`` runs), which needs no counting run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from crashpoints.killing import Tree, kill_target
from crashpoints.local_gate import LocalGate, Plan
from crashpoints.scenarios import PROGRAMS, SCENARIOS, Scenario

from lakesink.cli.exits import EXIT_TRY_LATER

HERE = Path(__file__).resolve().parent
SCENARIO_PROGRAM = HERE / "scenarios.py"
RUN_TIMEOUT_S = 600.0
RESTART_TIMEOUT_S = 600.0
# A dead writer's lease is taken over after this long (the default is 30 s).
LEASE_SECONDS = "4"


@dataclass(frozen=True)
class CrashPoint:
    """Where to kill: the k-th change, or the first whose path matches ``pattern``."""

    when: str  # "before" or "after"
    index: int | None = None
    pattern: str | None = None

    def __str__(self) -> str:
        return f"{self.when} {self.index if self.index is not None else self.pattern}"


@dataclass
class Outcome:
    """What one crash point did."""

    scenario: str
    mode: str | None
    store: str
    point: CrashPoint
    # "before 7 create orders/_delta_log/00..01.json"; None: the run ended before change k
    killed_at: str | None = None
    kill_method: str = ""  # "cgroup" (every process at once) or "process tree" (one by one)
    kill_exit: int | None = None
    restart_exit: int | None = None
    restart_s: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def row(self) -> dict[str, object]:
        return {
            "scenario": self.scenario,
            "mode": self.mode or "-",
            "store": self.store,
            "point": str(self.point),
            "change": _pattern(self.killed_at.split(" ", 2)[2]) if self.killed_at else "-",
            "killed": (
                f"{self.killed_at.split(' ', 1)[0]} ({self.kill_method})"
                if self.killed_at
                else "not reached"
            ),
            "restart_exit": self.restart_exit,
            "restart_s": round(self.restart_s, 1),
            "outcome": "exactly once" if self.ok else "; ".join(self.problems),
        }


def _pattern(path: str) -> str:
    """A change's path with its ids (transaction ids, file uuids) replaced by ``<id>``."""
    path = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<id>", path)
    return re.sub(r"[0-9a-f]{32}", "<id>", path)


# --------------------------------------------------------------------- stores


class Store:
    """Where a scenario's lakes live, how one is copied, and what observes its changes."""

    name: str

    def new_lake(self, label: str) -> str:
        raise NotImplementedError

    def copy_lake(self, source: str, target: str) -> None:
        raise NotImplementedError

    def environment(self) -> dict[str, str]:
        """What the scenario's processes get (the store as they should reach it)."""
        return {}

    @contextmanager
    def observed(self, lake: str) -> Iterator[_Observation]:
        """Observe the changes under ``lake`` while the block runs: its processes start
        with ``environment`` and ``arm`` aims the kill (once they exist)."""
        raise NotImplementedError


@dataclass
class _Observation:
    arm: Callable[[Plan], None]
    environment: dict[str, str] = field(default_factory=dict)
    started: list[str] = field(default_factory=list)  # every change, in order ("op path")
    landed: list[str] = field(default_factory=list)  # those that succeeded
    killed_at: str | None = None
    kill_method: str = ""
    misplaced: str | None = None  # what shows the kill is not where it says


class LocalStore(Store):
    name = "local"

    def __init__(self, base: Path) -> None:
        self.base = base

    def new_lake(self, label: str) -> str:
        return str(self.base / f"{label}-{uuid.uuid4().hex[:6]}" / "lake")

    def copy_lake(self, source: str, target: str) -> None:
        shutil.copytree(source, target, symlinks=True)

    @contextmanager
    def observed(self, lake: str) -> Iterator[_Observation]:
        gate = LocalGate(Path(lake))
        observation = _Observation(arm=gate.arm, environment=gate.environment())
        try:
            yield observation
        finally:
            seen = gate.stop()
            observation.started, observation.landed = seen.started, seen.landed
            observation.killed_at = seen.killed_at
            observation.misplaced = seen.proof(Path(lake))


class S3Store(Store):
    """Lakes in a bucket of the test S3 server, written through the fault proxy."""

    name = "s3"

    def __init__(self, bucket: str, proxy: S3FaultProxy, base: Path) -> None:
        self.bucket = bucket
        self.proxy = proxy
        self.base = base

    def new_lake(self, label: str) -> str:
        return f"s3a://{self.bucket}/crash-{label}-{uuid.uuid4().hex[:6]}/lake"

    def copy_lake(self, source: str, target: str) -> None:
        from obstore import copy

        from lakesink.storage.files import object_store

        store, source_key = object_store(source)
        _, target_key = object_store(target)
        for chunk in store.list(f"{source_key}/"):
            for entry in chunk:
                key = entry["path"]
                try:
                    copy(store, key, target_key + key[len(source_key) :])
                except FileNotFoundError:  # a folder marker the store lists, not an object
                    continue

    def environment(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.proxy.endpoint}

    @contextmanager
    def observed(self, lake: str) -> Iterator[_Observation]:
        prefix = lake.split("://", 1)[1].rstrip("/") + "/"
        log = self.base / f"writes-{uuid.uuid4().hex[:8]}.jsonl"
        self.proxy.plan(prefix, {"log": str(log)})

        def arm(plan: Plan) -> None:
            self.proxy.plan(
                prefix,
                {
                    "log": str(log),
                    "kill": plan.target,
                    "when": plan.when,
                    "index": plan.index,
                    "pattern": plan.pattern.pattern if plan.pattern else None,
                },
            )

        observation = _Observation(arm=arm)
        try:
            yield observation
        finally:
            self.proxy.plan(prefix, None)
            records = (
                [json.loads(line) for line in log.read_text().splitlines()]
                if (log.exists())
                else []
            )
            observation.started = [r["started"] for r in records if "started" in r]
            observation.landed = [
                r["landed"] for r in records if "landed" in r and 200 <= (r["status"] or 0) < 300
            ]
            kills = [r["killed"] for r in records if "killed" in r]
            observation.killed_at = kills[0] if kills else None
            if observation.killed_at is not None:  # the store answered it only if after
                when, index = observation.killed_at.split(" ", 2)[:2]
                answered = any("landed" in r and r["n"] == int(index) for r in records)
                if answered != (when == "after"):
                    observation.misplaced = f"killed {observation.killed_at}, yet the store " + (
                        "answered it" if answered else "never answered it"
                    )


class S3FaultProxy:
    """``mitmdump`` in reverse mode in front of the S3 server, with ``s3_faults`` loaded;
    one plan per lake it observes (runs on several lakes may overlap)."""

    def __init__(self, mitmdump: Path, upstream: str, folder: Path) -> None:
        from servers.cluster import free_port

        folder.mkdir(parents=True, exist_ok=True)
        self.plan_file = folder / "plans.json"
        self._plans: dict[str, dict[str, object]] = {}
        self._generation = 0
        self._lock = threading.Lock()
        self._save()
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}"
        self._log = (folder / "mitmdump.log").open("w")
        self._process = subprocess.Popen(
            [
                str(mitmdump),
                "--mode",
                f"reverse:{upstream}",
                "--listen-host",
                "127.0.0.1",
                "--listen-port",
                str(port),
                # SigV4 signs the Host header: the store must see the one the client signed.
                "--set",
                "keep_host_header=true",
                "-q",
                "-s",
                str(HERE / "s3_faults.py"),
            ],
            env={**os.environ, "CRASH_POINT_PLAN": str(self.plan_file)},
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=folder,
        )
        _wait_listening(port, self._process, folder / "mitmdump.log")

    def plan(self, prefix: str, settings: dict[str, object] | None) -> None:
        """Observe writes under ``prefix`` as ``settings`` say; None: no more."""
        with self._lock:
            if settings is None:
                self._plans.pop(prefix, None)
            else:
                self._generation += 1
                self._plans[prefix] = {
                    **settings,
                    "prefix": prefix,
                    "generation": self._generation,
                }
            self._save()

    def _save(self) -> None:
        draft = self.plan_file.with_suffix(f".{threading.get_ident()}.tmp")
        draft.write_text(json.dumps(self._plans))
        draft.replace(self.plan_file)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._log.close()


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mitmdump exited {process.returncode}: {log.read_text()[-2000:]}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"mitmdump does not listen on {port} after 60 s: {log}")


# ----------------------------------------------------------------- processes


def _command(scenario: str, phase: str, lake: str, mode: str | None) -> list[str]:
    return [
        sys.executable,
        str(SCENARIO_PROGRAM),
        scenario,
        phase,
        "--lake",
        lake,
        "--commit",
        mode or "merge",
    ]


def _environment(store: Store, local: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(store.environment())
    env["LAKESINK_LEASE_SECONDS"] = LEASE_SECONDS
    env["CRASH_POINT_LOCAL"] = str(local)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(HERE.parent.parent), *filter(None, [env.get("PYTHONPATH")])]
    )
    return env


def _start_stopped(
    command: list[str], env: dict[str, str], log: Path
) -> tuple[subprocess.Popen[bytes], Tree]:
    """Start ``command`` stopped before it runs, in a tree of its own (``killing.Tree``), so
    that the observer can kill all of it from its first change on."""
    with log.open("ab") as output:
        process = subprocess.Popen(
            ["/bin/sh", "-c", 'kill -STOP $$; exec "$@"', "sh", *command],
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + 30
    while _state(process.pid) != "T":
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"{command[:3]} did not stop before starting")
        time.sleep(0.005)
    tree = Tree()
    tree.adopt(process.pid)
    return process, tree


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return None


def _finish(
    process: subprocess.Popen[bytes], tree: Tree, timeout: float
) -> tuple[int | None, float]:
    """Wait for the process, then for all of its tree; its exit status (None: it ran past
    ``timeout`` and was killed) and how long it took."""
    start = time.monotonic()
    try:
        code: int | None = process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        code = None
    took = time.monotonic() - start
    # A JVM left behind (it ends by itself once its Python side is gone) is killed too.
    deadline = time.monotonic() + 30
    while tree.alive() and time.monotonic() < deadline:
        kill_target(tree.target)
        time.sleep(0.05)
    tree.close()
    return code, took


def _run(
    store: Store,
    scenario: str,
    phase: str,
    lake: str,
    local: Path,
    mode: str | None,
    *,
    point: CrashPoint | None = None,
    timeout: float = RUN_TIMEOUT_S,
) -> tuple[int | None, float, _Observation]:
    log = local / f"{phase}.log"
    with store.observed(lake) as observation:
        env = {**_environment(store, local), **observation.environment}
        process, tree = _start_stopped(_command(scenario, phase, lake, mode), env, log)
        observation.kill_method = tree.method
        if point is not None:
            observation.arm(
                Plan(
                    kill=lambda: kill_target(tree.target),
                    target=tree.target,
                    when=point.when,
                    index=point.index,
                    pattern=re.compile(point.pattern) if point.pattern else None,
                )
            )
        os.kill(process.pid, signal.SIGCONT)
        code, took = _finish(process, tree, timeout)
    return code, took, observation


# --------------------------------------------------------------------- checks


def check(lake: str, scenario: Scenario, local: Path) -> list[str]:
    """What is wrong with the lake once the scenario finished (nothing: exactly once)."""
    from lakesink.core import TxnState
    from lakesink.storage.location import join
    from lakesink.tables.deltars import delta_table
    from lakesink.tables.format import PENDING, SINK_ID_PROPERTY, VISIBLE, published_path
    from lakesink.tables.journal import read_transactions

    problems = []
    for name, ids in scenario.expected.items():
        table = join(lake, name)
        try:
            delta = delta_table(table)
        except Exception as exc:
            problems.append(f"{name}: not readable ({exc})")
            continue
        rows = delta.to_pyarrow_table(columns=[scenario.id_column, VISIBLE, PENDING]).to_pylist()
        visible = Counter(r[scenario.id_column] for r in rows if r[VISIBLE])
        if visible != Counter(ids):
            extra = sorted((visible - Counter(ids)).elements())
            missing = sorted((Counter(ids) - visible).elements())
            problems.append(f"{name}: visible ids wrong (extra {extra}, missing {missing})")
        # The published table, read by its path as any engine reads it, shows the same rows.
        try:
            published = delta_table(published_path(table)).to_pyarrow_table()
        except Exception as exc:
            problems.append(f"{name}: published table not readable ({exc})")
        else:
            shown = Counter(published.column(scenario.id_column).to_pylist())
            if shown != visible:
                problems.append(
                    f"{name}: the published table shows {sorted(shown.elements())}, the "
                    f"committed view {sorted(visible.elements())}"
                )
            if any(c.startswith("_lakesink_") for c in published.column_names):
                problems.append(f"{name}: the published table shows {published.column_names}")
        sink_id = delta.metadata().configuration[SINK_ID_PROPERTY]
        statuses = read_transactions(join(lake, "_lakesink_journal"), sink_id)
        states = {s.txn_id: s.state for s in statuses}
        masked = {r[PENDING] for r in rows if not r[VISIBLE]}
        unaccounted = sorted(t for t in masked if states.get(t) is not TxnState.ABORTED)
        if unaccounted:
            problems.append(
                f"{name}: masked rows of transactions the journal has not aborted: "
                + ", ".join(f"{t[:8]} ({states.get(t, 'unknown')})" for t in unaccounted)
            )
        unfinished = [s for s in statuses if not s.state.final]
        if unfinished:
            problems.append(
                f"{name}: unfinished in the journal: "
                + ", ".join(f"checkpoint {s.checkpoint_id} {s.state.value}" for s in unfinished)
            )
    status = subprocess.run(
        [sys.executable, "-m", "lakesink.cli", "status", join(lake, "orders")],
        capture_output=True,
        text=True,
        timeout=120,
        env=_environment(LocalStore(local), local),
    )
    if status.returncode != 0:
        problems.append(f"lakesink status exited {status.returncode}: {status.stderr[-300:]}")
    return problems


def check_one_cut(lake: str, scenario: Scenario, when: str) -> list[str]:
    """What is wrong with a read of the scenario's group of tables at one cut."""
    if scenario.one_cut is None:
        return []
    import lakesink
    from lakesink.errors import TableNotFoundError
    from lakesink.storage.location import join

    first, second, ratio = scenario.one_cut
    paths = [join(lake, first), join(lake, second)]
    try:
        tables = lakesink.arrow(*paths)
    except TableNotFoundError:
        return []  # not both made yet: nothing to read
    except Exception as exc:
        return [f"{when}: the tables are not readable together ({exc})"]
    if tables[0].num_rows != ratio * tables[1].num_rows:
        return [
            f"{when}: read at one cut, {first} has {tables[0].num_rows} rows and {second} "
            f"{tables[1].num_rows} (expected {ratio} to 1)"
        ]
    return []


# -------------------------------------------------------------------- driving


class Harness:
    """Runs crash points of the scenarios on one store; a scenario's setup is made once."""

    def __init__(self, store: Store, work: Path) -> None:
        self.store = store
        self.work = work
        self._templates: dict[tuple[str, str], tuple[str, Path]] = {}

    def _fresh(self, scenario: Scenario, mode: str | None, label: str) -> tuple[str, Path]:
        """A lake (and local folder) in the state the scenario's run starts from."""
        local = self.work / f"{label}-{uuid.uuid4().hex[:6]}"
        local.mkdir(parents=True)
        lake = self.store.new_lake(label) if self.store.name != "local" else str(local / "lake")
        if not scenario.setup:
            return lake, local
        # Scenarios with one setup program share its result (commit and abort of a held
        # checkpoint); an unset mode is the default's.
        key = (PROGRAMS[(scenario.name, "setup")].__name__, mode or "merge")
        if key not in self._templates:
            t_local = self.work / f"template-{key[0]}-{key[1]}"
            t_local.mkdir(parents=True)
            t_lake = (
                str(t_local / "lake")
                if self.store.name == "local"
                else self.store.new_lake(f"template-{scenario.name}")
            )
            code, _, _ = _run(self.store, scenario.name, "setup", t_lake, t_local, mode)
            if code != 0:
                raise RuntimeError(
                    f"setup of {scenario.name} exited {code}: {t_local / 'setup.log'}"
                )
            self._templates[key] = (t_lake, t_local)
        t_lake, t_local = self._templates[key]
        if Path(t_lake).exists() or self.store.name != "local":
            self.store.copy_lake(t_lake, lake)
        for entry in t_local.iterdir():
            if entry.is_dir() and entry.name != "lake":
                shutil.copytree(entry, local / entry.name)
        return lake, local

    def count(self, name: str, mode: str | None) -> list[str]:
        """The changes of the scenario's run, in order (each one a crash point, whether it
        succeeded or was refused: the kill run counts them alike)."""
        scenario = SCENARIOS[name]
        lake, local = self._fresh(scenario, mode, f"count-{name}")
        code, _, observation = _run(self.store, name, "run", lake, local, mode)
        if code != 0:
            raise RuntimeError(f"{name} ({mode}) exited {code} unharmed: {local / 'run.log'}")
        problems = check(lake, scenario, local)
        if problems:
            raise RuntimeError(f"{name} ({mode}) unharmed is wrong: {problems}")
        return observation.started

    def crash(self, name: str, mode: str | None, point: CrashPoint) -> Outcome:
        """Kill the scenario's run at ``point``, run it again, and check the lake."""
        scenario = SCENARIOS[name]
        outcome = Outcome(name, mode, self.store.name, point)
        lake, local = self._fresh(scenario, mode, f"{name}-{point.when}")
        code, _, observation = _run(self.store, name, "run", lake, local, mode, point=point)
        outcome.kill_exit, outcome.killed_at = code, observation.killed_at
        outcome.kill_method = observation.kill_method
        if observation.misplaced is not None:
            outcome.problems.append(observation.misplaced)
        if observation.killed_at is not None and code != -signal.SIGKILL:
            outcome.problems.append(f"killed at {observation.killed_at} but exited {code}")
        if observation.killed_at is None and code != 0:
            outcome.problems.append(f"not killed, yet exited {code} ({local / 'run.log'})")
        (local / "run.log").rename(local / "killed-run.log")
        outcome.problems.extend(check_one_cut(lake, scenario, "right after the kill"))
        restart, took = self._restart(name, lake, local, mode)
        outcome.restart_exit, outcome.restart_s = restart, took
        if restart is None:
            outcome.problems.append(f"restart stuck for {RESTART_TIMEOUT_S:.0f} s")
        elif restart != 0:
            outcome.problems.append(f"restart exited {restart} ({local / 'run.log'})")
        else:
            outcome.problems.extend(check(lake, scenario, local))
            outcome.problems.extend(check_one_cut(lake, scenario, "after the restart"))
        return outcome

    def _restart(
        self, name: str, lake: str, local: Path, mode: str | None
    ) -> tuple[int | None, float]:
        """The scenario run again as a scheduler runs it: again while it exits 75."""
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        took = 0.0
        while True:
            left = max(1.0, deadline - time.monotonic())
            code, seconds, _ = _run(self.store, name, "run", lake, local, mode, timeout=left)
            took += seconds
            if code != EXIT_TRY_LATER or time.monotonic() >= deadline:
                return code, took


def crash_points(store: str, changes: int) -> list[CrashPoint]:
    """Before and after each of ``changes`` changes.

    On S3 the proxy holds a request back before it reaches the store, so a kill before
    change k+1 leaves exactly the objects a kill after change k leaves (the writer is dead
    either way): after each change, and before the first, cover them all. On local disk a
    kill before a change leaves what was written since the one before (a temporary file, a
    file being written in place's predecessor), a state of its own.
    """
    if store == "s3":
        return [CrashPoint("before", index=1)] + [
            CrashPoint("after", index=k) for k in range(1, changes + 1)
        ]
    return [
        CrashPoint(when, index=k) for k in range(1, changes + 1) for when in ("before", "after")
    ]
