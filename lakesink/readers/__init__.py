"""Readers of lakesink tables' committed rows, one module per engine: ``spark`` (a
DataFrame, a downstream stream, the catalog views, a group's tables at one cut, the rows a
check audits) and ``deltars`` (Arrow through delta-rs, no JVM: DuckDB, polars, pandas).

Which rows are committed is the table format's to say (``lakesink.tables.format``); the
readers take it in their engine's form.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what the old path held, for type checkers
    from lakesink.readers.deltars import *  # noqa: F403


def moved(old: str, new: str) -> Callable[[str], Any]:
    """The ``__getattr__`` of the module ``old``, whose public names moved to the module
    ``new``: each is handed out from there, with a DeprecationWarning, for one release."""

    def __getattr__(name: str) -> Any:
        module = None if name.startswith("_") else importlib.import_module(new)
        if module is None or name not in module.__all__:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        warnings.warn(
            f"{old}.{name} is deprecated and goes in the next release: use {new}.{name}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(module, name)

    return __getattr__


# This package was the module of the Arrow reader (lakesink.arrow).
__getattr__ = moved(__name__, "lakesink.readers.deltars")
