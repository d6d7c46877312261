"""The engine set-up's own rules, without Docker: which mirror debootstrap uses, and that a machine
where the engine cannot be installed gets a clear failure, not a skip."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import engine


def test_the_mirror_is_read_from_the_apt_sources_main_suite_in_both_formats(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://old.example/debian bookworm main\n"
        "deb [arch=amd64] http://one-line.example/debian bookworm main contrib\n"
        "deb http://one-line.example/debian-security bookworm-security main\n"
    )
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://deb822.example/debian\nSuites: bookworm bookworm-updates\n"
        "Components: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://deb822.example/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb-src\nURIs: http://src.example/debian\nSuites: bookworm\nComponents: main\n"
    )
    (tmp_path / "sources.list.d" / "other.list").write_text("deb https://vendor.example/apt nodistro main\n")
    assert engine.apt_mirrors("bookworm", tmp_path) == ["http://one-line.example/debian", "http://deb822.example/debian"]
    assert engine.apt_mirrors("trixie", tmp_path) == []


def test_without_root_the_missing_engine_is_a_failure_that_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine.os, "geteuid", lambda: 1000)
    with pytest.raises(engine.EngineUnavailable, match=r"docker\.io missing.*needs root and apt-get"):
        engine._apt_install(["docker.io"])
