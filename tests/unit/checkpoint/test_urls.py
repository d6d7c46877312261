"""Which store a client opens: URL precedence, path rules, and clear errors at construction."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mooncat_checkpoint import DEFAULT_URL, BackendUnavailableError, CheckpointClient, SyncCheckpointClient


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MOONCAT_CHECKPOINT_URL", raising=False)


def test_the_default_is_a_file_store_under_the_working_directory(tmp_path: Path) -> None:
    cp = SyncCheckpointClient()
    assert cp.url == DEFAULT_URL == "file://./.mooncat/checkpoints" and cp.backend == "file"
    cp.claim("ns", "k")
    assert (tmp_path / ".mooncat" / "checkpoints" / "ns" / "k.json").is_file()


def test_the_environment_beats_the_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAT_CHECKPOINT_URL", "sqlite://./from-env.db")
    cp = SyncCheckpointClient()
    assert cp.url == "sqlite://./from-env.db" and cp.backend == "sqlite"
    assert (tmp_path / "from-env.db").is_file()


def test_an_explicit_url_beats_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAT_CHECKPOINT_URL", "sqlite://./from-env.db")
    cp = CheckpointClient("file://explicit")
    assert cp.url == "file://explicit"  # exactly as given
    assert (tmp_path / "explicit").is_dir() and not (tmp_path / "from-env.db").exists()


def test_an_empty_environment_variable_is_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOONCAT_CHECKPOINT_URL", "")
    assert SyncCheckpointClient().url == DEFAULT_URL


def test_the_path_is_everything_after_the_scheme(tmp_path: Path) -> None:
    rel = SyncCheckpointClient("sqlite://./rel.db")
    assert (tmp_path / "rel.db").is_file()
    absolute = tmp_path / "abs" / "x.db"
    SyncCheckpointClient(f"sqlite://{absolute}")  # sqlite:///... : an absolute path
    assert absolute.is_file()
    SyncCheckpointClient("file://nested/dir")
    assert (tmp_path / "nested" / "dir").is_dir()
    rel.close()


def test_a_relative_store_stays_put_when_the_working_directory_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = SyncCheckpointClient("file://./here")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    cp.claim("ns", "k")
    assert (tmp_path / "here" / "ns" / "k.json").is_file()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://localhost", "unknown checkpoint URL scheme 'ftp'"),
        ("./just/a/path", "has no scheme"),
        ("file://", "has no path"),
        ("sqlite://", "has no path"),
        ("postgresql://u@127.0.0.1:1/db?socket_timeout=0", "socket_timeout must be a number of seconds above 0, not '0'"),
        ("postgres://u@127.0.0.1:1/db?connect_timeout=2&socket_timeout=soon", "socket_timeout must be a number of seconds"),
        ("postgresql://u@127.0.0.1:1/db?connect_timeout=0", "connect_timeout must be a number of seconds above 0"),
        ("redis://127.0.0.1:1/0?socket_timeout=-1", "socket_timeout must be a number of seconds above 0, not '-1'"),
        ("redis://127.0.0.1:1/0?socket_connect_timeout=inf", "socket_connect_timeout must be a number of seconds"),
    ],
)
def test_bad_urls_fail_at_construction_with_one_line(url: str, message: str) -> None:
    with pytest.raises(BackendUnavailableError, match=message) as info:
        CheckpointClient(url)
    assert "\n" not in str(info.value)


def test_an_unusable_directory_fails_at_construction(tmp_path: Path) -> None:
    (tmp_path / "plain-file").write_text("not a directory")
    with pytest.raises(BackendUnavailableError, match="not usable") as info:
        CheckpointClient(f"file://{tmp_path}/plain-file/sub")
    assert "\n" not in str(info.value)
    with pytest.raises(BackendUnavailableError):
        CheckpointClient(f"sqlite://{tmp_path}/plain-file/sub/x.db")


def test_a_file_that_is_not_a_database_fails_at_construction(tmp_path: Path) -> None:
    (tmp_path / "junk.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(BackendUnavailableError, match=r"junk\.db"):
        CheckpointClient(f"sqlite://{tmp_path}/junk.db")
    with pytest.raises(BackendUnavailableError):
        CheckpointClient(f"sqlite://{tmp_path}")  # a directory


def test_someone_elses_database_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    """Pointing the client (or a read-only CLI command) at the wrong SQLite file must not switch it
    to WAL and add this library's tables to it."""
    other, clash = tmp_path / "app.db", tmp_path / "clash.db"
    with sqlite3.connect(other) as c:
        c.execute("CREATE TABLE users (id INTEGER)")
    with sqlite3.connect(clash) as c:
        c.execute("CREATE TABLE checkpoints (id INTEGER)")
    with pytest.raises(BackendUnavailableError, match=r"is not a checkpoint store \(it holds the tables users\)"):
        SyncCheckpointClient(f"sqlite://{other}")
    with pytest.raises(BackendUnavailableError, match=r"table 'checkpoints' that is not a checkpoint store's"):
        SyncCheckpointClient(f"sqlite://{clash}")
    for db, tables in ((other, ["users"]), (clash, ["checkpoints"])):
        with sqlite3.connect(db) as c:
            assert c.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
            assert [r[0] for r in c.execute("SELECT name FROM sqlite_master")] == tables


def test_memory_urls_may_carry_a_label() -> None:
    assert CheckpointClient("memory://tests").backend == "memory"


def test_sqlite_is_opened_in_wal_mode_with_a_migration_table(tmp_path: Path) -> None:
    SyncCheckpointClient(f"sqlite://{tmp_path}/m.db").close()
    SyncCheckpointClient(f"sqlite://{tmp_path}/m.db").close()  # a second open migrates nothing
    with sqlite3.connect(tmp_path / "m.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert db.execute("SELECT version, description FROM schema_migrations").fetchall() == [
            (1, "checkpoints and fence floors"),
            (2, "the original library's table layout (storage_key) and a fence high mark"),
        ]
        db.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', 0)")
    with pytest.raises(BackendUnavailableError, match="schema version 99"):
        SyncCheckpointClient(f"sqlite://{tmp_path}/m.db")


@pytest.mark.parametrize("scheme", ["redis", "postgresql"])
def test_a_server_that_is_not_there_fails_at_construction_with_one_line(scheme: str) -> None:
    from tests.integration.conftest import free_ports

    (port,) = free_ports(1)  # nothing listens there
    url = f"redis://127.0.0.1:{port}/0" if scheme == "redis" else f"postgresql://nobody:secret@127.0.0.1:{port}/db"
    with pytest.raises(BackendUnavailableError, match=f"{scheme} backend: cannot reach") as info:
        CheckpointClient(url)
    assert "\n" not in str(info.value)
    assert "secret" not in str(info.value)  # the password is not shown


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:SECRETPW@127.0.0.1:1/db",
        "postgresql://u:SECRETPW@[::1",  # the driver quotes the whole URI back
        "postgresql://u@127.0.0.1:1/db?password=SECRETPW",
        "postgresql://u:SEC@RETPW@127.0.0.1:1/db",  # the driver takes "RETPW@127.0.0.1" for the host
        "postgresql://u:p%40SECRETPW@127.0.0.1:1/db",
        "redis://:SECRETPW@127.0.0.1:1/0",
        "postgress://u:SECRETPW@127.0.0.1:1/db",  # a scheme mistyped
        "u:SECRETPW@127.0.0.1:1/db",  # no scheme at all
    ],
)
def test_a_password_never_shows_in_an_error(url: str) -> None:
    with pytest.raises(BackendUnavailableError) as exc:
        SyncCheckpointClient(url)
    text = str(exc.value)
    assert "SECRET" not in text and "RETPW" not in text, text
    assert "***" in text, text


def test_a_short_piece_of_a_password_never_shows_in_an_error_and_words_that_hold_it_stay() -> None:
    """A password of ``pw@xq``: the driver takes ``xq@127.0.0.1`` for the host and says so."""
    from mooncat_checkpoint.urls import redact

    url = "postgresql://u:pw@xq@127.0.0.1:1/db"
    with pytest.raises(BackendUnavailableError) as exc:
        SyncCheckpointClient(url)
    assert "xq@" not in str(exc.value) and "pw@" not in str(exc.value), exc.value
    said = redact("failed to resolve host 'xq@127.0.0.1' (pw): the xqueue's pwd", url)
    assert said == "failed to resolve host '***@127.0.0.1' (***): the xqueue's pwd"


def test_the_url_command_prints_a_path_of_undecodable_bytes_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json
    import os

    from mooncat_checkpoint.cli import main

    url = "file://" + os.fsdecode(bytes(tmp_path) + b"/\xff")
    assert main(["--url", url, "url"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["url"].endswith("/\udcff") and out["backend"] == "file"


def test_the_url_command_shows_a_password_as_stars(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from mooncat_checkpoint.cli import main

    monkeypatch.setenv("MOONCAT_CHECKPOINT_URL", "postgresql://u:SECRET@h/db?password=SECRET2")
    assert main(["url"]) == 0
    out = capsys.readouterr().out
    assert "SECRET" not in out and '"url": "postgresql://u:***@h/db?password=***"' in out, out


def test_a_closed_client_and_its_repr_show_a_password_as_stars(monkeypatch: pytest.MonkeyPatch) -> None:
    """The messages of a client that opened (here a memory store stands in for the server's)."""
    from mooncat_checkpoint import engine
    from mooncat_checkpoint.backends.memory import MemoryBackend

    monkeypatch.setattr(engine, "open_backend", lambda url: MemoryBackend())
    client = SyncCheckpointClient("postgresql://u:SECRETPW@127.0.0.1:1/db")
    assert repr(client) == "SyncCheckpointClient(url='postgresql://u:***@127.0.0.1:1/db')"
    assert "SECRET" not in repr(CheckpointClient("redis://:SECRETPW@127.0.0.1:1/0"))
    client.close()
    with pytest.raises(BackendUnavailableError) as exc:
        client.claim("ns", "k")
    assert "SECRET" not in str(exc.value) and "u:***@" in str(exc.value), exc.value


def test_url_option_takes_out_one_parameter_and_keeps_the_rest_as_written() -> None:
    from mooncat_checkpoint.urls import url_option

    assert url_option("postgresql://u@h/db?sslmode=require&socket_timeout=1.5&application_name=a%20b", "socket_timeout") == (
        "postgresql://u@h/db?sslmode=require&application_name=a%20b", "1.5")
    assert url_option("postgresql://u@h/db?socket_timeout=2", "socket_timeout") == ("postgresql://u@h/db", "2")
    assert url_option("postgresql://u@h/db?connect_timeout=2", "socket_timeout") == (
        "postgresql://u@h/db?connect_timeout=2", None)
    assert url_option("postgresql://u@h/db", "socket_timeout") == ("postgresql://u@h/db", None)
