"""Smoke job: write a small Delta table, append to it, read it back, show its history.

python jobs/smoke.py --path /tmp/smoke
spark-submit --packages "$(lakesink jars)" jobs/smoke.py --path /tmp/smoke
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
from pathlib import Path

from lakesink.spark.session import spark_session

log = logging.getLogger("lakesink.jobs.smoke")

SCHEMA = "order_id BIGINT, customer STRING, amount DOUBLE"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", required=True, help="Delta table folder (recreated)")
    parser.add_argument("--rows", type=int, default=1000, help="rows per append (default 1000)")
    parser.add_argument("--master", help="Spark master URL (default local[*])")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")

    path = Path(args.path).resolve()
    shutil.rmtree(path, ignore_errors=True)
    spark = spark_session(master=args.master, app_name="lakesink-smoke")
    spark.sparkContext.setLogLevel("WARN")
    for batch in range(2):
        first = batch * args.rows
        df = spark.range(first, first + args.rows).selectExpr(
            "id AS order_id", "concat('customer-', id % 17) AS customer", "id * 1.5 AS amount"
        )
        df.write.format("delta").mode("append").save(str(path))
        log.info("appended %d rows to %s", args.rows, path)

    table = spark.read.format("delta").load(str(path))
    count, distinct = table.count(), table.select("order_id").distinct().count()
    versions = spark.sql(f"DESCRIBE HISTORY delta.`{path}`").count()
    print(f"Delta table {path}: {count} rows ({distinct} distinct ids), {versions} versions")
    spark.stop()
    expected = 2 * args.rows
    if count != expected or distinct != expected:
        print(f"FAILED: expected {expected} rows with distinct ids", file=sys.stderr)
        return 1
    print("OK: Spark wrote and read back a Delta table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
