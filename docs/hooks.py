"""The parts of the pages that are generated from the code, so they never drift.

A page asks for a generated part with an HTML comment on a line of its own; the part is
written after it, up to a closing comment (``<!-- /lakesink:cli-reference -->``), into
the committed Markdown, so the page reads whole in the repository too:

- ``<!-- lakesink:cli-reference -->``: every ``lakesink`` subcommand, from the argparse
  parsers themselves (``lakesink.cli.build_parser()``): usage, description, every option
  with its default.
- ``<!-- lakesink:exit-statuses -->``: the exit-status table, from ``lakesink.cli.exits``.
- ``<!-- lakesink:layers -->``: the layers import-linter holds the packages to (from
  ``pyproject.toml``), each package with the first paragraph of its docstring.
- ``<!-- lakesink:scenarios DOTTED.NAME -->``: the numbered failure scenarios of a module's
  or function's docstring (``lakesink.core.recovery``, ``lakesink.delta.publish``, ...),
  where the code that handles them documents them.

``python docs/hooks.py`` (which ``make docs`` runs first) writes every page's generated
parts afresh; ``tests/test_docs.py`` checks that the committed pages hold what the code
generates (``fill``), and imports the same functions to check the commands the pages name.
As MkDocs hooks (``mkdocs.yml``: ``hooks: [docs/hooks.py]``) they fill the pages again when
the site is built, and add its small stylesheet (``STYLESHEET``: a wider page, for code
blocks whose lines carry comments).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = [
    "cli_reference",
    "exit_statuses",
    "failure_scenarios",
    "fill",
    "layers",
    "on_files",
    "on_page_markdown",
    "subcommand_parsers",
]

DOCS = Path(__file__).resolve().parent
# A generated part: its opening comment (what, and for scenarios whose), what was generated
# last, and its closing comment; a page that has only the opening comment gets the rest.
GENERATED = re.compile(
    r"^<!-- lakesink:(?P<what>cli-reference|exit-statuses|layers|scenarios)"
    r"(?: (?P<name>[\w.]+))? -->\n"
    r"(?:(?:(?!<!-- lakesink:).*\n)*?<!-- /lakesink:(?P=what) -->\n)?",
    re.MULTILINE,
)
# The site's own stylesheet (listed in mkdocs.yml's extra_css): Material's page is at most
# 61rem wide, which cuts most lines of the code blocks on a wide screen.
STYLESHEET = "assets/stylesheets/lakesink.css"
CSS = """\
.md-grid { max-width: 88rem; }
.md-typeset pre > code { font-size: .8em; }
"""
# Help texts are wrapped to the terminal's width: fixed, so the page is the same everywhere.
HELP_COLUMNS = "82"


def on_files(files: Any, *, config: Any) -> Any:
    """MkDocs' hook: the site's stylesheet, generated (it is no file under docs/)."""
    from mkdocs.structure.files import File

    files.append(File.generated(config, STYLESHEET, content=CSS))
    return files


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs' hook: the generated parts, as the code has them now."""
    return fill(markdown)


def fill(markdown: str) -> str:
    """``markdown`` with each part it asks for generated afresh, between its comments."""

    def generated(found: re.Match[str]) -> str:
        what, name = found["what"], found["name"]
        opening = f"<!-- lakesink:{what}{f' {name}' if name else ''} -->"
        if what == "scenarios":
            part = failure_scenarios(name or "")
        else:
            part = {
                "cli-reference": cli_reference,
                "exit-statuses": exit_statuses,
                "layers": layers,
            }[what]()
        return f"{opening}\n{part.strip()}\n<!-- /lakesink:{what} -->\n"

    return GENERATED.sub(generated, markdown)


def main() -> int:
    """Write every page's generated parts afresh; name the pages that changed."""
    for page in sorted(DOCS.rglob("*.md")):
        text = page.read_text()
        filled = fill(text)
        if filled != text:
            page.write_text(filled)
            print(f"generated the parts of {page.relative_to(DOCS.parent)}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------- layers


def _markdown_code(text: str) -> str:
    """reStructuredText's double backquotes as Markdown code."""
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def layers() -> str:
    """The layers contract of ``pyproject.toml``, top down, each package with its docstring."""
    import importlib

    pyproject = (DOCS.parent / "pyproject.toml").read_text()
    found = re.search(r"^layers = \[(.*?)^\]", pyproject, re.MULTILINE | re.DOTALL)
    if found is None:
        raise RuntimeError("pyproject.toml has no import-linter layers contract")
    rows = ["| layer | package | what it is |", "|---:|---|---|"]
    for number, layer in enumerate(re.findall(r'"([^"]+)"', found[1]), start=1):
        for package in (name.strip() for name in layer.split("|")):
            doc = importlib.import_module(package).__doc__ or ""
            summary = _markdown_code(" ".join(doc.strip().split("\n\n")[0].split()))
            cell = summary.replace("|", "\\|")
            rows.append(f"| {number} | `{package}` | {cell} |")
    return "\n".join(rows)


# ------------------------------------------------------------------ failure scenarios


def documented(dotted: str) -> object:
    """The module, class or function a dotted name names.

    Raises:
        LookupError: No module of it imports; AttributeError: a part of it is missing.
    """
    import importlib

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise LookupError(f"nothing importable is named {dotted}")


def failure_scenarios(dotted: str) -> str:
    """The numbered list that follows the line about failure scenarios in a docstring.

    Double backquotes become Markdown code; each item keeps its number.
    """
    import inspect

    doc = inspect.getdoc(documented(dotted)) or ""
    lines = doc.splitlines()
    start = next(
        (
            i + 1
            for i, line in enumerate(lines)
            if "scenarios" in line.lower() and line.rstrip().endswith(":")
        ),
        None,
    )
    if start is None:
        raise RuntimeError(f"the docstring of {dotted} lists no failure scenarios")
    items: list[str] = []
    for line in lines[start:]:
        if re.match(r"\d+\. ", line):
            items.append(line)
        elif items and (line.startswith(" ") or not line.strip()):
            if line.strip():
                items[-1] += " " + line.strip()
        elif items:
            break
    if not items:
        raise RuntimeError(f"the docstring of {dotted} lists no numbered scenarios")
    return _markdown_code("\n".join(items))


# ---------------------------------------------------------------------------- the parsers


def subcommand_parsers() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The ``lakesink`` parser and each subcommand's parser, by name, in ``--help`` order."""
    from lakesink.cli import build_parser

    parser = build_parser()
    found: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            found.update(action.choices)
    return parser, found


def _summaries() -> dict[str, str]:
    """The one-line ``help`` of each subcommand, as ``lakesink --help`` lists them."""
    from lakesink.cli import build_parser

    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return {choice.dest: choice.help or "" for choice in action._choices_actions}
    return {}


# --------------------------------------------------------------------------- rendering


def _escape(text: str) -> str:
    """Plain help text made safe for a Markdown paragraph or table cell."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = re.sub(r"([\\`*_\[\]|])", r"\\\1", text)
    return " ".join(text.split())


@contextmanager
def _columns() -> Iterator[None]:
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved


def _expand(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """An action's help with ``%(default)s`` and friends filled in, as argparse does."""
    if not action.help or action.help == argparse.SUPPRESS:
        return ""
    formatter = parser._get_formatter()
    return formatter._expand_help(action)


def _argument(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs == 0:
            return f"`{names}`"
        metavar = action.metavar or (action.dest.upper() if action.dest else "VALUE")
        return f"`{names} {metavar}`"
    name = action.metavar or action.dest
    if action.choices:
        name = "{" + ",".join(map(str, action.choices)) + "}"
    suffix = " ..." if action.nargs in ("+", "*") else ""
    return f"`{name}{suffix}`"


def _default(action: argparse.Action) -> str:
    if action.required or not action.option_strings:
        return "required"
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
        return ""
    return f"`{action.default}`"


def _options_table(parser: argparse.ArgumentParser) -> str:
    rows = ["| argument | what it is | default |", "|---|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        help_text = _escape(_expand(parser, action))
        if action.choices and action.option_strings:
            help_text += f" (one of: {', '.join(f'`{c}`' for c in action.choices)})"
        rows.append(f"| {_argument(action)} | {help_text} | {_default(action)} |")
    return "\n".join(rows)


def _usage(parser: argparse.ArgumentParser) -> str:
    return parser.format_usage().strip()


def _command_section(name: str, parser: argparse.ArgumentParser, summary: str) -> str:
    parts = [f"## lakesink {name}", ""]
    if summary:
        parts += [f"*{_escape(summary)}*", ""]
    parts += ["```text", _usage(parser), "```", ""]
    description = parser.description or ""
    if description:
        parts += [_escape(description), ""]
    parts += [_options_table(parser), ""]
    epilog = (parser.epilog or "").strip()
    if epilog and name == "vacuum":
        examples = epilog.split("exit status:")[0].strip()
        if examples:
            parts += ["Examples:", "", "```console", examples, "```", ""]
    return "\n".join(parts)


def exit_statuses() -> str:
    """The exit-status table of every command and job, from ``lakesink.cli.exits``."""
    from lakesink.cli.exits import EXIT_CODES, EXIT_INTERRUPTED

    listed = EXIT_CODES.removeprefix("exit status: ")
    entries = re.findall(r"(\d+) (.+?)(?=, \d+ |$)", listed)
    if not entries:
        raise RuntimeError(f"cannot read the exit statuses out of {EXIT_CODES!r}")
    rows = ["| status | meaning |", "|---:|---|"]
    rows += [f"| {status} | {_escape(meaning)} |" for status, meaning in entries]
    rows.append(
        f"| {EXIT_INTERRUPTED} | interrupted: Ctrl-C (SIGINT) stopped a short command; "
        "what it left is recovered as after a crash |"
    )
    return "\n".join(rows)


def cli_reference() -> str:
    """The reference of every ``lakesink`` subcommand, from the parsers."""
    with _columns():
        parser, commands = subcommand_parsers()
        summaries = _summaries()
        parts = [
            "## lakesink",
            "",
            "```text",
            parser.format_help().strip(),
            "```",
            "",
            "### Exit statuses",
            "",
            exit_statuses(),
            "",
        ]
        for name, sub in commands.items():
            parts.append(_command_section(name, sub, summaries.get(name, "")))
    return "\n".join(parts)


if __name__ == "__main__":
    sys.exit(main())
