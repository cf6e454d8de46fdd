"""lakesink through Spark Connect: the sink, a group's coordinator, the readers, a
streaming query's batches written in the server's Python worker, an operator's commit (the
library's and ``lakesink commit --remote``) and ``lakesink vacuum --remote``, from clients
with no JVM, in both commit modes, with the tables on local disk and on the S3 server.

The client (``tests/data/connect/client.py``) runs in a process of its own with no ``java``
on its ``PATH`` and no ``JAVA_HOME``: anything of lakesink that tried to start or reach a
JVM on the client would fail there. Its Spark work runs on a Spark Connect server with
Delta (``servers.connect``); what it committed is read back by delta-rs, which is neither
lakesink nor Spark.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from s3_fixture import STORES, s3_uri

from lakesink.storage.location import join

CLIENT = Path(__file__).resolve().parent / "data" / "connect" / "client.py"
LAKESINK = Path(sys.executable).parent / "lakesink"


def published_ids(table: str) -> list[int]:
    """The ids the table's published table holds, read by delta-rs."""
    from deltalake import DeltaTable

    from lakesink.storage.options import StorageOptions
    from lakesink.tables.format import published_path

    location = published_path(table)
    options = StorageOptions.from_env().deltars_options(location)
    return sorted(
        DeltaTable(location, storage_options=options).to_pyarrow_table().column("id").to_pylist()
    )


def without_java() -> dict[str, str]:
    """This environment with every folder holding a ``java`` off ``PATH``."""
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    folders = env.get("PATH", "").split(os.pathsep)
    env["PATH"] = os.pathsep.join(f for f in folders if not (Path(f) / "java").exists())
    return env


@pytest.mark.slow
@pytest.mark.parametrize("store", STORES)
def test_a_connect_client_writes_commits_reads_and_vacuums_exactly_once(
    connect_server, store: str, tmp_path: Path
) -> None:
    lake = s3_uri("connect") if store == "s3" else str(tmp_path / "lake")
    done = subprocess.run(
        [sys.executable, str(CLIENT), connect_server.url, lake],
        capture_output=True,
        text=True,
        timeout=900,
        env=without_java(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["session"].startswith("pyspark.sql.connect")
    assert found["orders"] == list(range(10))  # two checkpoints, each row once
    assert found["orders_committed"] == 10
    assert found["group"] == [6, 6] and found["group_committed"] == [6, 6]
    assert found["held_verdict"] == "held"
    assert found["held_before"] == [] and found["held_after"] == list(range(5))
    # The streaming query: two batches, then one more after its restart. Each batch's
    # commit waited for the next batch (in the server's worker) or for the client's close.
    assert found["before_close"] == [4, 8]  # the last batch of each run still pending
    assert found["after_close"] == [list(range(8)), list(range(12))]
    assert found["counts"] == [4, 4, 4]  # one row per batch in the other table, each once

    # The operator's commands, through the same server, from a process with no JVM.
    held = join(lake, "held")
    second = str(found["held_second"])
    command = [str(LAKESINK), "commit", held, "--checkpoint", second, "--yes", "--remote"]
    done = subprocess.run(
        [*command, connect_server.url], capture_output=True, text=True, env=without_java()
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert published_ids(held) == list(range(10))
    done = subprocess.run(
        [str(LAKESINK), "vacuum", held, "--json", "--remote", connect_server.url],
        capture_output=True,
        text=True,
        env=without_java(),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["rows_removed"] == 0  # nothing aborted: nothing to remove
