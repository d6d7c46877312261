"""The admin socket's membership changes: one refused only for now is asked again, a final refusal is not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from molens.config import load_dict
from molens.node import Node
from molens.raft import core as rc


def _node(tmp_path: Path) -> tuple[Node, list[tuple[Any, ...]]]:
    node = Node(load_dict({"node": {"id": "n1", "data_dir": str(tmp_path)}}))
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
