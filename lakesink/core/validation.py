"""What a validation run found, as the journal stores it: engine-free records.

The gate that runs a Great Expectations suite on Spark rows (``lakesink.spark.validation``)
makes them; ``lakesink status``, the audit, the Data Docs pages and the table object read
them back from the journal without loading Spark or Great Expectations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal, get_args

__all__ = [
    "POLICIES",
    "FailedExpectation",
    "Policy",
    "ValidationReport",
    "named_columns",
    "subject",
]

#: What a gate does with a checkpoint whose rows fail: abort it, hold it for an operator,
#: or commit it with a warning.
Policy = Literal["abort", "quarantine", "warn"]
POLICIES: tuple[Policy, ...] = get_args(Policy)

# The kwargs through which GX expectations name the columns they read.
_COLUMN_KWARGS = ("column", "column_A", "column_B", "column_list", "column_set")


@dataclass(frozen=True, kw_only=True)
class FailedExpectation:
    """One expectation the rows did not meet.

    Attributes:
        expectation: The expectation type, e.g. ``expect_column_values_to_not_be_null``.
        column: The column it is about, if it names a single one.
        kwargs: The expectation's configuration, JSON-ready.
        observed: What GX reported (observed value, unexpected count and percent, a few
            unexpected values), JSON-ready, every list cut to 10 items.
    """

    expectation: str
    column: str | None
    kwargs: Mapping[str, object]
    observed: Mapping[str, object]

    def summary(self) -> str:
        """A few words on what was wrong, e.g. ``amount min 0.0 < 0.01``."""
        about = subject(self.kwargs)
        metric, _, predicate = self.expectation.removeprefix("expect_").partition("_to_")
        value = self.observed.get("observed_value")
        if value is not None:
            label = metric.removeprefix("column_").removeprefix("table_").replace("_", " ")
            return f"{about} {label} {value}{_outside(value, self.kwargs)}"
        count = self.observed.get("unexpected_count")
        if isinstance(count, int):
            if predicate == "not_be_null":
                return f"{about} {_plural(count, 'null')}"
            fail = "row fails" if count == 1 else "rows fail"
            bounds = f" {_interval(self.kwargs)}" if _has_bounds(self.kwargs) else ""
            return f"{about} {count} {fail} to {predicate.replace('_', ' ')}{bounds}"
        return f"{about} failed {self.expectation}"


@dataclass(frozen=True, kw_only=True)
class ValidationReport:
    """What one run of a suite found in one set of rows.

    Attributes:
        suite: The suite's name.
        policy: The gate's policy, for whoever acts on the report.
        success: Every expectation was met and nothing raised.
        rows: Rows validated (0 if the run failed before they were counted).
        evaluated: Expectations evaluated.
        failed: The expectations that were not met.
        duration_s: Wall time of the run, in seconds.
        error: Set when GX or Spark raised during the run (type and message); ``success``
            is then false.
        result: GX's whole validation result (``ExpectationSuiteValidationResult`` as
            JSON: every expectation with its observed values), which Data Docs render
            (``lakesink.ops.reports``); None when the run did not finish.
    """

    suite: str
    policy: Policy
    success: bool
    rows: int
    evaluated: int
    failed: tuple[FailedExpectation, ...]
    duration_s: float
    error: str | None = None
    result: Mapping[str, object] | None = None

    def to_json(self) -> str:
        """Compact JSON with sorted keys: the string the journal stores."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> ValidationReport:
        """The report :meth:`to_json` wrote.

        Raises:
            ValueError: ``text`` is not JSON (``json.JSONDecodeError``).
            TypeError: The JSON is not a report's fields.
        """
        data = json.loads(text)
        failed = tuple(FailedExpectation(**item) for item in data.pop("failed"))
        return cls(failed=failed, **data)

    def summary(self) -> str:
        """One line for logs and ``lakesink status``.

        ``suite orders_quality failed 2 of 5 expectations on 1000 rows: amount min 0.0 <
        0.01; customer 3 nulls``, ``suite orders_quality passed 5 expectations on 1000
        rows``, or ``suite orders_quality error: ...``.
        """
        parts = []
        if self.error is not None:
            parts.append(f"error: {self.error}")
        if self.failed:
            details = "; ".join(failure.summary() for failure in self.failed)
            parts.append(
                f"failed {len(self.failed)} of {self.evaluated} expectations on "
                f"{_plural(self.rows, 'row')}: {details}"
            )
        if not parts:
            parts.append(
                f"passed {_plural(self.evaluated, 'expectation')} on {_plural(self.rows, 'row')}"
            )
        return f"suite {self.suite} " + "; ".join(parts)


def named_columns(kwargs: Mapping[str, object]) -> list[str]:
    """The columns an expectation's configuration names (not its row condition's)."""
    names: list[str] = []
    for key in _COLUMN_KWARGS:
        value = kwargs.get(key)
        if isinstance(value, str):
            names.append(value)
        elif isinstance(value, (list, tuple, set, frozenset)):
            names.extend(str(name) for name in value)
    return names


def subject(kwargs: Mapping[str, object]) -> str:
    """What an expectation is about, for messages: its columns, else ``table``."""
    return ", ".join(named_columns(kwargs)) or "table"


def _has_bounds(kwargs: Mapping[str, object]) -> bool:
    return kwargs.get("min_value") is not None or kwargs.get("max_value") is not None


def _interval(kwargs: Mapping[str, object]) -> str:
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    return f"[{'-inf' if low is None else low}, {'inf' if high is None else high}]"


def _outside(value: object, kwargs: Mapping[str, object]) -> str:
    """How an observed value misses the expectation's bounds, e.g. `` < 0.01``."""
    if "value" in kwargs:
        return f" != {kwargs['value']}"
    if not _has_bounds(kwargs):
        return ""
    low, high = kwargs.get("min_value"), kwargs.get("max_value")
    if _is_number(value) and _is_number(low) and value < low:  # type: ignore[operator]
        return f" < {low}"
    if _is_number(value) and _is_number(high) and value > high:  # type: ignore[operator]
        return f" > {high}"
    return f" not in {_interval(kwargs)}"


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"
