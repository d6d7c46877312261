"""The ``molens`` command's pure parts: what it reads from a command line (times, durations, the
API's words, options before and after the command), its tables, and the completion scripts run
by real bash and zsh."""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from enum import StrEnum
from typing import Any

import pytest

from molens import client, ops_cli, schema
from molens.fsm import tenancy
from molens.ops_cli import commands, completion, parser, values
from molens.ops_cli.render import Mode, Printer, col, when


@pytest.mark.parametrize(("words", "enum"), [
    (values.TASK_TYPES, schema.TaskType), (values.STATUSES, schema.Status),
    (values.RELIABILITIES, schema.Reliability), (values.CATCHUPS, schema.CatchUp), (values.OVERLAPS, schema.Overlap),
    (values.DEAD_LETTER_KINDS, schema.FailureKind), (values.EXECUTION_RESULTS, schema.ExecutionResult),
    (values.ROLES, tenancy.KeyRole), (tuple(client.Role), tenancy.KeyRole),
])
def test_the_cli_offers_exactly_the_words_the_api_takes(words: tuple[str, ...], enum: type[StrEnum]) -> None:
    assert set(words) == {e.value for e in enum}


def test_the_cli_and_the_sdk_take_the_namespace_names_the_api_takes() -> None:
    assert f"^{values._NAMESPACE.pattern}$" == schema.NAMESPACE_PATTERN == f"^{client._NAMESPACE.pattern}$"


def test_durations_and_instants_read_as_documented() -> None:
    assert [values.duration_ms(s) for s in ("500", "500ms", "30s", "5m", "2h", "1d")] == [
        500, 500, 30_000, 300_000, 7_200_000, 86_400_000]
    assert values.instant_ms("1795978278937") == 1795978278937
    assert values.instant_ms("2026-12-04T09:00:00Z") == values.instant_ms("2026-12-04 10:00+01:00") \
        == values.instant_ms("2026-12-04T09:00:00") == 1796374800000
    now = int(time.time() * 1000)
    assert abs(values.instant_ms("now-1h") - (now - 3_600_000)) < 60_000
    assert abs(values.instant_ms("+30m") - (now + 1_800_000)) < 60_000
    for bad in ("yesterday", "-1y", "", "٣"):
        with pytest.raises(argparse.ArgumentTypeError, match="not a time"):
            values.instant_ms(bad)
    for bad in ("5 minutes", "1y", "-5s", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="not a duration"):
            values.duration_ms(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not JSON"):
        values.json_value("bare")
    assert values.field_assignment('retry={"max_retries": 5}') == ("retry", {"max_retries": 5})
    assert values.field_assignment("scene=billing") == ("scene", "billing")
    assert values.status_list("pending, paused") == ["pending", "paused"]


def test_connection_and_output_options_go_before_or_after_the_command() -> None:
    p = parser.build()
    a = p.parse_args(["--json", "--url", "http://a:1", "tasks", "list"])
    assert (a.output, a.url, a.func) == ("json", ["http://a:1"], "task_list")
    a = p.parse_args(["tasks", "list", "--jsonl", "--url", "http://a:1", "--url", "http://b:2"])
    assert (a.output, a.url) == ("jsonl", ["http://a:1", "http://b:2"])
    a = p.parse_args(["--url", "http://a:1", "cluster", "leader", "--url", "http://b:2"])
    assert a.url == ["http://b:2"]  # after the command: replaces
    a = p.parse_args(["tasks", "list"])
    assert not hasattr(a, "output") and not hasattr(a, "url")
    with pytest.raises(parser.CommandLineError, match="not allowed with"):
        p.parse_args(["tasks", "list", "--json", "--jsonl"])


@pytest.mark.parametrize("argv", [
    ["--json", "tasks", "create", "--run-at", "yesterday"],
    ["tasks", "list", "--jsonl", "--bogus"],
    ["--json"],
])
def test_a_command_line_the_parser_refuses_is_a_json_error_in_the_json_modes(
    argv: list[str], capsys: pytest.CaptureFixture[str],
) -> None:
    """A script that asked for JSON reads every error as JSON on stderr, a bad option's too."""
    assert ops_cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    got = json.loads(err)
    assert got["error"]["code"] == "usage" and got["error"]["status"] is None
    assert got["error"]["message"].split(":")[0] in ("argument --run-at", "unrecognized arguments",
                                                     "the following arguments are required")


def test_a_command_line_the_parser_refuses_prints_the_usage_then_one_line_for_people(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert ops_cli.main(["tasks", "create", "--run-at", "yesterday", "--", "--json"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("usage: molens tasks create")
    assert err.splitlines()[-1].startswith("molens tasks create: error: argument --run-at: not a time: 'yesterday'")


def test_a_table_pads_columns_and_reads_times_as_utc() -> None:
    out = io.StringIO()
    Printer(Mode.TABLE, out).table([{"id": "a", "at": 0}, {"id": "bbbb", "at": None}],
                                   [col("ID", "id"), col("AT", "at", time=True)])
    assert out.getvalue().splitlines() == ["ID    AT", "a     1970-01-01 00:00:00.000Z", "bbbb  -"]
    assert when(1796374800000) == "2026-12-04 09:00:00.000Z"


def test_what_a_receiver_wrote_reaches_the_terminal_as_text_never_as_control_characters() -> None:
    """A task's ``last_response`` is the callback receiver's text: an escape sequence in it (ESC, a
    C1 CSI) is shown as ``\\xNN`` in a table and in ``get``'s fields, a newline or tab as a space."""
    hostile = "ok\x1b]0;owned\x07\x1b[2J\nnext\x9b31m\tend"
    out = io.StringIO()
    Printer(Mode.TABLE, out).table([{"r": hostile}], [col("R", "r", max_width=200)])
    Printer(Mode.TABLE, out).obj({"last_response": hostile, "k\x1b": 1})
    text = out.getvalue()
    assert not any((ord(ch) < 0x20 and ch != "\n") or 0x7F <= ord(ch) < 0xA0 for ch in text), repr(text)
    assert "ok\\x1b]0;owned\\x07\\x1b[2J next\\x9b31m end" in text
    assert "k\\x1b" in text


def _bash(script: str, words: list[str]) -> list[str]:
    quoted = " ".join(f"'{w}'" for w in words)
    cmd = f'source /dev/stdin <<<"$S"; COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _molens; ' \
          'printf "%s\\n" "${COMPREPLY[@]}"'
    r = subprocess.run(["bash", "--norc", "-c", cmd], env={"S": script, "PATH": "/usr/bin:/bin"},
                       capture_output=True, text=True, check=True)
    return [w for w in r.stdout.splitlines() if w]


def test_bash_completion_completes_commands_options_and_their_words() -> None:
    s = completion.script(parser.build(), "bash")
    assert _bash(s, ["molens", ""]) == ["tasks", "executions", "dead-letters", "flows", "namespaces", "keys",
                                        "cluster", "watch", "completion"]
    assert _bash(s, ["molens", "keys", "create", "ci", "--role", "w"]) == ["writer"]
    assert _bash(s, ["molens", "tasks", "pa"]) == ["patch", "pause"]
    assert _bash(s, ["molens", "--json", "dead-letters", "re"]) == ["redrive"]
    assert _bash(s, ["molens", "tasks", "pause", "--dr"]) == ["--dry-run"]
    assert _bash(s, ["molens", "tasks", "list", "--scene", "x", "--st"]) == ["--status"]
    assert _bash(s, ["molens", "tasks", "list", "--status", "pa"]) == ["paused"]
    assert _bash(s, ["molens", "dead-letters", "list", "--kind", "a"]) == ["ack_failed"]
    assert _bash(s, ["molens", "completion", ""]) == ["bash", "zsh"]
    assert _bash(s, ["molens", "tasks", "create", ""]) == []  # no word to offer: none made up
    # every word offered after a space works there: not "-created" (an option), not the refusing --token
    assert _bash(s, ["molens", "tasks", "list", "--order", ""]) == ["created", "newest", "next_run"]
    assert _bash(s, ["molens", "tasks", "list", "--tok"]) == ["--token-file"]


def test_zsh_completion_offers_the_same_words_through_bashcompinit() -> None:
    zsh = shutil.which("zsh")
    assert zsh is not None, "zsh is missing: scripts/setup installs Debian's zsh for this test"
    s = completion.script(parser.build(), "zsh")
    cmd = ('source /dev/stdin <<<"$S"\n'
           "COMP_WORDS=(molens tasks pa); COMP_CWORD=2; compgen -F _molens -- pa; print -- ---\n"
           "COMP_WORDS=(molens dead-letters list --kind ''); COMP_CWORD=4; compgen -F _molens -- ''\n")
    r = subprocess.run([zsh, "-f", "-c", cmd], env={"S": s, "PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
                       capture_output=True, text=True, check=True)
    subs, kinds = r.stdout.split("---\n")
    # zsh filters by the typed prefix itself; the function offers the command's words
    assert subs.split() == ["create", "list", "get", "patch", "pause", "resume", "trigger", "delete", "backfill"]
    assert sorted(kinds.split()) == sorted(values.DEAD_LETTER_KINDS)


def test_help_names_every_exit_code() -> None:
    r = subprocess.run([sys.executable, "-m", "molens.ops_cli", "--help"], capture_output=True, text=True, check=True)
    for code in ("0 ", "1 ", "2 ", "3 ", "130"):
        assert f"\n  {code}" in r.stdout
    assert "MOLENS_URL" in r.stdout and "MOLENS_TOKEN" in r.stdout


class _SigintInFinaliser:
    """Collected as a response is: Ctrl-C lands while its finaliser runs, where Python only prints the
    KeyboardInterrupt as ignored."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(10_000):  # Python code after the signal: its handler runs in here
            pass


class _PollingClient:
    """What ``watch`` asks of a client: a task and its (empty) executions, one lost Ctrl-C on the second poll."""

    def __init__(self) -> None:
        self.polls = 0

    def get(self, task_id: str) -> dict[str, object]:
        return {"id": task_id, "type": "periodic", "status": "pending", "interval_ms": 1000}

    def executions(self, task_id: str, **kw: object) -> list[dict[str, object]]:
        self.polls += 1
        if self.polls == 2:
            _SigintInFinaliser()  # made and collected at once
        if self.polls > 20:
            raise RuntimeError(f"still polling after {self.polls} polls: the Ctrl-C was lost")
        return []


def test_watch_stops_on_a_ctrl_c_that_landed_in_a_finaliser(monkeypatch: pytest.MonkeyPatch) -> None:
    lost: list[type[BaseException] | None] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: lost.append(u.exc_type))
    a = parser.build().parse_args(["watch", "01M917RR6Z3PWE1E76AWAPXS6X", "--interval", "0.01", "--jsonl"])
    c = _PollingClient()
    before = signal.getsignal(signal.SIGINT)
    with commands.interruptible(), pytest.raises(KeyboardInterrupt):
        commands.watch(c, a, Printer(Mode.JSONL, err=io.StringIO()))  # type: ignore[arg-type]
    assert lost == [KeyboardInterrupt]  # the finaliser's KeyboardInterrupt went nowhere ...
    assert c.polls == 2  # ... and watch stopped before its next poll all the same
    assert signal.getsignal(signal.SIGINT) is before


def test_watch_shows_an_execution_that_finished_between_its_two_start_up_reads() -> None:
    """Start-up reads the last executions, then what the first poll's overlap would read again (old
    news). One that finished in between is in the second read only: it is new, and shown."""
    def ex(attempt: int, at: int) -> dict[str, object]:
        return {"fire_id": "F-1", "kind": "callback", "attempt": attempt, "result": "failed", "finished_at": at,
                "execution_result": "", "task_id": "T"}

    old, older, new = ex(2, 1_000), ex(1, 990), ex(3, 1_500)

    class Client:
        reads = 0

        def get(self, task_id: str) -> dict[str, object]:
            return {"id": task_id, "type": "delayed", "status": "pending", "interval_ms": 1000}

        def executions(self, task_id: str, **kw: object) -> list[dict[str, object]]:
            self.reads += 1
            return [old] if self.reads == 1 else [new, old, older]  # newest first, as the API lists

    a = parser.build().parse_args(["watch", "01M917RR6Z3PWE1E76AWAPXS6X", "--last", "1", "--count", "1",
                                   "--interval", "0.01", "--json"])
    out = io.StringIO()
    with commands.interruptible():
        assert commands.watch(Client(), a, Printer(Mode.JSON, out, err=io.StringIO())) == commands.OK  # type: ignore[arg-type]
    assert [e["attempt"] for e in json.loads(out.getvalue())] == [2, 3]  # older is old news; new counts


def test_a_bulk_action_stops_at_the_first_no_leader_and_exits_as_unreachable() -> None:
    """A 503 after every retry is the cluster's state, not the task's: the next ids would each take
    a full round of retries again. The loop stops and the command exits 3 (try again)."""
    acted: list[str] = []

    def act(i: str) -> None:
        acted.append(i)
        raise client.UnavailableError(503, "no_leader", "no leader is known")

    err = io.StringIO()
    with pytest.raises(client.UnavailableError):
        commands._each(["A", "B", "C"], act, Printer(Mode.TABLE, io.StringIO(), err=err), "pause", "3 tasks")
    assert acted == ["A"] and "stopped after 0 of 3" in err.getvalue()


@pytest.mark.parametrize("argv", [
    ["--token", "s3cr3t-TOKEN", "tasks", "list"],
    ["tasks", "list", "--token=s3cr3t-TOKEN"],
    ["--tok=s3cr3t-TOKEN", "tasks", "list"],  # argparse read --tok as --token-file and echoed the value
    ["--json", "--tok", "s3cr3t-TOKEN", "tasks", "list"],
    ["tasks", "list", "--tokn", "s3cr3t-TOKEN"],
])
def test_a_token_on_the_command_line_is_refused_and_never_echoed(
    argv: list[str], capsys: pytest.CaptureFixture[str],
) -> None:
    assert ops_cli.main(argv) == 2
    out, err = capsys.readouterr()
    assert "s3cr3t" not in out + err, err
    assert "there is no --token option" in err, err


def test_options_are_never_abbreviated_and_a_rate_is_a_positive_number(capsys: pytest.CaptureFixture[str]) -> None:
    assert ops_cli.main(["--url", "http://127.0.0.1:9", "--token-f", "/nonexistent", "tasks", "list"]) == 2
    assert ops_cli.main(["--url", "http://127.0.0.1:9", "flows", "put", "f", "--rate-per-s", "nan"]) == 2
    err = capsys.readouterr().err
    assert "Errno" not in err and "expected a number > 0, got 'nan'" in err


def test_a_server_error_exits_as_try_again_and_an_unreadable_answer_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    """A node's 500 or a proxy's 502 / 504 is no refusal of the request (exit 3, try again, as a
    503); an answer the CLI cannot read is one ``internal`` line, exit 1, not a traceback."""
    def failing(exc: BaseException) -> Any:
        def handler(c: object, a: object, p: object) -> int:
            raise exc
        return handler

    monkeypatch.setitem(commands.HANDLERS, "task_list", failing(client.ApiError(504, "http_error", "gateway timeout")))
    assert ops_cli.main(["--url", "http://127.0.0.1:9", "tasks", "list"]) == 3
    monkeypatch.setitem(commands.HANDLERS, "task_list", failing(client.ApiError(404, "not_found", "no such")))
    assert ops_cli.main(["--url", "http://127.0.0.1:9", "tasks", "list"]) == 1
    monkeypatch.setitem(commands.HANDLERS, "task_list", failing(KeyError("items")))
    assert ops_cli.main(["--url", "http://127.0.0.1:9", "tasks", "list"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.splitlines()[-1] == (
        "molens: error: internal: KeyError: 'items' (MOLENS_DEBUG=1 shows where)")


def test_a_bulk_action_interrupted_says_what_it_did_and_names_the_one_in_flight() -> None:
    """Ctrl-C: the summary of what was done (``--json``: on stdout, so a script knows which ids were
    acted on) and the id whose request was in flight, whose outcome is unknown; then exit 130."""
    def act(i: str) -> dict[str, object]:
        if i == "C":
            raise KeyboardInterrupt
        return {"id": i}

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        commands._each(["A", "B", "C", "D"], act, Printer(Mode.JSON, out, err=err), "pause", "4 tasks")
    summary = json.loads(out.getvalue())
    assert summary["ids"] == ["A", "B"] and summary["paused"] == 2
    assert [e["id"] for e in summary["errors"]] == ["C"] and summary["errors"][0]["result"] == "unknown"
    assert "interrupted after 2 of 4: C may or may not have been paused" in err.getvalue()


def test_a_bulk_action_stops_when_the_key_is_refused() -> None:
    """A 401 / 403 is the key's, not the task's: every next id would meet it."""
    acted: list[str] = []

    def act(i: str) -> dict[str, object]:
        acted.append(i)
        if i == "B":
            raise client.ForbiddenError(403, "forbidden", "a reader may not write")
        return {"id": i}

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(client.ForbiddenError):
        commands._each(["A", "B", "C"], act, Printer(Mode.JSON, out, err=err), "pause", "3 tasks")
    assert acted == ["A", "B"] and "stopped after 1 of 3: forbidden" in err.getvalue()
    assert json.loads(out.getvalue())["ids"] == ["A"]


def test_a_bulk_action_stopped_part_way_still_prints_its_json_summary() -> None:
    """``--json``: what was done before the cluster stopped serving is on stdout, the error after."""
    def act(i: str) -> dict[str, object]:
        if i == "C":
            raise client.UnavailableError(503, "no_leader", "no leader is known")
        return {"id": i}

    out, err = io.StringIO(), io.StringIO()
    with pytest.raises(client.UnavailableError):
        commands._each(["A", "B", "C", "D"], act, Printer(Mode.JSON, out, err=err), "pause", "4 tasks")
    summary = json.loads(out.getvalue())
    assert summary["ids"] == ["A", "B"] and summary["paused"] == 2 and summary["matched"] == 4
    assert "stopped after 2 of 4" in err.getvalue()


def test_a_redrive_by_ids_keeps_each_answers_warning() -> None:
    """A redriven at_most_once fire's answer warns that it may have reached its receiver already:
    kept per id (JSON) and said once (stderr), as the single-id command says it."""
    warning = "this at_most_once fire may have been delivered before its node was lost"

    def act(i: str) -> dict[str, object]:
        return {"id": i, "warning": warning} if i == "B" else {"id": i}

    for mode in (Mode.JSON, Mode.TABLE):
        out, err = io.StringIO(), io.StringIO()
        assert commands._each(["A", "B"], act, Printer(mode, out, err=err), "redrive", "2 dead letters") == commands.OK
        assert f"warning (1 of them): {warning}" in err.getvalue()
        if mode is Mode.JSON:
            assert json.loads(out.getvalue())["warnings"] == [{"id": "B", "warning": warning}]
        else:
            assert warning in out.getvalue()


def test_an_error_message_of_several_lines_is_reported_on_one() -> None:
    from molens.ops_cli import _report

    err = io.StringIO()
    _report(Printer(Mode.TABLE, io.StringIO(), err=err), 502, "http_error", "<html>\n<body>bad gateway</body>\n</html>")
    assert err.getvalue().count("\n") == 1 and "<html> <body>bad gateway</body> </html>" in err.getvalue()


def test_a_bulk_delete_interrupted_by_a_leader_change_goes_on_with_the_rest() -> None:
    """The API answers what applied before a leader change, with ``interrupted`` and ``more``: the
    command counts what applied (not what matched), says so and sends the rest."""
    calls: list[int] = []

    class Client:
        def dead_letters(self, **_: object) -> list[dict[str, object]]:
            return [{"id": f"D{i}"} for i in range(5)]

        def delete_dead_letter(self, dead_id: str) -> None:
            raise AssertionError("a filter is sent, not the ids one by one")

        def delete_dead_letters(self, *, limit: int, **_: object) -> dict[str, object]:
            calls.append(limit)
            if len(calls) == 1:
                return {"matched": 5, "deleted": 2, "error_count": 0, "errors": [], "more": True,
                        "interrupted": {"code": "not_leader", "message": "this node is not the leader (leader: n2)"}}
            return {"matched": limit, "deleted": limit, "error_count": 0, "errors": [], "more": False}

    a = argparse.Namespace(task="T", flow=None, kind=None, since=None, until=None, ids=[], every=False,
                           action="delete", dry_run=False, yes=True)
    out, err = io.StringIO(), io.StringIO()
    assert commands.dead_action(Client(), a, Printer(Mode.JSON, out, err=err)) == commands.OK  # type: ignore[arg-type]
    assert calls == [5, 3]
    summary = json.loads(out.getvalue())
    assert (summary["matched"], summary["deleted"]) == (5, 5)
    assert "interrupted after 2 (this node is not the leader (leader: n2)); going on" in err.getvalue()
