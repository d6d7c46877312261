"""``molens``: operate a Molens cluster from a shell, through its REST API (docs/cli.md).

    molens tasks create --type delayed --interval 5s --callback http://127.0.0.1:9000/hook
    molens tasks list --scene billing --status pending
    molens tasks pause --scene billing --status pending      # counts, asks, then pauses each
    molens watch 01M8MABE0SEAD6S92SY1NA2EWB --count 3 --jsonl
    molens cluster leader --json

The package is the standard library and :mod:`molens.client` only (the client-only install brings
it: ``pip install molens``); it shares nothing with ``molens-node`` (:mod:`molens.cli`), which runs
and administers a node through its config file and admin socket. Modules:

- :mod:`~molens.ops_cli.parser`: the commands and options (also read by the completion scripts);
- :mod:`~molens.ops_cli.commands`: what each command does, through :class:`~molens.client.MolensClient`;
- :mod:`~molens.ops_cli.render`: tables for people, ``--json`` / ``--jsonl`` for scripts;
- :mod:`~molens.ops_cli.completion`: ``molens completion bash|zsh``;
- :mod:`~molens.ops_cli.values`: times, durations and the API's closed sets of words.

Exit codes: 0 done; 1 the API refused (its code printed) or a bulk operation had failures; 2 usage;
3 no node reachable, no leader, or the outcome of a write unknown; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback
from collections.abc import Sequence

from molens.client import (
    ApiError,
    ConnectionFailedError,
    MolensClient,
    OutcomeUnknownError,
    UnavailableError,
)
from molens.ops_cli import commands, completion, parser
from molens.ops_cli.render import Mode, Printer

DEFAULT_URL = "http://127.0.0.1:18081"
DEFAULT_REQUEST_TIMEOUT_S = 30.0
INTERRUPTED = 130


def _urls(a: argparse.Namespace) -> list[str]:
    given: list[str] = list(getattr(a, "url", None) or [])
    if not given:
        given = [u.strip() for u in os.environ.get("MOLENS_URL", "").split(",") if u.strip()]
    return given or [DEFAULT_URL]


def _namespace(a: argparse.Namespace) -> str | None:
    return getattr(a, "namespace", None) or os.environ.get("MOLENS_NAMESPACE") or None


def _token(a: argparse.Namespace) -> str | None:
    path = getattr(a, "token_file", None)
    if path is None:
        return os.environ.get("MOLENS_TOKEN") or None
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as exc:
        raise commands.UsageError(f"--token-file: {exc}") from None
    if not token:
        raise commands.UsageError(f"--token-file {path}: the file is empty")
    return token


def _report(p: Printer, status: int | None, code: str, message: str, field: str | None = None) -> None:
    """An error on stderr: one line for people, or ``{"error": {...}}`` in the JSON modes."""
    if p.mode is Mode.TABLE:
        where = f" (field {field})" if field else ""
        head = f"{status} {code}" if status else code
        one_line = " ".join(message.split())  # a proxy's HTML error page is several lines
        p.note(f"molens: error: {head}: {one_line}{where}")
    else:
        err = {"code": code, "message": message, "field": field, "status": status}
        print(json.dumps({"error": err}, ensure_ascii=False), file=p.err, flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs one command line; returns the exit code."""
    top = parser.build()
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        parser.refuse_token(top, args)
        a = top.parse_args(args)
    except parser.CommandLineError as exc:
        mode = Mode(parser.output_asked(args))
        if mode is Mode.TABLE:  # as argparse itself: the usage, then the line
            exc.parser.print_usage(sys.stderr)
            print(f"{exc.parser.prog}: error: {exc.message}", file=sys.stderr, flush=True)
        else:
            _report(Printer(mode), None, "usage", exc.message)
        return commands.USAGE
    p = Printer(Mode(getattr(a, "output", "table")))
    if a.func == "completion":
        print(completion.script(top, a.shell), end="")
        return commands.OK
    try:
        timeout_s = getattr(a, "request_timeout", DEFAULT_REQUEST_TIMEOUT_S)
        with commands.interruptible(), MolensClient(_urls(a), _token(a), timeout=min(timeout_s, 10.0),
                                                    retry_deadline_s=timeout_s, namespace=_namespace(a)) as c:
            return commands.HANDLERS[a.func](c, a, p)
    except (commands.UsageError, ValueError) as exc:
        _report(p, None, "usage", str(exc))
        return commands.USAGE
    except UnavailableError as exc:
        _report(p, exc.status, exc.code, exc.message, exc.field)
        return commands.UNREACHABLE
    except ApiError as exc:
        _report(p, exc.status, exc.code, exc.message, exc.field)
        # a server's error (a node's 500, a proxy's 502 / 504) is no refusal of the request: try again
        return commands.UNREACHABLE if exc.status >= 500 else commands.FAILED
    except (OutcomeUnknownError, ConnectionFailedError) as exc:
        _report(p, None, exc.code, str(exc))
        return commands.UNREACHABLE
    except KeyboardInterrupt:
        p.note("interrupted")
        return INTERRUPTED
    except BrokenPipeError:  # `molens tasks list --all | head`: the reader has had enough
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return commands.OK
    except Exception as exc:  # an answer this CLI cannot read (a proxy's page...): one line, not a traceback
        if os.environ.get("MOLENS_DEBUG"):
            traceback.print_exc()
        _report(p, None, "internal", f"{type(exc).__name__}: {exc} (MOLENS_DEBUG=1 shows where)")
        return commands.FAILED


__all__ = ["main"]
