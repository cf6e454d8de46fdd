"""The ``lakesink`` subcommands, a module each: its options beside what it does.

A command's module has ``add_parser(commands)``, which adds its parser (or parsers, as
``resolve`` adds commit and abort) to the ``lakesink`` parser's subcommands, its options
and, as the parser's ``func`` default, the function that runs it: called with the parsed
options and the ``Output`` its result goes to, it returns the exit status. The module
imports what is heavy (pyspark, the ops) inside that function, so ``lakesink --help`` and
the commands without Spark stay fast. ``lakesink.cli.COMMANDS`` lists the modules in the
order ``lakesink --help`` lists them; ``common`` holds what several commands share.
"""

from __future__ import annotations

from typing import Protocol

from lakesink.cli.commands.common import Subparsers

__all__ = ["Command"]


class Command(Protocol):
    """A command's module."""

    def add_parser(self, commands: Subparsers) -> None:
        """Add the command's parser, with its options and ``func``, to ``commands``."""
