"""A streaming query into two tables through Spark Connect, one table per commit mode.

    python stream.py SERVER_URL LAKE NEW_FILES

Lands NEW_FILES files of 4 ids each (the ids go on from the files already there) in
``LAKE/landing``, then runs the query over what it has not read yet, one file a batch
(``availableNow``): each batch's ids into ``events`` (metadata commit) and its row count
into ``counts`` (MERGE). Each batch is written in the server's Python worker; the last is
committed when the client's sink closes. Prints, as JSON, the events' published ids before
and after the close.
"""

import json
import sys

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from lakesink import DeltaSink
from lakesink.storage.files import entry_names
from lakesink.storage.options import StorageOptions
from lakesink.streaming import StreamingSink
from lakesink.tables.format import published_path


def published(path: str) -> DeltaTable:
    """The table's published table, opened by delta-rs (on S3 with the store's settings)."""
    location = published_path(path)
    return DeltaTable(location, storage_options=StorageOptions.from_env().deltars_options(location))


def published_ids(path: str) -> list[int]:
    return sorted(published(path).to_pyarrow_table().column("id").to_pylist())


def process(batch, sinks):
    sinks["events"].write(batch)
    sinks["counts"].write(batch.groupBy().count().withColumnRenamed("count", "n"))


def run_query(spark: SparkSession, lake: str, new_files: int) -> dict[str, object]:
    landing, checkpoints = f"{lake}/landing", f"{lake}/_stream"
    for _ in range(new_files):
        first = 4 * sum(1 for n in entry_names(landing) if n.endswith(".parquet"))
        spark.range(first, first + 4).coalesce(1).write.mode("append").parquet(landing)
    events, counts = f"{lake}/events", f"{lake}/counts"
    sinks = {
        "events": DeltaSink(spark, events, schema="id BIGINT", commit="metadata"),
        "counts": DeltaSink(spark, counts, schema="n BIGINT", commit="merge"),
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
        before_close = len(published_ids(events))
    return {"before_close": before_close, "after_close": published_ids(events)}


if __name__ == "__main__":
    url, lake, new_files = sys.argv[1], sys.argv[2], int(sys.argv[3])
    print(json.dumps(run_query(SparkSession.builder.remote(url).getOrCreate(), lake, new_files)))
