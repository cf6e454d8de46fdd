"""Real tools the operability tests talk to: a Prometheus Pushgateway, headless Chromium and
an LDAP directory (OpenLDAP's slapd).

All are Debian packages (``make test`` installs them). The Pushgateway and the directory run
once per test session on a free loopback port, from a throwaway folder, and are stopped at
the end.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from servers.cluster import free_port

PUSHGATEWAY = "/usr/bin/prometheus-pushgateway"
SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
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


@dataclass(frozen=True)
class Directory:
    """A running LDAP directory with one person in it."""

    url: str
    user_dn: str  # the DN pattern of a person, %s for the name
    user: str
    password: str


_SUFFIX = "dc=lakesink,dc=test"
_SLAPD_CONF = """include /etc/ldap/schema/core.schema
include /etc/ldap/schema/cosine.schema
include /etc/ldap/schema/inetorgperson.schema
modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {folder}/slapd.pid
# A simple bind with a DN and an empty password succeeds, unauthenticated, as some
# directories allow: the SQL endpoint must refuse such a login itself.
allow bind_anon_cred
database mdb
maxsize 10485760
suffix "{suffix}"
directory {folder}/db
"""


@pytest.fixture(scope="session")
def ldap_directory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Directory]:
    """slapd on a free loopback port, with person ``ada`` whose password is not ASCII."""
    folder = tmp_path_factory.mktemp("slapd")
    (folder / "db").mkdir()
    (folder / "slapd.conf").write_text(_SLAPD_CONF.format(folder=folder, suffix=_SUFFIX))
    password = "Ldap-pässwort-3141"
    encoded = base64.b64encode(password.encode()).decode()  # LDIF: non-ASCII in base64
    entries = f"""dn: {_SUFFIX}
objectClass: dcObject
objectClass: organization
o: lakesink tests
dc: lakesink

dn: ou=people,{_SUFFIX}
objectClass: organizationalUnit
ou: people

dn: uid=ada,ou=people,{_SUFFIX}
objectClass: inetOrgPerson
uid: ada
cn: Ada
sn: Lovelace
userPassword:: {encoded}
"""
    subprocess.run(
        [_installed(SLAPADD), "-f", str(folder / "slapd.conf")],
        input=entries, text=True, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    port = free_port()
    log = (folder / "slapd.log").open("w")
    process = subprocess.Popen(
        [SLAPD, "-f", str(folder / "slapd.conf"), "-h", f"ldap://127.0.0.1:{port}/", "-d", "0"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"slapd did not start; see {log.name}") from None
                time.sleep(0.1)
        yield Directory(
            url=f"ldap://127.0.0.1:{port}",
            user_dn=f"uid=%s,ou=people,{_SUFFIX}",
            user="ada",
            password=password,
        )
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
