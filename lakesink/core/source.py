"""Where a job's input comes from: batches read from an opaque, serialisable position.

A source never keeps what it has consumed itself: the coordinator records the position
after each batch with the checkpoint that consumed it, in the same atomic record, and a
restarted job resumes the source from the last completed checkpoint's position. So a
batch is consumed exactly once when its checkpoint completes, and read again otherwise.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Batch", "Quarantined", "Source"]

DataT = TypeVar("DataT")


@dataclass(frozen=True)
class Batch:
    """What the source offers next, not read yet.

    Attributes:
        items: What the batch consists of (file names, offset ranges), in reading order;
            recorded with the checkpoint.
        position: The source's position once this batch is consumed. Opaque to everyone
            but the source (JSON text, say), and stored as is.
        remaining: Items still waiting after this batch, if the source knows.
    """

    items: tuple[str, ...]
    position: str
    remaining: int | None = None


@dataclass(frozen=True)
class Quarantined:
    """An item of a batch that could not be read, set aside with the reason."""

    item: str
    reason: str


class Source(ABC, Generic[DataT]):
    """An input read in batches, resumable from a position the coordinator stores."""

    @abstractmethod
    def next_batch(self, position: str | None, *, limit: int) -> Batch | None:
        """At most ``limit`` items after ``position`` (None: the start), or None if none.

        Cheap and without side effects: a job may ask again before it takes the batch.
        """

    @abstractmethod
    def read(self, batch: Batch) -> tuple[DataT, tuple[Quarantined, ...]]:
        """The batch's data, and the items set aside because they cannot be read."""
