"""The wheel users install holds lakesink, and of the test tooling only the in-memory parts;
and the stub that lists lakesink's public names, each of which resolves.

The servers the tests run (``tests/servers/``: S3, a Spark cluster, Kafka) and the fault
injection (``tests/faults.py``) stay in the repository. The packages are found as
setuptools finds them when ``python -m build`` makes the wheel: the
``[tool.setuptools.packages.find]`` table of pyproject.toml, namespace packages included
(setuptools' default there), without building anything.
"""

from __future__ import annotations

import importlib
import re
from fnmatch import fnmatch
from pathlib import Path

import tomllib
from setuptools import find_namespace_packages

REPO = Path(__file__).resolve().parent.parent


def setuptools_settings() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def wheel_packages() -> list[str]:
    return find_namespace_packages(where=str(REPO), **setuptools_settings()["packages"]["find"])


def test_the_wheel_holds_no_test_server_nor_fault_injection():
    packages = wheel_packages()

    assert "lakesink" in packages and "lakesink.core" in packages
    assert [p for p in packages if p.split(".")[0] != "lakesink"] == []
    testing = REPO / "lakesink" / "testing"
    assert sorted(module.name for module in testing.glob("*.py")) == ["__init__.py", "memory.py"]
    # The finder does see the test tooling where a pattern takes it in.
    assert "tests.servers" in find_namespace_packages(where=str(REPO), include=["tests*"])


def test_the_public_names_are_the_stubs_each_from_its_module_and_the_wheel_has_the_stub():
    import lakesink

    stub = (REPO / "lakesink" / "__init__.pyi").read_text()
    listed = re.findall(r"^from ([\w.]+) import (\w+) as \2$", stub, re.M)
    assert sorted(name for _, name in listed) == lakesink.__all__
    for module, name in listed:
        assert getattr(lakesink, name) is getattr(importlib.import_module(module), name)
    data = setuptools_settings()["package-data"]["lakesink"]
    assert any(fnmatch("__init__.pyi", pattern) for pattern in data), data
