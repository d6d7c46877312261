"""The ``molens`` command line: every command, its options and its help (``argparse``).

The tree is data for two readers: :func:`molens.ops_cli.main` parses with it, and
:mod:`molens.ops_cli.completion` walks it to write the shell completion scripts, so a new option
completes without a second list to keep. Each leaf names its handler in ``func`` (a name in
:mod:`molens.ops_cli.commands`).

The connection and output options (``--url``, ``--token-file``, ``--namespace``,
``--request-timeout``, ``--json``, ``--jsonl``) are accepted before the command and after it (``molens --json tasks list`` and
``molens tasks list --json``); given after it, they replace what was given before it.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NoReturn

from molens.errors import MolensError
from molens.ops_cli import values as v

PROG = "molens"

EXIT_CODES = """exit codes:
  0   done
  1   the API refused (its error code is printed), a bulk operation had failures,
      a watch --count was not reached before --timeout, or a confirmation was declined
  2   usage: a bad option or value, or a bulk operation that needs --yes without a terminal
  3   no node reachable, no leader after every retry, the leader's disk full (507),
      another server error (500, a proxy's 502/504), or the outcome of a write is unknown
  130 interrupted (Ctrl-C)"""

ENV = """environment:
  MOLENS_URL    nodes, comma-separated (when no --url is given)
  MOLENS_TOKEN  the API's bearer token (when no --token-file is given)
  MOLENS_NAMESPACE  the namespace to act in (when no --namespace is given)"""


class CommandLineError(MolensError, code="usage"):
    """A command line the parser refuses (exit 2): ``parser`` is the (sub)command's, for its usage."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser


class Parser(argparse.ArgumentParser):
    """Raises :class:`CommandLineError` instead of printing and exiting, so that the caller reports it
    in the output mode asked for (``--json``: ``{"error": ...}`` on stderr, as every other error).
    No abbreviated options (its sub-command parsers are of this class too): ``--token`` would be read
    as ``--token-file`` and its value, a secret, echoed in the error."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)

    def error(self, message: str) -> NoReturn:
        head, sep, words = message.partition("unrecognized arguments: ")
        if sep:  # name the options alone: a value beside a mistyped option may be a secret (--tok=...)
            shown = [w.partition("=")[0] for w in words.split() if w.startswith("-")]
            rest = len(words.split()) - len(shown)
            if rest:
                shown.append(f"{rest} {'more ' if shown else ''}word{'s' if rest > 1 else ''} (not shown)")
            message = head + sep + ", ".join(shown)
        raise CommandLineError(self, message)


NO_TOKEN = ("there is no --token option (a command line is visible to every user of this machine): use "
            "--token-file PATH or $MOLENS_TOKEN")


def refuse_token(top: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Refuses a command line that gives a token (``--token``, or a misspelling of it: ``--tok``,
    ``--tokn``) before it is parsed, so that no error message shows the word after it."""
    for arg in argv:
        if arg == "--":
            return
        name = arg.partition("=")[0]
        if name.startswith("--tok") and name != "--token-file":
            raise CommandLineError(top, NO_TOKEN)


def output_asked(argv: Sequence[str]) -> str:
    """The output mode a command line asks for, read without parsing it (it may not parse): the last
    ``--json`` or ``--jsonl`` before any ``--``, else ``table``."""
    mode = "table"
    for arg in argv:
        if arg == "--":
            break
        if arg in ("--json", "--jsonl"):
            mode = arg[2:]
    return mode


def _common() -> argparse.ArgumentParser:
    """The connection and output options, accepted at every level (defaults applied after parsing)."""
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    g = p.add_argument_group("connection and output")
    g.add_argument("--url", action="append", metavar="URL", default=argparse.SUPPRESS,
                   help="a node's base URL, http://HOST:PORT (repeat for more nodes; the leader is found). "
                        "Default: $MOLENS_URL, else http://127.0.0.1:18081")
    g.add_argument("--token-file", metavar="PATH", default=argparse.SUPPRESS,
                   help="read the bearer token from PATH (default: $MOLENS_TOKEN)")
    g.add_argument("--namespace", metavar="NAME", default=argparse.SUPPRESS,
                   help="create tasks in NAME and limit lists and dead-letter actions to it "
                        "(default: $MOLENS_NAMESPACE, else creates go to default and lists show every "
                        "namespace the key may read)")
    g.add_argument("--request-timeout", type=v.seconds, metavar="SECONDS", default=argparse.SUPPRESS,
                   help="give up on a request after this long, retries included (default 30)")
    out = g.add_mutually_exclusive_group()
    out.add_argument("--json", dest="output", action="store_const", const="json", default=argparse.SUPPRESS,
                     help="print one JSON document (an array for lists)")
    out.add_argument("--jsonl", dest="output", action="store_const", const="jsonl", default=argparse.SUPPRESS,
                     help="print one JSON object per line")
    return p


COMMON = _common()


def _leaf(subs: Any, name: str, func: str, help: str, **kw: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subs.add_parser(
        name, help=help, description=help, parents=[COMMON], formatter_class=argparse.RawDescriptionHelpFormatter,
        **kw)
    p.set_defaults(func=func)
    return p


def _group(subs: Any, name: str, help: str) -> Any:
    p = subs.add_parser(name, help=help, description=help)
    return p.add_subparsers(dest=f"{name}_command", required=True, metavar="COMMAND")


def _task_fields(p: argparse.ArgumentParser, *, create: bool) -> None:
    g = p.add_argument_group("task fields (docs/api.md#post-apiv1tasks; an option left out keeps the "
                             + ("API's default)" if create else "stored value)"))
    g.add_argument("--file", metavar="PATH", help="a JSON object of task fields ('-': stdin); options override it")
    g.add_argument("--type", dest="f_type", choices=v.TASK_TYPES)
    g.add_argument("--callback", dest="f_callback_url", metavar="URL", help="callback_url")
    g.add_argument("--interval", dest="f_interval_ms", type=v.duration_ms, metavar="DURATION",
                   help="interval_ms: 500, 500ms, 30s, 5m, 2h, 1d")
    g.add_argument("--run-at", dest="f_run_at", type=v.instant_ms, metavar="TIME",
                   help="run_at: epoch ms, now+10m, or ISO 8601 (UTC without an offset)")
    g.add_argument("--cron", dest="f_cron_expr", metavar="EXPR", help="cron_expr (5 fields, or 6 with seconds)")
    g.add_argument("--timezone", dest="f_timezone", metavar="TZ")
    g.add_argument("--payload", dest="f_payload", type=v.json_value, metavar="JSON")
    g.add_argument("--scene", dest="f_scene", metavar="SCENE")
    if create:
        g.add_argument("--idempotency-key", dest="f_idempotency_key", metavar="KEY",
                       help="the create's key (default: a new one, printed): creating again with it "
                            "returns the same task, never a second one")
    g.add_argument("--ack-url", dest="f_ack_url", metavar="URL")
    g.add_argument("--ack-delay", dest="f_ack_delay_ms", type=v.duration_ms, metavar="DURATION")
    g.add_argument("--callback-timeout", dest="f_timeout_ms", type=v.duration_ms, metavar="DURATION",
                   help="timeout_ms of each callback")
    g.add_argument("--max-retries", dest="f_max_retries", type=v.count, metavar="N")
    g.add_argument("--max-fails", dest="f_max_fails", type=v.positive_int, metavar="N")
    g.add_argument("--reliability", dest="f_reliability", choices=v.RELIABILITIES)
    g.add_argument("--jitter", dest="f_jitter_ms", type=v.duration_ms, metavar="DURATION")
    g.add_argument("--start-at", dest="f_start_at", type=v.instant_ms, metavar="TIME")
    g.add_argument("--end-at", dest="f_end_at", type=v.instant_ms, metavar="TIME")
    g.add_argument("--max-runs", dest="f_max_runs", type=v.positive_int, metavar="N")
    g.add_argument("--catchup", dest="f_catchup", choices=v.CATCHUPS)
    g.add_argument("--catchup-window", dest="f_catchup_window_ms", type=v.duration_ms, metavar="DURATION")
    g.add_argument("--overlap", dest="f_overlap", choices=v.OVERLAPS)
    g.add_argument("--flow-key", dest="f_flow_key", metavar="KEY")
    g.add_argument("--notify-url", dest="f_notify_url", metavar="URL")
    g.add_argument("--set", dest="assignments", action="append", type=v.field_assignment, default=[],
                   metavar="FIELD=VALUE", help="any field, VALUE as JSON when it parses (--set 'retry={\"max_retries\":5}')")
    if not create:
        g.add_argument("--unset", action="append", default=[], metavar="FIELD",
                       help="reset FIELD to its default (null in the merge patch)")
        p.add_argument("--if-version", type=v.count, metavar="N",
                       help="change only if the task is still at version N (else exit 1, precondition_failed)")


def _task_filter(p: argparse.ArgumentParser, action: str | None) -> None:
    g = p.add_argument_group("filter" if action is None else f"which tasks to {action} (ids, or a filter)")
    default = "" if action is None else " (default: the statuses one can " + action + ")"
    g.add_argument("--status", type=v.status_list, metavar="S[,S...]",
                   help="statuses: " + ", ".join(v.STATUSES) + default)
    g.add_argument("--type", choices=v.TASK_TYPES)
    g.add_argument("--scene", help="exact scene")
    g.add_argument("--callback-contains", metavar="TEXT", help="a case-insensitive part of callback_url")


def _confirm(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--dry-run", action="store_true", help=f"list the {what} that match; change nothing")
    p.add_argument("--yes", "-y", action="store_true",
                   help="do not ask for confirmation (needed without a terminal)")


def _dead_filter(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("filter")
    g.add_argument("--task", metavar="TASK_ID")
    g.add_argument("--flow", metavar="KEY")
    g.add_argument("--kind", choices=v.DEAD_LETTER_KINDS)
    g.add_argument("--since", type=v.instant_ms, metavar="TIME")
    g.add_argument("--until", type=v.instant_ms, metavar="TIME")


def _limit(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--limit", type=v.positive_int, default=100, metavar="N", help=f"print at most N {what} (default 100)")
    g.add_argument("--all", dest="limit", action="store_const", const=None, help=f"print every {what}")


def build() -> argparse.ArgumentParser:
    top = Parser(
        prog=PROG, parents=[COMMON], formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Operate a Molens cluster through its REST API: tasks, executions, dead letters, flows, "
                    "namespaces and API keys.",
        epilog=f"{ENV}\n\n{EXIT_CODES}\n\nDocs: docs/cli.md",
    )
    subs = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    tasks = _group(subs, "tasks", "create, list, change and act on tasks")
    p = _leaf(tasks, "create", "task_create", "create a task; prints it and its idempotency key",
              epilog="A create that gets no answer exits 3 and prints its key: run it again with "
                     "--idempotency-key KEY to create it only if the first one did not.")
    _task_fields(p, create=True)
    p = _leaf(tasks, "list", "task_list", "list tasks")
    _task_filter(p, None)
    p.add_argument("--order", choices=v.LIST_ORDERS, default="created",
                   help="created (oldest first, default), newest, next_run (soonest first; tasks that have one)")
    _limit(p, "tasks")
    p = _leaf(tasks, "get", "task_get", "show one task")
    p.add_argument("id", metavar="TASK_ID")
    p.add_argument("--linearizable", action="store_true", help="confirm the read with the leader's quorum first")
    p = _leaf(tasks, "patch", "task_patch", "change a task's definition (a merge patch)")
    p.add_argument("id", metavar="TASK_ID")
    _task_fields(p, create=False)
    for name, verb, what in (
        ("pause", "pause", "take tasks off the schedule"),
        ("resume", "resume", "put paused (or inactive periodic) tasks back on the schedule"),
        ("trigger", "trigger", "run tasks' upcoming occurrence now"),
        ("delete", "delete", "delete tasks and their history"),
    ):
        p = _leaf(tasks, name, "task_action", what)
        p.set_defaults(action=verb)
        p.add_argument("ids", nargs="*", metavar="TASK_ID")
        _task_filter(p, verb)
        _confirm(p, "tasks")
        if name == "resume":
            p.add_argument("--from", dest="resume_from", choices=v.RESUME_FROM,
                           help="now (default): drop what was missed; schedule: take up the missed instant")
    p = _leaf(tasks, "backfill", "task_backfill", "fire a periodic task's occurrences of a past range now")
    p.add_argument("id", metavar="TASK_ID")
    p.add_argument("--start", type=v.instant_ms, required=True, metavar="TIME", help="from (inclusive)")
    p.add_argument("--end", type=v.instant_ms, metavar="TIME", help="to (exclusive; default now)")

    p = _leaf(subs, "executions", "executions", "list executions (callbacks, ACK probes, events), newest first")
    p.add_argument("--task", metavar="TASK_ID", help="one task's (default: every task's)")
    p.add_argument("--result", choices=v.EXECUTION_RESULTS)
    p.add_argument("--since", type=v.instant_ms, metavar="TIME")
    p.add_argument("--until", type=v.instant_ms, metavar="TIME")
    _limit(p, "executions")

    dead = _group(subs, "dead-letters", "list, redrive and delete dead letters (occurrences that failed for good)")
    p = _leaf(dead, "list", "dead_list", "list dead letters, newest first")
    _dead_filter(p)
    _limit(p, "dead letters")
    p = _leaf(dead, "get", "dead_get", "show one dead letter")
    p.add_argument("id", metavar="DEAD_ID")
    for name, what in (("redrive", "deliver dead letters' occurrences again"), ("delete", "delete dead letters")):
        p = _leaf(dead, name, "dead_action", what)
        p.set_defaults(action=name)
        p.add_argument("ids", nargs="*", metavar="DEAD_ID")
        _dead_filter(p)
        p.add_argument("--all", dest="every", action="store_true", help="every dead letter (no id or filter given)")
        _confirm(p, "dead letters")

    flows = _group(subs, "flows", "list and set flows (per-receiver rate, concurrency, pause)")
    _leaf(flows, "list", "flow_list", "list flows with settings or recent fires")
    for name, what in (("get", "show one flow"), ("pause", "hold every fire of a flow"),
                       ("resume", "let a paused flow's fires go"), ("delete", "forget a flow's settings")):
        p = _leaf(flows, name, "flow_one", what)
        p.set_defaults(action=name)
        p.add_argument("key", metavar="KEY")
    p = _leaf(flows, "put", "flow_put", "set a flow's limits, replaced whole (an option left out: unlimited)")
    p.add_argument("key", metavar="KEY")
    p.add_argument("--rate-per-s", type=v.rate, metavar="N")
    p.add_argument("--burst", type=v.positive_int, metavar="N")
    p.add_argument("--concurrency", type=v.positive_int, metavar="N")
    p.add_argument("--paused", action="store_true")
    p.add_argument("--adaptive", action="store_true", help="back off (AIMD) on 429/503/timeouts")

    groups: dict[str, Any] = {}
    for group, what, listed, shown, deleted, metavar in (
        ("namespaces", "list, show, create and delete namespaces (creating and deleting: admin)",
         "list the namespaces the key may read, default first", "show one namespace", "delete an empty namespace",
         "NAME"),
        ("keys", "list, show, create and revoke API keys (admin)", "list the API keys (never a secret)",
         "show one key (never its secret)", "revoke a key on every node", "KEY_ID"),
    ):
        groups[group] = g = _group(subs, group, what)
        _leaf(g, "list", "resource_list", listed).set_defaults(resource=group)
        for name, help in (("get", shown), ("delete", deleted)):
            p = _leaf(g, name, "resource_one", help)
            p.set_defaults(resource=group, action=name)
            p.add_argument("ref", metavar=metavar)
    p = _leaf(groups["namespaces"], "create", "namespace_create", "create a namespace (a quota left out: unlimited)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--max-pending-tasks", type=v.positive_int, metavar="N")
    p.add_argument("--creates-per-s", type=v.rate, metavar="N")
    p.add_argument("--max-payload-bytes", type=v.positive_int, metavar="N")
    p.add_argument("--fires-per-s", type=v.rate, metavar="N")

    p = _leaf(groups["keys"], "create", "key_create", "create an API key; prints its secret, this once",
              epilog="The secret is shown only now: give it to clients as their token (--token-file, "
                     "$MOLENS_TOKEN).")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--role", required=True, choices=v.ROLES)
    p.add_argument("--namespaces", required=True, type=v.name_list, metavar="NAME[,NAME...]",
                   help="the namespaces it may use, or '*' for every one, present and future")

    cluster = _group(subs, "cluster", "the cluster's members and leader")
    _leaf(cluster, "status", "cluster_status", "the answering node's view: role, term, indexes, members")
    _leaf(cluster, "leader", "cluster_leader", "who leads, and at which URL")

    p = _leaf(subs, "watch", "watch", "follow a task's executions as they happen (Ctrl-C stops)",
              epilog="--json prints one array when the watch ends; --jsonl prints each execution at once.")
    p.add_argument("id", metavar="TASK_ID")
    p.add_argument("--count", type=v.positive_int, metavar="N", help="stop after N executions")
    p.add_argument("--timeout", dest="watch_timeout", type=v.seconds, metavar="SECONDS",
                   help="stop after SECONDS (exit 1 if --count was not reached)")
    p.add_argument("--last", type=v.count, default=0, metavar="N", help="first print the N latest executions")
    p.add_argument("--interval", dest="poll_s", type=v.seconds, default=1.0, metavar="SECONDS",
                   help="how often to ask (default 1)")

    p = _leaf(subs, "completion", "completion", "print a shell completion script",
              epilog="bash: source <(molens completion bash)\nzsh:  source <(molens completion zsh)")
    p.add_argument("shell", choices=("bash", "zsh"))
    return top
