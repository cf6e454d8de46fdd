"""A real S3 server (SeaweedFS) for the object-storage tests: one per test run, stopped at the end.

Started with ``servers.s3`` (``tests/servers/s3.py``, what ``make s3-up`` runs) on a free
loopback port, with bucket ``BUCKET`` made. Under pytest-xdist the workers share the one
server: the first to need it starts it, each registers its pid in a file under the run's
base temp folder (a lock serialises them), and the last one done stops it. While the
fixture is up, the standard ``AWS_*`` variables point at the server, so
``StorageOptions.from_env()`` (and any job a test starts) reaches it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers.cluster import free_port
from servers.s3 import S3Server, create_bucket, load_server, start_server, stop_server

from lakesink.core.lock import pid_alive
from lakesink.errors import ConfigurationError

__all__ = ["BUCKET", "STORES", "s3_server", "s3_uri"]

BUCKET = "lakesink-tests"
# Where the storage-independent guarantees are tested: each on both (the ``lake`` fixture).
STORES = ("local", "s3")


def s3_uri(name: str) -> str:
    """A fresh ``s3a://`` location in ``BUCKET`` for one test's table or folder."""
    return f"s3a://{BUCKET}/{name}-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    base = tmp_path_factory.getbasetemp()
    # xdist workers each get <run>/popen-gwN; the run's folder is shared by all of them.
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder, users_file = root / "s3-server", root / "s3-server.users"
    with _locked(root / "s3-server.lock"):
        users = json.loads(users_file.read_text()) if users_file.is_file() else []
        try:
            server = load_server(folder)
        except ConfigurationError:
            server = start_server(folder, port=free_port())
            create_bucket(server, BUCKET)
        users = [pid for pid in users if pid_alive(pid) and pid != os.getpid()] + [os.getpid()]
        users_file.write_text(json.dumps(users))
    try:
        with server.exported():
            yield server
    finally:
        with _locked(root / "s3-server.lock"):
            users = json.loads(users_file.read_text()) if users_file.is_file() else []
            users = [pid for pid in users if pid_alive(pid) and pid != os.getpid()]
            users_file.write_text(json.dumps(users))
            if not users:
                stop_server(folder)
