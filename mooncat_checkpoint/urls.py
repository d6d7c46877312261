"""Which backend a client uses: ``url`` argument > ``$MOONCAT_CHECKPOINT_URL`` > the default.

A URL is ``scheme://path`` and the path is everything after ``://``, taken literally: so
``sqlite:///var/x.db`` is the absolute ``/var/x.db`` and ``sqlite://./x.db`` or ``file://data/cp`` are
relative to the working directory (resolved once, when the client is made). ``memory://`` takes no
path (anything after it is ignored, e.g. ``memory://tests`` as a label). ``redis://host:port/db`` and
``postgresql://user:password@host:port/db`` (also ``postgres://``) are passed whole to redis-py and
psycopg, which are imported only when such a URL is opened; the one exception is ``socket_timeout``,
which a ``postgresql://`` URL may carry for this library (``url_option`` takes it out) since libpq has no
such parameter.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from urllib.parse import unquote

from mooncat_checkpoint.backends.base import Backend, ServerBackend
from mooncat_checkpoint.errors import BackendUnavailableError

__all__ = [
    "shown_url", "redact", "ENV_VAR", "DEFAULT_URL", "SCHEMES", "resolve_url", "split_url", "open_backend", "url_option",
    "seconds_option",
]

ENV_VAR = "MOONCAT_CHECKPOINT_URL"
DEFAULT_URL = "file://./.mooncat/checkpoints"
SCHEMES = ("file", "sqlite", "memory", "redis", "postgresql", "postgres")
_USE = "use file://DIR, sqlite://PATH, memory://, redis://HOST:PORT/DB or postgresql://USER@HOST:PORT/DB"


def resolve_url(url: str | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """The effective URL, exactly as given, and where it came from: argument, environment or default."""
    if url is not None:
        return url, "argument"
    env = (os.environ if environ is None else environ).get(ENV_VAR)
    if env:
        return env, "environment"
    return DEFAULT_URL, "default"


def split_url(url: str) -> tuple[str, str]:
    """``(scheme, path)``; raises ``BackendUnavailableError`` naming what is wrong."""
    if not isinstance(url, str):
        raise BackendUnavailableError(f"checkpoint URL must be a str, not {type(url).__name__}")
    scheme, sep, path = url.partition("://")
    if not sep:
        raise BackendUnavailableError(
            f"checkpoint URL {shown_url(url)!r} has no scheme: {_USE}"
        )
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise BackendUnavailableError(
            f"unknown checkpoint URL scheme {scheme!r} in {shown_url(url)!r}: {_USE}"
        )
    if scheme in ("file", "sqlite") and not path:
        raise BackendUnavailableError(f"checkpoint URL {shown_url(url)!r} has no path after {scheme}://")
    return scheme, path


def open_backend(url: str) -> Backend | ServerBackend:
    scheme, path = split_url(url)
    if scheme == "redis":
        from mooncat_checkpoint.backends.redis import RedisBackend

        return RedisBackend(url)
    if scheme in ("postgresql", "postgres"):
        from mooncat_checkpoint.backends.postgres import PostgresBackend

        return PostgresBackend(url)
    if scheme == "memory":
        from mooncat_checkpoint.backends.memory import MemoryBackend

        return MemoryBackend()
    if scheme == "sqlite":
        from mooncat_checkpoint.backends.sqlite import SqliteBackend

        return SqliteBackend(path)
    from mooncat_checkpoint.backends.file import FileBackend

    return FileBackend(path)


def url_option(url: str, name: str) -> tuple[str, str | None]:
    """``url`` without its query parameter ``name`` (every other character kept as it was), and that
    parameter's value (the last one if repeated; None when absent)."""
    base, sep, query = url.partition("?")
    if not sep:
        return url, None
    kept, value = [], None
    for item in query.split("&"):
        field, _, raw = item.partition("=")
        if unquote(field) == name:
            value = unquote(raw)
        else:
            kept.append(item)
    return (base + "?" + "&".join(kept) if kept else base), value


def seconds_option(url: str, name: str, value: str | None, default: float) -> float:
    """A URL's duration parameter: a finite number of seconds above 0, ``default`` when absent."""
    if value is None:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise BackendUnavailableError(f"{shown_url(url)}: {name} must be a number of seconds above 0, not {value!r}")
    return seconds


def shown_url(url: str) -> str:
    """The URL as messages show it: any password (``user:PASSWORD@``, ``?password=...``) as ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep:  # no scheme (a slip): the whole of it may still carry user:password@
        scheme, rest = "", url
    creds, at, host = rest.rpartition("@")
    if at and ":" in creds:
        rest = f"{creds.split(':', 1)[0]}:***@{host}"
    return scheme + sep + _PASSWORD_PARAM.sub(r"\1***", rest)


def redact(text: str, url: str) -> str:
    """``text`` (a driver's error message, which may quote the URL or parts of it) with the URL's
    password, and each piece of it a driver may have split off at ``@`` or ``:``, shown as ``***``."""
    secrets = set()
    _, _, rest = url.partition("://")
    creds, at, _ = rest.rpartition("@")
    if at and ":" in creds:
        secrets.add(creds.split(":", 1)[1])
    secrets.update(m.group(2) for m in _PASSWORD_PARAM.finditer(rest))
    split = {p for s in secrets for p in re.split(r"[@:/?&]", s) if p}
    pieces = {p for p in split if len(p) >= 3}
    for s in sorted({*secrets, *pieces, *(unquote(s) for s in secrets)}, key=len, reverse=True):
        if s:
            text = text.replace(s, "***")
    for p in sorted(split - pieces, key=len, reverse=True):  # a short piece: only where it stands alone
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(p)}(?![A-Za-z0-9])", "***", text)
    return text


_PASSWORD_PARAM = re.compile(r"([?&]password=)([^&#]*)", re.IGNORECASE)
