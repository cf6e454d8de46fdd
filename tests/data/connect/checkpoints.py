"""A Connect client's job: checkpoints 1 to N of one table, each committed by MERGE.

    python tests/faults.py tests/data/connect/checkpoints.py SERVER_URL TABLE N

Checkpoint ``c`` writes the ids ``5(c-1)`` to ``5(c-1)+4``, so a run killed anywhere and run
again ends with every id below ``5N`` exactly once, if nothing was lost or duplicated. The sink
drives its own checkpoints: a run after a kill commits what the killed one pre-committed
(or decided) and goes on with the next id. Prints the checkpoints this run wrote.
"""

import sys

from pyspark.sql import SparkSession

from lakesink import DeltaSink

url, table, checkpoints = sys.argv[1], sys.argv[2], int(sys.argv[3])
spark = SparkSession.builder.remote(url).getOrCreate()
wrote = []
with DeltaSink.open(spark, table, schema="id BIGINT", commit="merge") as sink:
    while (checkpoint := sink.current_checkpoint_id) <= checkpoints:
        sink.write(spark.range(5 * (checkpoint - 1), 5 * checkpoint))
        sink.notify_checkpoint_complete(sink.prepare_commit())
        wrote.append(checkpoint)
print("wrote", wrote)
