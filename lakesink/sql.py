"""Quoting for names and values that go into Spark SQL, so no name can change a statement."""

from __future__ import annotations

__all__ = ["delta_path", "quote_identifier", "quote_name", "string_literal"]


def quote_identifier(part: str) -> str:
    """One identifier in backticks, inner backticks doubled: ``a`b`` -> ```a``b```."""
    if not part:
        raise ValueError("an SQL identifier cannot be empty")
    return "`" + part.replace("`", "``") + "`"


def quote_name(name: str) -> str:
    """A possibly qualified catalog name ``db.view``: each dot-separated part quoted."""
    return ".".join(quote_identifier(part) for part in name.split("."))


def delta_path(path: str) -> str:
    """The SQL reference to a Delta table by path: ``delta.`/the/path```."""
    return f"delta.{quote_identifier(path)}"


def string_literal(value: str) -> str:
    """A Spark SQL string literal; backslashes and quotes escaped."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
