"""Who may use ``lakesink serve``, and over what: logins and TLS for Spark's Thrift server.

Logins are checked against lakesink's users file (``serve_users``), or by a bind to an LDAP
directory, or, with ``no_auth``, not at all (loopback only). An address other than loopback
is served only with logins checked and TLS: a password sent in clear there is anyone's. Both
checks are lakesink's own CUSTOM login checks (``java/`` beside this file), built with
``javac`` on first use.

What this rests on, in Spark 4.1's Thrift server (its classes, and tried by experiment):

- The server reads its authentication type, TLS settings and keystore from the HiveConf
  it starts with, which Spark builds from the session's ``spark.hadoop.*`` settings.
- Its CUSTOM and LDAP login checks (``CustomAuthenticationProviderImpl``,
  ``LdapAuthenticationProviderImpl``) build a fresh ``new HiveConf()`` at every login,
  which reads ``hive-site.xml`` and the JVM's system properties but no Spark setting: given
  as ``spark.hadoop.*`` only, the CUSTOM class is not found (every login fails with
  ``NoSuchMethodException: PasswdAuthenticationProvider.<init>()``) and the LDAP URL is
  null (``NullPointerException``). The login checks' settings are therefore system
  properties of the driver JVM, set through the gateway once it runs.
- It decodes a login byte by byte (``PlainSaslServer``), so a non-ASCII password reaches a
  login check garbled; its own LDAP check binds with that, never matches, has no timeout
  and puts the user name into the DN unescaped. lakesink's checks undo the decoding.
"""

from __future__ import annotations

import ipaddress
import logging
import secrets
import shutil
import socket
import stat
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from lakesink.errors import ConfigurationError
from lakesink.jvm import build_jar, cache_dir, fetch_jars, pyspark_jars, source_digest
from lakesink.ops.serve_users import default_users_file, read_users

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey
    from cryptography.hazmat.primitives.asymmetric.rsa import RSAPrivateKey
    from cryptography.x509 import Certificate

__all__ = [
    "JvmKeystore",
    "ServeAuth",
    "ServeTls",
    "authenticator_class_path",
    "check_access",
    "is_loopback",
    "thrift_settings",
]

log = logging.getLogger(__name__)

JAVA_SOURCES = Path(__file__).resolve().parent / "java"
# The login checks (java/ beside this file), and the system properties they read.
USERS_CHECK = "io.lakesink.serve.UsersFileAuthenticator"
USERS_PROPERTY = "lakesink.serve.users"
LDAP_CHECK = "io.lakesink.serve.LdapAuthenticator"
LDAP_URL_PROPERTY = "lakesink.serve.ldap.url"
LDAP_USER_DN_PROPERTY = "lakesink.serve.ldap.user-dn"
# bcrypt for the JVM: one jar, no dependencies.
BCRYPT_JAR = "org.springframework.security:spring-security-crypto:7.1.2"
# What the server refuses to speak: everything before TLS 1.2.
OLD_PROTOCOLS = "SSLv2,SSLv2Hello,SSLv3,TLSv1,TLSv1.1"
_HOW_TO = (
    "add users with `lakesink serve-users add NAME` (or pass --ldap-url and --ldap-user-dn "
    "for a directory), and pass --tls-cert CERT.pem --tls-key KEY.pem; --no-auth is for "
    "loopback (127.0.0.1) only"
)


@dataclass(frozen=True, kw_only=True)
class ServeAuth:
    """How logins are checked: by a users file (the default), by an LDAP directory, or not.

    Attributes:
        users_file: lakesink's users file (``lakesink serve-users``); default
            ``default_users_file()`` when neither LDAP nor ``no_auth`` is chosen.
        ldap_url: An LDAP directory (``ldaps://host:636``; ``ldap://`` sends passwords to
            it in clear): a login is a bind as the user's DN with their password.
        ldap_user_dn: The DN pattern of a user, ``%s`` standing for the name given at login
            (``uid=%s,ou=people,dc=example,dc=org``); several, separated by ``:``, are tried
            in turn.
        no_auth: Check nothing: any name, any password or none (loopback only).
    """

    users_file: Path | None = None
    ldap_url: str | None = None
    ldap_user_dn: str | None = None
    no_auth: bool = False

    def __post_init__(self) -> None:
        chosen = [self.users_file is not None, self.ldap_url is not None, self.no_auth]
        if sum(chosen) > 1:
            raise ConfigurationError(
                "choose one way to check logins: a users file, LDAP, or none (--no-auth)"
            )
        if (self.ldap_url is None) != (self.ldap_user_dn is None):
            raise ConfigurationError(
                "LDAP needs both --ldap-url and --ldap-user-dn (the DN pattern of a user, "
                "e.g. uid=%s,ou=people,dc=example,dc=org)"
            )
        if self.ldap_url is not None and not self.ldap_url.startswith(("ldap://", "ldaps://")):
            raise ConfigurationError(f"--ldap-url {self.ldap_url}: give ldaps://HOST[:PORT]")
        if self.ldap_user_dn is not None and not all(
            "%s" in pattern and "=" in pattern and "," in pattern
            for pattern in self.ldap_user_dn.split(":")
        ):
            raise ConfigurationError(
                f"--ldap-user-dn {self.ldap_user_dn}: each pattern is a full DN with %s for "
                "the user name, e.g. uid=%s,ou=people,dc=example,dc=org"
            )

    @property
    def users(self) -> Path | None:
        """The users file logins are checked against, if that is the way."""
        if self.ldap_url is not None or self.no_auth:
            return None
        return self.users_file or default_users_file()


@dataclass(frozen=True, kw_only=True)
class ServeTls:
    """The server's certificate and key, as PEM files.

    Attributes:
        cert: The certificate, then any intermediate certificates.
        key: Its private key, unencrypted (keep the file mode 0600).
    """

    cert: Path
    key: Path


def is_loopback(host: str) -> bool:
    """Whether every address ``host`` names is a loopback one (127.0.0.0/8, ::1).

    Raises:
        ConfigurationError: ``host`` does not resolve.
    """
    try:
        found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except socket.gaierror as exc:
        raise ConfigurationError(f"--host {host} does not resolve: {exc.strerror}") from exc
    addresses = {ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found}
    return bool(addresses) and all(address.is_loopback for address in addresses)


def check_access(host: str, auth: ServeAuth, tls: ServeTls | None) -> None:
    """Refuse what would admit someone it should not, before anything starts: an address
    beyond loopback without logins checked and TLS, a users file that is missing, empty or
    writable by others, TLS files that cannot serve.

    Raises:
        ConfigurationError: What is wrong, and how to set it up.
    """
    if not is_loopback(host):
        missing = [
            what for what, absent in (("logins", auth.no_auth), ("TLS", tls is None)) if absent
        ]
        if missing:
            raise ConfigurationError(
                f"refusing to serve on {host} without {' and '.join(missing)}: anyone who "
                f"reaches it would read every table it serves, and passwords would cross the "
                f"network in clear; {_HOW_TO}"
            )
    users = auth.users
    if users is not None and not read_users(users):
        raise ConfigurationError(
            f"the users file {users} has no user: add one with `lakesink serve-users add "
            f"NAME --users {users}`"
        )
    if tls is not None:
        _read_pem(tls)


def authenticator_class_path() -> list[Path]:
    """lakesink's login checks and the bcrypt they use, for the driver's class path.

    The check is built with ``javac`` on first use, and bcrypt fetched from Maven Central,
    both into ``serve-auth`` beside the Ivy cache.

    Raises:
        ConfigurationError: No ``javac``, Maven Central unreachable, or the build failed.
    """
    folder = cache_dir("serve-auth")
    bcrypt_jars = sorted(
        fetch_jars([BCRYPT_JAR], folder / BCRYPT_JAR.replace(":", "-"), what="bcrypt").glob("*.jar")
    )
    salt = f"{BCRYPT_JAR}; pyspark {version('pyspark')}"
    jar = folder / f"lakesink-serve-auth-{source_digest(JAVA_SOURCES, salt)}.jar"
    built = build_jar(
        jar,
        JAVA_SOURCES,
        [pyspark_jars() / "*", *bcrypt_jars],
        what="the SQL endpoint's login check",
    )
    return [built, *bcrypt_jars]


@dataclass
class JvmKeystore:
    """A PKCS12 keystore of a PEM certificate and key, for the JVM, until ``remove()``.

    It lives in a temporary folder of mode 0700, itself mode 0600, under a random password
    made for this run alone (the JVM cannot read a key kept without one). The server reads
    it once, when it starts listening.

    Raises:
        ConfigurationError: A file is missing or not PEM, the key is encrypted or does not
            belong to the certificate, or the certificate has expired.
    """

    tls: ServeTls
    path: Path = field(init=False)
    password: str = field(init=False, repr=False)

    def __post_init__(self) -> None:
        from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

        chain, key = _read_pem(self.tls)
        self.password = secrets.token_urlsafe(32)
        folder = Path(tempfile.mkdtemp(prefix="lakesink-serve-tls-"))
        self.path = folder / "server.p12"
        data = pkcs12.serialize_key_and_certificates(
            b"lakesink",
            key,
            chain[0],
            chain[1:] or None,
            BestAvailableEncryption(self.password.encode()),
        )
        self.path.touch(mode=0o600)  # before the key is in it
        self.path.write_bytes(data)

    def remove(self) -> None:
        """Delete the keystore and its folder (again is harmless)."""
        shutil.rmtree(self.path.parent, ignore_errors=True)


def thrift_settings(
    auth: ServeAuth, keystore: JvmKeystore | None
) -> tuple[dict[str, str], dict[str, str]]:
    """The Spark settings of the server, and the system properties of its login checks."""
    conf: dict[str, str] = {}
    properties: dict[str, str] = {}
    users = auth.users
    if users is not None:
        properties["hive.server2.custom.authentication.class"] = USERS_CHECK
        properties[USERS_PROPERTY] = str(users.resolve())
    elif auth.ldap_url is not None:
        properties["hive.server2.custom.authentication.class"] = LDAP_CHECK
        properties[LDAP_URL_PROPERTY] = auth.ldap_url
        properties[LDAP_USER_DN_PROPERTY] = str(auth.ldap_user_dn)
    conf["spark.hadoop.hive.server2.authentication"] = "NONE" if auth.no_auth else "CUSTOM"
    if keystore is not None:
        conf.update(
            {
                "spark.hadoop.hive.server2.use.SSL": "true",
                "spark.hadoop.hive.server2.keystore.path": str(keystore.path),
                # A secret: spark_session keeps it off the JVM's command line, and Spark
                # redacts it wherever it shows settings (SET, the UI).
                "spark.hadoop.hive.server2.keystore.password": keystore.password,
                "spark.hadoop.hive.ssl.protocol.blacklist": OLD_PROTOCOLS,
            }
        )
    return conf, properties


def _read_pem(tls: ServeTls) -> tuple[list[Certificate], RSAPrivateKey | EllipticCurvePrivateKey]:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        PublicFormat,
        load_pem_private_key,
    )

    try:
        chain = x509.load_pem_x509_certificates(tls.cert.read_bytes())
    except OSError as exc:
        raise ConfigurationError(f"--tls-cert {tls.cert}: {exc.strerror}") from exc
    except ValueError:
        raise ConfigurationError(
            f"--tls-cert {tls.cert} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ) from None
    try:
        if tls.key.stat().st_mode & (stat.S_IRGRP | stat.S_IROTH):
            log.warning("the TLS key %s is readable by other users: chmod 600 %s", tls.key, tls.key)
        key = load_pem_private_key(tls.key.read_bytes(), password=None)
    except OSError as exc:
        raise ConfigurationError(f"--tls-key {tls.key}: {exc.strerror}") from exc
    except TypeError:  # encrypted: it needs a password
        raise ConfigurationError(
            f"--tls-key {tls.key} is encrypted; give it decrypted (openssl pkey -in "
            f"{tls.key} -out server-key.pem; chmod 600 server-key.pem)"
        ) from None
    except ValueError:
        raise ConfigurationError(
            f"--tls-key {tls.key} holds no PEM private key (-----BEGIN PRIVATE KEY-----)"
        ) from None
    if not isinstance(key, (rsa.RSAPrivateKey, ec.EllipticCurvePrivateKey)):
        raise ConfigurationError(f"--tls-key {tls.key}: give an RSA or EC key (Java's TLS)")
    leaf = chain[0]
    spki = (Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise ConfigurationError(
            f"--tls-key {tls.key} is not the key of the first certificate in {tls.cert}"
        )
    if leaf.not_valid_after_utc <= datetime.now(timezone.utc):
        raise ConfigurationError(
            f"the certificate in {tls.cert} expired on {leaf.not_valid_after_utc:%Y-%m-%d}"
        )
    return list(chain), key
