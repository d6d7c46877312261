"""MolensClient backoff: exponential, capped, jittered into [0.5, 1] of the step, never past the deadline."""

from __future__ import annotations

import time

import pytest

from molens import client as client_mod
from molens.client import MolensClient


def test_backoff_doubles_up_to_the_cap_with_jitter(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    c = MolensClient("http://127.0.0.1:1", backoff_base_s=0.1, backoff_max_s=1.0)
    far = time.monotonic() + 3600
    for n in range(1, 9):
        c._backoff(n, far)
    steps = [min(1.0, 0.1 * 2 ** (n - 1)) for n in range(1, 9)]
    assert all(0.5 * s <= d <= s for d, s in zip(slept, steps, strict=True)), slept
    assert len({round(d, 6) for d in slept}) > 1  # jittered


def test_backoff_never_sleeps_past_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(client_mod.time, "sleep", slept.append)
    c = MolensClient(["http://127.0.0.1:1"], backoff_base_s=10, backoff_max_s=10)
    c._backoff(5, time.monotonic() + 0.2)
    c._backoff(5, time.monotonic() - 1)
    assert slept[0] <= 0.2 and slept[1] == 0.0


def test_urls_are_reduced_to_base_urls_and_rotated() -> None:
    c = MolensClient(["http://a:1/", "http://b:2"])
    assert c._urls == ["http://a:1", "http://b:2"]
    with pytest.raises(ValueError, match="no path"):  # the API is at the root: a path prefix would answer 404
        MolensClient(["http://a:1/x/"])
    assert c._next_node("http://a:1") == "http://b:2"
    assert c._next_node("http://b:2") == "http://a:1"
    assert c._next_node("http://leader-not-listed:3") == "http://a:1"
    with pytest.raises(ValueError):
        MolensClient([])
