"""The audit's records as pandas DataFrames, for the notebooks' tables and plots."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas

__all__ = ["to_frame"]


def to_frame(records: Iterable[Any], *, record_type: type | None = None) -> pandas.DataFrame:
    """The records (``records``' dataclasses, or ``HistoryEntry``) as a pandas DataFrame.

    Args:
        records: Records of one type.
        record_type: Their type: gives the columns even when there are no records.
    """
    import pandas

    def plain(value: object) -> object:
        return value.value if isinstance(value, Enum) else value

    rows = [
        {name: plain(value) for name, value in dataclasses.asdict(record).items()}
        for record in records
    ]
    columns = [f.name for f in dataclasses.fields(record_type)] if record_type else None
    return pandas.DataFrame(rows, columns=columns)
