"""The ``lakesink`` command: ``commands`` parses and dispatches, ``vacuum`` is its vacuum job."""

from lakesink.cli.commands import main
from lakesink.cli.exits import exit_process

__all__ = ["entry", "main"]


def entry() -> None:
    """The ``lakesink`` console script: ``main`` as a whole process."""
    exit_process(main())
