"""``lakesink serve`` admits only who it should: real clients against real servers.

One server per configuration, shared by the module's tests (each start costs half a minute):

- users file and TLS: beeline without credentials, or with a wrong password, is refused;
  with the right ones it reads the committed rows; a client that does not trust the
  certificate is refused; ``openssl s_client`` gets TLS 1.2 or newer and no TLS 1.1 (the
  server's JVM is told to allow TLS 1.1, so lakesink's own setting is what refuses it);
  dbt-spark (thrift, user, password, TLS) runs a model over the committed rows; no password,
  S3 key or TLS key is in the server's log (Spark's output included, ``--verbose``), in any
  process's command line or in dbt's log, and the keystore is gone once the server listens;
  nothing of the server's JVM listens beyond loopback.
- LDAP, against a real slapd: the right password (not ASCII) reads rows; a wrong one or an
  empty one (which the directory would take as an anonymous bind) is refused.

Without Spark: an address beyond loopback without logins or TLS, and a missing users file,
exit 2 before Spark starts, with the way to set them up; ``lakesink serve-users`` keeps
salted bcrypt hashes in a file of mode 0600; the TLS keystore is private and goes away.
"""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import pytest
from serve_fixture import (
    REFUSED_LOGIN,
    SCRIPT,
    TlsFiles,
    add_user,
    beeline,
    descendants,
    hive_connect,
    make_tls,
    rows,
    start_serve,
    stop_serve,
    wait_ready,
)
from servers.cluster import free_port
from tools_fixture import Directory

from lakesink.delta.sink import DeltaSink
from lakesink.errors import ConfigurationError
from lakesink.ops import serve_users
from lakesink.ops.serve_access import JvmKeystore, ServeAuth, ServeTls, check_access
from lakesink.ops.serve_users import read_users

REPO = Path(__file__).resolve().parents[1]
DBT = REPO / ".cache" / "dbt-venv" / "bin" / "dbt"
SCHEMA = "order_id BIGINT, item STRING"
QUERY = "SELECT order_id FROM orders ORDER BY order_id"
# Distinctive fakes, to look for wherever they must not be.
RUN = uuid.uuid4().hex[:8]
PASSWORD = f"Pässwort-{RUN}-right"  # not ASCII: the server decodes logins byte by byte
WRONG_PASSWORD = f"Pässwort-{RUN}-wrong"
S3_KEY_ID = f"AKIAFAKE{RUN.upper()}"
S3_SECRET = f"s3-secret-{RUN}"
# What is looked for: the ASCII cores too, found in any garbling of the rest (the server
# holds a password decoded byte by byte: "Pￃﾤsswort-...").
SECRETS = [PASSWORD, WRONG_PASSWORD, f"{RUN}-right", f"{RUN}-wrong", S3_KEY_ID, S3_SECRET]
# The server's JVM may speak TLS 1.1 (Java 17 forbids it by default): lakesink's protocol
# list is then what refuses it.
ALLOW_TLS11 = (
    "jdk.tls.disabledAlgorithms=SSLv3, RC4, DES, MD5withRSA, DH keySize < 1024, "
    "EC keySize < 224, 3DES_EDE_CBC, anon, NULL\n"
)


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    log: Path
    pid: int
    tmp: Path  # the server's TMPDIR


@pytest.fixture(scope="module")
def orders(spark: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A lakesink table with rows 1 and 2 committed and row 3 pre-committed, on local disk."""
    table = str(tmp_path_factory.mktemp("lake") / "orders")
    sink = DeltaSink.open(spark, table, schema=SCHEMA)
    sink.write(spark.createDataFrame([(1, "a"), (2, "b")], SCHEMA))  # type: ignore[attr-defined]
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3, "c")], SCHEMA))  # type: ignore[attr-defined]
    sink.prepare_commit()  # pre-committed, never committed
    yield table
    sink.close()


def _serve(folder: Path, *args: str, env: dict[str, str] | None = None) -> Iterator[Server]:
    port, log, tmp = free_port(), folder / "serve.log", folder / "tmp"
    tmp.mkdir()
    server = start_serve(
        "--port", str(port), "--master", "local[1]", "--verbose", *args,
        log=log, env={"TMPDIR": str(tmp), **(env or {})},
    )  # fmt: skip
    try:
        url = wait_ready(server, log)
        yield Server(url=url, port=port, log=log, pid=server.pid, tmp=tmp)
    finally:
        assert stop_serve(server) == 0, log.read_text()[-3000:]


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_tls(tmp_path_factory.mktemp("tls"))


@pytest.fixture(scope="module")
def passwords(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """beeline's password files (``-w``): the right password and a wrong one."""
    folder = tmp_path_factory.mktemp("passwords")
    files = {"right": folder / "right", "wrong": folder / "wrong"}
    for name, text in (("right", PASSWORD), ("wrong", WRONG_PASSWORD)):
        files[name].touch(mode=0o600)
        files[name].write_text(text)
    return files


@pytest.fixture(scope="module")
def tls_server(
    orders: str, tls_files: TlsFiles, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """A server with a users file and TLS, S3 keys in its environment, its JVM allowed TLS
    1.1."""
    folder = tmp_path_factory.mktemp("tls-server")
    users = folder / "users"
    add_user(users, "analyst", PASSWORD)
    security = folder / "java.security"
    security.write_text(ALLOW_TLS11)
    env = {
        "AWS_ACCESS_KEY_ID": S3_KEY_ID,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "JDK_JAVA_OPTIONS": f"-Djava.security.properties={security}",
    }
    yield from _serve(
        folder, "--users", str(users), "--tls-cert", str(tls_files.cert),
        "--tls-key", str(tls_files.key), "--table", orders, env=env,
    )  # fmt: skip


def _tls_url(server: Server, tls: TlsFiles) -> str:
    return (
        f"{server.url};sslTrustStore={tls.truststore};trustStorePassword={tls.truststore_password}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("login", ["none", "wrong password", "right password"])
def test_beeline_over_tls_reads_committed_rows_only_with_the_right_password(
    tls_server: Server, tls_files: TlsFiles, passwords: dict[str, Path], login: str
) -> None:
    assert tls_server.url.endswith(";ssl=true")
    url = _tls_url(tls_server, tls_files)
    if login == "none":
        done = beeline(url, QUERY)
    else:
        password = passwords["right" if login == "right password" else "wrong"]
        done = beeline(url, QUERY, user="analyst", password_file=password)
    if login == "right password":
        assert rows(done) == ["order_id", "1", "2"]  # row 3 is not committed
    else:
        assert done.returncode != 0
        assert REFUSED_LOGIN in done.stdout + done.stderr
        assert "order_id" not in done.stdout


@pytest.mark.slow
def test_a_client_that_does_not_trust_the_certificate_is_refused(
    tls_server: Server, passwords: dict[str, Path]
) -> None:
    # Java's default trust store: the test CA is not in it.
    done = beeline(tls_server.url, QUERY, user="analyst", password_file=passwords["right"])
    assert done.returncode != 0
    assert "PKIX path building failed" in done.stdout + done.stderr
    assert "order_id" not in done.stdout


def _handshake(port: int, *options: str) -> str:
    done = subprocess.run(
        ["openssl", "s_client", "-connect", f"127.0.0.1:{port}", *options],
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout + done.stderr


@pytest.mark.slow
def test_openssl_gets_tls_1_2_or_newer_and_no_tls_1_1(
    tls_server: Server, tls_files: TlsFiles
) -> None:
    newest = _handshake(tls_server.port, "-CAfile", str(tls_files.ca))
    assert "New, TLSv1.3, Cipher is" in newest and "Verify return code: 0 (ok)" in newest
    assert "New, TLSv1.2, Cipher is" in _handshake(tls_server.port, "-tls1_2")
    # OpenSSL 3 offers TLS 1.1 only below security level 1.
    old = _handshake(tls_server.port, "-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0")
    assert "alert protocol version" in old and "New, (NONE), Cipher is (NONE)" in old


@pytest.mark.slow
def test_dbt_runs_a_model_over_committed_rows_with_user_password_and_tls(
    tls_server: Server, tls_files: TlsFiles, tmp_path: Path
) -> None:
    if not DBT.exists():
        pytest.fail(f"{DBT} is missing: make test installs dbt-spark there")
    (tmp_path / "models").mkdir()
    (tmp_path / "dbt_project.yml").write_text(
        "name: orders_report\nversion: '1.0'\nconfig-version: 2\nprofile: lakesink\n"
    )
    (tmp_path / "models" / "order_ids.sql").write_text(
        "{{ config(materialized='table') }}\nselect order_id from orders\n"
    )
    (tmp_path / "profiles.yml").write_text(
        f"""lakesink:
  target: dev
  outputs:
    dev:
      type: spark
      method: thrift
      host: 127.0.0.1
      port: {tls_server.port}
      user: analyst
      password: "{{{{ env_var('DBT_ENV_SECRET_LAKESINK_PASSWORD') }}}}"
      use_ssl: true
      auth: CUSTOM
      schema: default
"""
    )
    env = {
        **os.environ,
        "DBT_ENV_SECRET_LAKESINK_PASSWORD": PASSWORD,
        "DBT_SEND_ANONYMOUS_USAGE_STATS": "false",
    }
    done = subprocess.run(
        [str(DBT), "run", "--project-dir", str(tmp_path), "--profiles-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    said = done.stdout + done.stderr + (tmp_path / "logs" / "dbt.log").read_text()
    assert not [secret for secret in SECRETS if secret in said]
    with hive_connect(tls_server.port, "analyst", PASSWORD, ca=tls_files.ca) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT order_id FROM order_ids ORDER BY order_id")
        assert cursor.fetchall() == [(1,), (2,)]


@pytest.fixture(scope="module")
def logged_in(tls_server: Server, tls_files: TlsFiles) -> Server:
    """The server after a refused login and an accepted one: what it says about either is
    in its log."""
    with pytest.raises(Exception, match=REFUSED_LOGIN):
        hive_connect(tls_server.port, "analyst", WRONG_PASSWORD, ca=tls_files.ca)
    with hive_connect(tls_server.port, "analyst", PASSWORD, ca=tls_files.ca) as connection:
        cursor = connection.cursor()
        cursor.execute("SELECT count(*) FROM orders")
        assert cursor.fetchall() == [(2,)]
    return tls_server


@pytest.mark.slow
def test_no_secret_is_on_a_command_line(tls_server: Server) -> None:
    command_lines = subprocess.run(
        ["ps", "-eww", "-o", "args="], capture_output=True, text=True, check=True
    ).stdout
    assert "spark.app.name=lakesink-serve" in command_lines  # the server's JVM is among them
    # the keystore's password is made for the run: its setting's name stands for it
    for secret in [*SECRETS, "keystore.password"]:
        assert secret not in command_lines, secret


@pytest.mark.slow
def test_no_secret_is_in_the_servers_log(logged_in: Server, tls_files: TlsFiles) -> None:
    log = logged_in.log.read_text()
    assert "Setting default log level" in log  # Spark's own output is in it (--verbose)
    assert "SASL negotiation failure" in log  # so is the refused login
    key_lines = [line for line in tls_files.key.read_text().splitlines() if "-----" not in line]
    for secret in [*SECRETS, *key_lines]:
        assert secret not in log, secret


@pytest.mark.slow
def test_the_keystore_is_gone_once_the_server_listens(tls_server: Server) -> None:
    # lakesink made it in the server's TMPDIR from the PEM files; the server holds its key.
    assert tls_server.tmp.is_dir()
    assert not list(tls_server.tmp.glob("lakesink-serve-tls-*"))


def _listening(pids: set[int]) -> set[str]:
    """The local addresses the processes ``pids`` listen on (TCP, from /proc)."""
    inodes = set()
    for pid in pids:
        try:
            fds = list(Path(f"/proc/{pid}/fd").iterdir())
        except OSError:  # the process ended
            continue
        for fd in fds:
            try:
                target = os.readlink(fd)
            except OSError:  # closed since the listing: a busy JVM opens and closes files
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()
    for table, width in (("tcp", 4), ("tcp6", 16)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                address = bytes.fromhex(fields[1].split(":")[0])
                # /proc prints each 32-bit word little-endian
                words = [address[i : i + 4][::-1] for i in range(0, width, 4)]
                family = socket.AF_INET if width == 4 else socket.AF_INET6
                found.add(socket.inet_ntop(family, b"".join(words)))
    return found


@pytest.mark.slow
def test_nothing_of_the_server_listens_beyond_loopback(tls_server: Server) -> None:
    addresses = _listening(descendants(tls_server.pid))
    assert addresses, "found no listening socket of the server"
    assert all(a.startswith("127.") or a in ("::1", "::ffff:127.0.0.1") for a in addresses), (
        addresses
    )


@pytest.fixture(scope="module")
def ldap_server(
    orders: str, ldap_directory: Directory, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    folder = tmp_path_factory.mktemp("ldap-server")
    yield from _serve(
        folder, "--ldap-url", ldap_directory.url, "--ldap-user-dn", ldap_directory.user_dn,
        "--table", orders,
    )  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("password", ["right", "wrong", "empty"])
def test_an_ldap_login_reads_rows_only_with_the_directory_password(
    ldap_server: Server, ldap_directory: Directory, password: str
) -> None:
    given = {
        "right": ldap_directory.password,
        "wrong": ldap_directory.password + "x",
        "empty": "",
    }[password]
    user = ldap_directory.user
    if password != "right":
        with pytest.raises(Exception, match="Error validating the login"):
            hive_connect(ldap_server.port, user, given)
        return
    with hive_connect(ldap_server.port, user, given) as connection:
        cursor = connection.cursor()
        cursor.execute(QUERY)
        assert cursor.fetchall() == [(1,), (2,)]


# --- without Spark ---------------------------------------------------------------------------


def _lakesink(
    *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SCRIPT), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=120,
    )


@pytest.mark.parametrize(
    ("auth", "missing"),
    [(["--no-auth"], "logins and TLS"), (["--users", "USERS"], "TLS")],
    ids=["no-auth", "users-without-tls"],
)
def test_an_address_beyond_loopback_without_logins_or_tls_is_refused_before_spark(
    tmp_path: Path, auth: list[str], missing: str
) -> None:
    users = tmp_path / "users"
    add_user(users, "analyst", PASSWORD)
    args = [str(users) if a == "USERS" else a for a in auth]
    done = _lakesink("serve", "--host", "0.0.0.0", "--port", str(free_port()), *args)
    assert done.returncode == 2, done.stderr
    assert f"refusing to serve on 0.0.0.0 without {missing}" in done.stderr
    assert "lakesink serve-users add NAME" in done.stderr and "--tls-cert" in done.stderr
    assert "starting Spark" not in done.stderr


def test_serve_without_a_users_file_says_how_to_make_one(tmp_path: Path) -> None:
    done = _lakesink("serve", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert done.returncode == 2
    assert f"no users file at {tmp_path}/lakesink/serve-users" in done.stderr
    assert "lakesink serve-users add NAME" in done.stderr
    assert "starting Spark" not in done.stderr


def test_check_access_admits_no_auth_and_no_tls_on_loopback_only() -> None:
    for host in ("127.0.0.1", "localhost", "::1"):
        check_access(host, ServeAuth(no_auth=True), None)
    with pytest.raises(ConfigurationError, match="without logins and TLS"):
        check_access("0.0.0.0", ServeAuth(no_auth=True), None)


def test_serve_users_keeps_salted_bcrypt_hashes_in_a_private_file(tmp_path: Path) -> None:
    users = tmp_path / "config" / "users"
    add_user(users, "analyst", PASSWORD)
    serve_users.add_user(users, "bi-tool", PASSWORD)  # the same password, another salt
    assert stat.S_IMODE(users.stat().st_mode) == 0o600
    text = users.read_text()
    assert PASSWORD not in text
    hashes = read_users(users)
    assert list(hashes) == ["analyst", "bi-tool"] and hashes["analyst"] != hashes["bi-tool"]
    assert all(bcrypt.checkpw(PASSWORD.encode(), h.encode()) for h in hashes.values())
    assert _lakesink("serve-users", "list", "--users", str(users)).stdout.split() == [
        "analyst",
        "bi-tool",
    ]
    changed = _lakesink("serve-users", "add", "analyst", "--users", str(users), stdin="new\n")
    assert "changed the password of analyst" in changed.stdout
    assert bcrypt.checkpw(b"new", read_users(users)["analyst"].encode())
    assert _lakesink("serve-users", "remove", "bi-tool", "--users", str(users)).returncode == 0
    assert list(read_users(users)) == ["analyst"]
    too_long = _lakesink("serve-users", "add", "x", "--users", str(users), stdin="é" * 37 + "\n")
    assert too_long.returncode == 2 and "1 to 72 bytes" in too_long.stderr


def test_the_jvm_keystore_is_private_and_goes_away(tls_files: TlsFiles) -> None:
    keystore = JvmKeystore(ServeTls(cert=tls_files.cert, key=tls_files.key))
    assert stat.S_IMODE(keystore.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(keystore.path.parent.stat().st_mode) == 0o700
    keystore.remove()
    assert not keystore.path.parent.exists()


def test_tls_files_that_cannot_serve_are_refused(tls_files: TlsFiles, tmp_path: Path) -> None:
    other = make_tls(tmp_path / "other")
    with pytest.raises(ConfigurationError, match="is not the key of the first certificate"):
        JvmKeystore(ServeTls(cert=tls_files.cert, key=other.key))
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(tls_files.key.read_bytes(), password=None)
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    with pytest.raises(ConfigurationError, match="is encrypted"):
        JvmKeystore(ServeTls(cert=tls_files.cert, key=encrypted))
