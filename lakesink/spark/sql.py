"""Quoting and checking of names and values that go into Spark SQL, Delta and file names.

A sink id, view or table name, path or column name either works exactly (quoted, it can
neither break a statement nor change what it does) or is refused up front with a
``ConfigurationError`` that names it and says why.

Besides quotes, Spark SQL text has one more trap: with ``spark.sql.variable.substitute``
(on by default) Spark replaces ``${...}`` anywhere in a statement, inside quotes and
backticks too, before it parses it. String literals therefore spell ``$`` as an escape,
and names holding ``${`` are refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from lakesink.errors import ConfigurationError

__all__ = [
    "DELTA_COLUMN_FORBIDDEN",
    "check_column_names",
    "check_file_name_part",
    "check_path",
    "delta_path",
    "quote_identifier",
    "quote_name",
    "string_literal",
]

# Delta refuses these in column names unless the table uses column mapping.
DELTA_COLUMN_FORBIDDEN = " ,;{}()\n\t="
# Spark's session catalog takes only these as database, table and view names.
_CATALOG_PART = re.compile(r"[A-Za-z0-9_]+")
_SUBSTITUTED = "${"


def quote_identifier(part: str, *, what: str = "SQL identifier") -> str:
    """One identifier in backticks, inner backticks doubled: ``a`b`` -> ```a``b```.

    Raises:
        ConfigurationError: ``part`` is empty or holds ``${``.
    """
    if not part:
        raise ConfigurationError(f"the {what} is empty; give it a name")
    _check_not_substituted(part, what)
    return "`" + part.replace("`", "``") + "`"


def quote_name(name: str, *, what: str = "catalog name") -> str:
    """A possibly qualified catalog name ``view``, ``db.view`` or ``catalog.db.view``.

    Each dot-separated part is quoted on its own (so keywords such as ``select`` work) and
    must be what Spark's session catalog takes: letters, digits and ``_``.

    Raises:
        ConfigurationError: A part is empty (``a..b``, ``.a``, ``a.``) or holds another
            character, or there are more than three parts.
    """
    parts = name.split(".")
    if len(parts) > 3 or not all(_CATALOG_PART.fullmatch(part) for part in parts):
        raise ConfigurationError(
            f"the {what} {name!r} is not view, db.view or catalog.db.view with parts of "
            "letters, digits and _ only (what Spark's catalog takes); choose another name"
        )
    return ".".join(quote_identifier(part, what=what) for part in parts)


def delta_path(path: str) -> str:
    """The SQL reference to a Delta table by path: ``delta.`/the/path```."""
    return f"delta.{quote_identifier(path, what='table path')}"


def string_literal(value: str) -> str:
    """A Spark SQL string literal of exactly ``value``, whatever characters it holds.

    Backslashes and quotes are escaped, and ``$`` is spelled ``\\u0024`` so that variable
    substitution finds no ``${``. Relies on Spark's default
    ``spark.sql.parser.escapedStringLiterals=false``.
    """
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("$", "\\u0024")
    return "'" + escaped + "'"


def check_path(path: str, *, what: str = "table path") -> str:
    """Return ``path`` if lakesink can put it into Delta's SQL and APIs; refuse it otherwise.

    Quotes, spaces, semicolons, dashes, keywords, glob characters and non-ASCII letters
    all work. A backtick does not: Delta's own table builder (``DeltaTable.createIfNotExists``)
    puts the path into SQL unquoted, so it fails to parse; ``${`` would be substituted in
    the SQL that names the table by path; a NUL is no file name at all.

    Raises:
        ConfigurationError: ``path`` is empty or holds a backtick, ``${`` or a NUL.
    """
    if not path:
        raise ConfigurationError(f"the {what} is empty; give a folder")
    for char, name in (("`", "a backtick (`)"), ("\0", "a NUL character")):
        if char in path:
            raise ConfigurationError(
                f"the {what} {path!r} holds {name}, which Delta cannot take in a table "
                "path; choose a folder name without it"
            )
    _check_not_substituted(path, what)
    return path


def check_column_names(names: Iterable[str], *, what: str = "the schema") -> None:
    """Refuse column names a Delta table without column mapping cannot have.

    Raises:
        ConfigurationError: A name is empty or holds a space or one of ``,;{}()=``, a
            newline or a tab; the message names every such column.
    """
    bad = [n for n in names if not n or any(c in DELTA_COLUMN_FORBIDDEN for c in n)]
    # No "${" either: "{" is among the characters Delta refuses.
    if bad:
        raise ConfigurationError(
            f"{what} has column name(s) {', '.join(repr(n) for n in bad)}: Delta tables "
            f"refuse empty names and the characters {DELTA_COLUMN_FORBIDDEN!r} in column "
            "names; rename those columns (e.g. with underscores)"
        )


def check_file_name_part(value: str, *, what: str) -> str:
    """Return ``value`` if it can be part of one file name (a lock file's); refuse it otherwise.

    Raises:
        ConfigurationError: ``value`` is empty, ``.`` or ``..``, or holds a path separator
            or a NUL, so it would name another folder or no file at all.
    """
    if value in ("", ".", "..") or any(c in value for c in "/\\\0"):
        raise ConfigurationError(
            f"the {what} {value!r} cannot be part of a file name (it names lock files): "
            "use no '/', '\\' or NUL, and not '', '.' or '..'"
        )
    return value


def _check_not_substituted(text: str, what: str) -> None:
    if _SUBSTITUTED in text:
        raise ConfigurationError(
            f"the {what} {text!r} holds '${{', which Spark SQL replaces with a variable "
            "(spark.sql.variable.substitute) even inside quotes; choose a name without it"
        )
