"""Every code snippet of the documentation runs, and the site builds and works offline.

The pages are README.md and every Markdown page under docs/ (one test per page). Of each
page's fenced blocks:

- ```` ```python ```` blocks run in order, in one namespace, in a fresh empty folder as the
  current directory, in this process, with the suite's Spark session (a snippet's
  ``lakesink.spark_session()`` gets it back through ``getOrCreate``);
- ```` ```sh ```` commands that start with ``lakesink `` or ``python jobs/`` then run as
  processes in that folder (the installed ``lakesink`` script; the repository's
  ``jobs/``, with this Python), each expected to exit 0 unless a comment on its line says
  ``# exit N``; the other commands of a ``sh`` block are checked as a ``console`` block's;
- the pages a reader follows block by block (``FOLLOWED``: the S3, operating, jobs,
  streaming, Kafka and clusters guides) are run exactly so: every block in the page's
  order, every command of their ``sh`` blocks through bash, with the environment's
  ``lakesink``, ``python`` and ``spark-submit`` first on ``PATH``; a variable a block
  exports stays set for the blocks after it; what a ``$``-prompted command prints must be
  the lines the page shows after it (``...`` for any text: paths, times); a command
  commented ``# until Ctrl-C`` is interrupted once it printed its first line; and each
  ``print(...)`` of a ``python`` block with a comment must print what the comment starts
  with. The stand-ins: the S3 server the S3 page starts with ``python
  tests/servers/s3.py`` is the suite's (its ``start`` makes the buckets it names there,
  its ``status`` finds the variables exported, its ``stop`` leaves it running for the
  other tests), and the broker and the cluster master a page exports
  (``KAFKA_BROKER``, ``SPARK_MASTER``) are the suite's, each page followed by a test that
  starts its server;
- ```` ```console ```` blocks do not run: every ``make TARGET`` they name must be a target
  of the Makefile, and every ``lakesink COMMAND`` a real subcommand (inline code in the
  text is held to the same);
- other languages (sql, yaml, text, ...) are shown, not run.

The text is checked too: every file of the repository it names (``lakesink/core/...``,
``tests/...``) exists, and every ``lakesink.`` name in its inline code resolves.

The site test builds the site with ``mkdocs build --strict`` and checks that every
internal link and image resolves, that no page loads anything from off the machine (in
the HTML and CSS, and in what headless Chromium requests), and that Chromium shows the
home page and a guide with their titles.
"""

from __future__ import annotations

import ast
import contextlib
import html.parser
import importlib.util
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = [REPO / "README.md", *sorted(DOCS.rglob("*.md"))]
RUN_LANGUAGES = ("python", "py")
SHELL_LANGUAGES = ("sh", "bash", "shell")
# A command's comment that says what it exits with, when not 0: `lakesink ... # exit 2`.
EXPECTED_EXIT = re.compile(r"#.*?\bexits?(?: with)?(?: status)?\s+(\d+)\b")
# How long one documented command may take (a job that starts Spark: a minute or two).
COMMAND_TIMEOUT_S = 600
# Where the screenshots of the site test go, if set (tmp_path otherwise).
SCREENSHOTS_ENV = "LAKESINK_DOCS_SCREENSHOTS"


# ----------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class Block:
    """A fenced code block of a page."""

    language: str
    code: str
    line: int  # the page's line of the block's first line of code (1-based)


_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`]*)$")


def fenced_blocks(text: str) -> list[Block]:
    """The fenced code blocks of a Markdown text, indented ones (in lists) included."""
    found: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        index += 1
        if not opening:
            continue
        indent, fence = opening["indent"], opening["fence"]
        info = opening["info"].strip()
        language = info.split()[0].lstrip(".{").rstrip("}").lower() if info else ""
        first, body = index + 1, []
        while index < len(lines):
            line = lines[index]
            index += 1
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                break
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
        found.append(Block(language, "\n".join(body) + "\n", first))
    return found


def steps(code: str) -> list[tuple[str, str | None]]:
    """The commands of a shell block, continuation lines joined, prompts and comment lines
    dropped, each with the output the page shows for it. Where some lines carry a ``$``
    prompt, only those are commands, and the lines after one, up to the next, are its
    output; elsewhere a page shows no output (None)."""
    raw = code.splitlines()
    prompted = any(line.lstrip().startswith("$ ") for line in raw)
    found: list[str] = []
    shown: list[list[str]] = []
    pending = ""
    for line in raw:
        if not pending:
            stripped = line.strip()
            if prompted:
                if not stripped.startswith("$ "):
                    if shown:
                        shown[-1].append(line.rstrip())
                    continue
                stripped = stripped[2:]
            if not stripped or stripped.startswith("#"):
                continue
            line = stripped
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1].rstrip() + " "
            continue
        found.append((pending + line.strip()).strip())
        shown.append([])
        pending = ""
    if pending:
        found.append(pending.strip())
        shown.append([])
    return [(c, "\n".join(o) if prompted else None) for c, o in zip(found, shown, strict=True)]


def commands(code: str) -> list[str]:
    """The commands of a shell block (``steps`` without their output)."""
    return [command for command, _ in steps(code)]


def output_matches(shown: str, printed: str) -> bool:
    """Whether a command printed what the page shows: line by line, blank lines and
    trailing spaces aside, ``...`` in a line standing for any text and a line of ``...``
    alone for any lines."""
    pattern = "".join(
        r"(?:.*\n)*?"
        if line.strip() == "..."
        else ".*?".join(re.escape(part) for part in line.rstrip().split("...")) + r"\n"
        for line in shown.splitlines()
        if line.strip()
    )
    printed = "".join(line.rstrip() + "\n" for line in printed.splitlines() if line.strip())
    return re.fullmatch(pattern, printed) is not None


def runs(command: str) -> bool:
    """Whether a shell block's command is run by this test (else it is only checked)."""
    return command.startswith("lakesink ") or command.startswith("python jobs/")


# A command word: first on its line, or after ;, &&, ||, a pipe, $( or a backquote; the
# lakesink script maybe with its folder (.venv/bin/lakesink).
_COMMAND_START = r"(?:^|[;&|(`][ \t]*)"
_MAKE = re.compile(_COMMAND_START + r"make[ \t]+([a-z][\w-]*)", re.MULTILINE)
_LAKESINK = re.compile(_COMMAND_START + r"(?:[\w./-]*/)?lakesink[ \t]+([a-z][\w-]*)", re.MULTILINE)
_INLINE_CODE = re.compile(r"(?<!`)`([^`]+)`(?!`)")  # may wrap onto the next line
# In the text, `lakesink orders checkpoint 42: commit` is a Spark UI label, not a command: an
# inline span names a command only when nothing, an option, a placeholder or a path follows.
_INLINE_ARGUMENT = re.compile(r"[ \t]*(?:$|-|[A-Z$.~\[]|\S*/)")


@cache
def make_targets() -> frozenset[str]:
    text = (REPO / "Makefile").read_text()
    targets: set[str] = set()
    for match in re.finditer(r"^([\w.$()/ -]+?)\s*:(?![=])", text, re.MULTILINE):
        targets.update(t for t in match.group(1).split() if not t.startswith((".", "$")))
    return frozenset(targets)


@cache
def docs_hooks() -> ModuleType:
    """``docs/hooks.py``, the site's build hook, which reads the CLI's parsers."""
    spec = importlib.util.spec_from_file_location("lakesink_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@cache
def lakesink_commands() -> frozenset[str]:
    return frozenset(docs_hooks().subcommand_parsers()[1])


def named_commands(text: str, *, inline: bool = False) -> Iterator[tuple[str, str]]:
    """Each ``make TARGET`` and ``lakesink COMMAND`` a text names, as (kind, name)."""
    for kind, pattern in (("make", _MAKE), ("lakesink", _LAKESINK)):
        for match in pattern.finditer(text):
            if not inline or _INLINE_ARGUMENT.match(text, match.end()):
                yield kind, match.group(1)


def unknown_commands(text: str, *, inline: bool = False) -> list[str]:
    """What a text names that is no Makefile target or no lakesink subcommand."""
    wrong = []
    for kind, name in named_commands(text, inline=inline):
        known = make_targets() if kind == "make" else lakesink_commands()
        if name not in known:
            wrong.append(f"{kind} {name}")
    return wrong


# Files of the repository a page names (`lakesink/core/protocol.py`, `tests/core/`), and
# Python names (`lakesink.core.recovery.plan`, `lakesink.testing.memory:MemorySink`).
_REPO_PATH = re.compile(
    r"(?<![\w./:-])((?:lakesink|jobs|tests|notebooks|benchmarks|docs)/[\w./-]*)"
)
_PYTHON_NAME = re.compile(r"(?<![\w./-])lakesink(?:\.[A-Za-z_]\w*)+(?::[A-Za-z_]\w*)?")


@cache
def _table_properties() -> frozenset[str]:
    """Table properties named like modules (`lakesink.formatVersion`)."""
    from lakesink.tables import format as table_format

    return frozenset(
        value
        for name, value in vars(table_format).items()
        if name.endswith("_PROPERTY") and isinstance(value, str)
    )


@cache
def python_name_exists(dotted: str) -> bool:
    """Whether a dotted name (``module.attribute...``, or ``module:attribute``) resolves."""
    if dotted in _table_properties():
        return True
    try:
        docs_hooks().documented(dotted.replace(":", "."))  # as the site's build resolves it
    except (LookupError, AttributeError):
        return False
    return True


def missing_references(text: str) -> list[str]:
    """The repository files and the lakesink names a page's text names that do not exist."""
    text = prose(text)
    missing = [
        path
        for path in (m.rstrip(".,/") for m in _REPO_PATH.findall(text))
        if "*" not in path and not (REPO / path).exists()
    ]
    spans = _INLINE_CODE.findall(text)
    missing += [
        name
        for span in spans
        for name in _PYTHON_NAME.findall(span)
        if not python_name_exists(name)
    ]
    return sorted(set(missing))


def prose(text: str) -> str:
    """A page's text outside its fenced blocks."""
    kept, inside, fence = [], False, ""
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if not inside and opening:
            inside, fence = True, opening["fence"]
            continue
        if inside:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                inside = False
            continue
        kept.append(line)
    return "\n".join(kept)


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


# --------------------------------------------------------------------- the parsing, tested


def test_the_parsing_finds_what_it_should() -> None:
    text = (
        "# t\n\n```python\nx = 1\n```\n\n- item\n\n  ```sh\n  lakesink status a \\\n"
        "    --json   # exit 2\n  make demo\n  ```\n\n````console\n$ make nothing-such\n"
        "output lakesink bogus\n````\n"
    )
    found = fenced_blocks(text)
    assert [(b.language, b.line) for b in found] == [("python", 4), ("sh", 10), ("console", 16)]
    assert commands(found[1].code) == ["lakesink status a --json   # exit 2", "make demo"]
    assert EXPECTED_EXIT.search(commands(found[1].code)[0])[1] == "2"
    assert commands(found[2].code) == ["make nothing-such"]
    assert unknown_commands("make demo && .venv/bin/lakesink status x") == []
    assert unknown_commands("make nothing-such; lakesink bogus") == [
        "make nothing-such",
        "lakesink bogus",
    ]
    assert unknown_commands("s3a://lakesink/orders, lakesink.readers, `lakesink[docs]`") == []
    assert unknown_commands("from lakesink import Table") == []
    assert unknown_commands('--packages "$(lakesink jars --kafka)" && make docs') == []
    assert unknown_commands("cd /opt && .venv/bin/lakesink vacum") == ["lakesink vacum"]
    assert unknown_commands("lakesink orders checkpoint 42: commit", inline=True) == []
    assert unknown_commands("lakesink stauts TABLE...", inline=True) == ["lakesink stauts"]
    assert unknown_commands("make sql-upp [TABLES=x]", inline=True) == ["make sql-upp"]
    assert "vacuum" in lakesink_commands() and "docs" in make_targets()
    assert missing_references(
        "See `lakesink/core/recovery.py`, `lakesink.core.recovery.plan`, `lakesink.Table`,\n"
        "`lakesink.testing.memory:MemorySink`, `lakesink.formatVersion`, jobs/ingest.py.\n"
        "Not `lakesink/faults.py` nor `lakesink.sources.kafka` nor `lakesink.Tabel`.\n"
    ) == ["lakesink.Tabel", "lakesink.sources.kafka", "lakesink/faults.py"]
    shown = steps("$ lakesink status \\\n  lake/orders\nsink orders  (.../orders)\n...\n$ ls\n")
    assert shown == [("lakesink status lake/orders", "sink orders  (.../orders)\n..."), ("ls", "")]
    assert steps("echo a\nb\n") == [("echo a", None), ("b", None)]
    assert output_matches(shown[0][1], "sink orders  (/tmp/x/orders)\n  pending: 0\n\n")
    assert output_matches(shown[0][1], "sink orders  (/tmp/x/orders)\n")
    assert not output_matches(shown[0][1], "sink totals  (/tmp/x/orders)\n")
    assert not output_matches("done: 1 batch", "done: 1 batch\nmore\n")
    assert output_matches("", "") and not output_matches("", "something\n")


# ------------------------------------------------------------------ the generated parts


def test_the_pages_hold_what_the_code_generates() -> None:
    """The exit statuses, the CLI reference, the layers and the failure scenarios are in
    the committed Markdown (read in the repository, a page is whole), as generated now."""
    hooks = docs_hooks()
    stale = [page_id(page) for page in PAGES if hooks.fill(page.read_text()) != page.read_text()]
    assert not stale, f"generated parts are stale in {stale}: run make docs, and commit them"
    operating = (DOCS / "guides" / "operating.md").read_text()
    assert "| 78 | the store refused access" in operating  # the table itself, not a marker
    # The controls: a page with only the opening comment, or an old part, is filled afresh.
    bare = "<!-- lakesink:exit-statuses -->\n"
    old = "<!-- lakesink:exit-statuses -->\n| 9 | old |\n<!-- /lakesink:exit-statuses -->\n"
    assert (
        hooks.fill(bare)
        == hooks.fill(old)
        == (f"{bare}{hooks.exit_statuses()}\n<!-- /lakesink:exit-statuses -->\n")
    )


# ----------------------------------------------------------------------- the snippets


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("LAKESINK_IVY_DIR", str(REPO / ".cache" / "ivy"))  # the Makefile's
    env.pop("PYSPARK_GATEWAY_PORT", None)  # a child starts its own JVM
    # `lakesink` and `python` are the environment's, as in a reader's activated one.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def _argv(command: str) -> list[str]:
    argv = shlex.split(command, comments=True)
    if argv[0] == "lakesink":
        return [str(Path(sys.executable).with_name("lakesink")), *argv[1:]]
    return [sys.executable, str(REPO / argv[1]), *argv[2:]]


def _run_python(page: Path, block: Block, namespace: dict) -> None:
    # Padded so that a traceback's line numbers are the page's.
    code = compile("\n" * (block.line - 1) + block.code, str(page), "exec")
    exec(code, namespace)


# Spark's default checkpoint file manager (FileContext) resolves a relative streaming
# checkpoint location against the JVM's working directory, which Hadoop's file system API
# lets the page's blocks move; this one uses that API.
_CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
_FILE_SYSTEM_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


@contextlib.contextmanager
def _jvm_working_directory(spark: Any, folder: Path) -> Iterator[None]:
    """Resolve Spark's relative paths against ``folder`` too, while a page's blocks run.

    The blocks run in this process with its JVM, which started in another folder: Hadoop's
    local file system resolves a relative path against its own working directory, which is
    the page's folder meanwhile (lakesink makes its own paths absolute in Python), and so
    do streaming checkpoint locations. A user's script and its JVM share one folder.
    """
    jvm = spark._jvm
    local = jvm.org.apache.hadoop.fs.FileSystem.getLocal(spark._jsc.hadoopConfiguration())
    before = local.getWorkingDirectory()
    manager = spark.conf.get(_CHECKPOINT_MANAGER, None)
    local.setWorkingDirectory(jvm.org.apache.hadoop.fs.Path(folder.as_uri()))
    spark.conf.set(_CHECKPOINT_MANAGER, _FILE_SYSTEM_MANAGER)
    try:
        yield
    finally:
        local.setWorkingDirectory(before)
        if manager is None:
            spark.conf.unset(_CHECKPOINT_MANAGER)
        else:
            spark.conf.set(_CHECKPOINT_MANAGER, manager)


def _since(started: float) -> str:
    return f"{time.monotonic() - started:.1f} s"


def _stop_streams(namespace: dict) -> None:
    spark = namespace.get("spark")
    streams = getattr(spark, "streams", None)
    for query in streams.active if streams is not None else ():
        query.stop()


@pytest.mark.spark
@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_page_snippets(
    page: Path, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = page.read_text()
    found = fenced_blocks(text)
    python = [b for b in found if b.language in RUN_LANGUAGES]
    shell = [(b, c) for b in found if b.language in SHELL_LANGUAGES for c in commands(b.code)]
    to_run = [(b, c) for b, c in shell if runs(c)]

    # What is only shown must still name real targets and commands.
    shown = [
        (b.line, c)
        for b in found
        if b.language in (*SHELL_LANGUAGES, "console")
        for c in commands(b.code)
        if not runs(c)
    ]
    wrong = [f"line {line}: {c!r} names {w}" for line, c in shown for w in unknown_commands(c)]
    wrong += [
        f"inline `{span}` names {w}"
        for span in (" ".join(found.split()) for found in _INLINE_CODE.findall(prose(text)))
        for w in unknown_commands(span, inline=True)
    ]
    wrong += [f"names {name}, which does not exist" for name in missing_references(text)]
    assert not wrong, f"{page_id(page)}: " + "; ".join(wrong)

    if page in WITH_SERVERS or (not python and not to_run):
        return  # a page with its own server is followed by a test that starts it, below
    folder = _page_folder(tmp_path, monkeypatch, request if python else None)
    if page in FOLLOWED:
        _follow(page, found, folder, request, monkeypatch)
        return
    spark = request.getfixturevalue("spark") if python else None
    if python:
        namespace: dict = {"__name__": f"docs_page_{page.stem}"}
        timings: list[str] = []
        with _jvm_working_directory(spark, folder):
            try:
                for block in python:
                    started = time.monotonic()
                    _run_python(page, block, namespace)
                    timings.append(f"python block at line {block.line}: {_since(started)}")
            finally:
                _stop_streams(namespace)
                print("\n".join(timings), file=sys.stderr)  # shown by pytest when it fails
    for block, command in to_run:
        _run_command(page, block, command, _argv(command), folder)


def _page_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest | None
) -> Path:
    """A new empty folder, the current one from now on. With ``request``, the suite's Spark
    session (which the blocks' ``lakesink.spark_session()`` returns) is started first, if it
    is not yet, so that its JVM does not run in the page's folder."""
    if request is not None:
        request.getfixturevalue("spark")
    folder = tmp_path / "page"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def _run_command(
    page: Path, block: Block, command: str, argv: list[str], folder: Path
) -> subprocess.CompletedProcess[str]:
    """Run one command of a page in its folder; it must exit as its comment says (or 0)."""
    print(f"{command}", file=sys.stderr)
    expected = EXPECTED_EXIT.search(command)
    status = int(expected[1]) if expected else 0
    started = time.monotonic()
    result = subprocess.run(
        argv,
        cwd=folder,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_S,
    )
    print(f"  exit {result.returncode} after {_since(started)}", file=sys.stderr)
    assert result.returncode == status, (
        f"{page_id(page)} line {block.line}: {command!r} exited {result.returncode}, "
        f"not {status}, after {_since(started)}\n"
        f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"
    )
    return result


# --------------------------------------------------------------- pages followed in order

GUIDES = DOCS / "guides"
FOLLOWED = tuple(
    GUIDES / name
    for name in ("s3.md", "operating.md", "jobs.md", "streaming.md", "kafka.md", "clusters.md")
)
# The server a page asks its reader for, by the variable it exports (`export KAFKA_BROKER=
# 127.0.0.1:9092   # your broker`): followed with the suite's, which its own test starts.
SERVER_VARIABLES = {"KAFKA_BROKER": "kafka_broker", "SPARK_MASTER": "spark_cluster"}
WITH_SERVERS = (GUIDES / "kafka.md", GUIDES / "clusters.md")
_UNTIL_CTRL_C = re.compile(r"#.*\buntil Ctrl-C\b")
_EXPORT = re.compile(r"^export (?P<name>[A-Z_][A-Z0-9_]*)=(?P<value>.*)$")
# The S3 page's own server: `python tests/servers/s3.py start|status|stop ...`, maybe in
# an `eval "$(...)"`.
_S3_SERVER = re.compile(r'^(?:eval "\$\()?python tests/servers/s3\.py (start|status|stop)\b')


def _follow(
    page: Path,
    found: list[Block],
    folder: Path,
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every block of ``page`` in its order, as a reader runs them in ``folder``: the
    variables a block exports stay set for the blocks after it, as in a reader's shell, and
    what a command prints must be what the page shows after it."""
    namespace: dict = {"__name__": f"docs_page_{page.stem}"}
    with contextlib.ExitStack() as stack:
        if any(block.language in RUN_LANGUAGES for block in found):
            spark = request.getfixturevalue("spark")
            stack.enter_context(_jvm_working_directory(spark, folder))
            stack.callback(_stop_streams, namespace)
        for block in found:
            if block.language in RUN_LANGUAGES:
                started = time.monotonic()
                _run_statements(page, block, namespace)
                print(f"python block at line {block.line}: {_since(started)}", file=sys.stderr)
                continue
            if block.language not in SHELL_LANGUAGES:
                continue
            for command, shown in steps(block.code):
                server, export = _S3_SERVER.match(command), _EXPORT.match(command)
                if server:
                    _s3_server_stand_in(server[1], command, request)
                    continue
                if export:
                    monkeypatch.setenv(export["name"], _exported(export, folder, request))
                    continue
                # Through bash, as a reader's shell runs it: "$VARIABLE" and "$(...)" expand.
                argv = ["bash", "-c", command]
                run = _run_until_interrupted if _UNTIL_CTRL_C.search(command) else _run_command
                result = run(page, block, command, argv, folder)
                printed = result.stdout if result.returncode == 0 else result.stderr
                assert shown is None or output_matches(shown, printed), (
                    f"{page_id(page)} line {block.line}: {command!r} printed\n{printed}\n"
                    f"where the page shows\n{shown}"
                )
    # The reader's folder holds what the page made, and nothing a command left behind.
    assert not (folder / "spark-warehouse").exists(), "Spark's warehouse folder was left"


def _run_until_interrupted(
    page: Path, block: Block, command: str, argv: list[str], folder: Path
) -> subprocess.CompletedProcess[str]:
    """Run a command that runs until Ctrl-C: once it printed its first line, interrupt its
    process group as a terminal's Ctrl-C does; it must then exit 0."""
    print(f"{command}  (interrupted after its first line)", file=sys.stderr)
    stdout, stderr = folder.parent / "interrupted.out", folder.parent / "interrupted.err"
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(
            argv, cwd=folder, env=_environment(), stdout=out, stderr=err, text=True,
            start_new_session=True,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + COMMAND_TIMEOUT_S
        while "\n" not in stdout.read_text() and process.poll() is None:
            assert time.monotonic() < deadline, f"{command!r} printed nothing in time"
            time.sleep(0.2)
        assert process.poll() is None, (
            f"{page_id(page)} line {block.line}: {command!r} ended ({process.returncode}) "
            f"before Ctrl-C\n{stdout.read_text()}\n{stderr.read_text()[-5000:]}"
        )
        os.killpg(process.pid, signal.SIGINT)
        status = process.wait(timeout=COMMAND_TIMEOUT_S)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert status == 0, (
        f"{page_id(page)} line {block.line}: {command!r} exited {status} after Ctrl-C\n"
        f"{stdout.read_text()}\n{stderr.read_text()[-5000:]}"
    )
    return subprocess.CompletedProcess(argv, status, stdout.read_text(), stderr.read_text())


def _exported(export: re.Match[str], folder: Path, request: pytest.FixtureRequest) -> str:
    """The value an ``export`` line gives its variable: the suite's server for the one a
    page asks its reader for, else what bash makes of it in the page's folder."""
    fixture = SERVER_VARIABLES.get(export["name"])
    if fixture == "kafka_broker":
        return str(request.getfixturevalue(fixture).bootstrap_servers)
    if fixture == "spark_cluster":
        return str(request.getfixturevalue(fixture).master_url)
    script = f'export {export["name"]}={export["value"]}; printf %s "${export["name"]}"'
    return subprocess.run(
        ["bash", "-c", script], cwd=folder, env=_environment(), capture_output=True,
        text=True, check=True,
    ).stdout  # fmt: skip


@pytest.mark.spark
def test_the_kafka_page_followed_with_a_broker(
    kafka_broker, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _follow_page(GUIDES / "kafka.md", request, tmp_path, monkeypatch)


@pytest.mark.slow
@pytest.mark.spark
def test_the_clusters_page_followed_on_a_cluster(
    spark_cluster, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _follow_page(GUIDES / "clusters.md", request, tmp_path, monkeypatch)


def _follow_page(
    page: Path, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Follow a page with a server of its own (its test started the server)."""
    found = fenced_blocks(page.read_text())
    python = any(block.language in RUN_LANGUAGES for block in found)
    folder = _page_folder(tmp_path, monkeypatch, request if python else None)
    _follow(page, found, folder, request, monkeypatch)


def _s3_server_stand_in(action: str, command: str, request: pytest.FixtureRequest) -> None:
    """What the page's own S3 server command does, done with the suite's server."""
    from servers.s3 import create_bucket

    server = request.getfixturevalue("s3_server")
    if action == "start":
        for bucket in re.findall(r"--bucket[ =](\S+)", command):
            create_bucket(server, bucket)
    elif action == "status":  # the page exports what it prints: the fixture has
        assert all(os.environ.get(k) == v for k, v in server.environment().items()), command


def _run_statements(page: Path, block: Block, namespace: dict) -> None:
    """Run a block statement by statement; a ``print(...)`` whose line ends with a comment
    must print what the comment starts with (``print(x)  # 2, read with delta-rs``)."""
    source = "\n" * (block.line - 1) + block.code  # the page's own line numbers
    comments = {
        token.start[0]: token.string.lstrip("#").strip()
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    }
    for statement in ast.parse(source, filename=str(page)).body:
        printed = io.StringIO()
        code = compile(ast.Module(body=[statement], type_ignores=[]), str(page), "exec")
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
        sys.stdout.write(printed.getvalue())
        said = comments.get(statement.end_lineno or statement.lineno)
        call = statement.value if isinstance(statement, ast.Expr) else None
        if said and isinstance(call, ast.Call) and getattr(call.func, "id", "") == "print":
            shown = printed.getvalue().strip()
            assert said.startswith(shown) and shown, (
                f"{page_id(page)} line {statement.lineno} printed {shown!r}; the page says {said!r}"
            )


# --------------------------------------------------------------------------- the site


class _Page(html.parser.HTMLParser):
    """The links, sources, ids and title of one built page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str, str]] = []  # (tag, attribute, url)
        self.ids: set[str] = set()
        self.styles: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if values.get("name") and tag == "a":
            self.ids.add(values["name"] or "")
        for attribute in ("href", "src", "poster", "data"):
            if values.get(attribute):
                self.links.append((tag, attribute, values[attribute] or ""))
        if values.get("srcset"):
            for part in (values["srcset"] or "").split(","):
                if part.strip():
                    self.links.append((tag, "srcset", part.split()[0]))
        if values.get("style"):
            self.styles.append(values["style"] or "")
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "style":
            self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.styles.append(data)


_CSS_URL = re.compile(r"""url\(\s*['"]?([^'")\s]+)""")
_CSS_IMPORT = re.compile(r"""@import\s+['"]([^'"]+)""")


def _off_machine(url: str) -> bool:
    """A URL that would make a request off this machine."""
    parts = urlsplit(url)
    if url.startswith("//"):
        return True
    return parts.scheme in ("http", "https", "ftp", "ws", "wss")


def _built_site(tmp_path: Path) -> Path:
    pytest.importorskip("material", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings_handlers.python", reason="pip install -e '.[docs]'")
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stderr[-6000:]}"
    return site


def _chromium(arguments: list[str], profile: Path) -> subprocess.CompletedProcess[str]:
    from tools_fixture import CHROMIUM, QUIET_FLAGS

    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: make test installs Debian's chromium package")
    quiet = [*QUIET_FLAGS, "--hide-scrollbars"]
    return subprocess.run(
        [CHROMIUM, *quiet, f"--user-data-dir={profile}", *arguments],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_site_builds_and_works_offline(tmp_path: Path) -> None:
    site = _built_site(tmp_path).resolve()
    pages = sorted(site.rglob("*.html"))
    assert (site / "index.html").is_file() and len(pages) > 10

    parsed = {}
    for path in pages:
        page = _Page()
        page.feed(path.read_text(encoding="utf-8"))
        parsed[path] = page

    broken, external = [], []
    for path, page in parsed.items():
        where = path.relative_to(site)
        for tag, attribute, url in page.links:
            loads = not (tag == "a" and attribute == "href")
            if _off_machine(url):
                if loads:
                    external.append(f"{where}: <{tag} {attribute}={url}>")
                continue
            parts = urlsplit(url)
            if parts.scheme or (url.startswith("#") and not parts.fragment):
                continue  # mailto:, data:, javascript:, a bare '#'
            if not parts.path:
                target = path
            elif parts.path.startswith("/"):  # 404.html: served from the site's root
                target = (site / unquote(parts.path).lstrip("/")).resolve()
            else:
                target = (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file() or site.resolve() not in [target, *target.parents]:
                broken.append(f"{where}: <{tag} {attribute}={url}> -> no such file")
                continue
            if parts.fragment and target.suffix == ".html":
                known = parsed[target].ids if target in parsed else _ids(target)
                if unquote(parts.fragment) not in known:
                    broken.append(f"{where}: {url} -> no #{parts.fragment} in {target.name}")
        for style in page.styles:
            external += [
                f"{where}: style url({u})" for u in _CSS_URL.findall(style) if _off_machine(u)
            ]
    for sheet in site.rglob("*.css"):
        text = sheet.read_text(encoding="utf-8", errors="replace")
        for url in [*_CSS_URL.findall(text), *_CSS_IMPORT.findall(text)]:
            if _off_machine(url):
                external.append(f"{sheet.relative_to(site)}: url({url})")
    assert not broken, "broken links:\n" + "\n".join(broken)
    assert not external, "loaded from off the machine:\n" + "\n".join(external)

    # Headless Chromium renders the pages from the folder, without a server, and the pages
    # ask for nothing off the machine (its network log says what each page requested).
    shots = Path(os.environ.get(SCREENSHOTS_ENV) or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    for name, path, title in (
        ("home", site / "index.html", "lakesink"),
        ("guide", site / "guides" / "standalone.html", "A standalone sink - lakesink"),
    ):
        netlog = tmp_path / f"netlog-{name}.json"
        dom = _chromium(
            [f"--log-net-log={netlog}", "--dump-dom", path.as_uri()], tmp_path / "chromium"
        ).stdout
        assert f"<title>{title}</title>" in dom, dom[:2000]
        assert "md-header" in dom and "md-nav" in dom  # the theme's header and navigation
        assert not _page_requests(netlog), f"{name} requested {_page_requests(netlog)}"
        shot = shots / f"docs-{name}.png"
        result = _chromium(
            ["--window-size=1440,900", f"--screenshot={shot}", path.as_uri()],
            tmp_path / "chromium",
        )
        assert shot.is_file() and shot.stat().st_size > 10_000, result.stderr[-2000:]


def _page_requests(netlog: Path) -> list[str]:
    """What the pages Chromium opened asked for off the machine, from its network log.

    The browser's own background requests (updates, accounts) belong to no page; a page's
    requests and host lookups carry its ``file://`` origin in their isolation key.
    """
    events = json.loads(netlog.read_text())["events"]
    found = set()
    for event in events:
        params = event.get("params") or {}
        keys = ("network_isolation_key", "network_anonymization_key", "group_id")
        if not any("file://" in str(params.get(key, "")) for key in keys):
            continue
        target = str(params.get("url") or params.get("host") or "")
        if target and _off_machine(target):
            found.add(target)
    return sorted(found)


def _ids(path: Path) -> set[str]:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page.ids


def test_docs_extra_pins_what_builds_the_site() -> None:
    """``make docs`` builds with the docs extra (part of dev), whose pins are installed."""
    from importlib.metadata import PackageNotFoundError, version

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    pins = dict(spec.replace(" ", "").split("==") for spec in extras["docs"])
    assert set(pins) == {"mkdocs", "mkdocs-material", "mkdocstrings", "mkdocstrings-python"}
    assert any(spec.startswith("lakesink[") and "docs" in spec for spec in extras["dev"])
    assert "docs" in make_targets()
    for name, pinned in pins.items():
        try:
            installed = version(name)
        except PackageNotFoundError:  # the drift this guards: the dev extra brings it
            pytest.fail(
                f"{name} is not installed, pyproject pins {pinned}: pip install -e '.[dev]'"
            )
        assert installed == pinned, f"{name} {installed} is installed, pyproject pins {pinned}"
