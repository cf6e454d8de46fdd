"""Write path: a plain Delta append vs lakesink pre-commit and commit of the same rows.

    python benchmarks/write_path.py --rows 1000000 --repeat 3

Prints the median seconds of each and the ratio to the plain append measured in the same
run. (The full benchmark suite is an open issue; this is its first figure.)
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import tempfile
import time
from importlib.metadata import version

from lakesink.delta_sink import DeltaSink
from lakesink.session import spark_session


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = spark_session(app_name="lakesink-bench", conf={"spark.ui.enabled": "false"})
    spark.sparkContext.setLogLevel("ERROR")
    data = spark.range(args.rows).selectExpr(
        "id AS order_id", "concat('customer-', id % 1000) AS customer", "rand() * 100 AS amount"
    )
    data.cache().count()
    timings: dict[str, list[float]] = {"plain append": [], "pre-commit": [], "commit": []}
    for _ in range(args.repeat):
        root = tempfile.mkdtemp(prefix="lakesink-bench-")
        start = time.perf_counter()
        data.write.format("delta").save(f"{root}/plain")
        timings["plain append"].append(time.perf_counter() - start)

        sink = DeltaSink.open(spark, f"{root}/sink", schema=data.schema, view_name="bench")
        start = time.perf_counter()
        sink.write(data)
        checkpoint = sink.checkpoint()
        timings["pre-commit"].append(time.perf_counter() - start)
        start = time.perf_counter()
        sink.notify_checkpoint_complete(checkpoint)
        timings["commit"].append(time.perf_counter() - start)
        sink.close()
        shutil.rmtree(root)
    print(
        f"{args.rows:,} rows, median of {args.repeat}; {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, pyspark {version('pyspark')}, "
        f"delta-spark {version('delta-spark')}"
    )
    base = statistics.median(timings["plain append"])
    for name, values in timings.items():
        median = statistics.median(values)
        print(f"{name:>14}: {median:7.2f} s  ({median / base:4.2f}x plain append)")


if __name__ == "__main__":
    main()
