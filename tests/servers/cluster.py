"""A local Spark standalone cluster: one master and worker JVMs on loopback, for tests and trials.

    python tests/servers/cluster.py start --dir .cache/cluster [--port 7077] [--workers 2]
    python tests/servers/cluster.py status --dir .cache/cluster
    python tests/servers/cluster.py stop --dir .cache/cluster

Each daemon is its own JVM, started from the installed pyspark's ``bin/spark-class``
(pip's pyspark has no ``sbin/start-master.sh``), listening on loopback only: the master on
127.0.0.1 and, on Linux, worker N on 127.0.0.N+2, so that Spark sees the workers as
different hosts as on a real cluster (it never runs a speculative copy of a task on the
host of its first attempt). The folder
holds the daemons' logs, the workers' work dirs (executor logs: ``work-N/<app>/<executor>/``)
and ``cluster.json``, which ``stop`` and ``status`` read, so the cluster outlives the command
that started it. ``submit_command`` is the ``spark-submit`` line the README gives cluster
users; the cluster tests run exactly that.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import logging
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, cast

from lakesink.errors import ConfigurationError
from lakesink.jvm import listening, tail
from lakesink.storage.options import StorageOptions

__all__ = [
    "DEFAULT_PORT",
    "LOOPBACK",
    "LocalCluster",
    "WorkerProcess",
    "executor_pids",
    "free_port",
    "load_cluster",
    "spark_home",
    "start_cluster",
    "stop_cluster",
    "submit_command",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 7077
# Ports for servers started by the tests come from here up to the ephemeral range (or above it).
FIRST_SERVER_PORT = 10000
EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"
STATE_FILE = "cluster.json"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
# What the clusters guide tells users to pass to spark-submit besides the jars.
GUIDE_SUBMIT_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # Sized for this cluster's two 1-core workers: 200 shuffle and 50 snapshot partitions
    # cost seconds of task scheduling per Delta commit (a 2-order batch: 139 s, not 86 s).
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "2",
    "spark.log.level": "WARN",  # Spark's INFO lines, hundreds a run, off the job's stderr
}


@dataclass(frozen=True, kw_only=True)
class WorkerProcess:
    """One worker JVM of a local cluster."""

    index: int
    host: str
    pid: int
    ui_port: int
    work_dir: str
    log_file: str

    @property
    def ui_address(self) -> str:
        """The worker's web UI, as the master's state names it."""
        return f"http://{self.host}:{self.ui_port}"


@dataclass(frozen=True, kw_only=True)
class LocalCluster:
    """A running local standalone cluster, as ``cluster.json`` in its folder records it."""

    directory: str
    host: str
    master_url: str
    master_pid: int
    master_ui_port: int
    cores: int
    memory: str
    workers: tuple[WorkerProcess, ...]

    @property
    def master_ui(self) -> str:
        """The master's web UI; ``/json/`` there answers the cluster's state."""
        return f"http://{self.host}:{self.master_ui_port}"

    def state(self) -> dict[str, Any]:
        """The master's view: workers (with ``state`` ALIVE or DEAD), apps, cores."""
        with urllib.request.urlopen(f"{self.master_ui}/json/", timeout=5) as answer:
            return cast(dict[str, Any], json.load(answer))

    def alive_workers(self) -> tuple[int, ...]:
        """The indexes of this cluster's workers the master counts alive (none if it is down)."""
        try:
            workers = self.state()["workers"]
        except OSError:
            return ()
        alive = {w["webuiaddress"] for w in workers if w["state"] == "ALIVE"}
        return tuple(w.index for w in self.workers if w.ui_address in alive)

    def kill_worker(self, index: int) -> list[int]:
        """SIGKILL worker ``index`` and its executors, as a machine that dies; return pids."""
        # The saved state, not this object's: a revive since it was loaded started new JVMs.
        worker = load_cluster(self.directory).workers[index]
        pids = [pid for pid, parent, _ in _processes() if parent == worker.pid]
        pids.append(worker.pid)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        log.info("killed worker %d (pid %d) and its executors %s", index, worker.pid, pids[:-1])
        return pids

    def start_worker(self, index: int, *, timeout_s: float = 180.0) -> LocalCluster:
        """Start worker ``index`` again (after ``kill_worker``); return the updated cluster."""
        if _running(self.workers[index].pid):
            raise ConfigurationError(
                f"worker {index} (pid {self.workers[index].pid}) of {self.directory} is running"
            )
        worker = _start_worker(self, index)
        workers = tuple(worker if w.index == index else w for w in self.workers)
        cluster = replace(self, workers=workers)
        cluster.save()
        _await_workers(cluster, (worker,), timeout_s)
        return cluster

    def revive(self) -> LocalCluster:
        """Start every worker that is not running (killed by a test); return the cluster."""
        cluster = load_cluster(self.directory)  # as in kill_worker: the live pids
        for worker in cluster.workers:
            if not _running(worker.pid):
                cluster = cluster.start_worker(worker.index)
        return cluster

    def save(self) -> None:
        """Write ``cluster.json``, which ``load_cluster``, ``stop`` and ``status`` read."""
        state = asdict(self)
        Path(self.directory, STATE_FILE).write_text(json.dumps(state, indent=2) + "\n")


def spark_home() -> Path:
    """The Spark installation inside the installed pyspark package (its ``bin/`` scripts).

    Taken from pyspark itself, not ``$SPARK_HOME``, so the daemons run the very Spark
    version the Python jobs link against.
    """
    spec = importlib.util.find_spec("pyspark")
    locations = list(spec.submodule_search_locations or ()) if spec else []
    home = Path(locations[0]) if locations else None
    if home is None or not (home / "bin" / "spark-class").is_file():
        raise ConfigurationError(
            "no Spark installation in the pyspark package (pyspark/bin/spark-class); "
            "install pyspark from PyPI into this environment (pip install -e .)"
        )
    return home


def free_port(host: str = LOOPBACK, *, span: int = 1) -> int:
    """A TCP port nothing holds right now (with the ``span - 1`` ports after it), outside
    the kernel's range of ephemeral ports (below it, or above it where that leaves more).

    Not a port the kernel hands out for ``bind(0)``: that range is where every outgoing
    connection takes its source port, and a server that binds late (the Kafka broker binds
    its port some 20 s after it starts) would race the suite's other tests, which open
    thousands of connections, for it.
    """
    low, high = (int(n) for n in Path(EPHEMERAL_RANGE).read_text().split())
    start, stop = max((FIRST_SERVER_PORT, low), (high + 1, 65536), key=lambda r: r[1] - r[0])
    pick = random.SystemRandom()  # not the seeded one: parallel workers would pick alike
    for _ in range(200 if stop - start > span else 0):
        port = pick.randrange(start, stop - span + 1)
        if all(_bindable(host, port + k) for k in range(span)):
            return port
    raise ConfigurationError(
        f"no {span} free neighbouring TCP ports on {host} outside the ephemeral ports "
        f"{low}-{high} ({EPHEMERAL_RANGE})"
    )


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind((host, port))
        except OSError:
            return False
    return True


def submit_command(
    master_url: str,
    application: str,
    arguments: Sequence[str] = (),
    *,
    conf: Mapping[str, str] | None = None,
    storage: StorageOptions | None = None,
) -> list[str]:
    """The ``spark-submit`` command line that runs a lakesink job on a cluster.

    It is the one the clusters guide gives: Delta's jar files from lakesink's cache
    (``lakesink jars --files``), the Delta settings and a quiet log, then ``conf``. With
    ``storage`` (tables on S3), also ``hadoop-aws`` with the AWS SDK on the class path (a real
    cluster takes it as the ``lakesink jars --s3`` package), lakesink's log store jar
    (``lakesink jars --log-store``) and the S3A settings, credentials included:
    fine for the local test server; on a real cluster keep keys out of command lines (a
    role, or ``spark-defaults.conf``), as the README says.
    """
    from lakesink.jvm import delta_jars

    # Delta's jars as files from lakesink's cache: no Ivy resolution, nothing downloaded.
    settings, jars = dict(GUIDE_SUBMIT_CONF), [str(jar) for jar in delta_jars()]
    if storage is not None:
        # Every node of this cluster is this machine: hadoop-aws and the AWS SDK are read in
        # place from the class path, where --packages would copy 640 MB for each application.
        class_path = os.pathsep.join(storage.spark_class_path())
        settings |= storage.spark_conf() | {
            "spark.driver.extraClassPath": class_path,
            "spark.executor.extraClassPath": class_path,
        }
        jars += storage.spark_jars()
    command = [
        str(spark_home() / "bin" / "spark-submit"),
        "--master", master_url,
        "--jars", ",".join(jars),
    ]  # fmt: skip
    for key, value in {**settings, **(conf or {})}.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, application, *arguments]


def start_cluster(
    directory: str | Path,
    *,
    port: int = DEFAULT_PORT,
    workers: int = 2,
    cores: int = 1,
    memory: str = "1g",
    timeout_s: float = 180.0,
) -> LocalCluster:
    """Start a master and ``workers`` workers, each its own JVM; return once all are alive.

    Args:
        directory: Folder of the logs, work dirs and ``cluster.json``; created if missing.
        port: The master's port (the web UI gets a free one).
        workers: How many worker JVMs.
        cores: Cores each worker offers (one executor of that many cores per application).
        memory: Memory each worker offers; an executor takes 1g unless told otherwise.
        timeout_s: How long to wait for the master and every worker to be alive.

    Raises:
        ConfigurationError: A cluster of that folder runs already, the port is taken, or a
            daemon did not come up in time (the message names its log).
    """
    host = LOOPBACK
    folder = Path(directory).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / STATE_FILE).is_file():
        previous = load_cluster(folder)
        if _running(previous.master_pid):
            raise ConfigurationError(
                f"the cluster of {folder} runs already ({previous.master_url}); "
                f"stop it first: python tests/servers/cluster.py stop --dir {folder}"
            )
    if listening(host, port):
        raise ConfigurationError(
            f"port {port} on {host} is taken; choose another master port (--port)"
        )
    ui_port = free_port(host)
    master_log = folder / "master.log"
    master = _daemon(
        [MASTER_CLASS, "--host", host, "--port", str(port), "--webui-port", str(ui_port)],
        master_log,
        host,
    )
    cluster = LocalCluster(
        directory=str(folder),
        host=host,
        master_url=f"spark://{host}:{port}",
        master_pid=master.pid,
        master_ui_port=ui_port,
        cores=cores,
        memory=memory,
        workers=(),
    )
    cluster.save()
    try:
        _await(
            lambda: _answers(cluster),
            master.pid,
            master_log,
            timeout_s,
            f"the master on {host}:{port}",
        )
        started = tuple(_start_worker(cluster, index) for index in range(workers))
        cluster = replace(cluster, workers=started)
        cluster.save()
        _await_workers(cluster, started, timeout_s)
    except ConfigurationError:
        stop_cluster(folder)
        raise
    log.info(
        "cluster %s up: %d worker(s) of %d core(s), %s", cluster.master_url, workers, cores, memory
    )
    return cluster


def load_cluster(directory: str | Path) -> LocalCluster:
    """The cluster ``start_cluster`` recorded in ``directory`` (running or not)."""
    state_file = Path(directory).resolve() / STATE_FILE
    if not state_file.is_file():
        raise ConfigurationError(
            f"no cluster was started in {state_file.parent} (no {STATE_FILE}); "
            f"start one: python tests/servers/cluster.py start --dir {state_file.parent}"
        )
    try:
        state = json.loads(state_file.read_text())
        state["workers"] = tuple(WorkerProcess(**w) for w in state["workers"])
        return LocalCluster(**state)
    except (ValueError, TypeError, KeyError) as exc:
        raise ConfigurationError(
            f"{state_file} is not a cluster state this version of lakesink wrote ({exc}); "
            "stop its daemons by hand (their pids are in it) and delete it"
        ) from exc


def stop_cluster(directory: str | Path, *, timeout_s: float = 30.0) -> bool:
    """Stop the workers (which stop their executors), then the master; return if any ran.

    SIGTERM first, SIGKILL what is still alive after ``timeout_s``.
    """
    cluster = load_cluster(directory)
    workers = [w.pid for w in cluster.workers if _running(w.pid)]
    executors = [pid for pid, parent, _ in _processes() if parent in workers]
    master = [cluster.master_pid] if _running(cluster.master_pid) else []
    for group in (workers, master):
        for pid in group:
            _signal(pid, signal.SIGTERM)
        for pid in group:
            if not _await_gone(pid, timeout_s):
                log.warning("pid %d did not stop on SIGTERM within %.0fs; SIGKILL", pid, timeout_s)
                _signal(pid, signal.SIGKILL)
    for pid in executors:  # a worker's shutdown kills them; one killed hard may not have
        _signal(pid, signal.SIGKILL)
    stopped = bool(workers or master)
    log.info("cluster %s %s", cluster.master_url, "stopped" if stopped else "was not running")
    return stopped


def executor_pids(app_id: str) -> dict[str, int]:
    """The executor JVMs of a running application on this machine: executor id -> pid."""
    found = {}
    for pid, _, command in _processes():
        words = command.split()
        if EXECUTOR_CLASS in words and _option(words, "--app-id") == app_id:
            found[_option(words, "--executor-id") or "?"] = pid
    return found


# ------------------------------------------------------------------ internals


def _daemon(arguments: list[str], log_file: Path, host: str) -> subprocess.Popen[bytes]:
    home = spark_home()
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": host,
        # Small daemons: they only schedule; the executors they launch get their own memory.
        "SPARK_DAEMON_MEMORY": os.environ.get("SPARK_DAEMON_MEMORY", "512m"),
        # The master's REST submission server would take port 6066 on every cluster.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
    }
    env.pop("PYSPARK_GATEWAY_PORT", None)
    with open(log_file, "ab") as output:
        return subprocess.Popen(
            [str(home / "bin" / "spark-class"), *arguments],
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # outlives the command that started it
        )


def _start_worker(cluster: LocalCluster, index: int) -> WorkerProcess:
    folder = Path(cluster.directory)
    work_dir = folder / f"work-{index}"
    work_dir.mkdir(exist_ok=True)
    host = _worker_host(index)
    ui_port = free_port(host)
    log_file = folder / f"worker-{index}.log"
    arguments = [
        WORKER_CLASS,
        "--host", host,
        "--webui-port", str(ui_port),
        "--cores", str(cluster.cores),
        "--memory", cluster.memory,
        "--work-dir", str(work_dir),
        cluster.master_url,
    ]  # fmt: skip
    process = _daemon(arguments, log_file, host)
    return WorkerProcess(
        index=index,
        host=host,
        pid=process.pid,
        ui_port=ui_port,
        work_dir=str(work_dir),
        log_file=str(log_file),
    )


def _worker_host(index: int) -> str:
    # Linux routes all of 127.0.0.0/8 to the loopback interface; macOS only 127.0.0.1.
    return f"127.0.0.{index + 2}" if platform.system() == "Linux" else LOOPBACK


def _await_workers(
    cluster: LocalCluster, workers: Sequence[WorkerProcess], timeout_s: float
) -> None:
    deadline = time.monotonic() + timeout_s
    for worker in workers:
        _await(
            cast(Callable[[], bool], lambda index=worker.index: index in cluster.alive_workers()),
            worker.pid,
            Path(worker.log_file),
            max(deadline - time.monotonic(), 1.0),
            f"worker {worker.index} of {cluster.master_url}",
        )


def _await(
    ready: Callable[[], bool], pid: int, log_file: Path, timeout_s: float, what: str
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return
        if not _running(pid):
            raise ConfigurationError(
                f"{what} exited at start; see {log_file}:\n{tail(_read(log_file))}"
            )
        time.sleep(0.25)
    raise ConfigurationError(
        f"{what} was not up after {timeout_s:.0f}s; see {log_file}:\n{tail(_read(log_file))}"
    )


def _answers(cluster: LocalCluster) -> bool:
    try:
        return cluster.state().get("status") == "ALIVE"
    except OSError:
        return False


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.is_file() else ""


def _processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process, from ``ps`` (Linux and macOS)."""
    listing = subprocess.run(
        ["ps", "-ww", "-A", "-o", "pid=,ppid=,args="], capture_output=True, text=True, check=True
    ).stdout
    rows = []
    for line in listing.splitlines():
        pid, parent, *command = line.split(None, 2)
        rows.append((int(pid), int(parent), command[0] if command else ""))
    return rows


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live Spark daemon or executor (not a recycled pid)."""
    return any(p == pid and "org.apache.spark." in command for p, _, command in _processes())


def _await_gone(pid: int, timeout_s: float) -> bool:
    # By its command line: a daemon this process started stays a zombie until reaped.
    deadline = time.monotonic() + timeout_s
    while _running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # gone already
        os.kill(pid, signum)


def _option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words[:-1] else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/servers/cluster.py",
        description="Start, stop or check a local Spark standalone cluster (a master and "
        "worker JVMs on 127.0.0.1). start and status print the master URL.",
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument(
        "--dir",
        default=".cache/cluster",
        help="folder of the logs, work dirs and cluster.json (default: %(default)s)",
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help="master port (default: %(default)s)"
    )
    parser.add_argument("--workers", type=int, default=2, help="worker JVMs (default: 2)")
    parser.add_argument("--cores", type=int, default=1, help="cores per worker (default: 1)")
    parser.add_argument("--memory", default="1g", help="memory per worker (default: 1g)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.action == "start":
            cluster = start_cluster(
                args.dir,
                port=args.port,
                workers=args.workers,
                cores=args.cores,
                memory=args.memory,
            )
            print(cluster.master_url)
            return 0
        if args.action == "stop":
            stop_cluster(args.dir)
            return 0
        cluster = load_cluster(args.dir)
        alive = len(cluster.alive_workers())
        if not _answers(cluster):
            print(f"the master {cluster.master_url} does not answer", file=sys.stderr)
            return 1
        print(cluster.master_url)
        print(f"{alive} of {len(cluster.workers)} worker(s) alive", file=sys.stderr)
        return 0
    except ConfigurationError as exc:
        print(f"lakesink cluster {args.action}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
