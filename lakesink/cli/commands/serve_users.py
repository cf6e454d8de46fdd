"""``lakesink serve-users``: the users file whose logins ``lakesink serve`` admits."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lakesink.cli.commands.common import Subparsers, add_verbose_option
from lakesink.cli.output import Output
from lakesink.errors import ConfigurationError

__all__ = ["add_parser"]


def add_parser(commands: Subparsers) -> None:
    parser = commands.add_parser(
        "serve-users",
        help="add, change, remove or list the users lakesink serve admits",
        description="Manage the users file lakesink serve checks logins against: one "
        "NAME:HASH line per user, the password's salted bcrypt hash (no password is kept), "
        "mode 0600. add asks for the password on the terminal, twice, or reads the first "
        "line of stdin; it changes the password of a user who exists. A change takes effect "
        "at the next login, without restarting the server. Exit 0 done, 2 bad input.",
    )
    parser.add_argument("action", choices=["add", "remove", "list"])
    parser.add_argument("name", nargs="?", help="the user name (add, remove)")
    parser.add_argument(
        "--users",
        type=Path,
        metavar="FILE",
        help="the users file (default ~/.config/lakesink/serve-users)",
    )
    add_verbose_option(parser)
    parser.set_defaults(func=_serve_users)


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
