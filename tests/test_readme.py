"""The README's hello world prints what the README says it prints, run as a user would.

How the test knows: the README's block is executed as is in an empty folder, with the
suite's Spark session (``lakesink.spark_session()`` returns it), and what it printed is
compared line by line with the README's ``text`` block that follows "It prints:".
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def hello_world() -> tuple[str, list[str]]:
    """The README's hello world, and the lines it says the hello world prints."""
    text = README.read_text()
    hello = next(b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "Table(" in b)
    shown = re.search(r"It prints:\n\n```text\n(.*?)```", text, re.S)
    assert shown, "the README shows no output of its hello world"
    return hello, shown.group(1).splitlines()


def test_the_hello_world_prints_what_the_readme_shows(spark, tmp_path, monkeypatch, capsys):
    hello, shown = hello_world()
    monkeypatch.chdir(tmp_path)

    exec(compile(hello, "README.md", "exec"), {})

    assert capsys.readouterr().out.splitlines() == shown
