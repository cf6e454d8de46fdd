"""A real Kafka broker for the streaming tests, one per test session, stopped at the end.

Started with ``servers.kafka`` (``tests/servers/kafka.py``, what ``make kafka-up`` runs) on
free loopback ports; its jars are kept beside the Ivy cache, so only the first run fetches them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers.cluster import free_port
from servers.kafka import KafkaBroker, start_broker, stop_broker


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    folder = tmp_path_factory.mktemp("kafka")
    ivy = os.environ.get("LAKESINK_IVY_DIR")
    jars = Path(ivy).parent / "kafka-jars" if ivy else folder / "jars"
    broker = start_broker(folder, port=free_port(span=2), jars_dir=jars)
    try:
        yield broker
    finally:
        stop_broker(folder)


def produce(
    spark, broker: KafkaBroker, topic: str, values: list[str], *, partition: int | None = None
) -> None:
    """Send ``values`` to ``topic`` with Spark's own Kafka sink (a batch write), in order
    into one ``partition`` if given, else spread over the topic's partitions."""
    frame = spark.createDataFrame([(v,) for v in values], "value STRING")
    if partition is not None:
        frame = frame.selectExpr("value", f"{partition} AS partition").coalesce(1)
    (
        frame.write.format("kafka")
        .option("kafka.bootstrap.servers", broker.bootstrap_servers)
        .option("topic", topic)
        .save()
    )
