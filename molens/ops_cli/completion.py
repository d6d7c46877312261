"""``molens completion bash|zsh``: shell completion scripts written from the parser itself.

The script completes command words, the options of the command typed so far, and the values of
options that take one of a few words (``--status``, ``--kind``, ...); file names after ``--file``
and ``--token-file``. zsh runs the same function through its ``bashcompinit`` layer.

    source <(molens completion bash)      # in ~/.bashrc
    source <(molens completion zsh)       # in ~/.zshrc, after compinit
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Iterator

from molens.ops_cli import values
from molens.ops_cli.parser import PROG

FILE_OPTIONS = ("--file", "--token-file")
LIST_VALUES = {"--status": values.STATUSES}
"""Options that take a comma list of words (no argparse ``choices``): one word completes."""


def _subparsers(p: argparse.ArgumentParser) -> argparse._SubParsersAction | None:  # type: ignore[type-arg]
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _walk(p: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, p
    subs = _subparsers(p)
    if subs is not None:
        for name, child in subs.choices.items():
            yield from _walk(child, (*path, name))


def _words(values: list[str]) -> str:
    return shlex.quote(" ".join(values))


def script(top: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (``bash`` or ``zsh``)."""
    cases: list[str] = []
    paths: list[str] = []
    choices: dict[str, set[str]] = {o: set(words) for o, words in LIST_VALUES.items()}
    for path, p in _walk(top, ()):
        subs = _subparsers(p)
        words = list(subs.choices) if subs is not None else []
        opts = sorted({o for a in p._actions for o in a.option_strings if o.startswith("--")} | {"--help"})
        for a in p._actions:
            if a.choices is not None and a.option_strings and not isinstance(a, argparse._SubParsersAction):
                for o in a.option_strings:  # a word starting with "-" would be read as an option after a space
                    choices.setdefault(o, set()).update(str(c) for c in a.choices if not str(c).startswith("-"))
        key = " ".join(path)
        paths.append(key)
        cases.append(f"        {shlex.quote(key)}) subs={_words(words)}; opts={_words(opts)};;")
        positional_choices = [a for a in p._actions if not a.option_strings and a.choices is not None
                              and not isinstance(a, argparse._SubParsersAction)]
        if positional_choices:  # `completion bash|zsh`
            cases[-1] = (f"        {shlex.quote(key)}) subs={_words([str(c) for c in positional_choices[0].choices or ()])};"
                         f" opts={_words(opts)};;")
    value_cases = "\n".join(f"        {o}) COMPREPLY=($(compgen -W {_words(sorted(v))} -- \"$cur\")); return 0;;"
                            for o, v in sorted(choices.items()))
    body = f"""# {PROG} completion ({shell}): source <({PROG} completion {shell})
_{PROG}() {{
    local cur prev cmd w i subs opts
    cur=${{COMP_WORDS[COMP_CWORD]}}
    prev=${{COMP_WORDS[COMP_CWORD-1]}}
    case "$prev" in
{value_cases}
        {"|".join(FILE_OPTIONS)}) COMPREPLY=($(compgen -f -- "$cur")); return 0;;
    esac
    cmd=""
    for ((i = 1; i < COMP_CWORD; i++)); do
        w=${{COMP_WORDS[i]}}
        case "$w" in -*) continue;; esac
        case "${{cmd:+$cmd }}$w" in
            {"|".join(shlex.quote(k) for k in paths if k)}) cmd="${{cmd:+$cmd }}$w";;
        esac
    done
    subs=""; opts=""
    case "$cmd" in
{chr(10).join(cases)}
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$opts" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "$subs" -- "$cur"))
    fi
    return 0
}}
complete -F _{PROG} {PROG}
"""
    if shell == "zsh":
        return ("(( $+functions[compdef] )) || { autoload -U +X compinit && compinit }\n"
                "autoload -U +X bashcompinit && bashcompinit\n" + body)
    return body
