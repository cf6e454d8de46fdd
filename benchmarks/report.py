"""The report of a run: a table per section on stdout, the same as JSON, and one PNG."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

__all__ = ["Column", "Section", "read_json", "render_text", "write_json", "write_png"]

Kind = Literal["int", "seconds", "ms", "ratio", "percent", "text"]
Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of a section's table: its key in each row, header and format."""

    key: str
    header: str
    kind: Kind


@dataclass(frozen=True)
class Section:
    """One section of the report: a measurement, as the table the report prints.

    Attributes:
        key: Stable identifier (the JSON key).
        title: What was measured.
        baseline: What its ratios divide by.
        columns: The table's columns, in order.
        rows: One dict per measured point; ratio and seconds values are medians.
    """

    key: str
    title: str
    baseline: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]


def _cell(value: object, kind: Kind) -> str:
    if value is None:
        return "n/a"
    if kind == "seconds":
        return f"{value:.2f} s"
    if kind == "ratio":  # small ratios (a fraction of the baseline) to two figures
        return f"{value:.2f}x" if value >= 0.1 else f"{value:.2g}x"
    if kind == "ms":
        return f"{value * 1000:,.1f} ms"
    if kind == "int":
        return f"{value:,}"
    if kind == "percent":
        return f"{value:.0%}"
    return str(value)


def render_text(header: Row, sections: Sequence[Section], first: int = 1) -> str:
    """The whole report as Markdown: the machine, then a table per section (numbered from
    ``first``)."""
    lines = [
        f"lakesink benchmarks, {header['mode']} run, {header['machine']['date']}",
        "",
        "; ".join(_machine_facts(header)) + ".",
        " ".join(_run_facts(header)),
    ]
    for number, section in enumerate(sections, first):
        lines += ["", f"{number}. {section.title} (ratios: {section.baseline})", ""]
        lines.append("| " + " | ".join(c.header for c in section.columns) + " |")
        lines.append("|" + "|".join("---:" for _ in section.columns) + "|")
        for row in section.rows:
            cells = (_cell(row.get(c.key), c.kind) for c in section.columns)
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _machine_facts(header: Row) -> list[str]:
    m = header["machine"]
    return [
        m["cpu"],
        f"{m['cores']} cores, {m['memory_gib']} GiB RAM, {m['os']}",
        f"Python {m['python']}, Java {m['java']}",
        f"pyspark {m['pyspark']}, delta-spark {m['delta_spark']}, master {m['spark_master']}",
        f"lakesink {m['lakesink_commit']}",
    ]


def _run_facts(header: Row) -> list[str]:
    load = header["load"]
    facts = [
        f"Each figure: the median of {header['repetitions']} repetitions."
        if header["repetitions"] > 1
        else "Each figure: one run.",
        f"Load average (1 min) during the run: {load['min_1m']:.1f} to {load['max_1m']:.1f}"
        f" (median {load['median_1m']:.1f}).",
        f"The run took {header['duration_s']:.0f} s.",
    ]
    if header.get("place"):
        facts.append(f"Ran on {header['place']}.")
    if header.get("conf"):
        facts.append(f"Extra Spark settings: {header['conf']}.")
    if header.get("object_store"):
        store = header["object_store"]
        facts.append(f"S3 server: {store['server']}; its ratios show {store['measures']}.")
    return facts


def write_json(path: Path, header: Row, sections: Sequence[Section]) -> None:
    """The header and every section's rows, machine-readable."""
    document = {**header, "sections": {s.key: asdict(s) for s in sections}}
    path.write_text(json.dumps(document, indent=2, default=str) + "\n")


def read_json(path: Path) -> tuple[Row, Section]:
    """The header and the one section of a report ``write_json`` wrote."""
    document = json.loads(path.read_text())
    [section] = document.pop("sections").values()
    columns = tuple(Column(**column) for column in section.pop("columns"))
    return document, Section(**{**section, "columns": columns, "rows": tuple(section["rows"])})


def write_png(path: Path, header: Row, sections: Sequence[Section]) -> None:
    """One figure, a panel per section, each against its baseline (plain Delta, or local
    disk for the S3 section), and a panel of facts; three panels a row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = -(-(len(sections) + 1) // 3)  # a panel per section and one of facts, 3 a row
    figure, axes = plt.subplots(rows, 3, figsize=(20, 5 * rows), squeeze=False)
    panels = axes.flatten()
    for ax, (number, section) in zip(panels, enumerate(sections, 1), strict=False):
        _panels()[section.key](ax, f"{number}. {section.title}", section)
    _facts_panel(panels[len(sections)], header)
    for ax in panels[len(sections) + 1 :]:
        ax.axis("off")
    figure.suptitle(
        f"lakesink: what exactly-once costs vs plain Delta ({header['mode']} run, "
        f"{header['machine']['date']})",
        fontsize=14,
    )
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.5 / (5 * rows)))  # half an inch for the title
    figure.savefig(path, dpi=100)
    plt.close(figure)


def _panels() -> dict[str, Callable[..., None]]:
    """How each section is drawn: against its baseline, as ratios or as seconds."""
    return {
        "write_path": partial(
            _ratio_bars,
            label=lambda row: f"{_short(row['rows'])} rows",
            bars=(
                ("pre_commit_ratio", "pre-commit (MERGE table)"),
                ("metadata_pre_commit_ratio", "pre-commit (metadata table)"),
                ("total_ratio", "checkpoint (MERGE)"),
                ("metadata_total_ratio", "checkpoint (metadata)"),
            ),
            ylabel="x Delta's idempotent append of the same rows",
            target=1.3,
        ),
        "commit_vs_size": partial(
            _seconds_lines,
            x="rows",
            ours=(("commit_s", "commit (MERGE)"), ("metadata_commit_s", "commit (metadata)")),
            xlabel="rows in the checkpoint",
            log_y=True,
        ),
        "commit_vs_history": partial(
            _seconds_lines,
            x="history",
            ours=(("commit_s", "commit (MERGE)"), ("metadata_commit_s", "commit (metadata)")),
            xlabel="committed checkpoints already in the table",
            log_y=False,
        ),
        "reader": partial(
            _ratio_bars,
            label=lambda row: row["query"] + "\n" + row["table"].replace(" and ", "\n+ "),
            bars=(("ratio", "committed view"),),
            ylabel="x the same query on plain Delta",
        ),
        "vacuum": partial(
            _seconds_lines,
            x="history",
            ours=(("vacuum_s", "vacuum of one aborted checkpoint"),),
            xlabel="committed checkpoints in the table",
            log_y=False,
        ),
        "streaming": partial(
            _streaming_bars, ylabel="x Delta's idempotent foreachBatch write", target=1.3
        ),
        "checkpoint": partial(
            _ratio_bars,
            label=lambda row: f"{_short(row['rows'])} rows a sink",
            bars=(("ratio", "two sinks (MERGE)"), ("metadata_ratio", "two sinks (metadata)")),
            ylabel="x two plain Delta appends",
        ),
        "accumulated": partial(
            _ratio_bars,
            label=lambda row: (
                f"{_short(row['checkpoints'])} checkpoints"
                + (" (built)" if row["written"] == "built directly" else "")
                + f"\n{row['state']}"
            ),
            bars=(("ratio", "committed-view aggregate"),),
            ylabel="x the same aggregate on plain Delta",
        ),
        "cut": partial(
            _ratio_bars,
            label=lambda row: f"{_short(row['rows'])} rows a table",
            bars=(("one_ratio", "one table at its cut"), ("two_ratio", "two tables at one cut")),
            ylabel="x the same read at the latest versions",
            target=None,
        ),
        "scheduled": partial(
            _streaming_bars,
            ylabel="x Delta's foreachBatch + txnVersion, opening included",
            target=1.0,
        ),
        "object_store": partial(
            _ratio_bars,
            label=lambda row: f"{_short(row['rows'])} rows",
            bars=(
                ("pre_commit_ratio", "pre-commit"),
                ("commit_ratio", "commit"),
                ("batch_ratio", "StreamingSink, a batch"),
            ),
            ylabel="x the same work on local disk",
            target=None,  # no target: the figure says what object storage costs
        ),
        "published": partial(
            _ratio_bars,
            label=_published_label,
            bars=(("merge_ratio", "MERGE table"), ("metadata_ratio", "metadata table")),
            ylabel="x the baseline (an append; reads: plain Delta), log",
            target=1.02,
            log_y=True,
        ),
        "vectors": partial(
            _ratio_bars,
            label=lambda row: row["what"].replace(" after", "\nafter").replace(", ", "\n"),
            bars=(("merge_ratio", "MERGE table"), ("metadata_ratio", "metadata table")),
            ylabel="x the baseline (REORG PURGE; reads: vectors applied; no vectors)",
            target=None,
        ),
        "memory": partial(
            _ratio_bars,
            label=lambda row: row["what"].replace(" (", "\n("),
            bars=(
                ("merge_ratio", "checkpoint (MERGE)"),
                ("metadata_ratio", "checkpoint (metadata)"),
            ),
            ylabel="peak, x the idempotent append's",
            target=None,
        ),
    }


def _published_label(row: Row) -> str:
    """Section 12's bars: the update after a commit by size and by history, then reads."""
    if row["kind"] == "size":
        return f"publish\n{_short(row['rows'])} rows"
    if row["kind"] == "history":
        return f"publish\nhistory {_short(row['history'])}"
    return f"read by path\n{row['query']}"


def _ratio_bars(  # type: ignore[no-untyped-def]
    ax,
    title: str,
    section: Section,
    *,
    label: Callable[[Row], str],
    bars: tuple[tuple[str, str], ...],
    ylabel: str,
    target: float | None = 1.1,
    log_y: bool = False,
) -> None:
    width = 0.8 / len(bars)
    for i, (key, name) in enumerate(bars):
        offset = (i - (len(bars) - 1) / 2) * width
        xs = [j + offset for j in range(len(section.rows))]
        heights = [row[key] for row in section.rows]
        drawn = ax.bar(xs, heights, width, label=name)
        labels = [f"{h:.2g}x" if log_y else f"{h:.1f}x" for h in heights]
        ax.bar_label(drawn, labels=labels, fontsize=7)
    if log_y:
        ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=1)
    if target is not None:
        ax.axhline(target, color="grey", linestyle="--", linewidth=1, label=f"target {target}x")
    ax.set_xticks(range(len(section.rows)), [label(row) for row in section.rows], fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8)


# Sections 6 and 11: a StreamingSink batch in both commit modes against Delta's own query.
_streaming_bars = partial(
    _ratio_bars,
    label=lambda row: f"{_short(row['rows'])} rows a batch",
    bars=(("ratio", "StreamingSink (MERGE)"), ("metadata_ratio", "StreamingSink (metadata)")),
)


def _seconds_lines(  # type: ignore[no-untyped-def]
    ax,
    title: str,
    section: Section,
    *,
    x: str,
    ours: tuple[tuple[str, str], ...],
    xlabel: str,
    log_y: bool,
) -> None:
    """lakesink's seconds (one line per key of ``ours``) and the plain append's, each of
    lakesink's points labelled with its ratio to the plain append."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    xs = [row[x] for row in section.rows]
    for key, name in ours:
        ax.plot(xs, [row[key] for row in section.rows], marker="o", label=name)
        for xv, row in zip(xs, section.rows, strict=True):
            ax.annotate(
                f"{row[key] / row['plain_append_s']:.2g}x",
                (xv, row[key]),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=8,
            )
    ax.plot(xs, [row["plain_append_s"] for row in section.rows], marker="o", label="plain append")
    ax.set_xscale("log")
    ax.xaxis.set_major_locator(FixedLocator(xs))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _short(value)))
    ax.xaxis.set_minor_formatter(NullFormatter())
    if log_y:
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("seconds (median); labels: ratio")
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8)
    ax.grid(True, alpha=0.3)


def _short(count: float) -> str:
    """10000 -> 10k, 5000000 -> 5M: readable axis labels."""
    for divisor, suffix in ((1_000_000, "M"), (1_000, "k")):
        if count >= divisor:
            return f"{count / divisor:g}{suffix}"
    return f"{count:g}"


def _facts_panel(ax, header: Row) -> None:  # type: ignore[no-untyped-def]
    ax.axis("off")
    ax.set_title("machine and run", fontsize=11)
    facts = [*_machine_facts(header), "", *_run_facts(header)]
    lines = [part for fact in facts for part in textwrap.wrap(fact, 90) or [""]]
    ax.text(0.0, 1.0, "\n".join(lines), va="top", family="monospace", fontsize=8.5)
