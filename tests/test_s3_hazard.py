"""Concurrent Delta commits on S3: the hazard of Delta's default log store, and lakesink's fix.

Two processes, each with its own Spark JVM, write ``_delta_log/N.json`` of one table on the
SeaweedFS server through a Delta ``LogStore`` at the same moment, N after N, as two drivers
committing version N would (the parent releases both at once for every round). A round in
which both writes report success is a lost commit: the first object was silently replaced.
Delta's default for ``s3a://`` (``S3SingleDriverLogStore``: a lock inside one JVM, an
existence check, a plain PUT) loses commits; lakesink's ``S3ConditionalLogStore``
(``If-None-Match: *``) gives each round exactly one winner, whose bytes are what is stored,
and the other writer ``FileAlreadyExistsException`` (what Delta retries a commit on).

How the tests know the writes raced and who decided: each writer notes when its write began
and ended (they overlap), and the race runs on a server of this module's own that logs every
request it answers. There the default store's lost rounds are two PUTs both taken (200,
200), and each round of lakesink's store is one PUT taken and the loser's PUT refused by the
store (412): a store that checks for the version, then puts it, would never send a PUT the
store refuses. delta-rs's own commits are shown refused the same way, by two of its writers
appending at once.

Also here: the log store jar builds, a Spark + Delta round trip on ``s3a://`` uses it, and
delta-rs reads that table and appends to it.

This file is also the child processes' script: ``python tests/test_s3_hazard.py race|roundtrip``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import reduce
from pathlib import Path

import pytest
from servers.cluster import free_port
from servers.s3 import (
    Request,
    S3Server,
    create_bucket,
    get_object,
    load_server,
    put_object,
    start_server,
    stop_server,
)

from lakesink.errors import ConfigurationError
from lakesink.jvm import wait_gone
from lakesink.storage.logstore import LOGSTORE_CLASS, logstore_jar
from lakesink.storage.options import StorageOptions

try:  # as a test module; as the children's script the fixture module is not needed
    from s3_fixture import BUCKET, s3_server, s3_uri  # noqa: F401
except ImportError:  # pragma: no cover
    BUCKET = "lakesink-tests"

DEFAULT_S3_LOGSTORE = "io.delta.storage.S3SingleDriverLogStore"
ROUNDS = 30
APPEND_ROUNDS = 3
# delta-rs's appends race until the store has refused this many commits (at most so many rounds).
DELTARS_REFUSALS, DELTARS_ROUNDS = 3, 100
MARK = "LAKESINK-CHILD "
HERE = Path(__file__).resolve()
# Light JVMs: one core, no UI, no C2 compiler.
CHILD_SPARK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    "spark.sql.session.timeZone": "UTC",
}


# --- the parent's side ---------------------------------------------------------------------


class Child:
    """A child process of this script, spoken to by lines on stdin and stdout."""

    def __init__(self, arguments: Sequence[str], log_path: Path, env: dict[str, str]) -> None:
        self.log_path = log_path
        self._log = open(log_path, "wb")  # noqa: SIM115 (closed in close())
        self.process = subprocess.Popen(
            [sys.executable, str(HERE), *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=HERE.parent.parent,
        )
        self._buffer = b""

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{line}\n".encode())
        self.process.stdin.flush()

    def receive(self, timeout: float = 180.0) -> dict:
        """The next message of the child (lines not marked as ours are Spark's chatter)."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(MARK):
                    return json.loads(text[len(MARK) :])
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no answer within {timeout:.0f}s; see {self.log_path}")
            ready, _, _ = select.select([self.process.stdout], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 65536)
                if not chunk:
                    self.process.wait(timeout=30)
                    raise AssertionError(
                        f"child exited ({self.process.returncode}): "
                        f"{self.log_path.read_text(errors='replace')[-3000:]}"
                    )
                self._buffer += chunk

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.send("quit")
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


@contextmanager
def children(*argument_lists: Sequence[str], logs: Path) -> Iterator[list[Child]]:
    started: list[Child] = []
    try:
        for number, arguments in enumerate(argument_lists):
            started.append(Child(arguments, logs / f"child-{number}.log", dict(os.environ)))
        yield started
    finally:
        for child in started:
            child.close()


@pytest.fixture(scope="module")
def server_with_access_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    """A server of this module's own that logs every request it answers: what the store
    made of each write (its status, when it came and went) is read from its side."""
    folder = tmp_path_factory.mktemp("logged-s3")
    server = start_server(folder, port=free_port(), access_log=True)
    try:
        create_bucket(server, BUCKET)
        yield server
    finally:
        # Its data are thrown away: no need to wait out weed's graceful stop (up to 30 s).
        stop_server(folder, timeout=5)


@pytest.fixture
def logged_s3(server_with_access_log: S3Server) -> Iterator[S3Server]:
    """That server, the ``AWS_*`` variables (and so child processes) pointing at it."""
    with server_with_access_log.exported():
        yield server_with_access_log


def puts(server: S3Server, key: str) -> list[Request]:
    """The PUTs of ``BUCKET/key`` the server answered, in the order answered."""
    return [r for r in server.requests() if r.method == "PUT" and r.path == f"/{BUCKET}/{key}"]


def overlapped(requests: Sequence[Request]) -> bool:
    """Whether the requests were all at the server at one moment."""
    return max(r.arrived for r in requests) < min(r.answered for r in requests)


def _log_key(table: str, version: int) -> str:
    return f"{table.split('/', 3)[3]}/_delta_log/{version:020d}.json"


def _round(both: list[Child], command: str, delay: float) -> list[dict]:
    """Send ``command`` to both children, to run at one instant of the shared clock
    (however late either got the line); their answers."""
    start_at = time.time() + delay
    for child in both:
        child.send(f"{command} {start_at}")
    return [child.receive() for child in both]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("store", "safe"),
    [(DEFAULT_S3_LOGSTORE, False), (LOGSTORE_CLASS, True)],
    ids=["delta-default-store", "lakesink-conditional-store"],
)
def test_two_committers_race_for_each_version(
    logged_s3: S3Server, tmp_path: Path, store: str, safe: bool
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = s3_uri("hazard")
    # S3SingleDriverLogStore lists _delta_log before it writes and fails if there is none.
    put_object(logged_s3, BUCKET, _log_key(table, 0), b'{"commitInfo":{}}\n')
    outcomes: list[tuple[str, str]] = []
    calls_overlapped: list[bool] = []  # both writers inside their write at one moment
    stored_as_winner = 0
    with children(("race", store, "A"), ("race", store, "B"), logs=tmp_path) as both:
        for child in both:
            assert child.receive()["ready"]
        for version in range(1, ROUNDS + 1):
            answers = _round(both, f"write {table} {version}", 0.05)
            for answer in answers:
                assert answer["result"] in ("won", "exists"), answer
            outcomes.append((answers[0]["result"], answers[1]["result"]))
            calls_overlapped.append(
                max(a["started"] for a in answers) < min(a["ended"] for a in answers)
            )
            stored = get_object(logged_s3, BUCKET, _log_key(table, version))
            winners = [a["content"] for a in answers if a["result"] == "won"]
            stored_as_winner += stored is not None and stored.decode() in winners
        if safe:
            # End to end: Delta appends from both drivers at once, each round.
            options = StorageOptions.from_env()
            appended = s3_uri("appends")
            location, storage_options = (
                options.deltars_uri(appended),
                options.deltars_options(appended),
            )
            first = pa.table({"writer": ["init"], "number": pa.array([0], pa.int32())})
            write_deltalake(location, first, storage_options=storage_options)
            for number in range(1, APPEND_ROUNDS + 1):
                for answer in _round(both, f"append {appended} {number}", 0.3):
                    assert answer["result"] == "ok", answer["detail"]
    # What the store saw of each round: the PUTs of its version, with their statuses.
    rounds = [puts(logged_s3, _log_key(table, v)) for v in range(1, ROUNDS + 1)]
    statuses = [sorted(r.status for r in seen) for seen in rounds]
    at_once = sum(1 for seen in rounds if len(seen) >= 2 and overlapped(seen))
    lost = [outcome == ("won", "won") for outcome in outcomes]
    single = sum(1 for outcome in outcomes if sorted(outcome) == ["exists", "won"])
    print(
        f"\n{store}: {ROUNDS} rounds of two concurrent writes of one log version: "
        f"{sum(lost)} commits lost (both writers told success), {single} rounds with one "
        f"winner; the two writes overlapped in {sum(calls_overlapped)} rounds, and were in "
        f"the store at once in {at_once}; the store answered {Counter(map(tuple, statuses))}"
    )
    if not safe:
        assert any(lost), f"the default store lost no commit in {ROUNDS} rounds: {outcomes}"
        for round_lost, both_in, seen in zip(lost, calls_overlapped, statuses, strict=True):
            if round_lost:  # the store took both PUTs; the writes overlapped to get there
                assert both_in and seen == [200, 200], (calls_overlapped, statuses)
        return
    assert not any(lost)
    assert single == ROUNDS, outcomes
    # The writes overlapped in most rounds (in some both PUTs were in the store at once),
    # and in every round the loser's PUT reached the store and was refused there (412
    # If-None-Match, or 409 while the other was in flight): a store that checks, then
    # puts, never sends a PUT the store refuses.
    assert sum(calls_overlapped) >= ROUNDS // 2, calls_overlapped
    assert at_once >= 1, statuses
    for seen in statuses:
        assert seen.count(200) == 1 and len(seen) >= 2, statuses
        assert set(seen) - {200} <= {409, 412}, statuses
    assert stored_as_winner == ROUNDS
    result = DeltaTable(location, storage_options=storage_options)
    history = result.history()
    # A commit that read the version before last lost the race for its version once, got
    # FileAlreadyExistsException from the store, and was retried by Delta one version on.
    retried = [h for h in history if h.get("readVersion", h["version"] - 1) < h["version"] - 1]
    print(
        f"{store}: {APPEND_ROUNDS} rounds of two concurrent Delta appends: "
        f"{result.to_pyarrow_table().num_rows} rows of {1 + 2 * APPEND_ROUNDS}, "
        f"{len(retried)} commits retried after losing a version"
    )
    assert result.version() == 2 * APPEND_ROUNDS
    columns = result.to_pyarrow_table().to_pydict()
    rows = sorted(zip(columns["writer"], columns["number"], strict=True))
    assert rows == sorted(
        [("init", 0)] + [(w, n) for w in "AB" for n in range(1, APPEND_ROUNDS + 1)]
    )
    assert retried


@pytest.mark.slow
def test_spark_and_deltars_share_an_s3a_table(s3_server: S3Server, tmp_path: Path) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = s3_uri("roundtrip")
    options = StorageOptions.from_env()
    with children(("roundtrip", table), logs=tmp_path) as (spark,):
        first = spark.receive()
        # Delta resolves s3a:// and s3:// to lakesink's store, not its default.
        assert first["log_stores"] == {"s3a": LOGSTORE_CLASS, "s3": LOGSTORE_CLASS}
        assert first["rows"] == 8
        assert first["version"] == 2  # created, appended, appended again through s3://

        location = options.deltars_uri(table)
        assert location.startswith("s3://")
        storage_options = options.deltars_options(table)
        delta = DeltaTable(location, storage_options=storage_options)
        assert delta.version() == 2
        assert delta.to_pyarrow_table().num_rows == 8
        write_deltalake(
            location,
            pa.table({"id": pa.array([100, 101], pa.int64())}),
            mode="append",
            storage_options=storage_options,
        )
        spark.send("reread")
        assert spark.receive()["rows"] == 10


def test_deltars_commits_are_conditional_puts(logged_s3: S3Server) -> None:
    """Two delta-rs writers append at once, round after round, until the store has refused
    a few commits' PUTs (412): each such loser had looked for the version, not found it,
    and put it after the other writer's commit landed, the window in which a writer that
    checks, then puts, replaces the other's commit. Each version is stored once, as its
    first PUT made it, and every row is in the table once."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = s3_uri("deltars")
    options = StorageOptions.from_env()
    location, storage_options = options.deltars_uri(table), options.deltars_options(table)
    assert "AWS_S3_ALLOW_UNSAFE_RENAME" not in storage_options

    def append(*values: int) -> None:
        rows = pa.table({"id": pa.array(values, pa.int64())})
        write_deltalake(location, rows, mode="append", storage_options=storage_options)

    append(0)
    log_folder = f"/{BUCKET}/{_log_key(table, 0).rsplit('/', 1)[0]}/"
    refused, rounds = 0, 0
    while refused < DELTARS_REFUSALS and rounds < DELTARS_ROUNDS:  # about every other round races
        rounds += 1
        both_ready = threading.Barrier(2, timeout=60)

        def writer(number: int, ready: threading.Barrier = both_ready) -> None:
            ready.wait()
            append(number)  # delta-rs retries a refused commit as the next version

        writers = [threading.Thread(target=writer, args=(rounds * 2 + n,)) for n in (0, 1)]
        for thread in writers:
            thread.start()
        for thread in writers:
            thread.join()
        commits = [r for r in logged_s3.requests() if r.path.startswith(log_folder)]
        refused = sum(1 for r in commits if r.method == "PUT" and r.status == 412)

    print(f"\ndelta-rs: {rounds} rounds of two appends at once, {refused} commits refused (412)")
    assert refused >= DELTARS_REFUSALS, f"no commit raced in {rounds} rounds"
    latest = DeltaTable(location, storage_options=storage_options)
    assert latest.version() == 2 * rounds
    for version in range(latest.version() + 1):
        assert [r.status for r in puts(logged_s3, _log_key(table, version))].count(200) == 1
    ids = latest.to_pyarrow_table()["id"].to_pylist()
    assert sorted(ids) == [0, *range(2, 2 * rounds + 2)]


def test_the_server_refuses_a_second_conditional_put(s3_server: S3Server) -> None:
    key = f"conditional/{time.time_ns()}.json"
    assert put_object(s3_server, BUCKET, key, b"first", if_none_match=True)
    assert not put_object(s3_server, BUCKET, key, b"second", if_none_match=True)
    assert get_object(s3_server, BUCKET, key) == b"first"


def test_server_keeps_its_data_across_sigkill_and_restart(tmp_path: Path) -> None:
    # Its own server: the session's is shared with other tests (and xdist workers).
    server = start_server(tmp_path / "s3", port=free_port())
    try:
        create_bucket(server, "survivor")
        assert put_object(server, "survivor", "t/_delta_log/0.json", b"zero", if_none_match=True)
        os.kill(server.pid, signal.SIGKILL)
        assert wait_gone(server.pid, 10)
        again = start_server(tmp_path / "s3", port=server.port)
        assert (again.access_key, again.secret_key) == (server.access_key, server.secret_key)
        assert get_object(again, "survivor", "t/_delta_log/0.json") == b"zero"
        assert not put_object(again, "survivor", "t/_delta_log/0.json", b"x", if_none_match=True)
        assert load_server(tmp_path / "s3").pid == again.pid
    finally:
        stop_server(tmp_path / "s3")
    with pytest.raises(ConfigurationError, match="no S3 server"):
        load_server(tmp_path / "s3")


def test_logstore_jar_builds_once(tmp_path: Path) -> None:
    import zipfile

    jar = logstore_jar(tmp_path)
    built = jar.stat().st_mtime_ns
    names = zipfile.ZipFile(jar).namelist()
    assert LOGSTORE_CLASS.replace(".", "/") + ".class" in names
    assert logstore_jar(tmp_path) == jar
    assert jar.stat().st_mtime_ns == built  # not rebuilt: the source did not change


def test_logstore_jar_without_javac_names_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(ConfigurationError, match=r"javac.*JDK"):
        logstore_jar(tmp_path / "empty")


# --- the children's side -------------------------------------------------------------------


def _say(**message: object) -> None:
    sys.stdout.write(MARK + json.dumps(message) + "\n")
    sys.stdout.flush()


def _wait_until(instant: float) -> None:
    while (left := instant - time.time()) > 0:
        time.sleep(min(left, 0.01))


def _spark(log_store: str = LOGSTORE_CLASS):
    """A light Spark session for the S3 server of the environment, committing to ``s3a://``
    and ``s3://`` tables through ``log_store``."""
    from lakesink.spark.session import spark_session

    conf = {
        **CHILD_SPARK_CONF,
        "spark.delta.logStore.s3a.impl": log_store,
        "spark.delta.logStore.s3.impl": log_store,
    }
    spark = spark_session(master="local[1]", conf=conf, storage=StorageOptions.from_env())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _race(store_class: str, writer: str) -> None:
    """Commit when told: ``write TABLE VERSION AT`` through the log store directly,
    ``append TABLE NUMBER AT`` as a Delta append of one row; each at the instant AT."""
    from py4j.protocol import Py4JJavaError

    spark = _spark(store_class)
    jvm = spark._jvm
    hadoop_conf = spark._jsc.hadoopConfiguration()
    store = reduce(getattr, store_class.split("."), jvm)(hadoop_conf)
    _say(ready=True)
    for line in sys.stdin:
        command = line.split()
        if command[0] == "quit":
            break
        action, table, number, start_at = command[0], command[1], int(command[2]), command[3]
        if action == "append":
            frame = spark.createDataFrame([(writer, number)], "writer STRING, number INT")
            _wait_until(float(start_at))
            try:
                frame.write.format("delta").mode("append").save(table)
                _say(result="ok", detail="")
            except Exception as exc:  # the parent decides
                _say(result="error", detail=str(exc)[:3000])
            continue
        content = json.dumps({"commitInfo": {"hazardTest": {"writer": writer, "round": number}}})
        actions = jvm.java.util.ArrayList()
        actions.add(content)
        path = jvm.org.apache.hadoop.fs.Path(f"{table}/_delta_log/{number:020d}.json")
        _wait_until(float(start_at))
        started = time.time()
        try:
            store.write(path, actions.iterator(), False, hadoop_conf)
            result, detail = "won", ""
        except Py4JJavaError as exc:
            name = exc.java_exception.getClass().getName()
            result = "exists" if name == "java.nio.file.FileAlreadyExistsException" else "error"
            detail = str(exc.java_exception.toString())
        ended = time.time()
        _say(result=result, content=content + "\n", detail=detail, started=started, ended=ended)
    spark.stop()


def _roundtrip(table: str) -> None:
    spark = _spark()
    jvm = spark._jvm
    spark.range(5).write.format("delta").save(table)
    spark.range(5, 7).write.format("delta").mode("append").save(table)
    s3_spelling = "s3" + table[len("s3a") :]
    spark.range(7, 8).write.format("delta").mode("append").save(s3_spelling)
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, table)
    stores = {
        scheme: log.store()
        .getDelegate(jvm.org.apache.hadoop.fs.Path(f"{scheme}{table[len('s3a') :]}"))
        .logStoreImpl()
        .getClass()
        .getName()
        for scheme in ("s3a", "s3")
    }
    from delta.tables import DeltaTable

    version = DeltaTable.forPath(spark, table).history(1).first()["version"]
    _say(log_stores=stores, rows=spark.read.format("delta").load(table).count(), version=version)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        _say(rows=spark.read.format("delta").load(table).count())
    spark.stop()


if __name__ == "__main__":
    if sys.argv[1] == "race":
        _race(*sys.argv[2:4])
    else:
        _roundtrip(sys.argv[2])
