"""``python -m lakesink.cli``: the ``lakesink`` command."""

from lakesink.cli import entry

entry()
