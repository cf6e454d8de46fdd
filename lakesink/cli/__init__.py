"""The ``lakesink`` command: ``commands`` parses and dispatches, ``vacuum`` is its vacuum job."""

from lakesink.cli.commands import main

__all__ = ["main"]
