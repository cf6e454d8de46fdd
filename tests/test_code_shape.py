"""The package's functions stay short enough to read at once: under 80 lines each,
docstring included (a longer one does several jobs; split it into named steps)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "lakesink"
LIMIT = 80


def _lengths(source: Path) -> list[tuple[int, str]]:
    tree = ast.parse(source.read_text(), filename=str(source))
    return [
        (node.end_lineno - node.lineno + 1, f"{source.relative_to(PACKAGE.parent)}:{node.name}")
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno
    ]


def test_every_function_of_the_package_is_under_80_lines() -> None:
    lengths = [length for source in sorted(PACKAGE.rglob("*.py")) for length in _lengths(source)]
    assert len(lengths) > 500  # the whole package was read
    too_long = sorted((n, where) for n, where in lengths if n >= LIMIT)
    assert not too_long, f"functions of {LIMIT} lines or more: {too_long}"
