"""The ``lakesink`` command line."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from lakesink import __version__
from lakesink.cli.exits import EXIT_BAD_INPUT, EXIT_CHECK_FAILED, EXIT_CODES, run_command
from lakesink.cli.output import JsonOutput, Output, TextOutput
from lakesink.cli.spark_output import add_spark_options, jvm_output
from lakesink.delta.modes import COMMIT_MODES
from lakesink.errors import ConfigurationError, TableNotFoundError
from lakesink.storage.access import check_reachable
from lakesink.storage.files import has_files, require_delta_table
from lakesink.storage.location import normalize

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric
    from pyspark.sql import SparkSession

    from lakesink.core import CheckpointRecord
    from lakesink.core.validation import ValidationReport
    from lakesink.tables.journal import TransactionStatus

__all__ = ["main"]


def _jars(args: argparse.Namespace, out: Output) -> int:
    from lakesink.spark.session import KAFKA_CONNECTOR, delta_maven_coordinate
    from lakesink.storage.options import StorageOptions

    if args.log_store:
        found = StorageOptions.spark_jars()
    else:
        found = [
            delta_maven_coordinate(),
            *([KAFKA_CONNECTOR] if args.kafka else []),
            *(StorageOptions.spark_packages() if args.s3 else []),
        ]
    out.show(found, lambda: ",".join(found))
    return 0


def _metastore(args: argparse.Namespace, out: Output) -> int:
    from lakesink.spark import metastore

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    # Loopback only (the module's default host): the server has no authentication.
    if args.action == "start":
        started = metastore.start_server(args.dir, port=args.port)
        out.show(started, lambda: started)
        return 0
    if args.action == "stop":
        metastore.stop_server(data_dir=args.dir, port=args.port)
        return 0
    if metastore.server_running(port=args.port):
        url = metastore.jdbc_url(port=args.port)
        out.show(url, lambda: url)
        return 0
    print(f"no metastore server answers on 127.0.0.1:{args.port}", file=sys.stderr)
    return EXIT_CHECK_FAILED


def _reachable(*locations: str | None, write: bool = False) -> list[str]:
    """The locations normalized, once each store answered (before anything else runs)."""
    found = [normalize(location) for location in locations if location]
    for location in found:
        check_reachable(location, write=write)
    return found


def _session(args: argparse.Namespace) -> SparkSession:
    from lakesink.spark.session import spark_session

    print("starting Spark ...", file=sys.stderr, flush=True)
    spark = spark_session(master=args.master, app_name="lakesink-cli", jvm_output=jvm_output(args))
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _status(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.status import job_status, sink_status

    now = datetime.now(timezone.utc)
    _reachable(*args.table, args.state)
    statuses = [sink_status(table) for table in args.table]
    reports = [status.as_dict(now) for status in statuses]
    job = job_status(args.state, args.job_id) if args.state else None
    if args.report:
        from lakesink.core.validation import ValidationReport

        for status in statuses:
            held = [
                (t, ValidationReport.from_json(t.last_validation) if t.last_validation else None)
                for t in status.held
            ]
            _write_reports(held, status.table_path, args.report)
    out.show({"sinks": reports, "job": job}, lambda: _status_text(reports, job))
    return 0


def _status_text(reports: list[dict[str, Any]], job: dict[str, Any] | None) -> str:
    lines = []
    for report in reports:
        lines.append(f"sink {report['sink_id']}  ({report['table']})")
        lines.append(
            f"  last committed checkpoint: {report['last_committed_checkpoint']}"
            f"   committed rows: {report['committed_rows']}"
        )
        for kind in ("pending", "held", "aborted"):
            rows = report[kind]
            lines.append(f"  {kind}: {len(rows)}")
            for txn in rows:
                error = f"  error: {txn['last_error']}" if txn["last_error"] else ""
                state = "vacuumed" if txn["vacuumed"] else txn["state"]
                lines.append(
                    f"    checkpoint {txn['checkpoint_id']:>5}  {state:<13} "
                    f"writer {txn['writer_id']:<8} age {txn['age_seconds']:>9.1f}s "
                    f"rows {txn['rows'] if txn['rows'] is not None else '?'}{error}"
                )
                if txn["validation"] and kind != "aborted":
                    lines.append(f"      {txn['validation']}")
    if job is not None:
        lines.append(f"job {job['job_id']}  ({job['state']})")
        lines.append(f"  last completed checkpoint: {job['last_completed_checkpoint']}")
        lines.append(f"  quarantined input: {len(job['quarantined'])}")
        for q in job["quarantined"]:
            lines.append(f"    checkpoint {q['checkpoint_id']:>5}  {q['item']}: {q['reason']}")
    return "\n".join(lines)


def _checkpoints(args: argparse.Namespace, out: Output) -> int:
    from lakesink.tables.checkpoints import checkpoints_path, read_history

    (state,) = _reachable(args.state)
    records = read_history(checkpoints_path(state), args.job_id)
    out.show([r.as_dict() for r in records], lambda: _checkpoints_text(records))
    return 0


def _checkpoints_text(records: Sequence[CheckpointRecord]) -> str:
    lines = [
        f"{'checkpoint':>10}  {'completed at (UTC)':<26} {'items':>5} {'rows':>8}  quarantined"
    ]
    for r in records:
        quarantined = ", ".join(f"{q.item} ({q.reason})" for q in r.quarantined)
        rows = "?" if r.rows is None else r.rows
        lines.append(
            f"{r.checkpoint_id:>10}  {r.completed_at:%Y-%m-%d %H:%M:%S.%f}  "
            f"{len(r.items):>5} {rows:>8}  {quarantined}"
        )
    return "\n".join(lines)


def _metrics(args: argparse.Namespace, out: Output) -> int:
    from prometheus_client import generate_latest
    from prometheus_client.registry import Collector

    from lakesink.ops.metrics import MetricsExport, sink_registry

    export = MetricsExport(textfile=args.textfile, push_gateway=args.push_gateway, job=args.job)
    registry = sink_registry(_reachable(*args.table))
    if args.json or not export.enabled:  # exported as text, they go to the file or gateway
        # Folded once from the journals, for either form.
        families = list(registry.collect())

        class Folded(Collector):
            def collect(self) -> Iterable[Metric]:
                return families

        samples = [
            {"name": s.name, "labels": s.labels, "value": s.value}
            for family in families
            for s in family.samples
        ]
        # The exposition format ends its last line; print ends it once.
        out.show(
            {"metrics": samples},
            lambda: generate_latest(Folded()).decode().removesuffix("\n"),
        )
    if not export.enabled:
        return 0
    export.send(registry)
    where = " and ".join(
        f"{kind} {target}"
        for kind, target in (("wrote", export.textfile), ("pushed to", export.push_gateway))
        if target
    )
    print(f"metrics of {len(args.table)} sink(s): {where}", file=sys.stderr)
    return 0


# What an operator's action leaves a checkpoint as.
DONE = {"commit": "committed", "abort": "aborted"}


def _resolve(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.resolve import plan_resolution, resolve_checkpoint

    (table,) = _reachable(args.table, write=True)
    # Before Spark: a wrong checkpoint, a running writer, a refused action fail at once,
    # and a checkpoint already settled needs nothing.
    plan = plan_resolution(table, args.checkpoint, args.command)
    done_word = DONE[args.command]
    rows = "?" if plan.rows is None else plan.rows
    if plan.done:
        out.show(
            {f"already_{done_word}": _checkpoint_json(args.checkpoint, plan.transactions)},
            lambda: (
                f"checkpoint {args.checkpoint} of {table} is already {done_word} "
                f"({len(plan.transactions)} transaction(s), {rows} rows): nothing to do"
            ),
        )
        return 0
    states = ", ".join(sorted({t.state.value for t in plan.transactions}))
    question = (
        f"{args.command} checkpoint {args.checkpoint} of {table}: "
        f"{len(plan.transactions)} transaction(s), {rows} rows ({states})?"
    )
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"{question}\nrefusing without a terminal to confirm; pass --yes", file=sys.stderr
            )
            return EXIT_BAD_INPUT
        if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing changed")
            return EXIT_CHECK_FAILED
    done = resolve_checkpoint(
        _session(args),
        table,
        args.checkpoint,
        args.command,
        mode=getattr(args, "mode", "merge"),  # abort has no mode
        progress=lambda line: print(line, file=sys.stderr, flush=True),
    )
    out.show(
        {done_word: _checkpoint_json(args.checkpoint, done)},
        lambda: (
            f"{done_word} checkpoint {args.checkpoint}: {len(done)} transaction(s), {rows} rows"
        ),
    )
    return 0


def _checkpoint_json(
    checkpoint_id: int, transactions: Sequence[TransactionStatus]
) -> dict[str, Any]:
    return {
        "checkpoint_id": checkpoint_id,
        "transactions": [
            {
                "txn_id": t.txn_id,
                "writer_id": t.writer_id,
                "state": t.state.value,
                "rows": t.row_count,
            }
            for t in transactions
        ],
    }


def _validate(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.resolve import pending_transactions, revalidate_checkpoint
    from lakesink.spark.validation import ValidationGate

    (table,) = _reachable(args.table, write=True)
    gate = ValidationGate.from_file(args.suite)
    pending_transactions(table, args.checkpoint)  # before Spark: a wrong one fails fast
    results = revalidate_checkpoint(_session(args), table, args.checkpoint, gate)
    if args.report:
        _write_reports(results, table, args.report)
    out.show(
        [json.loads(report.to_json()) for _, report in results],
        lambda: "\n".join(
            f"checkpoint {txn.checkpoint_id}  {txn.state.value}  writer {txn.writer_id}\n"
            f"  {report.summary()}"
            for txn, report in results
        ),
    )
    return 0 if all(report.success for _, report in results) else EXIT_CHECK_FAILED


def _write_reports(
    validated: Sequence[tuple[TransactionStatus, ValidationReport | None]],
    table: str,
    directory: str,
) -> None:
    """Data Docs pages of (transaction, its report or None) pairs; their paths to stderr."""
    from lakesink.ops.reports import write_report_page

    for txn, report in validated:
        page = (
            None
            if report is None
            else write_report_page(report, txn, table_path=table, directory=directory)
        )
        if page is None:
            print(
                f"checkpoint {txn.checkpoint_id} (writer {txn.writer_id}): no GX result to render "
                "(the run raised, or an older lakesink kept only a summary); lakesink validate "
                "--report renders a new one",
                file=sys.stderr,
            )
        else:
            print(f"report of checkpoint {txn.checkpoint_id}: {page}", file=sys.stderr)


def _serve(args: argparse.Namespace, out: Output) -> int:
    from lakesink.cli.signals import stop_requested
    from lakesink.ops.serve import ServeOptions, serve
    from lakesink.ops.serve_access import ServeAuth, ServeTls, check_access

    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigurationError("TLS needs both --tls-cert and --tls-key")
    auth = ServeAuth(
        users_file=args.users,
        ldap_url=args.ldap_url,
        ldap_user_dn=args.ldap_user_dn,
        no_auth=args.no_auth,
    )
    tls = ServeTls(cert=args.tls_cert, key=args.tls_key) if args.tls_cert else None
    check_access(args.host, auth, tls)  # serve checks too; this says no before "starting"
    stop = stop_requested()  # before Spark starts: a signal during the start stops it too
    _reachable(*args.table)
    print("starting Spark and the SQL server ...", file=sys.stderr, flush=True)
    options = ServeOptions(
        host=args.host,
        port=args.port,
        auth=auth,
        tls=tls,
        tables=tuple(args.table),
        master=args.master,
        jvm_output=jvm_output(args),
    )
    serve(options, stop=stop, ready=lambda url: out.show(url, lambda: f"serving SQL at {url}"))
    print("stopped", file=sys.stderr)
    return 0


def _serve_users(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.serve_users import add_user, default_users_file, read_users, remove_user

    path = args.users or default_users_file()
    if args.action != "list" and not args.name:
        raise ConfigurationError(f"give the user's name: lakesink serve-users {args.action} NAME")
    if args.action == "list":
        names = read_users(path)
        out.show(names, lambda: "\n".join(names))
        return 0
    if args.action == "remove":
        remove_user(path, args.name)
        out.show({"removed": args.name}, lambda: f"removed {args.name} from {path}")
        return 0
    new = add_user(path, args.name, _new_password(args.name))
    out.show(
        {"added" if new else "changed": args.name},
        lambda: f"{'added' if new else 'changed the password of'} {args.name} in {path}",
    )
    return 0


def _new_password(name: str) -> str:
    """A password from the terminal (asked twice), else the first line of stdin: never from
    the command line, which ``ps`` and the shell's history show."""
    import getpass

    if not sys.stdin.isatty():
        return sys.stdin.readline().removesuffix("\n").removesuffix("\r")
    first = getpass.getpass(f"password for {name}: ")
    if getpass.getpass("again: ") != first:
        raise ConfigurationError("the two passwords differ; nothing changed")
    return first


def _checkpoint_view(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.resolve import create_checkpoint_view, pending_transactions

    (table,) = _reachable(args.table)
    pending_transactions(table, args.checkpoint)  # before Spark: a wrong one fails fast
    name, transactions = create_checkpoint_view(_session(args), table, args.checkpoint, args.name)
    states = ", ".join(sorted({t.state.value for t in transactions}))
    out.show(
        {"view": name, **_checkpoint_json(args.checkpoint, transactions)},
        lambda: (
            f"view {name}: the rows of checkpoint {args.checkpoint} ({len(transactions)} "
            f"transaction(s), {states}); query it with SQL before you commit or abort it"
        ),
    )
    return 0


def _migrate(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.migrate import migrate_checkpoints

    (state,) = _reachable(args.state, write=True)
    if not has_files(state):  # before Spark: a wrong path fails fast
        raise TableNotFoundError(f"nothing at {args.state}: pass a job's --state folder")
    plan = migrate_checkpoints(_session(args), args.state, dry_run=args.dry_run)
    out.show(plan, plan.summary)
    return 0


def _migrate_table(args: argparse.Namespace, out: Output) -> int:
    from lakesink.ops.migrate import migrate_table

    (table,) = _reachable(args.table, write=True)
    require_delta_table(table)  # before Spark: a wrong path fails fast
    plan = migrate_table(_session(args), table, dry_run=args.dry_run)
    out.show(plan, plan.summary)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="lakesink",
        description="Exactly-once, two-phase-commit writes from PySpark into Delta Lake.",
        epilog=f"Every command and job ends with {EXIT_CODES}.",
    )
    parser.add_argument("--version", action="version", version=f"lakesink {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    jars = commands.add_parser(
        "jars",
        help="print the Delta jar's Maven coordinate (for spark-submit --packages)",
        description="Print the Maven coordinate of the Delta jar that matches the installed "
        'pyspark and delta-spark, e.g. spark-submit --packages "$(lakesink jars)" job.py',
    )
    jars.add_argument(
        "--kafka", action="store_true", help="also Spark's Kafka connector (comma-separated)"
    )
    jars.add_argument(
        "--s3", action="store_true", help="also hadoop-aws, for s3a:// tables (comma-separated)"
    )
    jars.add_argument(
        "--log-store",
        action="store_true",
        help="instead, the path of lakesink's S3 log store jar (for spark-submit --jars), "
        "built with javac on first use",
    )
    jars.set_defaults(func=_jars)
    server = commands.add_parser(
        "metastore",
        help="start, stop or check a shared metastore server (Derby) for the committed views",
        description="Run a Derby network server that keeps the Hive metastore, so a writer "
        "job and SQL readers in other processes share the committed views at once. start "
        "and status print the JDBC URL to pass as metastore_url= or LAKESINK_METASTORE_URL; "
        "status fails when no server answers.",
    )
    server.add_argument("action", choices=["start", "stop", "status"])
    server.add_argument(
        "--dir",
        default=".cache/metastore",
        help="folder for the metastore database, the server log and pid file "
        "(default: %(default)s)",
    )
    server.add_argument("--port", type=int, default=1527, help="TCP port (default: %(default)s)")
    server.set_defaults(func=_metastore)

    status = commands.add_parser(
        "status",
        help="where each sink stands: last commit, pending and aborted transactions",
        description="Per sink: the last committed checkpoint, committed rows, and every "
        "pending (open, pre-committed, committing), held (failed validation) and aborted "
        "transaction with its age, rows, last error and validation result, by checkpoint "
        "id (the same ids as the job's checkpoints and the journal). With --state, also the "
        "job's last checkpoint and quarantined input. Read from the tables' logs with "
        "delta-rs: no Spark, no JVM. Exit 0, 2 when a table is not a lakesink table, 78 "
        "when its store refuses access or does not answer.",
    )
    status.add_argument("table", nargs="+", help="path of a lakesink table")
    status.add_argument("--state", help="a job's --state folder: show its quarantined input")
    status.add_argument("--job-id", default="ingest", help="job name (default: ingest)")
    status.add_argument(
        "--report",
        metavar="DIR",
        help="write a Great Expectations Data Docs page of each held checkpoint's "
        "validation into DIR (open it in a browser)",
    )
    status.set_defaults(func=_status)

    checkpoints = commands.add_parser(
        "checkpoints",
        help="the checkpoint history of a job",
        description="Every completed checkpoint of a job: its id, time, the input items it "
        "consumed (files), rows and quarantined input.",
    )
    checkpoints.add_argument("--state", required=True, help="the job's --state folder")
    checkpoints.add_argument("--job-id", default="ingest", help="job name (default: ingest)")
    checkpoints.set_defaults(func=_checkpoints)

    metrics = commands.add_parser(
        "metrics",
        help="Prometheus metrics of sinks: pending age, commit latency, checkpoints, rows",
        description="Print each sink's metrics in Prometheus' text format, folded from its "
        "journal: the age of the oldest pending checkpoint, pending and held checkpoints, "
        "committed and aborted checkpoints, committed rows, the last commit, the commit "
        "latency (pre-commit to visible) histogram and what the vacuum removed; the README's "
        "'Operating lakesink' lists the names. No Spark, no JVM: run it from cron with "
        "--textfile for node_exporter's textfile collector, or push it with --push-gateway. "
        "Exit 0, 2 when a table is not a lakesink table, 75 when the Pushgateway did not "
        "answer (retry later), 78 when a table's store refuses access or does not answer.",
    )
    metrics.add_argument("table", nargs="+", help="path of a lakesink table")
    metrics.add_argument(
        "--textfile",
        metavar="FILE.prom",
        help="write them to this file (whole, then renamed into place) instead of stdout",
    )
    metrics.add_argument(
        "--push-gateway", metavar="URL", help="push them to this Prometheus Pushgateway"
    )
    metrics.add_argument(
        "--job",
        default="lakesink",
        help="the Pushgateway's job label, which groups what is pushed (default: lakesink)",
    )
    metrics.set_defaults(func=_metrics)
    resolve = {}
    for action, effect in (
        (
            "commit",
            "make its rows visible (only if its checkpoint really completed: a job "
            "that replays its input would then duplicate it)",
        ),
        ("abort", "its rows never become visible (the vacuum job removes them)"),
    ):
        resolve[action] = commands.add_parser(
            action,
            help=f"{action} a pending checkpoint by hand (operator recovery)",
            description=f"{action.capitalize()} every pending transaction of a checkpoint of a "
            f"sink: {effect}. Asks for confirmation unless --yes. The writers must not be "
            "running: the checkpoint, its writers' locks and leases and the store are "
            f"checked before Spark starts. A checkpoint already {DONE[action]} is left as it "
            "is, and the command says so (a retry of one that landed succeeds). Exit 0 done "
            "(or already done), 1 declined, 2 bad input, 75 a writer of it runs (retry once "
            "it stopped), 78 the store refuses access or does not answer.",
        )
        resolve[action].add_argument("table", help="path of the lakesink table")
        resolve[action].add_argument("--checkpoint", type=int, required=True)
        resolve[action].add_argument("--yes", action="store_true", help="do not ask")
        resolve[action].set_defaults(func=_resolve)
    resolve["commit"].add_argument(
        "--mode",
        choices=COMMIT_MODES,
        default="merge",
        help="how the rows become visible: a Delta MERGE that rewrites them into the "
        "committed partition (default), or a metadata commit that moves their files there, "
        "rewriting no row (as the writer's --commit / SinkOptions.commit)",
    )
    validate = commands.add_parser(
        "validate",
        help="run an expectation suite again on a pending or held checkpoint",
        description="Validate the rows of a checkpoint that is pre-committed or held by the "
        "validation gate with a Great Expectations suite file, and journal the result; "
        "nothing else changes (commit or abort it afterwards). Exit 0 when it passes, 1 "
        "when it fails, 2 on bad input, 78 when its store refuses access or does not answer.",
    )
    validate.add_argument("table", help="path of the lakesink table")
    validate.add_argument("--checkpoint", type=int, required=True)
    validate.add_argument("--suite", required=True, metavar="FILE", help="GX suite JSON file")
    validate.add_argument(
        "--report",
        metavar="DIR",
        help="also write the result as a Great Expectations Data Docs page into DIR",
    )
    validate.set_defaults(func=_validate)
    view = commands.add_parser(
        "checkpoint-view",
        help="a SQL view of a pending or held checkpoint's rows, to audit before publishing",
        description="Create (or replace) a catalog view of the rows of a checkpoint that is "
        "pre-committed or held by the validation gate, user columns only, so SQL checks "
        "(dbt tests, ad hoc queries, a SQL client over the shared metastore) can audit what "
        "is about to be published. It is empty once the checkpoint is committed or "
        "vacuumed. Exit 0 done, 2 bad input (nothing pending in that checkpoint), 78 its "
        "store refuses access or does not answer.",
    )
    view.add_argument("table", help="path of the lakesink table")
    view.add_argument("--checkpoint", type=int, required=True)
    view.add_argument("--name", help="the view's name (default: <sink id>_checkpoint_<N>)")
    view.set_defaults(func=_checkpoint_view)
    sql = commands.add_parser(
        "serve",
        help="run a SQL endpoint (Spark's Thrift JDBC/ODBC server) over the committed views",
        description="Run Spark's Thrift JDBC/ODBC server in the foreground over the catalog "
        "(the shared metastore of $LAKESINK_METASTORE_URL or $LAKESINK_METASTORE_DIR, else one "
        "of its own), after (re)creating the committed view of each --table, named as its "
        "sink. Connect with beeline, a JDBC URL (jdbc:hive2://HOST:PORT/default) or dbt's "
        "spark adapter. Logins are checked against the users file (lakesink serve-users), or "
        "by LDAP; an address other than loopback is served only with logins checked and TLS. "
        "SIGINT or SIGTERM stops it and its JVM. Exit 0 stopped, 2 bad input (a taken port, "
        "a table that is not a lakesink table, no users file, an address beyond loopback "
        "without logins or TLS), 78 a table's store refuses access or does not answer.",
    )
    sql.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    sql.add_argument("--port", type=int, default=10000, help="Thrift port (10000)")
    logins = sql.add_mutually_exclusive_group()
    logins.add_argument(
        "--users",
        type=Path,
        metavar="FILE",
        help="check logins against this users file (default ~/.config/lakesink/serve-users; "
        "lakesink serve-users manages it)",
    )
    logins.add_argument(
        "--ldap-url",
        metavar="URL",
        help="check logins by a bind to this LDAP directory (ldaps://HOST:636); needs "
        "--ldap-user-dn",
    )
    logins.add_argument(
        "--no-auth",
        action="store_true",
        help="check no login: anyone who reaches the port reads every view (loopback only)",
    )
    sql.add_argument(
        "--ldap-user-dn",
        metavar="PATTERN",
        help="a user's DN, %%s standing for the login name: uid=%%s,ou=people,dc=example,dc=org",
    )
    sql.add_argument("--tls-cert", type=Path, metavar="PEM", help="serve TLS with this certificate")
    sql.add_argument("--tls-key", type=Path, metavar="PEM", help="and this (unencrypted) key")
    sql.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="PATH",
        help="a lakesink table whose committed view to serve (repeatable)",
    )
    sql.set_defaults(func=_serve)
    users = commands.add_parser(
        "serve-users",
        help="add, change, remove or list the users lakesink serve admits",
        description="Manage the users file lakesink serve checks logins against: one "
        "NAME:HASH line per user, the password's salted bcrypt hash (no password is kept), "
        "mode 0600. add asks for the password on the terminal, twice, or reads the first "
        "line of stdin; it changes the password of a user who exists. A change takes effect "
        "at the next login, without restarting the server. Exit 0 done, 2 bad input.",
    )
    users.add_argument("action", choices=["add", "remove", "list"])
    users.add_argument("name", nargs="?", help="the user name (add, remove)")
    users.add_argument(
        "--users",
        type=Path,
        metavar="FILE",
        help="the users file (default ~/.config/lakesink/serve-users)",
    )
    users.set_defaults(func=_serve_users)
    for sub in (status, checkpoints, validate, metrics, view, *resolve.values()):
        sub.add_argument("--json", action="store_true", help="machine-readable output")
    for sub in (validate, view, sql, *resolve.values()):
        add_spark_options(sub)
    for sub in (jars, server, status, checkpoints, metrics, users):
        sub.add_argument("--verbose", "-v", action="store_true", help="show a failure's full trace")

    migrate = commands.add_parser(
        "migrate-checkpoints",
        help="rewrite a job's checkpoint table of an older lakesink format",
        description="Rewrite the checkpoint table in a --state folder written by lakesink "
        "0.1 (format 1) in the current format, keeping every record; the old table is kept "
        "beside it as checkpoints.format1. Run it while the jobs of that folder are "
        "stopped. --dry-run says what it would do. Exit 0 done (or nothing to do), 2 bad "
        "input, 78 its store refuses access or does not answer.",
    )
    migrate.add_argument("state", help="the jobs' --state folder")
    migrate.set_defaults(func=_migrate)
    migrate_table = commands.add_parser(
        "migrate-table",
        help="rewrite a sink table of an older lakesink format in place",
        description="Rewrite a lakesink table of an older format (1 to 3) in the current "
        "one (partitioned by the masking bit and the pending transaction; partition values "
        "in the Delta log and the folders only, so every engine reads the right rows), in "
        "place and in one Delta commit; every row and transaction state is kept. Refused "
        "while a writer of the table runs. "
        "--dry-run says what it would do. Exit 0 done (or nothing to do), 2 bad input, 75 a "
        "writer of the table runs, 78 its store refuses access or does not answer.",
    )
    migrate_table.add_argument("table", help="the lakesink table's folder")
    migrate_table.set_defaults(func=_migrate_table)
    for sub in (migrate, migrate_table):
        sub.add_argument("--dry-run", action="store_true", help="report, change nothing")
        sub.add_argument("--json", action="store_true", help="machine-readable output")
        add_spark_options(sub)
    for job, summary in (
        ("vacuum", "remove aborted and expired pending rows, then their files (--dry-run)"),
    ):
        commands.add_parser(job, help=summary)  # listed in --help; main() hands over
    return parser


JOBS = {"vacuum": "lakesink.cli.vacuum"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in JOBS:  # the job parses its own options, --help included
        from importlib import import_module

        return cast(int, import_module(JOBS[argv[0]]).main(argv[1:]))
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return EXIT_BAD_INPUT
    out = (
        JsonOutput() if getattr(args, "json", False) else TextOutput()
    )  # not every command has --json
    return run_command(
        f"lakesink {args.command}", lambda: args.func(args, out), verbose=args.verbose
    )


if __name__ == "__main__":
    sys.exit(main())
