"""The export module's pure parts: CSV cells and one-time tickets (molens/web/export.py)."""

from __future__ import annotations

import pytest

from molens.errors import ValidationError
from molens.web.export import Tickets, cell, export_target


def test_cells() -> None:
    assert cell(None) == "" and cell(True) == "true" and cell(False) == "false"
    assert cell(1795978291101, is_time=True) == "2026-11-29T18:51:31.101Z"
    assert cell(1795978291101) == "1795978291101"  # not a time column: the number
    assert cell({"a": [1, "é"]}) == '{"a":[1,"é"]}'
    assert cell(0.5) == "0.5"
    for risky in ("=SUM(A1)", "+1", "-1", "@x", "\tx", "\rx"):
        assert cell(risky) == "'" + risky
    assert cell("plain, \"quoted\"") == "plain, \"quoted\""  # quoting is the csv writer's


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


URL = "/api/v1/tasks?format=csv&status=failed"


def test_a_ticket_works_once_for_its_path_and_query_in_any_order() -> None:
    book: Tickets[str] = Tickets(Clock())
    t, ttl = book.mint("alice", URL)
    assert ttl == 60 and len(t) >= 40
    assert book.take(t, "/api/v1/tasks", "format=csv&status=failed&ticket=" + t) == "alice"
    assert book.take(t, "/api/v1/tasks", "format=csv&status=failed") is None  # used up


def test_a_ticket_for_another_query_or_path_is_refused_and_used_up() -> None:
    book: Tickets[str] = Tickets(Clock())
    for path, query in (("/api/v1/tasks", "status=failed&format=jsonl"), ("/api/v1/executions", "status=failed&format=csv"),
                        ("/api/v1/tasks", "status=failed&format=csv&namespace=x")):
        t, _ = book.mint("alice", URL)
        assert book.take(t, path, query) is None
        assert book.take(t, "/api/v1/tasks", "status=failed&format=csv") is None


def test_a_ticket_expires() -> None:
    clock = Clock()
    book: Tickets[str] = Tickets(clock, ttl_s=60)
    t, _ = book.mint("alice", URL)
    clock.t += 60
    assert book.take(t, "/api/v1/tasks", "status=failed&format=csv") is None


def test_the_oldest_unused_tickets_make_room() -> None:
    book: Tickets[str] = Tickets(Clock(), capacity=3)
    made = [book.mint(f"k{i}", URL)[0] for i in range(4)]
    assert book.take(made[0], "/api/v1/tasks", "status=failed&format=csv") is None
    assert [book.take(t, "/api/v1/tasks", "status=failed&format=csv") for t in made[1:]] == ["k1", "k2", "k3"]


def test_a_key_minting_many_tickets_pushes_out_its_own_oldest_never_another_keys() -> None:
    """A key of one namespace minting past its bound made room by pushing out the node's oldest
    tickets: another team's download links failed. Now it pushes out its own."""
    book: Tickets[tuple[str, int]] = Tickets(Clock(), capacity=4, per_holder=3, owner=lambda h: h[0])
    theirs = book.mint(("bob", 0), URL)[0]
    mine = [book.mint(("eve", i), URL)[0] for i in range(8)]
    assert book.take(theirs, "/api/v1/tasks", "status=failed&format=csv") == ("bob", 0)
    got = [book.take(t, "/api/v1/tasks", "status=failed&format=csv") for t in mine]
    assert got == [None] * 5 + [("eve", 5), ("eve", 6), ("eve", 7)]  # its three newest


@pytest.mark.parametrize("url", [
    "/api/v1/tasks", "/api/v1/tasks?format=json", "/api/v1/keys?format=csv", "//evil/api/v1/tasks?format=csv",
    "http://x/api/v1/tasks?format=csv", "/api/v1/tasks?format=csv#x", "/api/v1/tasks?format=csv&ticket=a",
    "/api/v1/tasks?format=csv&format=csv", "/api/v1/tasks/../keys?format=csv", "/api/v1/tasks?format=csv" + "&a=b" * 2000,
    "/api/v1/tasks?status=failed&format=csv", "/api/v1/tasks?format=csv\n", "/api/v1/tasks?format=csv&A=b",
])
def test_only_an_export_gets_a_ticket(url: str) -> None:
    with pytest.raises(ValidationError) as e:
        export_target(url)
    assert e.value.field == "url"


def test_a_tasks_history_is_an_export() -> None:
    assert export_target("/api/v1/tasks/01M8MABE0SEAD6S92SY1NA2EWB/executions?format=jsonl").endswith("format=jsonl")
    assert export_target("/api/v1/tasks?format=csv&q=a+b%21&since=1&order=-created") == \
        "/api/v1/tasks?format=csv&order=-created&q=a+b%21&since=1"
