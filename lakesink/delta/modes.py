"""The commit modes, named once (no Spark import: the command line offers them too)."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["COMMIT_MODES", "CommitMode"]

#: How a commit makes rows visible: a MERGE that rewrites them, or a metadata commit that
#: moves their files into the committed partition (``lakesink.delta.committer``).
CommitMode = Literal["merge", "metadata"]
COMMIT_MODES: tuple[CommitMode, ...] = get_args(CommitMode)
