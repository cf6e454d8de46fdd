"""A one-node Kafka broker on loopback, for the streaming tests and for trying lakesink out.

    python tests/servers/kafka.py start --dir .cache/kafka [--port 9092]
    python tests/servers/kafka.py status --dir .cache/kafka
    python tests/servers/kafka.py stop --dir .cache/kafka

It runs Apache Kafka's own broker (``org.apache.kafka:kafka_2.13``, fetched from Maven
Central with its dependencies into ``<dir>/jars`` on first use) in KRaft mode, broker and
controller in one JVM, on 127.0.0.1 only, without authentication. Topics are created on
first use with ``num.partitions`` partitions. Its data and log (``broker.log``) live in
``<dir>``. ``start`` prints the bootstrap servers to give Spark's Kafka source.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from lakesink.errors import ConfigurationError
from lakesink.jvm import (
    daemon_state,
    fetch_jars,
    java,
    listening,
    read_pid,
    start_daemon,
    stop_recorded_daemon,
)

__all__ = ["KAFKA_VERSION", "KafkaBroker", "load_broker", "start_broker", "stop_broker"]

log = logging.getLogger(__name__)

KAFKA_VERSION = "4.4.0"
LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 9092
STATE_FILE = "broker.json"
PID_FILE = "broker.pid"
LOG_FILE = "broker.log"
# The broker logs through slf4j 1.7; without a binding it would log nothing at all.
JARS = (f"org.apache.kafka:kafka_2.13:{KAFKA_VERSION}", "org.slf4j:slf4j-simple:1.7.36")


@dataclass(frozen=True, kw_only=True)
class KafkaBroker:
    """A running broker: where to reach it and where it keeps its files."""

    directory: str
    port: int
    controller_port: int
    pid: int

    @property
    def bootstrap_servers(self) -> str:
        """What Spark's ``kafka.bootstrap.servers`` option takes."""
        return f"{LOOPBACK}:{self.port}"


def start_broker(
    directory: str | Path,
    *,
    port: int = DEFAULT_PORT,
    partitions: int = 2,
    jars_dir: str | Path | None = None,
    timeout: float = 120.0,
) -> KafkaBroker:
    """Format a new KRaft log folder and start a broker on it; return once it listens.

    The jars are fetched into ``jars_dir`` (default ``<directory>/jars``) if missing.

    Raises:
        ConfigurationError: A broker already runs from ``directory``, a port is taken, or
            the broker did not come up (the message quotes its log).
    """
    folder = Path(directory).resolve()
    if read_pid(folder / PID_FILE) is not None and listening(LOOPBACK, port):
        raise ConfigurationError(
            f"a Kafka broker already runs from {folder}; stop it first: "
            f"python tests/servers/kafka.py stop --dir {folder}"
        )
    for taken in (port, port + 1):
        if listening(LOOPBACK, taken):
            raise ConfigurationError(
                f"port {taken} on {LOOPBACK} is taken; start the broker with another --port "
                "(it uses that port and the next)"
            )
    folder.mkdir(parents=True, exist_ok=True)
    jars = Path(jars_dir) if jars_dir else folder / "jars"
    classpath = os.path.join(fetch_jars(JARS, jars, what=f"Kafka {KAFKA_VERSION}"), "*")
    data = folder / "data"
    properties = folder / "server.properties"
    properties.write_text(_server_properties(data, port, port + 1, partitions))
    if not (data / "meta.properties").is_file():
        _tool(classpath, "format", "--standalone", "--ignore-formatted", "-t",
              _tool(classpath, "random-uuid").strip(), "-c", str(properties))  # fmt: skip
    pid = start_daemon(
        [java(), "-Xmx512m", "-cp", classpath, "kafka.Kafka", str(properties)],
        folder=folder,
        log_name=LOG_FILE,
        pid_name=PID_FILE,
        ready=lambda: listening(LOOPBACK, port),
        timeout=timeout,
        what=f"the Kafka broker on {LOOPBACK}:{port}",
    )
    broker = KafkaBroker(directory=str(folder), port=port, controller_port=port + 1, pid=pid)
    (folder / STATE_FILE).write_text(json.dumps(asdict(broker), indent=2))
    return broker


def load_broker(directory: str | Path) -> KafkaBroker:
    """The broker started from ``directory``.

    Raises:
        ConfigurationError: None was started there, or it no longer listens.
    """
    recorded = daemon_state(directory, STATE_FILE, what="Kafka broker", module=__name__)
    broker = KafkaBroker(**recorded)
    if not listening(LOOPBACK, broker.port):
        raise ConfigurationError(
            f"the Kafka broker of {broker.directory} no longer listens on {broker.port}"
        )
    return broker


def stop_broker(directory: str | Path, *, timeout: float = 30.0) -> bool:
    """Stop the broker started from ``directory``; return whether one was running."""
    return stop_recorded_daemon(
        directory, PID_FILE, STATE_FILE, timeout=timeout, what="Kafka broker"
    )


def _server_properties(data: Path, port: int, controller_port: int, partitions: int) -> str:
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"{LOOPBACK}:{controller_port}",
        "listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{LOOPBACK}:{port},CONTROLLER://{LOOPBACK}:{controller_port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data),
        "num.partitions": str(partitions),
        # One node: every internal topic has one replica, and consumers start at once.
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def _tool(classpath: str, *arguments: str) -> str:
    result = subprocess.run(
        [java(), "-cp", classpath, "kafka.tools.StorageTool", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )
    if result.returncode != 0:
        raise ConfigurationError(
            f"Kafka's StorageTool {arguments[0]} failed:\n{result.stdout}{result.stderr}"
        )
    return result.stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/servers/kafka.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", required=True, help="folder of the broker's jars, data and log")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="(default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.action == "start":
            print(start_broker(args.dir, port=args.port).bootstrap_servers)
        elif args.action == "stop":
            if not stop_broker(args.dir):
                print(f"no Kafka broker was running from {args.dir}", file=sys.stderr)
        else:
            print(load_broker(args.dir).bootstrap_servers)
    except ConfigurationError as exc:
        print(f"kafka {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
