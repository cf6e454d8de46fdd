"""How a command prints its result: as text for a person, or as JSON with ``--json``.

A command hands its result to the ``Output`` chosen once for its run, as data together
with how to say it as text; how data is written as JSON (the indent, a datetime or a
dataclass) is decided here alone, so every command's ``--json`` reads alike.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Callable

__all__ = ["JsonOutput", "Output", "TextOutput"]


class Output(ABC):
    """Where a command's result goes: stdout, in one of two forms."""

    @abstractmethod
    def show(self, data: object, text: Callable[[], str]) -> None:
        """Print a result: ``data`` (dicts, lists, dataclasses), or what ``text`` says of it.

        ``text`` is called only for the text form; it may read richer objects than
        ``data`` holds (a datetime formatted its own way, a report's summary).
        """


class TextOutput(Output):
    """The result as its command says it, for a person."""

    def show(self, data: object, text: Callable[[], str]) -> None:
        said = text()
        if said:  # an empty list says nothing, rather than an empty line
            # Flushed: a long-running command (serve) says its result before it waits.
            print(said, flush=True)


class JsonOutput(Output):
    """The result's data as JSON, for a program."""

    def show(self, data: object, text: Callable[[], str]) -> None:
        print(json.dumps(data, indent=2, default=_plain), flush=True)


def _plain(value: object) -> object:
    """What JSON has no form of: a dataclass as its fields, anything else (a datetime, a
    path) as its ``str``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)
