"""``lakesink serve``: a SQL endpoint (Spark's Thrift server) over the committed views."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lakesink.cli.commands.common import Subparsers, reachable
from lakesink.cli.output import Output
from lakesink.cli.spark_output import add_spark_options, jvm_output
from lakesink.errors import ConfigurationError

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
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
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    parser.add_argument("--port", type=int, default=10000, help="Thrift port (10000)")
    logins = parser.add_mutually_exclusive_group()
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
    parser.add_argument(
        "--ldap-user-dn",
        metavar="PATTERN",
        help="a user's DN, %%s standing for the login name: uid=%%s,ou=people,dc=example,dc=org",
    )
    parser.add_argument(
        "--tls-cert", type=Path, metavar="PEM", help="serve TLS with this certificate"
    )
    parser.add_argument("--tls-key", type=Path, metavar="PEM", help="and this (unencrypted) key")
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        metavar="PATH",
        help="a lakesink table whose committed view to serve (repeatable)",
    )
    add_spark_options(parser, remote=False)  # the SQL server runs in this process's Spark
    parser.set_defaults(func=_serve)


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
    reachable(*args.table)
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
