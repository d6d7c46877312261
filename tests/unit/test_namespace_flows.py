"""A namespace's own flows (``<namespace>~<flow_key>``) go with it (molens/fsm/machine.py
``_delete_namespace``, ``_put_flow``; docs/api.md#flows): a namespace made again under a deleted
one's name starts without its limits or pause, a flow of a namespace that does not exist is not
set, and through the API a namespace has at most ``MAX_NAMESPACE_FLOWS`` flows with settings and
no ``default~`` flow is made. Entries of the release before (the flags false) apply as it did."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from molens.errors import NotFoundError
from molens.fsm.commands import (
    Audited,
    AuditStamp,
    Command,
    DeleteNamespace,
    FlowSettings,
    PutFlow,
    PutNamespace,
    decode,
    encode,
)
from molens.fsm.machine import FlowSet
from molens.fsm.memstate import MemoryState
from molens.fsm.store import AuditFilter, EntryResult, TaskStore
from molens.fsm.tenancy import Namespace
from molens.web import flows
from molens.web.app import Api
from tests.unit.test_quota_hold import _call, api  # noqa: F401  (the fixture)

T0 = 1_700_000_000_000


@pytest.mark.parametrize("drops", [True, False])
def test_a_deleted_namespaces_own_flows_go_with_it(drops: bool) -> None:
    s = MemoryState()
    for name in ("pay", "pay-eu"):
        s.apply(PutNamespace(T0, Namespace(name=name), True))
    for key in ("pay~orders", "pay~refunds", "pay-eu~orders", "api.example:443"):
        s.apply(PutFlow(T0, key, FlowSettings(paused=True)))
    out = s.apply(DeleteNamespace(T0, "pay", True, drops))
    assert out.results == [None]
    if drops:
        assert sorted(s.flows) == ["api.example:443", "pay-eu~orders"]  # another namespace's: kept
        assert {e for e in out.effects if isinstance(e, FlowSet) and e.key.startswith("pay~")} == {
            FlowSet("pay~orders", None), FlowSet("pay~refunds", None)}  # the leader's flow control forgets them
    else:  # the release before: a namespace made again under the name would be held by the old pause
        assert "pay~orders" in s.flows


@pytest.mark.parametrize("checks", [True, False])
def test_a_namespaces_own_flow_is_not_set_while_the_namespace_does_not_exist(checks: bool) -> None:
    s = MemoryState()
    res = s.apply(PutFlow(T0, "gone~orders", FlowSettings(rate_per_s=1), False, checks)).results[0]
    if checks:
        assert isinstance(res, NotFoundError) and res.field == "key" and not s.flows
    else:
        assert "gone~orders" in s.flows
    assert isinstance(s.apply(PutFlow(T0, "api.example:443", FlowSettings(), False, checks)).results[0],
                      FlowSettings)  # a shared flow names no namespace
    # a default~ flow set by an earlier release (the API makes none now) can still be changed
    assert isinstance(s.apply(PutFlow(T0, "default~x", FlowSettings(paused=True), True, checks)).results[0],
                      FlowSettings)


def test_the_flags_are_trailing_fields_an_entry_of_the_release_before_lacks() -> None:
    for cmd, before in ((PutFlow(1, "a~b", FlowSettings(), False, True), PutFlow(1, "a~b", FlowSettings())),
                        (DeleteNamespace(1, "a", True, True), DeleteNamespace(1, "a", True))):
        raw = msgspec.msgpack.decode(encode(cmd))
        assert raw[-1] is True
        assert decode(msgspec.msgpack.encode(raw[:-1])) == before


def test_a_namespace_has_at_most_max_namespace_flows_and_no_default_flow_is_made(
        api: tuple[Api, list[float]], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    a, _ = api
    monkeypatch.setattr(flows, "MAX_NAMESPACE_FLOWS", 2)
    assert _call(a, "POST", "/api/v1/namespaces", {"name": "team"})[0] == 201
    for key in ("team~a", "team~b"):
        assert _call(a, "PUT", f"/api/v1/flows/{key}", {"rate_per_s": 1})[0] == 200
    st, _, out = _call(a, "PUT", "/api/v1/flows/team~c", {"rate_per_s": 1})
    assert (st, out["error"]["code"], out["error"]["field"]) == (409, "conflict", "key"), out
    assert _call(a, "POST", "/api/v1/flows/team~c/pause")[0] == 409  # a pause makes settings too
    assert _call(a, "PUT", "/api/v1/flows/team~a", {"rate_per_s": 2})[0] == 200  # one it has: changed
    assert _call(a, "PUT", "/api/v1/flows/other.example:443", {"rate_per_s": 1})[0] == 200  # shared: not counted
    st, _, out = _call(a, "PUT", "/api/v1/flows/default~x", {"rate_per_s": 1})
    assert (st, out["error"]["field"]) == (400, "key") and "bare keys" in out["error"]["message"], out
    assert _call(a, "DELETE", "/api/v1/flows/team~b")[0] == 200
    assert _call(a, "PUT", "/api/v1/flows/team~c", {"rate_per_s": 1})[0] == 200  # room again


def test_the_lmdb_store_drops_the_namespaces_flows_as_the_memory_twin_does(tmp_path: Path) -> None:
    store, mem = TaskStore(tmp_path / "fsm"), MemoryState()
    try:
        cmds: list[Command] = [PutNamespace(T0, Namespace(name=n), True) for n in ("pay", "pay-eu")]
        cmds += [PutFlow(T0, k, FlowSettings(rate_per_s=1)) for k in ("pay~a", "pay~b", "pay-eu~a", "payx:80")]
        cmds.append(DeleteNamespace(T0, "pay", True, True))
        out = store.apply_batch([(n + 1, encode(c)) for n, c in enumerate(cmds)])
        assert all(isinstance(r, EntryResult) for r in out), out
        for c in cmds:
            mem.apply(c)
        assert [k for k, _ in store.scan_flows()] == sorted(mem.flows) == ["pay-eu~a", "payx:80"]
    finally:
        store.close()


def test_the_dropped_flows_are_on_record_as_deleted_and_read_as_the_namespaces(tmp_path: Path) -> None:
    store = TaskStore(tmp_path / "fsm")
    try:
        stamp = AuditStamp("k1", "alice", "10.0.0.1")
        cmds: list[Command] = [PutNamespace(T0, Namespace(name="pay"), True),
                               PutFlow(T0, "pay~a", FlowSettings(rate_per_s=1)),
                               Audited(T0, stamp, DeleteNamespace(T0, "pay", True, True))]
        store.apply_batch([(n + 1, encode(c)) for n, c in enumerate(cmds)])
        got = [(a.action, a.namespace, a.target) for a in store.list_audit(AuditFilter())[0]]
        assert got == [("flow.delete", "pay", "pay~a"), ("namespace.delete", "*", "pay")], got
    finally:
        store.close()
