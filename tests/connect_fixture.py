"""A Spark Connect server with Delta for the Connect tests, one per test session, stopped at
the end (``servers.connect``); its Delta jars come from lakesink's cache, and it reaches
the tests' S3 server as well as local disk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers.cluster import free_port
from servers.connect import ConnectServer, start_connect_server, stop_connect_server

from lakesink.storage.options import StorageOptions


def start(folder: Path, port: int) -> ConnectServer:
    """Start the tests' server in ``folder``; again after a test killed it, as it was."""
    return start_connect_server(
        folder,
        port=port,
        ivy_dir=os.environ.get("LAKESINK_IVY_DIR"),
        storage=StorageOptions.from_env(),  # the S3 server's, exported by s3_server
    )


@pytest.fixture(scope="session")
def connect_server(s3_server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    folder = tmp_path_factory.mktemp("connect")
    server = start(folder, free_port())
    try:
        yield server
    finally:
        stop_connect_server(folder)
