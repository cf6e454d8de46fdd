"""lakesink: exactly-once, two-phase-commit writes from PySpark into Delta Lake tables.

What a user needs is importable from here: ``Table`` (a lakesink table: its checkpoints,
rows as of a checkpoint, operator actions), ``DeltaSink`` and ``StreamingSink`` (writing),
``spark_session``, the readers ``committed`` (Spark) and ``arrow`` (no JVM), the options
and every exception. ``lakesink.core`` is the engine-free protocol for implementers of a
new sink or driver.

The names are listed once, in ``__init__.pyi`` beside this file (where type checkers read
them), and each is imported from its module when first used: the Spark-bound ones must not
pull pyspark into ``import lakesink.core``. A new public name is one line there.
"""

import ast
import importlib
from pathlib import Path
from typing import Any

__version__ = "0.2.0"


def _public_names() -> dict[str, str]:
    """Each name the stub re-exports, and the module it comes from."""
    stub = ast.parse((Path(__file__).parent / "__init__.pyi").read_text())
    return {
        alias.asname or alias.name: node.module
        for node in stub.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


_PUBLIC = _public_names()
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        try:
            module = importlib.import_module(_PUBLIC[name])
        except ModuleNotFoundError as exc:
            if (exc.name or "").split(".")[0] != "pyspark":
                raise
            # lakesink brings no Spark of its own (an environment may have one already).
            raise ModuleNotFoundError(
                f"lakesink.{name} needs pyspark, which is not installed: pip install "
                "'lakesink[spark]' (Spark on this machine) or 'lakesink[connect]' (a Spark "
                "Connect client)",
                name=exc.name,
            ) from exc
        value = getattr(module, name)
        globals()[name] = value  # once: later uses find it without this call
        return value
    raise AttributeError(f"module 'lakesink' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
