"""Namespaces and API keys in the state machine and the key secrets (molens/fsm/tenancy.py,
molens/web/keys.py), driven through machine.apply on an in-memory state."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import msgspec
import pytest

from molens import model
from molens.errors import IllegalTransitionError, NotFoundError, QuotaExceeded, ValidationError
from molens.fsm import machine, tenancy
from molens.fsm.commands import (
    Command,
    CreateItem,
    CreateTasks,
    DeleteApiKey,
    DeleteNamespace,
    DeleteTasks,
    PauseTasks,
    PutApiKey,
    PutNamespace,
    UpdateTask,
    decode,
    encode,
)
from molens.fsm.machine import Created
from molens.fsm.memstate import MemoryState
from molens.fsm.store import EntryResult, TaskStore
from molens.fsm.tenancy import ApiKey, KeyRole, Namespace, Quotas
from molens.schema import DeadLetter, Task, TaskSpec
from molens.web import keys
from molens.web.access import RULES
from molens.web.quotas import CreateRate, Impatience

T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]


def spec(**kw: object) -> TaskSpec:
    body = {"type": "delayed", "callback_url": "http://127.0.0.1:9/cb", "interval_ms": 60_000, **kw}
    return model.decode_create(msgspec.json.encode(body), now_ms=T0)


_IDS = itertools.count(1)


def create(s: MemoryState, sp: TaskSpec) -> object:
    return s.apply(CreateTasks(T0, (CreateItem(model.new_task_id(T0, next(_IDS)), sp),))).results[0]


def test_a_task_stored_before_namespaces_existed_reads_back_in_default() -> None:
    sp = spec()
    fields = msgspec.structs.fields(TaskSpec)
    assert fields[-1].name == "namespace"
    old = msgspec.msgpack.encode(msgspec.structs.astuple(sp)[:-1])  # as written before the field existed
    assert msgspec.msgpack.decode(old, type=TaskSpec).namespace == "default"
    t = Task(id=model.new_task_id(T0, 1), spec=sp, status=model.Status.PENDING, created_ms=T0, updated_ms=T0,
             due_ms=T0, sched_ms=T0)
    assert t.namespace == "default"
    dead = msgspec.msgpack.encode(["x.1", t.id, t.id + "-1", 1, "retries_exhausted", 1, None, None, T0, "f", "s",
                                   "http://x/", "at_least_once", T0, "failed"])
    assert msgspec.msgpack.decode(dead, type=DeadLetter).namespace == "default"


def test_a_namespace_name_is_checked_and_cannot_change() -> None:
    with pytest.raises(ValidationError) as e:
        spec(namespace="Payments")
    assert e.value.field == "namespace"
    with pytest.raises(ValidationError):
        spec(namespace="pay\n")
    current = spec(namespace="pay")
    with pytest.raises(ValidationError) as e:
        model.decode_update(b'{"namespace": "ops"}', current, now_ms=T0)
    assert e.value.field == "namespace"
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay"), True))
    t = create(s, current)
    assert isinstance(t, Created)
    res = s.apply(UpdateTask(T0, t.task.id, spec(namespace="default"), 1)).results[0]
    assert isinstance(res, IllegalTransitionError) and res.field == "namespace"


def test_a_task_in_a_namespace_that_does_not_exist_is_refused() -> None:
    s = MemoryState()
    res = create(s, spec(namespace="nowhere"))
    assert isinstance(res, NotFoundError) and res.field == "namespace"
    assert not s.tasks


def test_a_batch_naming_a_namespace_that_does_not_exist_refuses_those_items_alone() -> None:
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay"), True))
    items = tuple(CreateItem(model.new_task_id(T0, next(_IDS)), spec(namespace=ns))
                  for ns in ("pay", "nowhere", "default", "nowhere"))
    res = s.apply(CreateTasks(T0, items)).results
    assert [type(r) for r in res] == [Created, NotFoundError, Created, NotFoundError]
    assert res[1].message == "namespace nowhere not found" and res[1].field == "namespace"
    assert len(s.tasks) == 2


def test_names_a_batch_shares_are_matched_once_per_shape_with_the_decoders_message() -> None:
    from molens.model import DEFAULT_LIMITS, resolve_creates
    from molens.web.app import _typed_batch

    good = {"type": "delayed", "callback_url": "http://127.0.0.1:9/cb", "interval_ms": 60_000}
    for field, bad in (("namespace", "Pay"), ("namespace", "pay\n"), ("scene", "a b"), ("flow_key", "x/y")):
        body = msgspec.json.encode({"tasks": [{**good, field: "ok"}, {**good, field: bad}]})
        reqs = _typed_batch(body, DEFAULT_LIMITS)
        assert reqs is not None  # the decoder leaves the pattern to resolve_create
        out = resolve_creates(reqs, model.DEFAULT_POLICY, DEFAULT_LIMITS, T0)
        assert getattr(out[0], field) == "ok"
        with pytest.raises(ValidationError) as e:
            model.decode_create(msgspec.json.encode({**good, field: bad}), now_ms=T0)
        assert isinstance(out[1], ValidationError) and out[1].to_json() == e.value.to_json()
        assert e.value.field == field and "must match" in e.value.message


def test_idempotency_keys_are_per_namespace() -> None:
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay"), True))
    a = create(s, spec(idempotency_key="k"))
    b = create(s, spec(idempotency_key="k", namespace="pay"))
    again = create(s, spec(idempotency_key="k", namespace="pay"))
    assert isinstance(a, Created) and isinstance(b, Created) and isinstance(again, Created)
    assert a.created and b.created and not again.created
    assert a.task.id != b.task.id and again.task.id == b.task.id


def test_a_namespace_holding_tasks_cannot_be_deleted_and_default_always_exists() -> None:
    s = MemoryState()
    assert isinstance(s.apply(PutNamespace(T0, Namespace(name="pay"), True)).results[0], Namespace)
    dup = s.apply(PutNamespace(T0, Namespace(name="pay"), True)).results[0]
    assert isinstance(dup, IllegalTransitionError) and dup.code == "conflict"
    t = create(s, spec(namespace="pay"))
    assert isinstance(t, Created)
    held = s.apply(DeleteNamespace(T0, "pay")).results[0]
    assert isinstance(held, IllegalTransitionError) and held.code == "conflict"
    s.apply(DeleteTasks(T0, (t.task.id,)))
    assert s.apply(DeleteNamespace(T0, "pay")).results[0] is None
    assert s.get_meta(tenancy.NS_PREFIX + "pay") is None
    assert isinstance(create(s, spec(namespace="pay")), NotFoundError)
    assert isinstance(s.apply(DeleteNamespace(T0, "default")).results[0], IllegalTransitionError)
    assert isinstance(s.apply(PutNamespace(T0, Namespace(name="default"), True)).results[0], IllegalTransitionError)
    assert isinstance(s.apply(DeleteNamespace(T0, "gone")).results[0], NotFoundError)


def _key(kid: str, *namespaces: str) -> ApiKey:
    return ApiKey(id=kid, name=kid, role=KeyRole.WRITER, namespaces=namespaces, salt=b"s" * 16, digest=b"d" * 32,
                  created_ms=T0)


@pytest.mark.parametrize("checks", [True, False])
@pytest.mark.parametrize("on_disk", [True, False])
def test_a_key_and_the_delete_of_its_namespace_cannot_both_apply_once_every_replica_checks(
    checks: bool, on_disk: bool, tmp_path: Path,
) -> None:
    """Two admins: one creates a key naming ``pay`` while the other deletes ``pay``; each request's
    check passed before the other's entry applied. With ``checks_namespaces`` / ``checks_keys`` the
    entry that applies second is refused, whichever it is, so no key is left naming a deleted
    namespace (which a namespace made again under the same name would hand back to it); without
    them (the release before), both apply, as that release applied them. The lmdb store and the
    in-memory state (the simulator's) apply alike."""
    s: MemoryState | TaskStore = TaskStore(tmp_path / "fsm", durable=False) if on_disk else MemoryState()
    index = itertools.count(1)

    def apply_all(*cmds: Command) -> list[object]:
        """One batch of entries: the store applies them in one write transaction, each seeing those before."""
        if isinstance(s, TaskStore):
            out = s.apply_batch([(next(index), encode(c)) for c in cmds])
            assert all(isinstance(r, EntryResult) for r in out), out
            return [r.results[0] for r in out]
        return [s.apply(c).results[0] for c in cmds]

    def apply(cmd: Command) -> object:
        return apply_all(cmd)[0]

    try:
        for ns in ("pay", "ops"):
            assert isinstance(apply(PutNamespace(T0, Namespace(name=ns), True)), Namespace)
        # the delete lands first: the key's entry finds its namespace gone
        assert apply(DeleteNamespace(T0, "pay", checks)) is None
        late = apply(PutApiKey(T0, _key("k1", "ops", "pay", "default"), checks))
        if checks:
            assert isinstance(late, NotFoundError) and late.field == "namespaces", late
            assert late.message == "namespace pay not found"
            assert s.get_meta(tenancy.KEY_PREFIX + "k1") is None
        else:
            assert isinstance(late, ApiKey)
        # the key lands first: the delete's entry finds a key naming its namespace
        k2, k3, refused = apply_all(PutApiKey(T0, _key("k2", "ops"), checks),
                                    PutApiKey(T0, _key("k3", "*"), checks),  # every namespace: names none
                                    DeleteNamespace(T0, "ops", checks))
        assert isinstance(k2, ApiKey) and isinstance(k3, ApiKey)
        if checks:
            assert isinstance(refused, IllegalTransitionError) and refused.code == "conflict", refused
            assert refused.message == "namespace ops is named by API keys k2; delete them first"
            assert s.get_meta(tenancy.NS_PREFIX + "ops") is not None
            assert apply(DeleteApiKey(T0, "k2")) is None
            assert apply(DeleteNamespace(T0, "ops", checks)) is None  # revoked: the delete goes through
        else:
            assert refused is None
        assert s.get_meta(tenancy.NS_PREFIX + "ops") is None
    finally:
        if isinstance(s, TaskStore):
            s.close()


def test_the_key_and_namespace_checks_are_trailing_fields_an_entry_of_the_release_before_lacks() -> None:
    key = _key("k1", "pay")
    # (DeleteNamespace's drops_flows, a field of a later release, trails checks_keys: the release
    # before wrote neither)
    for cmd, before, later in ((PutApiKey(T0, key, True), PutApiKey(T0, key), 0),
                               (DeleteNamespace(T0, "pay", True), DeleteNamespace(T0, "pay"), 1)):
        raw = msgspec.msgpack.decode(encode(cmd))
        assert raw[len(raw) - 1 - later] is True and raw[len(raw) - later:] == [False] * later
        assert decode(msgspec.msgpack.encode(raw[:len(raw) - 1 - later])) == before  # as the release before wrote it


def test_quotas_are_replaced_and_the_creation_time_kept() -> None:
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay"), True))
    res = s.apply(PutNamespace(T0 + 5, Namespace(name="pay", quotas=Quotas(max_pending_tasks=3)), False)).results[0]
    assert isinstance(res, Namespace)
    assert (res.created_ms, res.updated_ms, res.quotas.max_pending_tasks) == (T0, T0 + 5, 3)
    assert isinstance(s.apply(PutNamespace(T0, Namespace(name="gone"), False)).results[0], NotFoundError)


def test_key_commands_use_tags_40_to_49_and_round_trip() -> None:
    key = ApiKey(id="0123456789abcdef", name="ci", role=KeyRole.WRITER, namespaces=("pay",), salt=b"s" * 16,
                 digest=b"d" * 32, created_ms=T0)
    for cmd in (PutNamespace(T0, Namespace(name="pay"), True), DeleteNamespace(T0, "pay"), PutApiKey(T0, key),
                DeleteApiKey(T0, key.id)):
        raw = encode(cmd)
        assert 40 <= msgspec.msgpack.decode(raw)[0] <= 49
        assert decode(raw) == cmd
    s = MemoryState()
    s.apply(PutApiKey(T0, key))
    assert tenancy.decode_key(s.meta[tenancy.KEY_PREFIX + key.id]) == key
    assert s.apply(DeleteApiKey(T0, key.id)).results[0] is None
    assert isinstance(s.apply(DeleteApiKey(T0, key.id)).results[0], NotFoundError)


def test_a_secret_names_its_key_and_only_its_keyed_hash_is_kept() -> None:
    kid, secret = keys.new_secret()
    assert keys.key_id_of(secret) == kid
    assert secret.startswith(f"mlk_{kid}_") and len(secret) == len(f"mlk_{kid}_") + 43  # 32 random bytes
    salt = keys.new_salt()
    key = ApiKey(id=kid, name="n", role=KeyRole.READER, namespaces=("*",), salt=salt, digest=keys.digest(salt, secret),
                 created_ms=T0)
    assert keys.verify(key, secret)
    assert not keys.verify(key, secret[:-1] + ("A" if secret[-1] != "A" else "B"))
    assert secret.encode() not in tenancy.encode(key)
    assert keys.key_id_of("mlk_" + kid) is None and keys.key_id_of("Bearer x") is None
    assert "secret" not in key.to_json() and "digest" not in key.to_json()


def test_bad_keys_from_one_address_are_slowed_down_and_memory_is_bounded() -> None:
    brake = keys.FailureBrake(burst=3, refill_s=1.0, max_addresses=2)
    for _ in range(3):
        assert brake.wait_s("a", 0.0) == 0
        brake.failed("a", 0.0)
    assert brake.wait_s("a", 0.5) == 1
    assert brake.wait_s("b", 0.5) == 0  # another address is not slowed
    assert brake.wait_s("a", 1.0) == 0  # one failure leaked out: one more key is checked
    brake.failed("b", 1.0)
    brake.failed("c", 1.0)
    assert brake.wait_s("a", 1.0) == 0  # forgotten: at most two addresses are tracked


def test_docs_list_every_route_with_what_it_needs() -> None:
    md = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    rows = set(re.findall(r"^\| `(GET|POST|PUT|PATCH|DELETE) ([^`]+)` \|", md, re.MULTILINE))
    assert rows == set(RULES)


def test_a_batch_over_max_pending_tasks_is_refused_whole_and_finished_tasks_free_room() -> None:
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay", quotas=Quotas(max_pending_tasks=3)), True))
    first = create(s, spec(namespace="pay"))
    assert isinstance(first, Created)
    batch = CreateTasks(T0, tuple(CreateItem(model.new_task_id(T0, 100 + i), spec(namespace="pay")) for i in range(3)))
    res = s.apply(batch).results
    assert len(res) == 3 and all(isinstance(r, QuotaExceeded) and r.field == "max_pending_tasks" for r in res)
    assert res[0].to_json()["error"]["quota"] == "max_pending_tasks"
    assert len(s.tasks) == 1  # nothing of the batch was created
    assert all(isinstance(r, Created) for r in s.apply(CreateTasks(T0, batch.items[:2])).results)
    assert isinstance(create(s, spec(namespace="pay")), QuotaExceeded)
    assert isinstance(create(s, spec()), Created)  # default has no quota
    s.apply(PauseTasks(T0, (first.task.id,)))  # a paused task is not finished
    assert isinstance(create(s, spec(namespace="pay")), QuotaExceeded)
    s.apply(DeleteTasks(T0, (first.task.id,)))
    assert isinstance(create(s, spec(namespace="pay")), Created)
    assert tenancy.decode_count(s.meta[tenancy.LIVE_PREFIX + "pay"]) == 3
    assert tenancy.decode_count(s.meta[tenancy.COUNT_PREFIX + "pay"]) == 3


@pytest.mark.parametrize("keys_first", [False, True])
def test_a_retried_create_finds_its_task_before_the_quota_it_filled_once_every_replica_reads_keys_first(
    keys_first: bool,
) -> None:
    """The answer to a create that filled ``max_pending_tasks`` was lost; its retry (same key) answers
    the task with ``keys_first``, and is refused by the quota without it, as the release before did."""
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay", quotas=Quotas(max_pending_tasks=2, max_payload_bytes=10)), True))
    made = [create(s, spec(namespace="pay", idempotency_key=f"order-{i}")) for i in range(2)]
    assert all(isinstance(r, Created) and r.created for r in made)

    def again(*specs: TaskSpec) -> list[object]:
        items = tuple(CreateItem(model.new_task_id(T0, next(_IDS)), sp) for sp in specs)
        return list(s.apply(CreateTasks(T0, items, keys_first)).results)

    retried = again(spec(namespace="pay", idempotency_key="order-1"))
    mixed = again(spec(namespace="pay", idempotency_key="order-0"), spec(namespace="pay", idempotency_key="order-2"))
    if keys_first:
        assert isinstance(retried[0], Created) and not retried[0].created
        assert retried[0].task.id == made[1].task.id  # type: ignore[union-attr]
    else:
        assert isinstance(retried[0], QuotaExceeded) and retried[0].field == "max_pending_tasks"
    assert all(isinstance(r, QuotaExceeded) for r in mixed)  # one of the two would make a task: over it
    assert len(s.tasks) == 2
    # max_payload_bytes lowered after the first attempt: the retry of a task already made still answers it
    big = spec(namespace="pay", idempotency_key="order-0", payload="x" * 20)
    assert isinstance(again(big)[0], Created if keys_first else QuotaExceeded)


def test_an_idempotency_key_too_long_for_an_lmdb_key_is_kept_under_its_digest(tmp_path: Path) -> None:
    """128 characters of four UTF-8 bytes (512 bytes), or a namespace's prefix on a shorter one: past
    lmdb's 511-byte key, so the entry failed to apply on every replica."""

    store, mem = TaskStore(tmp_path / "fsm"), MemoryState()
    ns = "n" * 63
    cmds = [PutNamespace(T0, Namespace(name=ns), True)]
    keys = [("default", "\U0001F600" * 128), (ns, "\U0001F600" * 112), (ns, "\U0001F600" * 111), ("default", "x" * 128)]
    for i, (name, key) in enumerate(keys):
        sp = spec(namespace=name, idempotency_key=key)
        cmds += [CreateTasks(T0, (CreateItem(model.new_task_id(T0, 500 + 2 * i), sp),)),
                 CreateTasks(T0, (CreateItem(model.new_task_id(T0, 501 + 2 * i), sp),))]
    out = store.apply_batch([(n + 1, encode(c)) for n, c in enumerate(cmds)])
    assert all(isinstance(r, EntryResult) for r in out), out
    for n, c in enumerate(cmds):
        assert decode(encode(c)) == c
        got, twin = out[n].results[0], mem.apply(c).results[0]  # type: ignore[union-attr]
        if n:
            assert isinstance(got, Created) and got.created == (n % 2 == 1) and got.task == twin.task
    ids = {out[n].results[0].task.id for n in range(1, len(cmds))}  # type: ignore[union-attr]
    assert len(ids) == len(keys)  # each pair answered one task, each key its own
    assert store.get_idem("\U0001F600" * 128) is None  # kept under its digest, not as it is
    assert store.get_idem("x" * 128) in ids  # a key that fits is kept as it always was
    out = store.apply_batch([(len(cmds) + 1, encode(DeleteTasks(T0, tuple(sorted(ids)))))])
    assert isinstance(out[0], EntryResult)
    stored = [machine.idem_key(name, key) for name, key in keys]
    assert all(k is not None and store.get_idem(k) is None for k in stored)


def test_max_payload_bytes_refuses_the_whole_batch() -> None:
    s = MemoryState()
    s.apply(PutNamespace(T0, Namespace(name="pay", quotas=Quotas(max_payload_bytes=10)), True))
    small, big = spec(namespace="pay", payload=1), spec(namespace="pay", payload="x" * 20)
    res = s.apply(CreateTasks(T0, (CreateItem(model.new_task_id(T0, 1), small),
                                   CreateItem(model.new_task_id(T0, 2), big)))).results
    assert all(isinstance(r, QuotaExceeded) and r.field == "max_payload_bytes" for r in res)
    assert not s.tasks
    assert isinstance(create(s, small), Created)


def test_creates_per_s_is_a_bucket_of_one_seconds_worth() -> None:
    rate = CreateRate()
    assert [rate.take("pay", 1, 5.0, 0.0) for _ in range(6)] == [0, 0, 0, 0, 0, 1]
    assert rate.take("ops", 1, 5.0, 0.0) == 0  # another namespace has its own bucket
    assert rate.take("pay", 1, 5.0, 0.2) == 0  # one token back after 1/5 s
    assert rate.take("pay", 1, 5.0, 0.2) == 1
    assert rate.take("pay", 20, 5.0, 0.5) == 1  # a batch over a second's worth waits for a full bucket...
    assert rate.take("pay", 20, 5.0, 1.5) == 0  # ...then goes, and leaves the bucket in debt
    assert rate.take("pay", 1, 5.0, 3.5) == 2  # 15 tokens of debt: 3 s to repay, 0.2 s more for one
    assert rate.take("pay", 1, 5.0, 5.0) == 0


def test_asking_the_create_bucket_takes_nothing() -> None:
    rate = CreateRate()
    assert rate.wait("pay", 1, 2.0, 0.0) == 0
    assert [rate.take("pay", 1, 2.0, 0.0) for _ in range(2)] == [0, 0]
    assert [rate.wait("pay", 1, 2.0, 0.0) for _ in range(3)] == [1, 1, 1]
    assert rate.wait("pay", 1, 2.0, 0.5) == 0  # one token back, and asking leaves it there
    assert rate.wait("pay", 1, 2.0, 0.5) == 0
    assert rate.take("pay", 1, 2.0, 0.5) == 0
    assert rate.wait("pay", 1, 2.0, 0.5) == 1


def test_a_creates_namespaces_and_keys_are_read_without_decoding_its_tasks() -> None:
    from molens.web.app import quick_creates

    assert quick_creates(b'{"namespace": "pay", "payload": {"namespace": "ops"}}', batch=False) == [("pay", None)]
    assert quick_creates(b'{"type": "delayed", "idempotency_key": "k"}', batch=False) == [("default", "k")]
    assert quick_creates(b'{"tasks": [{"namespace": "pay", "idempotency_key": 3}, {}]}', batch=True) == [
        ("pay", 3), ("default", None)]
    for bad in (b'{"namespace": 3}', b"{not json", b"[]"):
        assert quick_creates(bad, batch=False) is None  # left to the full decoding, which says why
    assert quick_creates(b'{"tasks": {}}', batch=True) is None


def test_a_batch_counts_each_of_its_tasks_once_in_its_namespaces() -> None:
    s = MemoryState()
    for name in ("pay", "ops"):
        s.apply(PutNamespace(T0, Namespace(name=name), True))
    items = tuple(CreateItem(model.new_task_id(T0, 200 + i), spec(namespace="pay" if i % 3 else "ops"))
                  for i in range(300))
    made = s.apply(CreateTasks(T0, items)).results
    assert all(isinstance(r, Created) for r in made)
    counts = {p + ns: tenancy.decode_count(s.meta.get(p + ns)) for p in (tenancy.LIVE_PREFIX, tenancy.COUNT_PREFIX)
              for ns in ("pay", "ops")}
    assert counts == {tenancy.LIVE_PREFIX + "pay": 200, tenancy.LIVE_PREFIX + "ops": 100,
                      tenancy.COUNT_PREFIX + "pay": 200, tenancy.COUNT_PREFIX + "ops": 100}
    s.apply(DeleteTasks(T0, tuple(it.task_id for it in items[:30])))  # 20 of pay, 10 of ops
    assert tenancy.decode_count(s.meta[tenancy.LIVE_PREFIX + "pay"]) == 180
    assert tenancy.decode_count(s.meta[tenancy.COUNT_PREFIX + "ops"]) == 90


def test_a_connection_that_ignores_its_retry_after_is_held_until_it_passes() -> None:
    imp = Impatience(max_hold_s=1.0, max_connections=2)
    assert imp.hold_s("a", "pay", 0.0) == 0  # never refused: answered at once
    imp.told("a", "pay", 1.0)
    assert imp.hold_s("a", "pay", 0.25) == 0.75  # back before its Retry-After passed: held the rest
    assert imp.hold_s("a", "ops", 0.25) == 0  # another namespace's bucket told it nothing
    assert imp.hold_s("b", "pay", 0.25) == 0  # another connection neither
    assert imp.hold_s("a", "pay", 1.0) == 0  # a client that waited is never held
    imp.told("a", "pay", 6.0)
    assert imp.hold_s("a", "pay", 2.0) == 1.0  # at most max_hold_s
    imp.told("b", "pay", 6.0)
    imp.told("c", "pay", 6.0)
    assert imp.hold_s("a", "pay", 2.0) == 0  # the least recently refused is forgotten past max_connections
    assert imp.hold_s("c", "pay", 2.0) == 1.0


def test_the_retry_after_of_a_tiny_creates_per_s_is_at_most_a_day() -> None:
    from molens.web.quotas import MAX_RETRY_AFTER_S

    rate = CreateRate()
    assert rate.take("pay", 1, 1e-300, 0.0) == 0
    assert rate.take("pay", 1, 1e-300, 1.0) == rate.wait("pay", 1, 1e-300, 1.0) == MAX_RETRY_AFTER_S == 86_400
    assert rate.take("ops", 1, 1 / 3600, 0.0) == 0
    assert rate.take("ops", 1, 1 / 3600, 0.0) == 3600  # below the bound: as it was
