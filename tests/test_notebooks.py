"""The notebooks, executed top to bottom by a real Jupyter kernel, as a user would run them.

Each run starts the ``python3`` kernel of this interpreter with this checkout on its
``PYTHONPATH`` and the test's ``LAKESINK_IVY_DIR``; the kernel starts its own Spark session
(its own JVM), so every table is written, and its writers closed, before the kernel reads
it. Parameters are injected as a cell right after the one tagged ``parameters``, as
papermill does. A cell that raises fails the run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import nbformat
import pytest
from conftest import TEST_SPARK_CONF
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from test_audit import CHECK_NAMES, SCHEMA, SUITE, commit_aborted

from lakesink import committed
from lakesink.delta.journal import journal_events
from lakesink.delta.sink import DeltaSink
from lakesink.spark.validation import ValidationGate
from lakesink.tables.format import VISIBLE
from lakesink.tables.journal import default_journal_path

# One xdist worker runs the module, so its table is written once, not per worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("notebooks")]

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
CELL_TIMEOUT_S = 300


def kernel_env() -> dict[str, str]:
    """The test's environment, with this checkout first on the kernel's import path."""
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "LAKESINK_SPARK_MASTER": "local[2]"}


def run_notebook(name: str, cwd: Path, **parameters: object) -> nbformat.NotebookNode:
    """Execute ``notebooks/<name>`` with ``parameters``; return it with its outputs.

    Raises:
        CellExecutionError: A cell raised; the notebook's outputs up to it are kept in the
            exception's ``notebook`` attribute.
    """
    notebook = nbformat.read(NOTEBOOKS / name, as_version=4)
    tagged = [i for i, c in enumerate(notebook.cells) if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1, f"{name} must have exactly one cell tagged 'parameters'"
    source = "\n".join(f"{key} = {value!r}" for key, value in parameters.items())
    injected = nbformat.v4.new_code_cell(source, metadata={"tags": ["injected-parameters"]})
    notebook.cells.insert(tagged[0] + 1, injected)
    client = NotebookClient(
        notebook,
        kernel_name="python3",
        timeout=CELL_TIMEOUT_S,
        resources={"metadata": {"path": str(cwd)}},
    )
    try:
        client.execute(env=kernel_env())
    except CellExecutionError as error:
        error.notebook = notebook
        raise
    return notebook


def stdout(notebook: nbformat.NotebookNode) -> str:
    return "".join(
        output.text
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
        if output.output_type == "stream" and output.name == "stdout"
    )


def pngs(notebook: nbformat.NotebookNode) -> int:
    return sum(
        "image/png" in output.get("data", {})
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.outputs
    )


@pytest.fixture(scope="module")
def table(spark, tmp_path_factory) -> tuple[Path, dict[int, str]]:
    """A lakesink table and its transaction ids by checkpoint id, its writer closed.

    Checkpoint 1 is committed (2 rows), checkpoint 2 fails the validation suite and is
    held (1 row), checkpoint 3 is aborted (1 row): the committed view holds 2 rows.
    (``tests/test_audit.py`` checks the queries on a longer story; this one is short
    because the kernel's JVM reads it again.)
    """
    path = tmp_path_factory.mktemp("notebooks") / "orders"
    suite = path.parent / "suite.json"
    suite.write_text(json.dumps(SUITE))
    gate = ValidationGate.from_file(suite, policy="quarantine")
    txn: dict[int, str] = {}
    sink = DeltaSink.open(spark, str(path), schema=SCHEMA, view_name="nb_orders", validation=gate)

    def write(rows: list[tuple]) -> None:
        sink.write(spark.createDataFrame(rows, SCHEMA))
        txn[sink.current_checkpoint_id] = sink.state.current.handle.txn_id

    write([(1, "apple"), (2, "pear")])
    sink.notify_checkpoint_complete(sink.prepare_commit())
    write([(3, None)])
    sink.prepare_commit()  # held: an item is missing
    write([(4, "fig")])
    sink.close()  # checkpoint 3 aborted
    assert sorted(r.order_id for r in committed(spark, str(path)).collect()) == [1, 2]
    return path, txn


def test_quickstart_runs_and_leaves_both_checkpoints_committed_once(spark, tmp_path):
    workdir = tmp_path / "quickstart"

    notebook = run_notebook(
        "quickstart.ipynb", tmp_path, workdir=str(workdir), spark_conf=TEST_SPARK_CONF
    )

    out = stdout(notebook)
    assert "pre-committed; the committed view shows 3 rows" in out
    assert "as of checkpoint 1: 3 committed rows" in out  # read as of a checkpoint
    assert re.search(r"checkpoint 2: committed, 2 rows, published in Delta version \d+", out)
    # What the kernel left on disk, read back by this process: 5 rows, each once.
    table = str(workdir / "orders")
    orders = sorted(r.order_id for r in committed(spark, table).collect())
    assert orders == [1, 2, 3, 4, 5]
    assert spark.read.format("delta").load(table).where(f"NOT {VISIBLE}").count() == 0
    events = journal_events(spark, default_journal_path(table))
    assert sorted(r.checkpoint_id for r in events.where("state = 'committed'").collect()) == [1, 2]


def test_audit_notebook_passes_every_check_on_an_honest_table(table, tmp_path):
    path, _ = table
    notebook = run_notebook("audit.ipynb", tmp_path, tables=[str(path)], spark_conf=TEST_SPARK_CONF)

    out = stdout(notebook)
    assert f"orders: {path} at version" in out and "3 transactions" in out
    for name in CHECK_NAMES:
        assert f"PASS  {name}" in out
    assert "FAIL" not in out
    assert "orders: 1 failed expectation(s)" in out
    assert "checkpoint 2 (held) pending for" in out
    assert out.rstrip().endswith("exactly-once audit passed for 1 table(s)")
    assert pngs(notebook) >= 3  # timeline, latency and pending age, rows per checkpoint


def test_audit_notebook_fails_naming_the_check_on_a_tampered_table(spark, table, tmp_path):
    path, txn = table
    tampered = tmp_path / "orders"
    shutil.copytree(path, tampered)  # same sink; a copy of its journal beside it
    shutil.copytree(path.parent / "_lakesink_journal", tmp_path / "_lakesink_journal")
    aborted = txn[3]
    # Its rows made visible by a commit that ignored the journal (``test_audit`` says why a
    # commit: the audit knows a transaction's visible rows by the commits that published them).
    commit_aborted(spark, tampered, 3, aborted, "0")

    with pytest.raises(CellExecutionError) as raised:
        run_notebook("audit.ipynb", tmp_path, tables=[str(tampered)], spark_conf=TEST_SPARK_CONF)

    error = raised.value
    assert error.ename == "AuditFailedError"  # an AssertionError
    assert "no visible row of a non-committed checkpoint" in error.evalue
    assert aborted in error.evalue
    # Every cell before the verdict ran: the checks' own output names the offender.
    out = stdout(error.notebook)
    assert f"FAIL  no visible row of a non-committed checkpoint: {aborted}" in out
    assert "PASS  no duplicate transaction rows" in out
    last_code = [c for c in error.notebook.cells if c.cell_type == "code"][-1]
    assert [o.output_type for o in last_code.outputs] == ["error"]
