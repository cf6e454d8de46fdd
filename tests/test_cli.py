"""The command line, run as a user runs it: the installed ``lakesink`` script."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

# The console script pip installed next to this interpreter, as a user would call it.
SCRIPT = Path(sys.executable).parent / "lakesink"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"the lakesink console script is not installed at {SCRIPT}"
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_help_lists_the_commands_and_the_exit_codes():
    result = run("--help")
    assert result.returncode == 0
    assert "jars" in result.stdout
    helped = " ".join(result.stdout.split())
    for command in ("status", "commit", "abort", "vacuum", "serve", "metrics", "migrate-table"):
        assert f" {command} " in helped, command
    assert "75 retry later (another live run holds the lock or lease" in helped


def test_jars_prints_the_delta_coordinate_for_spark_submit():
    result = run("jars")
    assert result.returncode == 0
    assert result.stdout.strip() == f"io.delta:delta-spark_4.1_2.13:{version('delta-spark')}"


def test_app_prints_the_file_spark_submit_runs_as_the_command(tmp_path):
    result = run("app")
    assert result.returncode == 0
    app = Path(result.stdout.strip())
    assert app.suffix == ".py" and app.is_file()  # spark-submit runs .py files with Python
    import lakesink

    assert Path(lakesink.__file__).parent in app.parents  # the installed package's own
    # Run as a script from another folder, as spark-submit runs it: the whole command.
    ran = subprocess.run(
        [sys.executable, str(app), "--version"], capture_output=True, text=True, cwd=tmp_path
    )
    assert (ran.returncode, ran.stdout.strip()) == (0, f"lakesink {version('lakesink')}")


def test_no_command_prints_help_and_fails():
    result = run()
    assert result.returncode == 2
    assert "usage: lakesink" in result.stdout


def test_status_shows_last_commit_pending_and_aborted(spark, tmp_path, capsys):
    import json

    from lakesink import DeltaSink
    from lakesink.cli import main

    path = str(tmp_path / "orders")
    schema = "order_id BIGINT"
    sink = DeltaSink.open(spark, path, schema=schema, view_name="cli_status")
    sink.write(spark.createDataFrame([(1,), (2,)], schema))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3,)], schema))
    sink.prepare_commit()  # checkpoint 2 stays pre-committed
    sink.write(spark.createDataFrame([(4,)], schema))
    sink.close()  # checkpoint 3 is aborted

    assert main(["status", path]) == 0
    human = capsys.readouterr().out
    assert "last committed checkpoint: 1   committed rows: 2" in human
    assert "pending: 1" in human and "pre_committed" in human
    assert "aborted: 1" in human

    assert main(["status", "--json", path]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["job"] is None
    (report,) = answer["sinks"]
    assert report["last_committed_checkpoint"] == 1
    assert [(t["checkpoint_id"], t["state"], t["rows"]) for t in report["pending"]] == [
        (2, "pre_committed", 1)
    ]
    assert [t["checkpoint_id"] for t in report["aborted"]] == [3]


def test_status_reads_without_spark_and_exits_0_as_a_process(spark, tmp_path):
    from lakesink import DeltaSink

    path = str(tmp_path / "orders")
    sink = DeltaSink.open(spark, path, schema="order_id BIGINT", view_name="cli_fast")
    sink.write(spark.createDataFrame([(1,), (2,)], "order_id BIGINT"))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(3,)], "order_id BIGINT"))
    sink.prepare_commit()

    result = run("status", path)

    assert result.returncode == 0, result.stderr[-2000:]  # also: no abort at exit
    assert "last committed checkpoint: 1   committed rows: 2" in result.stdout
    assert "pre_committed" in result.stdout and "pending: 1" in result.stdout
    assert "starting Spark" not in result.stderr  # delta-rs reads, no JVM
    sink.close()


def test_status_of_a_path_without_a_lakesink_table_exits_2(spark, tmp_path, capsys):
    from lakesink.cli import main

    assert main(["status", str(tmp_path / "nothing")]) == 2
    assert "no Delta table at" in capsys.readouterr().err


def test_commit_and_abort_by_hand_in_the_tables_own_mode(spark, tmp_path, capsys, commit):
    from lakesink import DeltaSink, committed
    from lakesink.cli import main

    path = str(tmp_path / "orders")
    schema = "order_id BIGINT"
    sink = DeltaSink.open(spark, path, schema=schema, view_name="cli_manual", commit=commit)
    sink.write(spark.createDataFrame([(1,)], schema))
    sink.prepare_commit()  # checkpoint 1: pre-committed
    sink.write(spark.createDataFrame([(2,)], schema))
    sink.prepare_commit()  # checkpoint 2: pre-committed
    sink._release()  # the writer "dies" without committing

    # stdin is not a terminal under pytest: without --yes nothing is done
    assert main(["commit", path, "--checkpoint", "1"]) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert main(["commit", path, "--checkpoint", "1", "--yes"]) == 0
    assert main(["abort", path, "--checkpoint", "2", "--yes"]) == 0
    assert sorted(r.order_id for r in committed(spark, path).collect()) == [1]
    assert main(["commit", path, "--checkpoint", "2", "--yes"]) == 2
    assert "nothing pending in checkpoint 2" in capsys.readouterr().err


def test_a_pending_checkpoint_is_audited_with_sql_by_name_before_it_is_published(
    spark, tmp_path, capsys
):
    from lakesink import DeltaSink, committed
    from lakesink.cli import main

    path = str(tmp_path / "orders")
    schema = "order_id BIGINT, amount DOUBLE"
    sink = DeltaSink.open(spark, path, schema=schema, view_name="cli_audited")
    sink.write(spark.createDataFrame([(1, 5.0)], schema))
    sink.notify_checkpoint_complete(sink.prepare_commit())
    sink.write(spark.createDataFrame([(2, 7.0), (3, -1.0)], schema))
    pending = sink.prepare_commit()  # pre-committed: about to be published

    assert main(["checkpoint-view", path, "--checkpoint", str(pending)]) == 0
    assert f"view orders_checkpoint_{pending}: the rows of checkpoint" in capsys.readouterr().out
    view = f"orders_checkpoint_{pending}"
    assert spark.table(view).columns == ["order_id", "amount"]  # like the committed view
    assert sorted(r.order_id for r in spark.sql(f"SELECT order_id FROM {view}").collect()) == [
        2,
        3,
    ]
    # A SQL check (what a dbt test runs) finds the bad row before anyone can read it.
    assert spark.sql(f"SELECT count(*) AS bad FROM {view} WHERE amount < 0").first().bad == 1
    assert sorted(r.order_id for r in spark.table("cli_audited").collect()) == [1]

    assert main(["checkpoint-view", path, "--checkpoint", "7", "--name", "v7"]) == 2
    assert "nothing pending in checkpoint 7" in capsys.readouterr().err
    sink.notify_checkpoint_complete(pending)
    assert spark.table(view).count() == 0  # published: nothing pending any more
    assert sorted(r.order_id for r in committed(spark, path).collect()) == [1, 2, 3]
    sink.close()


def test_a_command_refused_by_a_live_writers_lock_exits_75_and_bad_input_exits_2(spark, tmp_path):
    import os
    import socket

    from lakesink import DeltaSink
    from lakesink.storage.lease import writer_lock

    path = str(tmp_path / "orders")
    sink = DeltaSink.open(spark, path, schema="order_id BIGINT", view_name="cli_locked")
    sink.write(spark.createDataFrame([(1,)], "order_id BIGINT"))
    sink.prepare_commit()  # pre-committed; the writer goes on running
    lock = writer_lock(path, "orders", "0").path
    assert lock.read_text() == f"{socket.gethostname()} {os.getpid()}"  # this live process

    busy = run("commit", path, "--checkpoint", "1", "--yes", "--master", "local[1]")
    assert busy.returncode == 75, busy.stderr[-2000:]  # EX_TEMPFAIL: a scheduler retries
    assert "is already running" in busy.stderr or "is running" in busy.stderr
    wrong = run("commit", path, "--checkpoint", "9", "--yes", "--master", "local[1]")
    assert wrong.returncode == 2, wrong.stderr[-2000:]
    assert "nothing pending in checkpoint 9" in wrong.stderr
    sink.close()


def test_job_commands_have_their_own_help():
    for job in ("vacuum", "ingest"):
        result = run(job, "--help")
        assert result.returncode == 0, result.stderr
        assert f"usage: lakesink {job}" in result.stdout
    script = Path(__file__).resolve().parent.parent / "jobs" / "ingest.py"  # the same command
    result = subprocess.run(
        [sys.executable, str(script), "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "usage: lakesink ingest" in result.stdout and "--files-per-checkpoint" in result.stdout
