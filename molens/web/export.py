"""Exports: every row of a filtered list as CSV or JSON lines, streamed (docs/api.md#exports).

The list routes of tasks, executions (a task's history too), dead letters and the audit trail take
``?format=csv`` or ``?format=jsonl`` beside their filters: the answer is every matching row, not a
page, so ``cursor`` and ``limit`` are refused with it. The body is a generator that asks the route's
own page function for one page at a time (:data:`PAGE` rows, a short read transaction each) and
writes it out before asking for the next: a node never holds the export in memory, and a client sees
its first rows before the last are read. The filters, the namespaces the key may read and the bad
parameters (400) are settled before the first byte, from the same code the pages use.

CSV: a header row of the object's fields in the OpenAPI document's order; times (``*_at``, ``at``)
as ISO 8601 UTC with milliseconds; objects (payload, retry) as compact JSON; a text cell that a
spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab, CR first) is written with a
leading ``'``. JSON lines: one object per line, exactly as the list's ``items`` hold it.

A browser cannot put a bearer key on a download link, so the console asks ``POST /api/v1/exports``
``{"url": "/api/v1/tasks?status=failed&format=csv"}`` for a one-time link: the answer's ``url`` adds a
``ticket`` that stands in for the key on that one GET, on this node, within :data:`TICKET_TTL_S`
(:class:`Tickets`; checked by :mod:`molens.web.access`).
"""

from __future__ import annotations

import csv
import datetime as dt
import functools
import io
import json
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import bottle

from molens.errors import ValidationError
from molens.schema import python_pattern
from molens.wallclock import MAX_EPOCH_MS

if TYPE_CHECKING:
    from molens.web.app import Api

FORMATS = ("json", "csv", "jsonl")
PAGE = 500
"""Rows read per page of an export."""
TICKET_TTL_S = 60.0
MAX_TICKETS = 1024
"""Unused tickets kept per node at most: a client minting more pushes out the oldest."""
MAX_TICKETS_PER_KEY = 32
"""Unused tickets kept per key at most: a key minting more pushes out its own oldest, never another
key's (a key of one namespace cannot make another team's download links fail by minting)."""
MAX_EXPORT_URL = 4096
_CT = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
EXPORT_URL_PATTERN = (
    r"^/api/v1/(?:tasks|executions|dead-letters|audit|tasks/[0-9A-Za-z]{1,64}/executions)\?format=(?:csv|jsonl)"
    r"(?:&(?!format=|ticket=)[a-z_]{1,32}=[A-Za-z0-9_%.*+-]{0,2048})*$"
)
"""What ``POST /api/v1/exports`` takes: an export's path, ``format`` first, then the list's
filters, URL-encoded as a browser's ``URLSearchParams`` writes them (the OpenAPI document states it)."""
TICKET_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"
_EXPORT_URL = re.compile(python_pattern(EXPORT_URL_PATTERN))
_TICKET = re.compile(python_pattern(TICKET_PATTERN))

P = TypeVar("P")


def export_format(api: Api) -> str | None:
    """``csv`` or ``jsonl`` when the request asks for an export; None for a page (``format=json`` or none)."""
    ticket = api.q_raw("ticket")  # beside a key it is not read, but it is still checked
    if ticket is not None and not _TICKET.match(ticket):
        raise ValidationError("ticket is not a ticket this API issued", "ticket")
    fmt = api.q_raw("format")
    if fmt is None or fmt == "json":
        return None
    if fmt not in FORMATS:
        raise ValidationError(f"format must be one of {', '.join(FORMATS)}", "format")
    if api.q_raw("cursor") is not None or api.q_raw("limit") is not None:
        raise ValidationError(f"an export (format={fmt}) is every matching row: no cursor or limit", "format")
    return fmt


def paged(page: Callable[[P | None], tuple[Sequence[dict[str, Any]], P | None]]) -> Iterator[Sequence[dict[str, Any]]]:
    """The pages ``page(position)`` answers, from the start until it answers no next position."""
    pos: P | None = None
    while True:
        rows, pos = page(pos)
        if rows:
            yield rows
        if pos is None:
            return


def stream(name: str, fmt: str, columns: Sequence[str], pages: Iterable[Sequence[dict[str, Any]]]) -> bottle.HTTPResponse:
    """The streamed answer of an export of ``name`` (``tasks``...) in ``fmt``."""
    body = _csv(columns, pages) if fmt == "csv" else _jsonl(pages)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    ext = "csv" if fmt == "csv" else "jsonl"
    headers = {
        "Content-Type": _CT[fmt],
        "Content-Disposition": f'attachment; filename="molens-{name}-{stamp}.{ext}"',
        "Cache-Control": "no-store",
        "X-Molens-Role": bottle.response.get_header("X-Molens-Role") or "",
    }
    return bottle.HTTPResponse(body, status=200, headers=headers)


def _jsonl(pages: Iterable[Sequence[dict[str, Any]]]) -> Iterator[bytes]:
    for rows in pages:
        yield b"".join(json.dumps(r, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for r in rows)


def _csv(columns: Sequence[str], pages: Iterable[Sequence[dict[str, Any]]]) -> Iterator[bytes]:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n")
    w.writerow(columns)
    times = [c == "at" or c.endswith("_at") for c in columns]
    yield buf.getvalue().encode()
    for rows in pages:
        buf.seek(0)
        buf.truncate()
        for r in rows:
            w.writerow([cell(r.get(c), is_time) for c, is_time in zip(columns, times, strict=True)])
        yield buf.getvalue().encode()


def cell(v: Any, is_time: bool = False) -> str:
    """One CSV cell (see the module docstring)."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        if is_time and 0 <= v <= MAX_EPOCH_MS:
            return dt.datetime.fromtimestamp(v / 1000, dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        return str(v)
    if isinstance(v, float):
        return repr(v)
    if not isinstance(v, str):
        return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
    return "'" + v if v.startswith(_FORMULA_START) else v


@functools.cache
def columns(schema: str) -> tuple[str, ...]:
    """The fields of OpenAPI component ``schema``, in the document's order: an export's CSV header."""
    from molens.web.openapi import document

    return tuple(document()["components"]["schemas"][schema]["properties"])


# -------------------------------------------------------------------------------------------------
# one-time download links


@dataclass(frozen=True, slots=True)
class _Ticket(Generic[P]):
    holder: P
    target: str
    expires: float


class Tickets(Generic[P]):
    """One-time tickets that stand in for a key on one export GET (see the module docstring):
    bound to the path and query they were minted for, used once, gone after :data:`TICKET_TTL_S`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, ttl_s: float = TICKET_TTL_S,
                 capacity: int = MAX_TICKETS, per_holder: int = MAX_TICKETS_PER_KEY,
                 owner: Callable[[P], object] = lambda p: p) -> None:
        self._clock, self._ttl, self._cap, self._per_holder, self._owner = clock, ttl_s, capacity, per_holder, owner
        self._live: dict[str, _Ticket[P]] = {}
        self._lock = threading.Lock()

    def mint(self, holder: P, url: str) -> tuple[str, float]:
        """A ticket for ``holder`` to GET ``url`` (an export's path and query, checked here; 400
        otherwise) and the seconds it lasts."""
        target = export_target(url)
        t = secrets.token_urlsafe(32)
        now = self._clock()
        with self._lock:
            for k in [k for k, v in self._live.items() if v.expires <= now]:
                del self._live[k]
            who = self._owner(holder)
            own = [k for k, v in self._live.items() if self._owner(v.holder) == who]  # oldest first
            for k in own[:max(0, len(own) - self._per_holder + 1)]:
                del self._live[k]
            while len(self._live) >= self._cap:
                del self._live[next(iter(self._live))]
            self._live[t] = _Ticket(holder, target, now + self._ttl)
        return t, self._ttl

    def take(self, ticket: str, path: str, query: str) -> P | None:
        """The holder of ``ticket`` if it was minted for this path and query (``ticket`` left out)
        and has not expired; it is used up either way."""
        with self._lock:
            found = self._live.pop(ticket, None)
        if found is None or found.expires <= self._clock():
            return None
        return found.holder if found.target == _canonical(path, query) else None


def export_target(url: str) -> str:
    """``url``'s path and query in one canonical form, if it asks a list for an export
    (:data:`EXPORT_URL_PATTERN`); else 400."""
    if not isinstance(url, str) or len(url) > MAX_EXPORT_URL or not _EXPORT_URL.match(url):
        raise ValidationError(
            "url must be an export: /api/v1/tasks, /executions, /dead-letters, /audit or a task's /executions, "
            "then ?format=csv or ?format=jsonl first and the list's filters after it", "url",
        )
    path, _, query = url.partition("?")
    return _canonical(path, query)


def _canonical(path: str, query: str) -> str:
    pairs = sorted((k, v) for k, v in urllib.parse.parse_qsl(query, keep_blank_values=True) if k != "ticket")
    return path + "?" + urllib.parse.urlencode(pairs)


def install_exports(api: Api) -> None:
    """``POST /api/v1/exports``: a one-time link to an export for the request's key."""
    from molens.web import access
    from molens.web.app import PREFIX

    @api.route("POST", f"{PREFIX}/exports")
    def mint_ticket() -> tuple[int, Any]:
        body = api.read_json()
        if not isinstance(body, dict) or set(body) != {"url"}:
            raise ValidationError("the body must be an object with one field, url: an export's path and query", "url")
        url = body["url"]
        ticket, ttl = api.access.tickets.mint(access.principal(), url)
        return 201, {"url": url + ("&" if "?" in url else "?") + "ticket=" + ticket, "expires_in_s": ttl}


__all__ = ["FORMATS", "MAX_TICKETS_PER_KEY", "PAGE", "TICKET_TTL_S", "Tickets", "cell", "columns", "export_format", "export_target", "paged",
           "install_exports", "stream"]
