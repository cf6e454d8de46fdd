"""The commands' one output layer: the same result as text, or as JSON with ``--json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from lakesink.cli.output import JsonOutput, TextOutput


@dataclass
class Plan:
    table: str
    rows: int


PLAN = Plan("lake/orders", 3)
RESULT = {"plan": PLAN, "at": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc), "items": ["a"]}


def test_text_is_what_the_command_says(capsys):
    TextOutput().show(RESULT, lambda: f"{PLAN.table}: {PLAN.rows} rows")

    assert capsys.readouterr().out == "lake/orders: 3 rows\n"


def test_json_is_the_data_indented_with_dataclasses_and_datetimes_written_out(capsys):
    def text() -> str:
        raise AssertionError("the JSON form asked for the text")

    JsonOutput().show(RESULT, text)

    printed = capsys.readouterr().out
    assert json.loads(printed) == {
        "plan": {"table": "lake/orders", "rows": 3},
        "at": "2026-01-02 03:04:05+00:00",
        "items": ["a"],
    }
    assert printed.startswith('{\n  "plan": {\n    "table": "lake/orders",\n')
    assert printed.endswith('\n  "items": [\n    "a"\n  ]\n}\n')


def test_an_empty_text_prints_nothing_and_empty_json_prints_its_value(capsys):
    TextOutput().show([], lambda: "\n".join([]))
    assert capsys.readouterr().out == ""
    JsonOutput().show([], lambda: "")
    assert capsys.readouterr().out == "[]\n"
