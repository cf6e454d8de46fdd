"""The users of ``lakesink serve``: a file of names and salted bcrypt hashes of passwords.

One ``NAME:HASH`` line per user (the format of Apache's ``htpasswd -B``), the hash made by
the ``bcrypt`` package with a random salt and cost 12; no password is kept. ``lakesink
serve-users`` adds, changes, removes and lists users; the server checks a login against the
file as it is at that moment (``io.lakesink.serve.UsersFileAuthenticator``, ``java/``
beside this file), so a change takes effect at the next login, without a restart.

The file is written whole, then renamed into place, readable and writable by its owner only
(mode 0600); a file others may change is refused, since whoever can write it can add
themselves.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from lakesink.errors import ConfigurationError

__all__ = [
    "MAX_PASSWORD_BYTES",
    "add_user",
    "default_users_file",
    "read_users",
    "remove_user",
]

# bcrypt reads the first 72 bytes of a password and ignores the rest.
MAX_PASSWORD_BYTES = 72
_COST = 12
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,63}")


def default_users_file() -> Path:
    """``serve-users`` in lakesink's configuration folder: ``$XDG_CONFIG_HOME/lakesink``,
    else ``~/.config/lakesink``."""
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "lakesink" / "serve-users"


def read_users(path: str | Path) -> dict[str, str]:
    """Each user's name and hash, in the file's order.

    Raises:
        ConfigurationError: The file is missing, others may write it, or a line is not
            ``NAME:HASH``.
    """
    path = Path(path)
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigurationError(
            f"no users file at {path}: add a user with `lakesink serve-users add NAME "
            f"--users {path}` (it asks for the password)"
        ) from None
    except OSError as exc:
        raise ConfigurationError(f"cannot read the users file {path}: {exc.strerror}") from exc
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigurationError(
            f"the users file {path} may be changed by other users of this host, who could add "
            f"themselves: chmod 600 {path}"
        )
    users: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        name, colon, hashed = line.partition(":")
        if not colon or not _NAME.fullmatch(name) or not hashed.startswith("$2"):
            raise ConfigurationError(
                f"{path}, line {number}: not NAME:BCRYPT-HASH; rewrite it with lakesink serve-users"
            )
        users[name] = hashed
    return users


def add_user(path: str | Path, name: str, password: str) -> bool:
    """Set the password of user ``name`` (added if new); return whether it is new.

    Raises:
        ConfigurationError: The name is not letters, digits and ``._@-`` (up to 64), or
            the password is empty or over 72 bytes (bcrypt would ignore the rest).
    """
    import bcrypt

    if not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"user name {name!r}: use letters, digits and . _ @ - (up to 64, starting with a "
            "letter or digit)"
        )
    secret = password.encode("utf-8")
    if not secret or len(secret) > MAX_PASSWORD_BYTES:
        raise ConfigurationError(
            f"the password must be 1 to {MAX_PASSWORD_BYTES} bytes long (bcrypt ignores what "
            "comes after that); choose another"
        )
    path = Path(path)
    users = read_users(path) if path.exists() else {}
    new = name not in users
    users[name] = bcrypt.hashpw(secret, bcrypt.gensalt(_COST)).decode("ascii")
    _write(path, users)
    return new


def remove_user(path: str | Path, name: str) -> None:
    """Remove user ``name``; their next login is refused.

    Raises:
        ConfigurationError: There is no such user.
    """
    users = read_users(path)
    if users.pop(name, None) is None:
        raise ConfigurationError(f"no user {name!r} in {path}")
    _write(Path(path), users)


def _write(path: Path, users: dict[str, str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # mkstemp's file is mode 0600 from the start: no moment when others could read it.
    handle, staged = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.writelines(f"{name}:{hashed}\n" for name, hashed in users.items())
        os.replace(staged, path)
    except BaseException:
        Path(staged).unlink(missing_ok=True)
        raise
