"""The audit gate: a Great Expectations suite run on a checkpoint's pending rows.

Write-Audit-Publish. Pre-commit writes a transaction's rows into the target table masked;
before the commit makes them visible, the sink hands exactly those rows (user columns only)
to :meth:`ValidationGate.validate` and gets a :class:`ValidationReport` back. The gate's
policy says what the sink does with a failed report: ``abort`` the transaction,
``quarantine`` it (hold it masked for an operator), or ``warn`` and commit anyway. This
module only runs the suite and reports; the sink applies the policy and journals the report
(``ValidationReport.to_json``).

A run that GX or Spark cannot finish is a report too (``success`` false, ``error`` set),
never an exception: the sink then holds the checkpoint instead of crashing mid-protocol.

great_expectations is imported only when a gate is made: importing it takes seconds, and
reading reports back (``lakesink status``) needs none of it.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from pyspark import StorageLevel
from pyspark.sql import DataFrame

from lakesink.core.validation import (
    POLICIES,
    FailedExpectation,
    Policy,
    ValidationReport,
    named_columns,
    subject,
)
from lakesink.errors import ValidationSuiteError

if TYPE_CHECKING:
    from great_expectations.core import ExpectationSuite, ExpectationSuiteValidationResult
    from great_expectations.core.validation_definition import ValidationDefinition
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

__all__ = ["ValidationGate", "import_gx"]

log = logging.getLogger(__name__)


# Reports are journaled for every checkpoint: keep each one small.
_MAX_ITEMS = 10
_MAX_TEXT = 300
# SUMMARY gives counts and a few unexpected values; COMPLETE would collect every bad row.
_RESULT_FORMAT = {"result_format": "SUMMARY", "partial_unexpected_count": _MAX_ITEMS}


@dataclass(frozen=True, kw_only=True)
class ValidationGate:
    """A GX expectation suite and the policy for rows that fail it.

    The gate keeps its own ephemeral GX context, made on the first :meth:`validate` and
    reused after; a copy of the suite is registered there, so the caller's suite object is
    never bound to or changed by it, and gates in one process never share GX names.

    Args:
        suite: The expectations, naming columns by the table's user column names.
        policy: ``abort``, ``quarantine`` or ``warn``: what the sink does with a failed run.

    Raises:
        ValidationSuiteError: ``policy`` is none of the three.
        TypeError: ``suite`` is not a GX ``ExpectationSuite``.
    """

    suite: ExpectationSuite
    policy: Policy = "abort"
    _runner: _SuiteRunner = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValidationSuiteError(
                f"unknown validation policy {self.policy!r}: use one of {', '.join(POLICIES)}"
            )
        gx = import_gx()
        if not isinstance(self.suite, gx.ExpectationSuite):
            raise TypeError(f"suite must be a GX ExpectationSuite, not {type(self.suite)!r}")
        object.__setattr__(self, "_runner", _SuiteRunner(self.suite))

    @classmethod
    def from_file(cls, path: str | Path, *, policy: Policy = "abort") -> ValidationGate:
        """Load a GX suite JSON file, as GX 1.x writes it (``ExpectationSuite.to_json_dict()``).

        Args:
            path: The suite file.
            policy: See the class.

        Raises:
            ValidationSuiteError: The file is missing or unreadable, is not JSON, is not a
                suite, or has an expectation of an unknown type or with wrong kwargs (every
                bad expectation is named), or ``policy`` is unknown.
        """
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ValidationSuiteError(
                f"cannot read expectation suite file {path}: {error.strerror or error}; "
                "pass the path of a suite JSON file (ExpectationSuite.to_json_dict())"
            ) from error
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValidationSuiteError(
                f"expectation suite file {path} is not valid JSON: {error}; "
                "write it with ExpectationSuite.to_json_dict()"
            ) from error
        return cls(suite=_suite_from_dict(data, source=path), policy=policy)

    def check_columns(self, columns: Sequence[str]) -> None:
        """Refuse a suite that names columns the table lacks, before any row is written.

        The columns an expectation is about and those of its row condition are checked; a
        pass-through row condition (a Spark SQL string) is not parsed.

        Args:
            columns: The table's user columns (without the hidden ``_lakesink_`` ones).
                Names match exactly, as GX matches them.

        Raises:
            ValidationSuiteError: Naming each expectation and the missing column it uses.
        """
        present = set(columns)
        missing = [
            f"{expectation.expectation_type} uses {name!r}"
            for expectation in self.suite.expectations
            for name in _read_columns(expectation.configuration.kwargs)
            if name not in present
        ]
        if missing:
            raise ValidationSuiteError(
                f"expectation suite {self.suite.name!r} names columns the table lacks: "
                f"{'; '.join(missing)}. The table has {', '.join(columns) or 'no columns'}: "
                "fix the suite's column names or add the columns to the table"
            )

    def validate(self, frame: DataFrame) -> ValidationReport:
        """Run the suite on exactly these rows (the caller passes only the pending ones).

        Never raises for a GX or Spark failure during the run: that is a report with
        ``success`` false and ``error`` set.

        Args:
            frame: The rows, with the user columns only.

        Raises:
            TypeError: ``frame`` is not a Spark DataFrame.
        """
        if not isinstance(frame, DataFrame):
            raise TypeError(f"validate needs a Spark DataFrame, not {type(frame)!r}")
        started = time.monotonic()
        rows = 0
        cached_here = False
        try:
            # GX reads the rows in a dozen Spark jobs: cache them for the run. (GX's own
            # persist option never unpersists, which would pin every checkpoint's rows.)
            if frame.storageLevel == StorageLevel.NONE:
                frame.persist()
                cached_here = True
            rows = frame.count()
            result = self._runner.run(frame)
        except Exception as error:  # the contract: a run that cannot finish is a report
            log.warning("validation with suite %s failed to run", self.suite.name, exc_info=True)
            report = self._report(
                started=started, rows=rows, error=_short(f"{type(error).__name__}: {error}")
            )
        else:
            report = self._report_from(result, started=started, rows=rows)
        finally:
            if cached_here:
                frame.unpersist()
        log.info("validation: %s", report.summary())
        return report

    def _report_from(
        self, result: ExpectationSuiteValidationResult, *, started: float, rows: int
    ) -> ValidationReport:
        failed = []
        errors = []
        for outcome in result.results:
            # GX fills in the configuration of every result of a suite run.
            config = cast("ExpectationConfiguration", outcome.expectation_config)
            kwargs = _json_ready({k: v for k, v in config.kwargs.items() if k != "batch_id"})
            raised = _raised(outcome.exception_info)
            if raised:
                errors.append(f"{config.type} on {subject(kwargs)}: {'; '.join(raised)}")
            elif not outcome.success:
                failed.append(
                    FailedExpectation(
                        expectation=config.type,
                        column=kwargs.get("column"),
                        kwargs=kwargs,
                        observed=_json_ready(dict(outcome.result)),
                    )
                )
        return self._report(
            started=started,
            rows=rows,
            success=bool(result.success) and not errors,
            evaluated=result.statistics["evaluated_expectations"],
            failed=tuple(failed),
            error="; ".join(errors) or None,
            result=result.to_json_dict(),  # type: ignore[no-untyped-call]  # GX: no annotations
        )

    def _report(
        self,
        *,
        started: float,
        rows: int,
        success: bool = False,
        evaluated: int = 0,
        failed: tuple[FailedExpectation, ...] = (),
        error: str | None = None,
        result: Mapping[str, object] | None = None,
    ) -> ValidationReport:
        return ValidationReport(
            suite=self.suite.name,
            policy=self.policy,
            success=success,
            rows=rows,
            evaluated=evaluated,
            failed=failed,
            duration_s=round(time.monotonic() - started, 3),
            error=error,
            result=result,
        )


class _SuiteRunner:
    """A gate's GX state: an ephemeral context holding a copy of the suite and a
    whole-DataFrame batch definition, made on first use (GX contexts are slow to make)."""

    def __init__(self, suite: ExpectationSuite) -> None:
        self._suite = suite
        self._definition: ValidationDefinition | None = None
        self._context: Any = None  # the GX context _build made (gx.get_context: untyped)
        self._lock = threading.Lock()  # one GX run at a time per context

    def run(self, frame: DataFrame) -> ExpectationSuiteValidationResult:
        with self._lock:
            if self._definition is None:
                self._definition = self._build()
            result = self._definition.run(
                batch_parameters={"dataframe": frame}, result_format=_RESULT_FORMAT
            )
            # The ephemeral context keeps every result in memory; the report is ours now.
            store = self._context.validation_results_store
            for key in store.list_keys():
                store.remove_key(key)
            return result

    def _build(self) -> ValidationDefinition:
        gx = import_gx()
        from great_expectations.data_context.types.base import (
            DataContextConfig,
            InMemoryStoreBackendDefaults,
            ProgressBarsConfig,
        )

        context = gx.get_context(
            mode="ephemeral",
            project_config=DataContextConfig(
                store_backend_defaults=InMemoryStoreBackendDefaults(),
                analytics_enabled=False,
                progress_bars=ProgressBarsConfig(globally=False),
            ),
        )
        tag = uuid.uuid4().hex[:12]
        batch = (
            context.data_sources.add_spark(f"lakesink-{tag}", persist=False)
            .add_dataframe_asset(f"pending-{tag}")
            .add_batch_definition_whole_dataframe("all-rows")
        )
        # copy.copy drops an expectation's id, so it can join a suite of this context.
        suite = context.suites.add(
            gx.ExpectationSuite(
                name=self._suite.name,
                expectations=[copy.copy(e) for e in self._suite.expectations],
                suite_parameters=copy.deepcopy(self._suite.suite_parameters),
                meta=copy.deepcopy(self._suite.meta),
            )
        )
        self._context = context
        return cast(
            "ValidationDefinition",
            context.validation_definitions.add(
                gx.ValidationDefinition(data=batch, suite=suite, name=f"{suite.name}-{tag}")
            ),
        )


def import_gx() -> ModuleType:
    """great_expectations, with its loggers at WARNING unless the application set them:
    importing it alone logs a hundred INFO lines."""
    gx_log = logging.getLogger("great_expectations")
    if gx_log.level == logging.NOTSET:
        gx_log.setLevel(logging.WARNING)
    import great_expectations

    return great_expectations


def _suite_from_dict(data: object, *, source: Path) -> ExpectationSuite:
    gx = import_gx()
    from great_expectations.expectations.expectation_configuration import (
        ExpectationConfiguration,
    )

    where = f"expectation suite file {source}"
    if not isinstance(data, dict) or not isinstance(data.get("name"), str) or not data["name"]:
        raise ValidationSuiteError(f"{where} is not a suite: it needs a non-empty 'name'")
    expectations = data.get("expectations", [])
    if not isinstance(expectations, list):
        raise ValidationSuiteError(f"{where}: 'expectations' must be a list")
    configs: list[ExpectationConfiguration] = []
    problems = []
    for index, item in enumerate(expectations):
        if not isinstance(item, dict) or "type" not in item:
            problems.append(f"expectation {index}: needs an object with a 'type' and its 'kwargs'")
            continue
        label = f"expectation {index} ({item['type']})"
        try:
            config = ExpectationConfiguration(**item)
            # GX's suite drops an invalid expectation with only a log line: build each one
            # here so that a bad one is an error.
            config.to_domain_obj()
        except gx.exceptions.ExpectationNotFoundError:
            problems.append(f"{label}: unknown expectation type")
        except (TypeError, ValueError, gx.exceptions.GreatExpectationsError) as error:
            problems.append(f"{label}: {_problem(error)}")
        else:
            configs.append(config)
    if problems:
        raise ValidationSuiteError(
            f"{where} has bad expectations: {'; '.join(problems)}. Fix them; the GX "
            "expectation gallery lists each type's kwargs"
        )
    try:
        return cast("ExpectationSuite", gx.ExpectationSuite(**{**data, "expectations": configs}))
    except (TypeError, ValueError) as error:
        raise ValidationSuiteError(f"{where} is not a valid suite: {_problem(error)}") from error


def _problem(error: Exception) -> str:
    """An exception's message on one line; a pydantic error as ``field: message`` pairs."""
    details = getattr(error, "errors", None)
    if callable(details):
        return "; ".join(
            f"{'.'.join(str(part) for part in item['loc'])}: {item['msg']}" for item in details()
        )
    return _short(str(error))


def _short(message: str) -> str:
    """A message on one line without Java stack frames, cut to a few hundred characters."""
    lines = (line.strip() for line in message.splitlines())
    text = " ".join(line for line in lines if line and not line.startswith("at "))
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 3] + "..."


def _raised(exception_info: Mapping[str, object] | None) -> list[str]:
    """The distinct messages of what raised while GX evaluated one expectation.

    GX reports either one ``{raised_exception, exception_message, ...}`` mapping or one
    such mapping per metric it tried to compute.
    """
    info = exception_info or {}
    entries = [info] if "raised_exception" in info else list(info.values())
    messages: list[str] = []
    for entry in entries:
        if isinstance(entry, Mapping) and entry.get("raised_exception"):
            message = _short(str(entry.get("exception_message") or "no message"))
            if message not in messages:
                messages.append(message)
    return messages


def _json_ready(value: dict[str, Any]) -> dict[str, Any]:
    from great_expectations.util import convert_to_json_serializable

    return cast(dict[str, Any], _small(convert_to_json_serializable(value)))


def _small(value: object) -> object:
    if isinstance(value, dict):
        return {key: _small(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_small(item) for item in value[:_MAX_ITEMS]]
    if isinstance(value, str) and len(value) > _MAX_TEXT:
        return value[: _MAX_TEXT - 3] + "..."
    return value


def _read_columns(kwargs: Mapping[str, object]) -> list[str]:
    """Every column an expectation reads: the ones it is about and its row condition's."""
    return [*named_columns(kwargs), *_condition_columns(kwargs.get("row_condition"))]


def _condition_columns(condition: object) -> list[str]:
    # A row condition in its JSON form; a pass-through string of Spark SQL is not parsed.
    if not isinstance(condition, Mapping):
        return []
    column = condition.get("column")
    names = [str(column["name"])] if isinstance(column, Mapping) and "name" in column else []
    for inner in condition.get("conditions") or []:
        names.extend(_condition_columns(inner))
    return names
