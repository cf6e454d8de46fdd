"""The few file operations lakesink makes beside Delta, on a local folder or an object store.

Delta tables are read and written by Spark and delta-rs; what is left is small: whether a
folder holds anything or a Delta table, the names in a folder (a streaming query's commit
log), and the lock or lease files that fence a second live writer or job. On a URI these
go through ``obstore`` (Python bindings of ``object_store``, the crate delta-rs commits
with), configured from the same ``StorageOptions`` as Spark and delta-rs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import uuid
from datetime import datetime, timedelta, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, cast

from lakesink.errors import TableNotFoundError
from lakesink.storage.access import access_error, not_writable, translated
from lakesink.storage.location import is_uri, join
from lakesink.storage.options import StorageOptions

__all__ = [
    "check_reachable",
    "copy_file",
    "create_file",
    "entry_names",
    "file_exists",
    "file_times",
    "folder_names",
    "has_files",
    "is_delta_table",
    "object_store",
    "place_file",
    "read_bytes",
    "remove_file",
    "remove_folder",
    "require_delta_table",
    "size_of",
    "subfolder_names",
    "write_bytes",
]


# A probe before Spark starts (``check_reachable``) gives up after
# one retry and a few seconds: a client's defaults (10 retries, 3 minutes) suit a writer
# riding out a blip, not an operator's command against an endpoint that is wrong.
_QUICK_RETRY = {"max_retries": 1, "retry_timeout": timedelta(seconds=5)}
_QUICK_TIMEOUTS = {"connect_timeout": "3s", "timeout": "10s"}


@lru_cache(maxsize=32)
def _store(root: str, options: StorageOptions, quick: bool = False) -> Any:
    from obstore.store import from_url

    # object_store takes delta-rs's option names (lower case) and its s3:// spelling; obstore
    # wants plain HTTP as a client option.
    config = {k.lower(): v for k, v in options.deltars_options(root).items()}
    allow_http = config.pop("aws_allow_http", "false") == "true"
    # The keys are those of whichever store the URL names (S3, GCS, Azure); obstore types
    # config per store, as a TypedDict.
    return from_url(
        options.deltars_uri(root),
        config=cast(Any, config),
        client_options=cast(Any, {"allow_http": allow_http, **(_QUICK_TIMEOUTS if quick else {})}),
        retry_config=cast(Any, _QUICK_RETRY) if quick else None,
    )


def object_store(
    location: str, options: StorageOptions | None = None, *, quick: bool = False
) -> tuple[Any, str]:
    """An ``obstore`` store for the bucket of the URI ``location``, and its key there.

    ``quick``: a store that gives up after one retry and a few seconds (for a probe).
    """
    scheme, _, rest = location.partition("://")
    bucket, _, key = rest.partition("/")
    return _store(f"{scheme}://{bucket}", options or StorageOptions.from_env(), quick), key


# What makes a Delta log hold a table: a commit or a checkpoint. A log folder with neither
# holds at most the temporary file of a first commit cut short (a crash while the table
# was being created): no table.
_DELTA_LOG_ENTRY = re.compile(r"^\d{20}\.(json|checkpoint(\.\d+\.\d+)?\.parquet)$")


def check_reachable(location: str, *, write: bool = False, create: bool = False) -> None:
    """Ask the store of ``location`` once whether it answers, and lets this process in.

    On an object store: one listing of the location, with one retry and short timeouts (a
    client's own retries take minutes to give up on an endpoint that does not answer). On
    local disk: every folder on the way must be one this user may enter; with ``write``,
    the location must be writable if it exists, and with ``create`` the folder it would be
    made in if it does not (a missing table is another error, said by whoever needs it).
    Nothing is created.

    Raises:
        StorageAccessError: The store refused, or did not answer.
    """
    if is_uri(location):
        store, key = object_store(location, quick=True)
        with translated(location):
            store.list_with_delimiter(f"{key}/" if key else None)
        return
    path = Path(location)
    try:
        existing = next(p for p in (path, *path.parents) if _exists(p))
        if existing == path and path.is_dir():
            os.listdir(path)
    except OSError as error:
        found = access_error(error, location)
        if found is None:
            raise
        raise found from error
    checked = write if existing == path else create
    if checked and not os.access(existing, os.W_OK | os.X_OK):
        raise not_writable(location, str(existing))


def _exists(path: Path) -> bool:
    """Whether ``path`` exists; a refusal to look (no permission, a file on the way) raises."""
    try:
        path.stat()
    except FileNotFoundError:
        return False
    return True


def has_files(location: str, *, but_uncommitted_log: bool = False) -> bool:
    """True when the folder ``location`` exists and holds anything.

    With ``but_uncommitted_log``, a Delta log with no commit in it (what a table creation cut
    short leaves) counts as nothing: a new table may be created there.

    Raises:
        StorageAccessError: The store refused or did not answer (as every function here).
    """
    with translated(location):
        if not is_uri(location):
            folder = Path(location)
            names = {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        else:
            store, key = object_store(location)
            listed = store.list_with_delimiter(_prefix(key))
            names = {o["path"].rpartition("/")[2] for o in _contents(listed, key)}
            names |= {p.rstrip("/").rpartition("/")[2] for p in listed["common_prefixes"]}
    if but_uncommitted_log and "_delta_log" in names and not is_delta_table(location):
        names.discard("_delta_log")
    return bool(names)


def is_delta_table(location: str) -> bool:
    """True when ``location`` holds a Delta log with at least one commit or checkpoint."""
    return any(_DELTA_LOG_ENTRY.match(n) for n in folder_names(join(location, "_delta_log")))


def require_delta_table(location: str) -> None:
    """Refuse a location that holds no Delta table, before anything starts a JVM.

    Raises:
        TableNotFoundError: No Delta log there; the message names the location.
        StorageAccessError: The store refused or did not answer.
    """
    if not is_delta_table(location):
        raise TableNotFoundError(
            f"no Delta table at {location}: pass the folder of a table written by lakesink"
        )


def folder_names(location: str) -> list[str]:
    """The names of the files directly in the folder ``location`` (none if it is absent)."""
    return _listing(location)[0]


def subfolder_names(location: str) -> list[str]:
    """The names of the folders directly in the folder ``location`` (none if it is absent)."""
    return _listing(location)[1]


def entry_names(location: str) -> list[str]:
    """The names of the files and folders directly in the folder ``location``, from one
    listing (none if it is absent)."""
    files, folders = _listing(location)
    return sorted(files + folders)


def file_times(location: str) -> dict[str, datetime]:
    """When each file directly in the folder ``location`` was last written (none if it is
    absent)."""
    with translated(location):
        if not is_uri(location):
            try:
                with os.scandir(location) as found:
                    return {
                        e.name: datetime.fromtimestamp(e.stat().st_mtime, tz=timezone.utc)
                        for e in found
                        if e.is_file()
                    }
            except (FileNotFoundError, NotADirectoryError):
                return {}
        store, key = object_store(location)
        listed = store.list_with_delimiter(_prefix(key))
        return {o["path"].rpartition("/")[2]: o["last_modified"] for o in _contents(listed, key)}


def _listing(location: str) -> tuple[list[str], list[str]]:
    """The names of the files, and of the folders, directly in the folder ``location``.

    A local folder is read with ``scandir``, which tells files from folders without a
    ``stat`` of each: a table's log holds thousands of entries.
    """
    with translated(location):
        if not is_uri(location):
            try:
                with os.scandir(location) as found:
                    entries = list(found)
            except (FileNotFoundError, NotADirectoryError):
                return [], []
            return (
                sorted(e.name for e in entries if e.is_file()),
                sorted(e.name for e in entries if e.is_dir()),
            )
        store, key = object_store(location)
        listed = store.list_with_delimiter(_prefix(key))
        return (
            sorted(o["path"].rpartition("/")[2] for o in _contents(listed, key)),
            sorted(p.rstrip("/").rpartition("/")[2] for p in listed["common_prefixes"]),
        )


def _prefix(key: str) -> str | None:
    # A folder's objects are listed by "key/"; a bucket's root by no prefix at all.
    return f"{key}/" if key else None


def _contents(listed: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The objects of a folder's listing but the folder's own marker (``key/``, which
    Hadoop's S3A writes for a folder it made or emptied, and object_store lists as
    ``key``): it is the folder, not something in it."""
    return [o for o in listed["objects"] if o["path"].rstrip("/") != key]


def size_of(location: str) -> int:
    """The size in bytes of the file ``location`` (local or on an object store)."""
    with translated(location):
        if not is_uri(location):
            return os.stat(location).st_size
        from obstore import head

        store, key = object_store(location)
        return int(head(store, key)["size"])


def file_exists(location: str) -> bool:
    """Whether the file ``location`` exists (local or on an object store)."""
    with translated(location):
        if not is_uri(location):
            return _exists(Path(location))
        from obstore import head
        from obstore.exceptions import NotFoundError

        store, key = object_store(location)
        try:
            head(store, key)
        except (FileNotFoundError, NotFoundError):  # obstore raises either for a 404
            return False
        return True


def copy_file(source: str, target: str) -> None:
    """Copy the file ``source`` to ``target`` (either local or on an object store)."""
    write_bytes(target, read_bytes(source))


def read_bytes(location: str) -> bytes:
    """The whole content of the file ``location``."""
    with translated(location):
        if not is_uri(location):
            return Path(location).read_bytes()
        from obstore import get

        store, key = object_store(location)
        return bytes(get(store, key).bytes())


def write_bytes(location: str, content: bytes) -> None:
    """Write the file ``location`` whole (its local folder is made if missing)."""
    with translated(location):
        if not is_uri(location):
            Path(location).parent.mkdir(parents=True, exist_ok=True)
            Path(location).write_bytes(content)
            return
        from obstore import put

        store, key = object_store(location)
        put(store, key, content)


def remove_file(location: str) -> None:
    """Delete the file ``location`` (local or on an object store)."""
    with translated(location):
        if not is_uri(location):
            Path(location).unlink()
            return
        from obstore import delete

        store, key = object_store(location)
        delete(store, key)


def place_file(source: str, target: str) -> None:
    """Make the file ``source`` also be at ``target`` without writing its bytes again: a hard
    link on local disk, a copy inside the store (no byte through this process) on an object
    store. A ``target`` already there (placed before) is left as it is."""
    with translated(source):
        if not is_uri(source):
            Path(target).parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(FileExistsError):
                os.link(source, target)
            return
        from obstore import copy

        store, source_key = object_store(source)
        _, target_key = object_store(target)
        copy(store, source_key, target_key)


def remove_folder(location: str) -> None:
    """Delete the folder ``location`` and everything in it (on an object store: every
    object under it)."""
    with translated(location):
        if not is_uri(location):
            shutil.rmtree(location, ignore_errors=True)
            return
        from obstore import delete

        store, key = object_store(location)
        for chunk in store.list(f"{key}/"):
            delete(store, [entry["path"] for entry in chunk])


def create_file(location: str, content: bytes) -> None:
    """Write the file ``location`` whole, only if it does not exist (readers never see it
    half written).

    Raises:
        FileExistsError: It exists; it was left as it was.
    """
    with translated(location):
        if not is_uri(location):
            target = Path(location)
            draft = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
            draft.write_bytes(content)
            try:
                os.link(draft, target)  # fails if the target exists, unlike a rename
            finally:
                draft.unlink()
            return
        from obstore import put
        from obstore.exceptions import AlreadyExistsError

        store, key = object_store(location)
        try:
            put(store, key, content, mode="create")
        except AlreadyExistsError:
            raise FileExistsError(location) from None
