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


def test_the_local_base_is_debootstrapped_as_the_release_its_tag_names_from_this_machines_mirror(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert engine.LOCAL_BASE_IMAGE.endswith(f":{engine.DEBIAN_RELEASE}")  # the tag says the release it holds
    assert engine.BASE_IMAGE.endswith(f":{engine.DEBIAN_RELEASE}-slim")
    (tmp_path / "sources.list").write_text("deb http://trixie-host.example/debian trixie main\n")
    monkeypatch.setattr(engine, "debian_codename", lambda: "trixie")
    assert engine.debootstrap_mirror("bookworm", tmp_path) == "http://trixie-host.example/debian"
    (tmp_path / "sources.list").write_text(
        "deb http://trixie-host.example/debian trixie main\ndeb http://bookworm.example/debian bookworm main\n"
    )
    assert engine.debootstrap_mirror("bookworm", tmp_path) == "http://bookworm.example/debian"
    (tmp_path / "sources.list").write_text("deb https://vendor.example/apt nodistro main\n")
    with pytest.raises(engine.EngineUnavailable, match="no Debian mirror for 'bookworm' or 'trixie'"):
        engine.debootstrap_mirror("bookworm", tmp_path)


def test_a_base_image_named_by_molens_base_image_is_used_without_fetching_the_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fetched: list[str] = []
    monkeypatch.setattr(engine, "ensure_tools", lambda: ["docker", "compose"])
    monkeypatch.setattr(engine.Daemon, "ensure", classmethod(lambda cls: cls()))
    def ensure_base_image(pull_tag: str, *_: object) -> str:
        fetched.append(pull_tag)
        return pull_tag

    monkeypatch.setattr(engine, "ensure_base_image", ensure_base_image)
    assert engine.main(["up", "python:3.12-slim"]) == 0
    assert capsys.readouterr().out == "python:3.12-slim\n"
    assert fetched == []
    assert engine.main(["up"]) == 0
    assert capsys.readouterr().out == f"{engine.BASE_IMAGE}\n"
    assert fetched == [engine.BASE_IMAGE]
