"""``molens-node CONFIG signing-key --namespace NS`` (docs/receiver.md#one-key-per-namespace): the
namespace's callback signing keys, one a line, derived from the node's secrets; clear refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from molens.cli import main
from molens.signing import namespace_secret


def _conf(tmp_path: Path, worker: str) -> str:
    p = tmp_path / "node.yaml"
    p.write_text(f"worker:\n{worker}")
    return str(p)


def test_it_prints_the_key_of_each_secret_in_order(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = _conf(tmp_path, "  signing_secret: s1\n  signing_secret_next: s2\n")
    assert main([conf, "signing-key", "--namespace", "team-a"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [namespace_secret("s1", "team-a"), namespace_secret("s2", "team-a")]
    assert "s1" not in out.out.split() and out.err == ""


def test_a_cluster_scope_is_pointed_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conf = _conf(tmp_path, "  signing_secret: s1\n  signing_scope: cluster\n")
    assert main([conf, "signing-key", "--namespace", "team-a"]) == 0
    out = capsys.readouterr()
    assert out.out.splitlines() == [namespace_secret("s1", "team-a")] and "signing_scope is cluster" in out.err


@pytest.mark.parametrize("worker,namespace,says", [
    ("  signing_secret: \"\"\n", "team-a", "worker.signing_secret is not set"),
    ("  signing_secret: s1\n", "Team A", "is not a namespace name"),
    ("  signing_secret: s1\n  signing_scope: tenant\n", "team-a", "must be cluster, both or namespace"),
])
def test_what_it_cannot_do_is_a_one_line_error_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], worker: str, namespace: str, says: str,
) -> None:
    assert main([_conf(tmp_path, worker), "signing-key", "--namespace", namespace]) == 2
    out = capsys.readouterr()
    assert out.out == "" and says in out.err


def test_the_namespace_is_required_and_only_for_signing_key(tmp_path: Path) -> None:
    conf = _conf(tmp_path, "  signing_secret: s1\n")
    for argv in ([conf, "signing-key"], [conf, "status", "--namespace", "team-a"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 2
