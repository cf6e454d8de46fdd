"""The wheel users install holds lakesink, and of the test tooling only the in-memory parts.

The servers the tests run (``tests/servers/``: S3, a Spark cluster, Kafka) and the fault
injection (``tests/faults.py``) stay in the repository. The packages are found as
setuptools finds them when ``python -m build`` makes the wheel: the
``[tool.setuptools.packages.find]`` table of pyproject.toml, namespace packages included
(setuptools' default there), without building anything.
"""

from __future__ import annotations

from pathlib import Path

import tomllib
from setuptools import find_namespace_packages

REPO = Path(__file__).resolve().parent.parent


def wheel_packages() -> list[str]:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    return find_namespace_packages(where=str(REPO), **settings["packages"]["find"])


def test_the_wheel_holds_no_test_server_nor_fault_injection():
    packages = wheel_packages()

    assert "lakesink" in packages and "lakesink.core" in packages
    assert [p for p in packages if p.split(".")[0] != "lakesink"] == []
    testing = REPO / "lakesink" / "testing"
    assert sorted(module.name for module in testing.glob("*.py")) == ["__init__.py", "memory.py"]
    # The finder does see the test tooling where a pattern takes it in.
    assert "tests.servers" in find_namespace_packages(where=str(REPO), include=["tests*"])
