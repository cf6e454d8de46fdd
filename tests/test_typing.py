"""A user's script type-checks against lakesink's public names: ``mypy --strict`` on the
README's hello world, with lakesink's own annotations (it ships ``py.typed``).

How the test knows the names are really typed, not ``Any``: a script that misuses them
(an attribute ``Table`` lacks, a checkpoint id given as a string) must fail the same check.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def mypy(script: str, folder: Path) -> subprocess.CompletedProcess[str]:
    (folder / "script.py").write_text(script)
    # The editable install hides the package behind an import hook mypy cannot follow;
    # MYPYPATH points it at the sources. lakesink's own internals are not the user's to fix.
    env = {**os.environ, "MYPYPATH": str(REPO)}
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent"]
    command += ["--cache-dir", str(folder / ".mypy"), "script.py"]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def test_the_readme_hello_world_passes_mypy_strict_and_a_misuse_does_not(tmp_path):
    readme = (REPO / "README.md").read_text()
    hello = next(b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "Table(" in b)
    checked = mypy(hello, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr

    misuse = 'import lakesink\nlakesink.Table("t").checkpoint("7")\nlakesink.Table("t").nope()\n'
    refused = mypy(misuse, tmp_path)
    assert refused.returncode == 1
    assert 'Argument 1 to "checkpoint" of "Table" has incompatible type "str"' in refused.stdout
    assert '"Table" has no attribute "nope"' in refused.stdout
