"""Real tools the operability tests talk to: a Prometheus Pushgateway and headless Chromium.

Both are Debian packages (``make test`` installs them). The Pushgateway runs once per test
session on a free loopback port and is stopped at the end.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from lakesink.testing.cluster import free_port

PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"
CHROMIUM = "/usr/bin/chromium"
# This machine's network is closed: without these, Chromium keeps opening connections
# that are refused, and looks up Google's hosts at every start.
QUIET_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _installed(path: str) -> str:
    if not Path(path).exists():
        pytest.fail(f"{path} is missing: make test installs Debian's {Path(path).name} package")
    return path


@pytest.fixture(scope="session")
def push_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a running Pushgateway."""
    port = free_port()
    log = (tmp_path_factory.mktemp("pushgateway") / "pushgateway.log").open("w")
    process = subprocess.Popen(
        [_installed(PUSHGATEWAY), f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the Pushgateway did not start; see {log.name}") from None
                time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def page_dom(page: Path, profile: Path) -> str:
    """The DOM of a local HTML page as headless Chromium built it."""
    profile.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [
            _installed(CHROMIUM),
            *QUIET_FLAGS,
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout
