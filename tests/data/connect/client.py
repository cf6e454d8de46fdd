"""What a Spark Connect client does with lakesink, run in a process of its own (no JVM).

    python client.py SERVER_URL LAKE

A table committed by MERGE (a sink alone, and a checkpoint an operator commits), a group
of two tables committed by metadata, and a streaming query into two tables (one of each
mode, ``stream.py``) run twice.

Prints one JSON object: what each step did, read back where it can be by delta-rs (a
reader that is neither lakesink nor Spark).
"""

import json
import subprocess
import sys
from pathlib import Path

import great_expectations as gx
import great_expectations.expectations as gxe
from pyspark.sql import SparkSession
from stream import published, published_ids

import lakesink
from lakesink import DeltaSink
from lakesink.core import CheckpointCoordinator
from lakesink.spark.validation import ValidationGate
from lakesink.tables.checkpoints import DeltaCheckpointStore

url, lake = sys.argv[1:3]
spark = SparkSession.builder.remote(url).getOrCreate()
found: dict[str, object] = {"session": type(spark).__module__}


# A sink driving its own checkpoints: two of them.
orders = f"{lake}/orders"
with DeltaSink.open(spark, orders, schema="id BIGINT", commit="merge") as sink:
    for first in (0, 5):
        sink.write(spark.range(first, first + 5))
        sink.notify_checkpoint_complete(sink.prepare_commit())
found["orders"] = published_ids(orders)
found["orders_committed"] = lakesink.committed(spark, orders).count()

# Two tables of a group, checkpointed by a coordinator, read at one cut.
paths = {key: f"{lake}/{key}" for key in ("left", "right")}
sinks = {k: DeltaSink(spark, p, schema="id BIGINT", commit="metadata") for k, p in paths.items()}
store = DeltaCheckpointStore(f"{lake}/_state")
with CheckpointCoordinator(store, job_id="job", sinks=sinks, group_id="pair") as job:
    for first in (0, 3):
        for sink in job.sinks.values():
            sink.write(spark.range(first, first + 3))
        job.trigger_checkpoint(None)
found["group"] = [table.num_rows for table in lakesink.arrow(*paths.values())]
found["group_committed"] = [frame.count() for frame in lakesink.committed(spark, *paths.values())]

# Checkpoints the validation gate holds: the first committed by an operator here, the
# second left held (the test commits it with ``lakesink commit --remote``).
held = f"{lake}/held"
suite = gx.ExpectationSuite(
    name="small",
    expectations=[gxe.ExpectColumnValuesToBeBetween(column="id", min_value=0, max_value=2)],
)
gate = ValidationGate(suite=suite, policy="quarantine")
with DeltaSink.open(spark, held, schema="id BIGINT", commit="merge", validation=gate) as sink:
    sink.write(spark.range(5))
    checkpoint = sink.prepare_commit()
    found["held_verdict"] = sink.verdict(checkpoint).value
    sink.write(spark.range(5, 10))
    found["held_second"] = sink.prepare_commit()
found["held_before"] = published_ids(held)
lakesink.Table(held).commit(spark, checkpoint)
found["held_after"] = published_ids(held)


def run_query(new_files: int) -> dict:
    """``stream.py`` in a process of its own: its ``process`` function is pickled by value
    for the server only from the main script (imported from here, by name: the server's
    worker could not import it)."""
    done = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("stream.py")), url, lake, str(new_files)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"stream.py failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# A streaming query of two tables, run with two new files, then started again with one more.
runs = [run_query(2), run_query(1)]
found["before_close"] = [run["before_close"] for run in runs]
found["after_close"] = [run["after_close"] for run in runs]
counts = published(f"{lake}/counts").to_pyarrow_table()
found["counts"] = sorted(counts.column("n").to_pylist())
print(json.dumps(found))
