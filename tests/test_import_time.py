"""``lakesink.arrow`` reads a real lakesink table in a fresh process without loading Spark:
no ``pyspark``, ``py4j`` or ``delta`` (delta-spark) module is imported, as Python's
``-X importtime`` reports every import the process made, and none is in ``sys.modules``
after the read.

What keeps it so is that ``lakesink.tables`` (the table format, the journal, the cuts)
imports no engine; a Spark import creeping into any module the reader reaches fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from lakesink.delta.sink import DeltaSink

SCHEMA = "order_id BIGINT, customer STRING"
CHECKOUT = Path(__file__).resolve().parent.parent
SPARK_MODULES = {"pyspark", "py4j", "delta"}

READ = """
import json, sys
import lakesink
rows = lakesink.arrow(sys.argv[1])
print(json.dumps({
    "orders": sorted(rows.column("order_id").to_pylist()),
    "loaded": sorted(m for m in sys.modules if m.split(".")[0] in %r),
}))
"""


def test_the_arrow_reader_imports_no_spark_module(spark, tmp_path):
    table = tmp_path / "orders"
    sink = DeltaSink.open(spark, str(table), schema=SCHEMA, view_name="v_import_time")
    sink.write(spark.createDataFrame([(1, "ann"), (2, "bo")], SCHEMA))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.close()

    environment = {**os.environ, "PYTHONPATH": str(CHECKOUT)}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", READ % (SPARK_MODULES,), str(table)],
        capture_output=True,
        text=True,
        env=environment,
        check=True,
    )

    # Each line: "import time: <self us> | <cumulative us> | <indented module name>".
    imported = [
        line.rsplit("|", 1)[1].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    ]
    # The reader's module is loaded by importlib (lakesink's lazy names), which the report
    # leaves out; what it imports is in it.
    assert "lakesink.tables.cuts" in imported
    assert [m for m in imported if m.split(".")[0] in SPARK_MODULES] == []
    found = json.loads(done.stdout)
    assert found == {"orders": [1, 2], "loaded": []}
