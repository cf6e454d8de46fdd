"""Validation reports people can open: GX Data Docs pages of journaled validation results.

The validation gate keeps GX's whole result in each journaled report
(``ValidationReport.result``); this module renders one into the page Great Expectations'
own Data Docs show for a validation run (``ValidationResultsPageRenderer`` and its Jinja
page view): every expectation grouped by column, with its observed value and unexpected
values, failed ones marked. ``lakesink validate --report DIR`` writes one per validated
transaction, ``lakesink status --report DIR`` one per held transaction.

The page loads Bootstrap and its scripts from public CDNs, as every GX Data Docs page
does; offline it shows the same content unstyled.
"""

from __future__ import annotations

import copy
import logging
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakesink.core.validation import ValidationReport
from lakesink.spark.validation import import_gx

if TYPE_CHECKING:
    from lakesink.tables.journal import TransactionStatus

__all__ = ["report_page_name", "write_report_page"]

log = logging.getLogger(__name__)


def report_page_name(txn: TransactionStatus) -> str:
    """The page's file name: ``<sink>-checkpoint-<id>-<writer>.html``, safe for any id."""
    stem = f"{txn.sink_id}-checkpoint-{txn.checkpoint_id}-{txn.writer_id}"
    return re.sub(r"[^A-Za-z0-9._-]", "_", stem) + ".html"


def write_report_page(
    report: ValidationReport, txn: TransactionStatus, *, table_path: str, directory: str | Path
) -> Path | None:
    """Write the Data Docs page of ``report``, the validation of ``txn``; return its path.

    The page names the sink, checkpoint, writer and state as its run, and the table as its
    data asset. Returns None (and writes nothing) when the report holds no GX result: the
    run raised before GX finished (its ``error`` says why), or an older lakesink, which kept
    only a summary, wrote it.

    Raises:
        OSError: ``directory`` cannot be created or written.
    """
    if report.result is None:
        return None
    import_gx()  # GX's loggers quiet before its renderer loads
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResultSchema,
    )

    # GX re-exports these from their packages without listing them in __all__.
    from great_expectations.render.renderer import (  # type: ignore[attr-defined]
        ValidationResultsPageRenderer,
    )
    from great_expectations.render.view import DefaultJinjaPageView  # type: ignore[attr-defined]

    data: dict[str, Any] = copy.deepcopy(dict(report.result))
    meta = data.setdefault("meta", {})
    meta["run_id"] = {
        "run_name": f"{txn.sink_id} checkpoint {txn.checkpoint_id} (writer {txn.writer_id}, "
        f"{txn.state.value})",
        "run_time": (meta.get("run_id") or {}).get("run_time") or txn.updated_at.isoformat(),
    }
    meta.setdefault("batch_spec", {})["data_asset_name"] = table_path  # the page's "Data asset"
    result = ExpectationSuiteValidationResultSchema().load(data)
    # GX's renderers have no annotations.
    page = DefaultJinjaPageView().render(ValidationResultsPageRenderer().render(result))  # type: ignore[no-untyped-call]
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    path = target / report_page_name(txn)
    path.write_text(page, encoding="utf-8")
    log.info("wrote the validation report of checkpoint %d to %s", txn.checkpoint_id, path)
    return path
