"""``mooncat-checkpoint``: inspect and repair checkpoint stores from a shell.

    mooncat-checkpoint [--url URL] url
    mooncat-checkpoint [--url URL] list NS [--status claimed|done|failed] [--expired]
    mooncat-checkpoint [--url URL] get NS KEY
    mooncat-checkpoint [--url URL] reset NS KEY [--if-expired]
    mooncat-checkpoint [--url URL] gc [--older-than MS] [--prune-finished-older-than MS]

Output is JSON on stdout: one object per line for ``list``, one object otherwise (``gc``: ``removed``,
and the ``unreadable`` records it left in place, counted and listed in ``unreadable_records``, also
named in one line on stderr). Exit status: 0 done;
1 nothing there (``get`` of a missing key, ``reset`` that deleted nothing, a ``file://`` or ``sqlite://``
store that does not exist); 2 bad usage or arguments, an unusable backend, or a record that does not read
(``CorruptRecordError``); 130 interrupted. Errors are one line on stderr. ``--url`` may also follow the command.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

from mooncat_checkpoint.errors import CheckpointError, InvalidArgumentError
from mooncat_checkpoint.model import CheckpointStatus
from mooncat_checkpoint.naming import check_key, check_namespace
from mooncat_checkpoint.sync_client import SyncCheckpointClient
from mooncat_checkpoint.urls import DEFAULT_URL, ENV_VAR, resolve_url, shown_url, split_url

__all__ = ["main", "build_parser"]

PROG = "mooncat-checkpoint"
EXIT_OK = 0
EXIT_NOT_FOUND = 1
EXIT_ERROR = 2


class _Parser(argparse.ArgumentParser):
    """argparse, but usage errors are one line (and still exit 2)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_ERROR, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class _NotFound(Exception):
    pass


def _ms(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number of milliseconds: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    url_help = f"backend URL (default: ${ENV_VAR}, else {DEFAULT_URL})"
    common = _Parser(add_help=False)
    common.add_argument("--url", default=argparse.SUPPRESS, help=url_help)

    parser = _Parser(
        prog=PROG,
        description="Inspect and repair mooncat_checkpoint stores (file://DIR, sqlite://PATH, memory://, "
        "redis://HOST:PORT/DB, postgresql://USER@HOST:PORT/DB).",
        epilog="Output is JSON. Exit status: 0 ok, 1 nothing there (no record, nothing reset, no store at that "
        "path), 2 usage, argument or backend error or a record that does not read, 130 interrupted.",
    )
    parser.add_argument("--url", default=None, help=url_help)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)

    sub.add_parser("url", parents=[common], help="print the effective backend URL and where it came from")

    p = sub.add_parser("list", parents=[common], help="list a namespace's records, one JSON object per line")
    p.add_argument("namespace", metavar="NS")
    p.add_argument("--status", choices=[s.value for s in CheckpointStatus], help="only records in this state")
    p.add_argument("--expired", action="store_true", help="only claims whose lease has run out")

    p = sub.add_parser("get", parents=[common], help="print one record (exit 1 if there is none)")
    p.add_argument("namespace", metavar="NS")
    p.add_argument("key", metavar="KEY")

    p = sub.add_parser("reset", parents=[common], help="delete a record so the step can run again")
    p.add_argument("namespace", metavar="NS")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--if-expired", action="store_true", help="only if it is a claim whose lease has run out")

    p = sub.add_parser(
        "gc", parents=[common],
        help="delete expired claims (done/failed records only with --prune-finished-older-than); "
        "records that do not read are left and reported",
    )
    p.add_argument(
        "--older-than", type=_ms, default=None, metavar="MS",
        help="only claims whose lease ended at least MS milliseconds ago (default 0: every expired claim)",
    )
    p.add_argument(
        "--prune-finished-older-than", type=_ms, default=None, metavar="MS",
        help="also delete done/failed records not updated for MS milliseconds (their steps would run again)",
    )
    return parser


def _emit(obj: dict[str, Any]) -> None:
    line = json.dumps(obj, ensure_ascii=False) + "\n"
    out = getattr(sys.stdout, "buffer", None)
    if out is not None:
        sys.stdout.flush()
        out.write(line.encode("utf-8", "backslashreplace"))  # a path of undecodable bytes as \udcXX
        out.flush()
    else:
        sys.stdout.write(line)


def _run(args: argparse.Namespace) -> int:
    if args.command == "url":
        url, source = resolve_url(args.url)
        scheme, _ = split_url(url)
        _emit({"url": shown_url(url), "source": source, "backend": scheme})  # a password as ***
        return EXIT_OK
    if getattr(args, "namespace", None) is not None:  # a bad argument is exit 2 whatever the store
        check_namespace(args.namespace)
    if getattr(args, "key", None) is not None:
        check_key(args.key)
    url, _ = resolve_url(args.url)
    scheme, path = split_url(url)
    if scheme in ("file", "sqlite") and _missing(path):
        # nothing was ever written there (or the path is mistyped): say so rather than create a store
        raise _NotFound(f"no store at {path[:200]!r} ({scheme}://): nothing to {args.command}")
    with SyncCheckpointClient(args.url) as cp:
        if args.command == "list":
            for rec in cp.list(args.namespace, args.status, expired=args.expired):
                _emit(rec.to_dict())
            return EXIT_OK
        if args.command == "get":
            found = cp.get(args.namespace, args.key)
            if found is None:
                raise _NotFound(f"no record {args.namespace}/{_key(args.key)}")
            _emit(found.to_dict())
            return EXIT_OK
        if args.command == "reset":
            if not cp.reset(args.namespace, args.key, if_expired=args.if_expired):
                found = cp.get(args.namespace, args.key)
                if found is None:
                    raise _NotFound(f"no record {args.namespace}/{_key(args.key)}")
                raise _NotFound(
                    f"not reset: {args.namespace}/{_key(args.key)} is {found.status.value}"
                    + (", not an expired claim" if found.status is CheckpointStatus.CLAIMED else "")
                )
            _emit({"namespace": args.namespace, "key": args.key, "reset": True})
            return EXIT_OK
        if args.command == "gc":
            result = cp.gc(args.older_than, prune_finished_older_than_ms=args.prune_finished_older_than)
            _emit(result.to_dict())
            if result.unreadable:  # collected the rest; say on stderr what needs a look
                shown = ", ".join(
                    f"{u.namespace}/{'?' if u.key is None else _key(u.key)}" for u in result.unreadable[:5]
                ) + (", ..." if len(result.unreadable) > 5 else "")
                print(f"{PROG}: gc left {len(result.unreadable)} record(s) that do not read: {shown} "
                      "(see unreadable_records: reset a key to remove its record, or repair it)", file=sys.stderr)
            return EXIT_OK
    raise InvalidArgumentError(f"unknown command {args.command!r}")  # argparse prevents this


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except _NotFound as e:
        print(f"{PROG}: {_one_line(e)}", file=sys.stderr)
        return EXIT_NOT_FOUND
    except CheckpointError as e:
        print(f"{PROG}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `mooncat-checkpoint list ns | head`: stop quietly, as cat does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:  # Ctrl-C (e.g. while a SQLite store is locked): one line, no traceback
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


def _missing(path: str) -> bool:
    """Nothing at ``path`` and its nearest existing ancestor is a directory: no store was ever made
    there (a path through a file is the backend's to call unusable)."""
    p = os.path.abspath(path)
    if os.path.lexists(p):
        return False
    while not os.path.lexists(p):
        parent = os.path.dirname(p)
        if parent == p:
            return True
        p = parent
    return os.path.isdir(p)


def _key(key: str) -> str:
    """A key as messages show it: quoted, cut at 80 characters (the library's own messages do so)."""
    return repr(key) if len(key) <= 80 else repr(key[:80]) + f"... ({len(key)} characters)"


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())


if __name__ == "__main__":
    sys.exit(main())
