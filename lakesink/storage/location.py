"""Locations: a local folder or an object-store URI, one spelling for each place.

Every path lakesink takes (a table, the journal, the checkpoint table, a job's state, a
streaming checkpoint location) goes through ``normalize`` once, where it enters, so that
two spellings of one place compare equal: a local path becomes absolute (``file:``
dropped), a URI keeps its scheme, bucket and key. ``s3://`` and ``s3n://`` become
``s3a://``, the scheme Spark's S3 connector owns, so a table written as ``s3://b/t`` and
read as ``s3a://b/t`` is one table to lakesink (delta-rs, which wants ``s3://``, gets its
own spelling from ``lakesink.storage.options``).

Only string work here: no file system is touched, so the engine-free core can use it.
"""

from __future__ import annotations

import os
import posixpath
import re
from pathlib import Path

__all__ = [
    "is_uri",
    "join",
    "name",
    "normalize",
    "parent",
    "relative_to_parent",
    "resolve_relative",
    "scheme",
]

# scheme://rest, as RFC 3986 spells a scheme; a Windows drive ("C:\") has no "//".
_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://(.*)$")
_S3_ALIASES = {"s3": "s3a", "s3n": "s3a"}
# What a location recorded relative to its table starts with (Delta records its own files
# relative to the table's folder the same way).
_SIBLING = "../"


def is_uri(location: str | os.PathLike[str]) -> bool:
    """True for ``scheme://...`` other than ``file://`` (an object store, HDFS, ...)."""
    found = _URI.match(str(location))
    return found is not None and found.group(1).lower() != "file"


def scheme(location: str) -> str | None:
    """The URI scheme of a normalized location (``s3a``, ``gs``, ``abfss``), None if local."""
    found = _URI.match(location)
    return found.group(1).lower() if found and is_uri(location) else None


def normalize(location: str | os.PathLike[str]) -> str:
    """The one spelling of a location: an absolute local path, or a canonical URI.

    Raises:
        ValueError: A URI with no bucket or container (``s3a://``).
    """
    text = os.fspath(location)
    found = _URI.match(text)
    if found is None or found.group(1).lower() == "file":
        local = re.sub(r"^file:(//)?", "", text) if text.lower().startswith("file:") else text
        return str(Path(local).expanduser().resolve())
    kind = found.group(1).lower()
    rest = found.group(2).rstrip("/")
    if not rest or rest.startswith("/"):
        raise ValueError(f"{text!r} names no bucket or container: write {kind}://BUCKET/PATH")
    # "a/./b" and "a//b" name one key to a file system, two to an object store: fold them.
    bucket, _, key = rest.partition("/")
    key = posixpath.normpath(key) if key else ""
    if key.startswith(".."):
        raise ValueError(f"{text!r} climbs above its bucket")
    key = "" if key == "." else key
    return f"{_S3_ALIASES.get(kind, kind)}://{bucket}{'/' + key if key else ''}"


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` appended (``location`` must be normalized)."""
    if is_uri(location):
        return "/".join([location.rstrip("/"), *(p.strip("/") for p in parts)])
    return str(Path(location, *parts))


def parent(location: str) -> str:
    """The folder holding ``location`` (a bucket's root has none: it is its own parent)."""
    if is_uri(location):
        head = location.rpartition("/")[0]
        return location if head.endswith(":/") else head
    return str(Path(location).parent)


def name(location: str) -> str:
    """The last part of ``location``: a table's folder name."""
    return location.rstrip("/").rpartition("/")[2] if is_uri(location) else Path(location).name


def relative_to_parent(location: str, base: str) -> str | None:
    """``../<name>`` when ``location`` sits beside ``base`` (in the same folder), else None.

    What a table records of its journal: a table moved or copied together with the journal
    beside it then still finds it, in its new place.
    """
    if location == base or parent(location) != parent(base) or parent(base) == base:
        return None
    return _SIBLING + name(location)


def resolve_relative(base: str, recorded: str) -> str:
    """The location ``recorded`` names, relative to ``base`` if it is ``../<name>``."""
    if recorded.startswith(_SIBLING):
        return join(parent(base), recorded[len(_SIBLING) :])
    return recorded
