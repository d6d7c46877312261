"""The admin socket's membership changes: one refused only for now is asked again, a final refusal is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from molens.config import load_dict
from molens.node import Node
from molens.raft import core as rc


class _Peer:
    """The Raft status a change's reply waits on: its entry committed (or, with ``stuck``, never)."""

    def __init__(self, commit: int, role: str = "leader") -> None:
        self.commit, self.role = commit, role

    def status(self) -> dict[str, Any]:
        return {"commit_index": self.commit, "role": self.role}


def _node(tmp_path: Path, peer: _Peer | None = None) -> tuple[Node, list[tuple[Any, ...]]]:
    node = Node(load_dict({"node": {"id": "n1", "data_dir": str(tmp_path)}}))
    node.peer = peer or _Peer(commit=100)  # type: ignore[assignment]
    audited: list[tuple[Any, ...]] = []
    node._audit_membership = lambda *a: audited.append(a)  # type: ignore[method-assign]
    return node, audited


def test_a_change_refused_for_now_is_asked_again_until_taken_and_audited_once(tmp_path: Path) -> None:
    node, audited = _node(tmp_path)
    calls: list[int] = []

    def change() -> dict[str, Any]:  # a leader just elected: its term's first entry is still committing
        calls.append(1)
        if len(calls) < 3:
            raise rc.ConfChangePending("leader has not committed an entry of its term yet")
        return {"ok": True, "index": 7}

    changes = {"member": {"old": True, "new": None}}
    reply = node._membership_change(change, "cluster.remove_node", "n4", changes).result(10)
    assert reply == {"ok": True, "index": 7}
    assert len(calls) == 3
    assert audited == [("cluster.remove_node", "n4", changes)]


def test_a_final_refusal_is_answered_at_once_and_not_audited(tmp_path: Path) -> None:
    node, audited = _node(tmp_path)
    calls: list[int] = []

    def change() -> dict[str, Any]:
        calls.append(1)
        raise rc.ConfChangeError("n9 is not a member")

    reply = node._membership_change(change, "cluster.remove_node", "n9", {}).result(10)
    assert reply == {"ok": False, "error": "n9 is not a member"}
    assert calls == [1]
    assert audited == []


def test_a_change_that_does_not_commit_while_this_node_leads_is_of_unknown_outcome_and_not_audited(
    tmp_path: Path,
) -> None:
    node, audited = _node(tmp_path, _Peer(commit=6, role="follower"))  # it stepped down with index 7 uncommitted
    reply = node._membership_change(lambda: {"ok": True, "index": 7}, "cluster.remove_node", "n4", {}).result(10)
    assert reply["ok"] is False and reply["outcome"] == "unknown" and reply["index"] == 7, reply
    assert audited == []


def test_a_change_whose_audit_fails_unexpectedly_is_still_answered(tmp_path: Path) -> None:
    """The reply slot of the admin socket is answered whatever the change's thread meets."""
    node, _ = _node(tmp_path)

    def boom(*_: object) -> None:
        raise RuntimeError("audit trail broke")

    node._audit_membership = boom  # type: ignore[method-assign]
    reply = node._membership_change(lambda: {"ok": True, "index": 7}, "cluster.remove_node", "n4", {}).result(10)
    assert reply["ok"] is False and "audit trail broke" in reply["error"]
