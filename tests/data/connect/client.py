"""What a Spark Connect client does with lakesink, run in a process of its own (no JVM).

    python client.py SERVER_URL LAKE

A table committed by MERGE (a sink alone, and a checkpoint an operator commits), a group
of two tables committed by metadata, and a streaming query into two tables (one of each
mode) run twice.

Prints one JSON object: what each step did, read back where it can be by delta-rs (a
reader that is neither lakesink nor Spark).
"""

import json
import sys

import great_expectations as gx
import great_expectations.expectations as gxe
from deltalake import DeltaTable
from pyspark.sql import SparkSession

import lakesink
from lakesink import DeltaSink
from lakesink.core import CheckpointCoordinator
from lakesink.spark.validation import ValidationGate
from lakesink.storage.options import StorageOptions
from lakesink.streaming import StreamingSink
from lakesink.tables.checkpoints import DeltaCheckpointStore
from lakesink.tables.format import published_path

url, lake = sys.argv[1:3]
spark = SparkSession.builder.remote(url).getOrCreate()
found: dict[str, object] = {"session": type(spark).__module__}


def published(path: str) -> DeltaTable:
    """The table's published table, opened by delta-rs (on S3 with the store's settings)."""
    location = published_path(path)
    return DeltaTable(location, storage_options=StorageOptions.from_env().deltars_options(location))


def published_ids(path: str) -> list[int]:
    return sorted(published(path).to_pyarrow_table().column("id").to_pylist())


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

# A streaming query of two tables, one per commit mode: each batch is written in the
# server's Python worker, the last one committed when the client's sink closes.
landing, checkpoints = f"{lake}/landing", f"{lake}/_stream"
streamed = {"events": f"{lake}/events", "counts": f"{lake}/counts"}


def process(batch, sinks):
    sinks["events"].write(batch)
    sinks["counts"].write(batch.groupBy().count().withColumnRenamed("count", "n"))


def run_query(new_files: int) -> None:
    for _ in range(new_files):
        first = spark.read.parquet(landing).count() if found.get("landed") else 0
        spark.range(first, first + 4).coalesce(1).write.mode("append").parquet(landing)
        found["landed"] = first + 4
    sinks = {
        "events": DeltaSink(spark, streamed["events"], schema="id BIGINT", commit="metadata"),
        "counts": DeltaSink(spark, streamed["counts"], schema="n BIGINT", commit="merge"),
    }
    source = spark.readStream.schema("id BIGINT").option("maxFilesPerTrigger", 1).parquet(landing)
    with StreamingSink.for_sinks(
        spark, sinks, process=process, checkpoint_location=checkpoints
    ) as sink:
        query = (
            source.writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoints)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        found.setdefault("before_close", []).append(len(published_ids(streamed["events"])))
    found.setdefault("after_close", []).append(published_ids(streamed["events"]))


run_query(2)
run_query(1)  # the query started again, with one new file
counts = published(streamed["counts"]).to_pyarrow_table()
found["counts"] = sorted(counts.column("n").to_pylist())
print(json.dumps(found))
