"""Moved to ``lakesink.readers.spark``: its names work from here, with a DeprecationWarning,
for one release."""

from typing import TYPE_CHECKING

from lakesink.readers import moved

if TYPE_CHECKING:  # what this module held, for type checkers
    from lakesink.readers.spark import *  # noqa: F403

__getattr__ = moved(__name__, "lakesink.readers.spark")
