"""Real SQL endpoints for the tests: ``lakesink serve`` processes, the users and TLS files
they are given, and real clients (pyspark's beeline, PyHive, ``openssl s_client``)."""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import signal
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pyspark
from pyhive import hive

__all__ = [
    "BEELINE",
    "REFUSED_LOGIN",
    "SCRIPT",
    "TlsFiles",
    "add_user",
    "beeline",
    "descendants",
    "hive_connect",
    "make_tls",
    "rows",
    "start_serve",
    "stop_serve",
    "wait_ready",
]

SCRIPT = Path(sys.executable).parent / "lakesink"
BEELINE = Path(pyspark.__file__).parent / "bin" / "beeline"
# What beeline says when the server refused the name and password.
REFUSED_LOGIN = "Error validating the login"


def start_serve(*args: str, log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """``lakesink serve ARGS`` in a session of its own, stdout piped, stderr into ``log``.

    Without a shared metastore's variables: each server keeps a catalog of its own.
    """
    base = {k: v for k, v in os.environ.items() if not k.startswith("LAKESINK_METASTORE")}
    return subprocess.Popen(
        [str(SCRIPT), "serve", *args],
        stdout=subprocess.PIPE,
        stderr=log.open("w"),
        text=True,
        env={**base, **(env or {})},
        start_new_session=True,
    )


def wait_ready(server: subprocess.Popen[str], log: Path, timeout: float = 600) -> str:
    """The JDBC URL the server prints once it listens."""
    deadline = time.monotonic() + timeout
    assert server.stdout is not None
    while time.monotonic() < deadline:
        line = server.stdout.readline()
        if line.startswith("serving SQL at "):
            return line.removeprefix("serving SQL at ").strip()
        assert line or server.poll() is None, f"the server ended:\n{log.read_text()[-3000:]}"
    raise AssertionError(f"not ready in {timeout} s:\n{log.read_text()[-3000:]}")


def stop_serve(server: subprocess.Popen[str]) -> int:
    """SIGTERM, as an operator would; SIGKILL to its process group if it does not stop."""
    if server.poll() is None:
        server.send_signal(signal.SIGTERM)
        try:
            return server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
    return server.wait()


def add_user(users: Path, name: str, password: str) -> None:
    """``lakesink serve-users add NAME``, the password on stdin as a script gives it."""
    done = subprocess.run(
        [str(SCRIPT), "serve-users", "add", name, "--users", str(users)],
        input=password + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr


def beeline(
    url: str, query: str, *, user: str | None = None, password_file: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """pyspark's beeline running ``query``; the password from a file (``-w``), never ``-p``."""
    login = [
        *(["-n", user] if user else []),
        *(["-w", str(password_file)] if password_file else []),
    ]
    return subprocess.run(
        [str(BEELINE), "-u", url, *login, "--silent=true", "--outputformat=csv2", "-e", query],
        capture_output=True,
        text=True,
        timeout=300,
    )


def rows(done: subprocess.CompletedProcess[str]) -> list[str]:
    """beeline's output lines, without its prompt ("0: jdbc:hive2://...> ")."""
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    return [re.sub(r"^\d+: jdbc:\S*> ?", "", line) for line in done.stdout.splitlines() if line]


def hive_connect(port: int, user: str, password: str, *, ca: Path | None = None) -> hive.Connection:
    """A PyHive connection with a name and password (SASL PLAIN), over TLS if ``ca`` (which
    it then verifies the server's certificate with)."""
    if ca is None:
        return hive.connect(
            host="127.0.0.1", port=port, username=user, password=password, auth="CUSTOM"
        )
    import thrift_sasl
    from thrift.transport.TSSLSocket import TSSLSocket

    context = ssl.create_default_context(cafile=str(ca))
    socket = TSSLSocket("127.0.0.1", port, ssl_context=context, server_hostname="127.0.0.1")
    transport = thrift_sasl.TSaslClientTransport(
        lambda: hive.get_installed_sasl(
            host="127.0.0.1", sasl_auth="PLAIN", username=user, password=password
        ),
        "PLAIN",
        socket,
    )
    return hive.connect(thrift_transport=transport)


@dataclass(frozen=True)
class TlsFiles:
    """A test CA, a server certificate it signed for 127.0.0.1 and its key (PEM), and a
    PKCS12 trust store of the CA for Java clients."""

    ca: Path
    cert: Path
    key: Path
    truststore: Path
    truststore_password: str = "not-a-secret"  # a trust store holds public certificates


def make_tls(folder: Path) -> TlsFiles:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=1))

    def certificate(
        subject: str,
        key: ec.EllipticCurvePrivateKey,
        issuer: str,
        signer: ec.EllipticCurvePrivateKey,
    ) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
        )
        if subject == issuer:
            builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        else:
            names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), False)
        return builder.sign(signer, hashes.SHA256())

    folder.mkdir(parents=True, exist_ok=True)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    files = TlsFiles(
        ca=folder / "ca.pem",
        cert=folder / "server.pem",
        key=folder / "server-key.pem",
        truststore=folder / "truststore.p12",
    )
    pem = serialization.Encoding.PEM
    files.ca.write_bytes(certificate("test CA", ca_key, "test CA", ca_key).public_bytes(pem))
    files.cert.write_bytes(certificate("127.0.0.1", key, "test CA", ca_key).public_bytes(pem))
    files.key.touch(mode=0o600)
    files.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    subprocess.run(
        ["keytool", "-importcert", "-noprompt", "-alias", "ca", "-file", str(files.ca),
         "-keystore", str(files.truststore), "-storetype", "PKCS12",
         "-storepass", files.truststore_password],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    return files


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (the driver JVM among them), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        children = {p for p, parent in parents.items() if parent in frontier}
        found |= children
        frontier = children
    return found
