"""The chaos soak says before it starts when the machine cannot make its faults."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.integration import chaos


def test_the_soak_names_a_missing_iptables_before_it_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "iptables" else real(name) or f"/usr/sbin/{name}")
    why = chaos.netns_unavailable()
    assert why is not None and "iptables" in why, why
