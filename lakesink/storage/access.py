"""Stores that refuse lakesink or cannot be reached, told apart from every other failure.

A wrong secret, a missing bucket, an unreachable endpoint, expired credentials and a folder
without permission are one thing to an operator, a setting to fix, whichever client met
them: Spark's S3A connector (a Java exception through Py4J: ``AccessDeniedException``,
``UnknownStoreException``, ``UnknownHostException``), delta-rs and obstore (an ``OSError`` or
an obstore exception holding the store's XML answer and a Rust debug dump), the lease, or
the local file system. ``access_error`` recognises one in any of their exceptions (their
causes and a Java exception's own causes included) and says it in one line: the store, the
location and the cause, with what to fix. ``translated`` raises it as a
``StorageAccessError`` where lakesink calls a client (``lakesink.storage.files.check_reachable``
asks the store once, quickly, before a command starts Spark).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from lakesink.errors import ConfigurationError, LakesinkError, StorageAccessError
from lakesink.storage.location import scheme
from lakesink.storage.options import S3_SCHEMES, StorageOptions

__all__ = ["access_error", "not_writable", "translated"]

# How much of one exception's text is searched (a Java stack through Py4J runs to pages).
_TEXT_LIMIT = 50_000
# The S3 error codes that name the cause, most telling first.
_DENIED_CODES = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "InvalidToken", "AccessDenied")
_EXPIRED_CODES = ("ExpiredToken", "TokenRefreshRequired", "RequestExpired")
_URI = re.compile(r"\b(?:s3a?|s3n|gs|abfss?|wasbs?)://[^\s'\"`<>,;)]*[^\s'\"`<>,;):.]")
_LOCAL = re.compile(r"(?:file:)?(/[^\s'\"`<>,;:)]+)")


@dataclass(frozen=True)
class _Cause:
    kind: str  # "bucket", "expired", "denied", "unreachable", "local-denied", "not-a-folder"
    detail: str  # what the client said, in a few words
    path: str | None = None  # the local file or folder refused, when the client names it


def access_error(
    error: BaseException, location: str | None = None, *, unanswered: bool = True
) -> StorageAccessError | None:
    """The ``StorageAccessError`` that ``error`` amounts to, or None if it is something else.

    Args:
        error: Whatever a client raised (its ``__cause__``/``__context__`` chain, a
            ``CommitRoundError``'s failures and a Java exception's causes are searched too).
        location: The table or folder the caller was reaching; default: the first
            location the error's text names.
        unanswered: Whether a store that did not answer counts. Not where a request may
            have landed before the store went away (a commit: its outcome is unknown);
            a refusal is a refusal anywhere.
    """
    if isinstance(error, StorageAccessError):
        return error
    if isinstance(error, LakesinkError):  # lakesink's own verdict stands
        return None
    found = _cause(error)
    if found is None or (found.kind == "unreachable" and not unanswered):
        return None
    where = location or _named_location(error) or "(unknown location)"
    return StorageAccessError(_message(found, where))


@contextmanager
def translated(location: str) -> Iterator[None]:
    """Raise what a client raises inside as a ``StorageAccessError`` when it is one;
    anything else passes unchanged."""
    try:
        yield
    except Exception as error:
        found = access_error(error, location)
        if found is None or found is error:
            raise
        raise found from error


def not_writable(location: str, folder: str) -> StorageAccessError:
    """The error for a local ``folder`` on the way to ``location`` that this user may not
    write."""
    return StorageAccessError(_message(_Cause("local-denied", "not writable", folder), location))


# ------------------------------------------------------------------------- recognising


def _chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, its causes and contexts, and a ``CommitRoundError``'s failures, each once."""
    seen: set[int] = set()
    waiting = [error]
    while waiting:
        current = waiting.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        waiting += [e for e in (current.__cause__, current.__context__) if e is not None]
        waiting += [failure for _, failure in getattr(current, "failures", ())]


def _text(error: BaseException) -> str:
    # A Py4J error's text is the Java exception's whole stack, its causes included; reading
    # it asks the JVM, which may be gone.
    try:
        text = str(error)
    except Exception:
        text = repr(error)
    return f"{type(error).__module__}.{type(error).__name__}: {text}"[:_TEXT_LIMIT]


def _cause(error: BaseException) -> _Cause | None:
    chain = list(_chain(error))
    for current in chain:
        if isinstance(current, StorageAccessError):
            return None  # already said; ``access_error`` returns it as it is
        if isinstance(current, OSError) and current.errno is not None:
            local = _local_cause(current)
            if local is not None:
                return local
    text = "\n".join(_text(e) for e in chain)
    if re.search(r"NoSuchBucket|UnknownStoreException|bucket does not exist", text):
        return _Cause("bucket", "the bucket does not exist")
    expired = _first_code(text, _EXPIRED_CODES)
    if expired or re.search(r"(?i)token (?:has|is) expired|credentials have expired", text):
        return _Cause("expired", expired or "expired credentials")
    if re.search(
        r"SignatureDoesNotMatch|InvalidAccessKeyId|InvalidToken|AccessDenied|403 Forbidden|"
        r"Status Code: 403|status: 403|lacked the necessary privileges|"
        r"obstore\.exceptions\.(?:PermissionDenied|Unauthenticated)Error",
        text,
    ):
        code = _first_code(text, _DENIED_CODES)
        return _Cause("denied", f"HTTP 403, {code}" if code else "HTTP 403")
    unreachable = _unreachable(text)
    # Unanswered through a Spark Connect client: the server did not answer, not the store.
    through_connect = any(type(e).__module__.startswith(_CONNECT_CHANNEL) for e in chain)
    if unreachable is not None and not through_connect:
        return _Cause("unreachable", unreachable)
    if re.search(r"Permission denied|AccessControlException|Read-only file system", text):
        return _Cause("local-denied", "permission denied")
    if re.search(r"Not a directory|ParentNotDirectoryException", text):
        return _Cause("not-a-folder", "a file stands where a folder is needed")
    return None


# Where a Spark Connect client's errors come from.
_CONNECT_CHANNEL = ("pyspark.errors.exceptions.connect", "grpc")


def _local_cause(error: OSError) -> _Cause | None:
    path = error.filename if isinstance(error.filename, str) else None
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return _Cause("local-denied", os.strerror(error.errno).lower(), path)
    if error.errno == errno.ENOTDIR:
        return _Cause("not-a-folder", "a file stands where a folder is needed", path)
    return None


def _first_code(text: str, codes: tuple[str, ...]) -> str | None:
    # A code on its own: "AccessDenied", not the "AccessDeniedException" S3A throws for any 403.
    return next((code for code in codes if re.search(rf"\b{code}\b", text)), None)


def _unreachable(text: str) -> str | None:
    for pattern, reason in (
        (r"Connection refused|ConnectException", "connection refused"),
        (r"UnknownHostException|dns error|failed to lookup address", "unknown host"),
        (r"(?i)connect timeout|connection timed out|SocketTimeoutException", "timed out"),
        (
            r"tcp connect error|error sending request|Unable to execute HTTP request|"
            r"SdkClientException",
            "no answer",
        ),
    ):
        if re.search(pattern, text):
            return reason
    return None


def _named_location(error: BaseException) -> str | None:
    for current in _chain(error):
        if isinstance(current, OSError) and isinstance(current.filename, str):
            return current.filename
        text = _text(current)
        found = _URI.search(text) or _LOCAL.search(text.partition(": ")[2])
        if found:
            return found.group(1) if found.re is _LOCAL else found.group(0)
    return None


# -------------------------------------------------------------------------- the line


def _message(cause: _Cause, location: str) -> str:
    if cause.kind in ("local-denied", "not-a-folder"):
        fix = (
            "fix the path"
            if cause.kind == "not-a-folder"
            else "run as a user who may use it, or change its permissions"
        )
        where = f" ({cause.path})" if cause.path and cause.path != location else ""
        return f"the local file system refused {location}: {cause.detail}{where}; {fix}"
    store = _store_name(location)
    if cause.kind == "bucket":
        bucket = location.partition("://")[2].partition("/")[0]
        return (
            f"{store} has no bucket {bucket!r} (for {location}); create it, or correct the "
            "bucket in the location"
        )
    if cause.kind == "expired":
        return (
            f"{store} refused {location}: the credentials expired ({cause.detail}); renew "
            "them (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)"
        )
    if cause.kind == "denied":
        return (
            f"{store} refused {location}: access denied ({cause.detail}); check "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and what they may do in the bucket"
        )
    return (
        f"{store} does not answer for {location} ({cause.detail}); check AWS_ENDPOINT_URL "
        "and that the store is up"
    )


def _store_name(location: str) -> str:
    kind = scheme(location)
    if kind not in S3_SCHEMES:
        return f"the {kind} store" if kind else "the store"
    try:
        endpoint = StorageOptions.from_env().endpoint
    except ConfigurationError:
        endpoint = None
    return f"S3 at {endpoint}" if endpoint else "AWS S3"
