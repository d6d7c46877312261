"""Every rule of the task request table (docs/api.md): a bad field gives one error naming that field."""

from __future__ import annotations

import itertools
import random
from typing import Any

import pytest

from molens.model import (
    CallbackPolicy,
    Limits,
    PayloadTooLargeError,
    Reliability,
    TaskIds,
    TaskType,
    ValidationError,
    auto_max_fails,
    is_task_id,
    new_task_id,
    task_id_ms,
    task_ids_from_bytes,
    task_ids_from_digits,
    validate_create,
)

NOW = 1_700_000_000_000
URL = "http://127.0.0.1:18081/api/v1/test/callback"


def ok(**kw: Any) -> dict[str, Any]:
    req: dict[str, Any] = {"type": "delayed", "interval_ms": 1000, "callback_url": URL}
    req.update(kw)
    return {k: v for k, v in req.items() if v is not _DROP}


_DROP = object()


def bad(req: Any, field: str | None, policy: CallbackPolicy | None = None, limits: Limits | None = None) -> str:
    with pytest.raises(ValidationError) as ei:
        validate_create(req, policy or CallbackPolicy(), limits or Limits(), NOW)
    assert ei.value.field == field, (ei.value.field, ei.value.message)
    assert ei.value.http_status in (400, 413)
    body = ei.value.to_json()
    assert body["error"]["code"] and body["error"]["message"]
    return ei.value.message


def test_minimal_delayed_task_gets_defaults() -> None:
    s = validate_create(ok(), now_ms=NOW)
    assert s.type is TaskType.DELAYED and s.interval_ms == 1000
    assert (s.timezone, s.scene, s.timeout_ms, s.max_retries, s.reliability) == (
        "UTC",
        "default",
        5000,
        3,
        Reliability.AT_LEAST_ONCE,
    )
    assert s.ack_delay_ms == 1000 and s.payload is None and s.idempotency_key is None


def test_request_must_be_an_object() -> None:
    bad([1, 2], None)


def test_unknown_field_is_named() -> None:
    bad(ok(intervall_ms=5), "intervall_ms")


@pytest.mark.parametrize("v", [None, _DROP])
def test_type_is_required(v: Any) -> None:
    bad(ok(type=v), "type")


@pytest.mark.parametrize("v", ["cron", "", 1, True])
def test_type_must_be_delayed_or_periodic(v: Any) -> None:
    bad(ok(type=v), "type")


@pytest.mark.parametrize("v", [True, 1.5, "1000", [1]])
def test_interval_ms_must_be_an_int_not_bool_or_float(v: Any) -> None:
    bad(ok(interval_ms=v), "interval_ms")


def test_a_whole_number_written_as_a_float_is_that_integer_but_the_payload_keeps_its_bytes() -> None:
    # JSON has one number type and JSON Schema counts 1000.0 as an integer (the OpenAPI document says integer)
    spec = validate_create(ok(interval_ms=1000.0, max_retries=2.0, payload={"x": 1.0}), now_ms=NOW)
    assert (spec.interval_ms, spec.max_retries, spec.payload_json) == (1000, 2, b'{"x":1.0}')
    assert type(spec.interval_ms) is int


def test_delayed_interval_ms_must_not_be_negative() -> None:
    bad(ok(interval_ms=-1), "interval_ms")
    assert validate_create(ok(interval_ms=0), now_ms=NOW).interval_ms == 0


def test_delayed_interval_beyond_horizon_rejected() -> None:
    bad(ok(interval_ms=Limits().max_delay_ms + 1), "interval_ms")


def test_delayed_needs_interval_or_run_at() -> None:
    bad(ok(interval_ms=_DROP), "interval_ms")


def test_delayed_run_at_accepted_and_both_rejected() -> None:
    s = validate_create(ok(interval_ms=_DROP, run_at=NOW + 5000), now_ms=NOW)
    assert s.run_at == NOW + 5000 and s.interval_ms is None
    bad(ok(run_at=NOW + 5000), "run_at")


@pytest.mark.parametrize("v", [True, 1.5, "x", -1])
def test_run_at_must_be_epoch_ms_int(v: Any) -> None:
    bad(ok(interval_ms=_DROP, run_at=v), "run_at")


def test_run_at_beyond_horizon_rejected() -> None:
    bad(ok(interval_ms=_DROP, run_at=NOW + Limits().max_delay_ms + 1), "run_at")


def test_cron_expr_is_only_for_periodic() -> None:
    bad(ok(cron_expr="* * * * *"), "cron_expr")


def test_run_at_is_only_for_delayed() -> None:
    bad(ok(type="periodic", interval_ms=_DROP, run_at=NOW), "run_at")


def test_periodic_needs_interval_or_cron() -> None:
    bad(ok(type="periodic", interval_ms=_DROP), "interval_ms")


def test_periodic_interval_below_minimum_rejected() -> None:
    bad(ok(type="periodic", interval_ms=999), "interval_ms")
    assert validate_create(ok(type="periodic", interval_ms=1000), now_ms=NOW).interval_ms == 1000


def test_periodic_interval_and_cron_both_rejected() -> None:
    bad(ok(type="periodic", cron_expr="* * * * *"), "cron_expr")


def test_periodic_max_fails_auto_is_an_hour_of_periods_clamped() -> None:
    assert validate_create(ok(type="periodic", interval_ms=60_000), now_ms=NOW).max_fails == 60
    assert validate_create(ok(type="periodic", interval_ms=1000), now_ms=NOW).max_fails == 100
    assert validate_create(ok(type="periodic", interval_ms=3_600_000), now_ms=NOW).max_fails == 3
    assert auto_max_fails(1_200_000) == 3 and auto_max_fails(36_000) == 100 and auto_max_fails(72_000) == 50


def test_periodic_max_fails_explicit() -> None:
    assert validate_create(ok(type="periodic", interval_ms=1000, max_fails=7), now_ms=NOW).max_fails == 7
    bad(ok(type="periodic", interval_ms=1000, max_fails=0), "max_fails")
    bad(ok(type="periodic", interval_ms=1000, max_fails=True), "max_fails")


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "example.com/x",
        "http://",
        "http:///path",
        "",
        "http://exa mple.com/",
        "http://example.com:99999/",
        "http://example.com:0/",
        "http://ex_ample..com/",
        "javascript:alert(1)",
        "http://example.com/#frag",
    ],
)
def test_callback_url_must_be_http_with_a_host(url: str) -> None:
    bad(ok(callback_url=url), "callback_url")


@pytest.mark.parametrize("v", [None, _DROP, 5, True, ["http://x"]])
def test_callback_url_required_string(v: Any) -> None:
    bad(ok(callback_url=v), "callback_url")


def test_callback_url_too_long() -> None:
    bad(ok(callback_url="http://example.com/" + "a" * 3000), "callback_url")


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[fd00:ec2::254]/latest/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://2852039166/",  # 169.254.169.254 as one decimal number
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://[::ffff:169.254.169.254]/",
        "http://169.254.1.1.:80/",
    ],
)
def test_metadata_addresses_denied_by_default(url: str) -> None:
    msg = bad(ok(callback_url=url), "callback_url")
    assert "denied" in msg


def test_loopback_and_public_names_allowed_by_default() -> None:
    for u in ("http://127.0.0.1:9/x", "https://example.com/hook?a=1", "http://[::1]:8080/", "http://localhost/"):
        assert validate_create(ok(callback_url=u), now_ms=NOW).callback_url == u


def test_deny_lists_of_hosts_and_cidrs() -> None:
    pol = CallbackPolicy(deny_hosts=(".internal.corp", "evil.com"), deny_cidrs=("10.0.0.0/8",))
    bad(ok(callback_url="http://a.b.internal.corp/"), "callback_url", pol)
    bad(ok(callback_url="http://internal.corp/"), "callback_url", pol)
    bad(ok(callback_url="http://EVIL.com/"), "callback_url", pol)
    bad(ok(callback_url="http://10.1.2.3/"), "callback_url", pol)
    assert validate_create(ok(callback_url="http://notevil.com/"), pol, now_ms=NOW)


def test_allow_list_admits_only_what_it_names_and_deny_wins() -> None:
    pol = CallbackPolicy(allow_hosts=(".example.com",), allow_cidrs=("192.168.0.0/16",), deny_hosts=("bad.example.com",))
    assert validate_create(ok(callback_url="http://api.example.com/"), pol, now_ms=NOW)
    assert validate_create(ok(callback_url="http://192.168.1.5/"), pol, now_ms=NOW)
    bad(ok(callback_url="http://other.org/"), "callback_url", pol)
    bad(ok(callback_url="http://10.0.0.1/"), "callback_url", pol)
    bad(ok(callback_url="http://bad.example.com/"), "callback_url", pol)


def test_policy_rejects_bad_cidr_at_construction() -> None:
    with pytest.raises(ValueError):
        CallbackPolicy(deny_cidrs=("not-a-cidr",))


def test_ack_url_checked_like_callback_url() -> None:
    bad(ok(ack_url="ftp://x/"), "ack_url")
    bad(ok(ack_url="http://169.254.169.254/"), "ack_url")
    bad(ok(ack_url=3), "ack_url")
    s = validate_create(ok(ack_url="http://127.0.0.1/ack"), now_ms=NOW)
    assert s.ack_url == "http://127.0.0.1/ack"


def test_ack_url_with_at_most_once_rejected() -> None:
    bad(ok(ack_url="http://127.0.0.1/ack", reliability="at_most_once"), "ack_url")


def test_periodic_tasks_ignore_ack_url() -> None:
    s = validate_create(ok(type="periodic", ack_url="http://127.0.0.1/ack"), now_ms=NOW)
    assert s.ack_url is None


@pytest.mark.parametrize("v", [-1, True, 1.5, "10"])
def test_ack_delay_ms_must_be_non_negative_int(v: Any) -> None:
    bad(ok(ack_delay_ms=v), "ack_delay_ms")


def test_payload_any_json_up_to_limit() -> None:
    for p in ({"a": [1, 2.5, None, True]}, "text", 3, [], 10**30):
        assert validate_create(ok(payload=p), now_ms=NOW).payload == p
    lim = Limits()
    exact = "x" * (lim.max_payload_bytes - 2)  # two quote characters
    assert validate_create(ok(payload=exact), now_ms=NOW)
    with pytest.raises(PayloadTooLargeError) as ei:
        validate_create(ok(payload=exact + "x"), now_ms=NOW)
    assert ei.value.field == "payload" and ei.value.http_status == 413


def test_payload_size_is_measured_utf8_encoded() -> None:
    lim = Limits(max_payload_bytes=10)
    assert validate_create(ok(payload="ééé"), limits=lim, now_ms=NOW)  # 8 bytes with quotes
    assert validate_create(ok(payload="éééé"), limits=lim, now_ms=NOW)  # exactly 10 bytes
    bad(ok(payload="éééé" + "a"), "payload", limits=lim)  # 11 bytes


def test_payload_must_be_json() -> None:
    bad(ok(payload=float("nan")), "payload")
    bad(ok(payload={1, 2}), "payload")
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    bad(ok(payload=deep), "payload")


@pytest.mark.parametrize("v", ["", "a" * 65, "with space", "é", "a/b", 5, "abc\n", "abc\n\n"])
def test_scene_pattern(v: Any) -> None:
    bad(ok(scene=v), "scene")


@pytest.mark.parametrize("v", ["", "a" * 129, "with space", "a/b", "payments\n", "127.0.0.1:80\n"])
def test_flow_key_pattern(v: Any) -> None:
    """A pattern's ``$`` ends at the end of the string: Python's ``re`` would also let one trailing
    newline through, which a flow's path (``/flows/{key}``) could then never name."""
    bad(ok(flow_key=v), "flow_key")


def test_flow_key_accepted() -> None:
    assert validate_create(ok(flow_key="[::1]:8080"), now_ms=NOW).flow_key == "[::1]:8080"


def test_scene_accepted() -> None:
    assert validate_create(ok(scene="A-z_0.9"), now_ms=NOW).scene == "A-z_0.9"


@pytest.mark.parametrize("v", [0, 300_001, True, 1.5, "5"])
def test_timeout_ms_range(v: Any) -> None:
    bad(ok(timeout_ms=v), "timeout_ms")


def test_timeout_ms_bounds_accepted() -> None:
    assert validate_create(ok(timeout_ms=1), now_ms=NOW).timeout_ms == 1
    assert validate_create(ok(timeout_ms=300_000), now_ms=NOW).timeout_ms == 300_000


@pytest.mark.parametrize("v", [-1, 21, False, 2.5])
def test_max_retries_range(v: Any) -> None:
    bad(ok(max_retries=v), "max_retries")


def test_max_retries_default_from_config() -> None:
    assert validate_create(ok(), limits=Limits(default_max_retries=5), now_ms=NOW).max_retries == 5
    assert validate_create(ok(max_retries=0), now_ms=NOW).max_retries == 0
    assert validate_create(ok(max_retries=20), now_ms=NOW).max_retries == 20


@pytest.mark.parametrize("v", ["exactly_once", "", 1])
def test_reliability_values(v: Any) -> None:
    bad(ok(reliability=v), "reliability")


def test_at_most_once_accepted() -> None:
    assert validate_create(ok(reliability="at_most_once"), now_ms=NOW).reliability is Reliability.AT_MOST_ONCE


@pytest.mark.parametrize("v", ["", "k" * 129, 5])
def test_idempotency_key_length_and_type(v: Any) -> None:
    bad(ok(idempotency_key=v), "idempotency_key")


def test_idempotency_key_accepted() -> None:
    assert validate_create(ok(idempotency_key="k" * 128), now_ms=NOW).idempotency_key == "k" * 128


def test_an_idempotency_key_header_with_a_nul_is_refused_as_the_body_field_is() -> None:
    """The store keeps another namespace's keys as ``namespace NUL key``: a default-namespace create
    whose header key held a NUL would find another namespace's task by its key."""
    import json

    from molens.model import decode_create

    body = json.dumps(ok()).encode()
    with pytest.raises(ValidationError) as ei:
        decode_create(body, now_ms=NOW, idempotency_key="pay\x00k")
    assert ei.value.field == "Idempotency-Key"
    assert decode_create(body, now_ms=NOW, idempotency_key="pay-k").idempotency_key == "pay-k"


def test_timezone_must_be_string() -> None:
    bad(ok(timezone=5), "timezone")


def test_task_ids_sort_by_time_and_encode_it() -> None:
    rng = random.Random(1)
    ids = [new_task_id(NOW + i, rng.getrandbits(80)) for i in range(200)]
    assert ids == sorted(ids)
    assert all(is_task_id(i) and len(i) == 26 for i in ids)
    assert task_id_ms(ids[7]) == NOW + 7
    assert not is_task_id("hello")
    assert not is_task_id(ids[0] + "\n")


def test_task_id_source_gives_distinct_valid_ids_across_buffer_refills() -> None:
    ids = TaskIds(buffer_ids=8)
    out = [ids.new(NOW) for _ in range(100)]  # 12 refills
    assert len(set(out)) == 100
    assert all(is_task_id(i) and task_id_ms(i) == NOW for i in out)


def test_batch_task_ids_equal_one_by_one_encoding() -> None:
    rng = random.Random(7)
    raw = bytes(rng.getrandbits(8) for _ in range(10 * 300))
    raw = b"\x00" * 10 + b"\xff" * 10 + raw  # the extremes of the 80 random bits
    for ms in (0, NOW, (1 << 48) - 1):
        got = task_ids_from_bytes(ms, raw)
        want = [new_task_id(ms, int.from_bytes(raw[i : i + 10], "big")) for i in range(0, len(raw), 10)]
        assert got == want
    with pytest.raises(ValueError):
        task_ids_from_bytes(NOW, b"123")


def test_batch_task_ids_from_digit_bytes_equal_one_by_one_encoding() -> None:
    rng = random.Random(8)
    raw = bytes(rng.getrandbits(8) for _ in range(16 * 300))
    raw = b"\x00" * 16 + b"\xff" * 16 + bytes(range(256)) + raw  # every byte value, the extremes
    for ms in (0, NOW, (1 << 48) - 1):
        got = task_ids_from_digits(ms, raw)
        want = []
        for i in range(0, len(raw), 16):
            r = 0
            for b in raw[i : i + 16]:
                r = (r << 5) | (b & 31)
            want.append(new_task_id(ms, r))
        assert got == want
    with pytest.raises(ValueError):
        task_ids_from_digits(NOW, b"0123456789")


def test_task_id_source_batches_are_distinct_across_refills_and_mix_with_single_ids() -> None:
    ids = TaskIds(buffer_ids=8)
    out = [*ids.new_many(NOW, 5), ids.new(NOW), *ids.new_many(NOW, 20), *ids.new_many(NOW, 3), *ids.new_many(NOW, 0)]
    assert len(out) == 29 and len(set(out)) == 29 and out == sorted(out)
    # a batch whose ids would not all sort above the last id takes the next millisecond
    assert all(is_task_id(i) and NOW <= task_id_ms(i) <= NOW + 3 for i in out)


def test_a_batchs_ids_ascend_so_its_items_list_in_the_order_they_were_sent() -> None:
    ids = TaskIds()
    for n in (2, 50, 1000):
        got = ids.new_many(NOW, n)
        assert got == sorted(got) and len(set(got)) == n


def test_a_sources_ids_never_go_down_in_one_millisecond_after_a_clock_step_back_or_across_batches() -> None:
    """GET /tasks lists in id order, documented as creation order: one client creating task after
    task must see them listed so, also when several land in the same millisecond."""
    from molens.model import task_id_random

    ids = TaskIds(buffer_ids=8)
    out = [ids.new(NOW) for _ in range(300)]  # all in one millisecond
    out += ids.new_many(NOW, 50)  # a batch in that millisecond: above all of them
    out += [ids.new(NOW - 5_000) for _ in range(20)]  # the clock stepped back 5 s
    out += ids.new_many(NOW - 5_000, 10)
    out += [ids.new(NOW + 10) for _ in range(5)]  # time moved on: its own millisecond again
    assert out == sorted(out) and len(set(out)) == len(out)
    assert all(is_task_id(i) for i in out)
    assert task_id_ms(out[0]) == NOW and task_id_ms(out[-1]) == NOW + 10
    assert task_id_ms(out[299]) == NOW  # one millisecond holds many ids: no drift ahead of the clock
    assert task_id_ms(out[300]) == NOW + 1  # the batch took the next one
    steps = {task_id_random(b) - task_id_random(a) for a, b in itertools.pairwise(out[:300])}
    assert min(steps) >= 1 and len(steps) > 250  # still random, not a counter
    # the random part at its top: the next id takes the next millisecond
    top = TaskIds()
    top._last = prev = new_task_id(NOW, (1 << 80) - 1)
    nxt = top.new(NOW)
    assert nxt > prev and task_id_ms(nxt) == NOW + 1


@pytest.mark.parametrize("expr", ["* * *", "61 * * * *", "* * * * * * *", "H * * * *", "0 0 30 2 *", "bogus"])
def test_bad_cron_expr_names_cron_expr(expr: str) -> None:
    bad(ok(type="periodic", interval_ms=None, cron_expr=expr), "cron_expr")


def test_cron_expr_must_be_a_string() -> None:
    bad(ok(type="periodic", interval_ms=None, cron_expr=5), "cron_expr")


@pytest.mark.parametrize("tz", ["Mars/Olympus", "", "utc ", "../etc/passwd"])
def test_unknown_timezone_names_timezone(tz: str) -> None:
    bad(ok(type="periodic", interval_ms=None, cron_expr="0 * * * *", timezone=tz), "timezone")


def test_cron_accepted_with_seconds_and_zone() -> None:
    s = validate_create(ok(type="periodic", interval_ms=None, cron_expr="*/5 * * * * *", timezone="Europe/Berlin"), now_ms=NOW)
    assert (s.cron_expr, s.timezone, s.interval_ms, s.max_fails) == ("*/5 * * * * *", "Europe/Berlin", None, 100)


def test_a_batch_resolves_each_item_as_a_single_create_would() -> None:
    """resolve_creates shares the work of items that differ only in payload and key: each result
    must still be exactly decode_create's spec, or its error (message, field, class)."""
    import msgspec

    from molens.model import DEFAULT_LIMITS, DEFAULT_POLICY, create_type, decode_create, resolve_creates

    limits = Limits(max_payload_bytes=64)
    items: list[dict[str, Any]] = [
        ok(payload={"i": 1}, idempotency_key="a"),
        ok(payload={"i": 2}),
        ok(payload=[1, 2.5, "x"], idempotency_key="b"),
        ok(payload="y" * 100),  # too large: the shape resolves, the payload does not
        ok(payload={"i": 3}, run_at=NOW + 5),  # interval_ms and run_at: the shape fails
        ok(payload={"i": 4}, run_at=NOW + 5, interval_ms=None),
        ok(type="periodic", interval_ms=None, cron_expr="*/5 * * * *", payload=None),
        ok(type="periodic", interval_ms=60_000, retry={"max_retries": 5, "non_retryable_statuses": [410, 400]}),
        ok(type="periodic", interval_ms=60_000, retry={"max_retries": 5, "non_retryable_statuses": [400, 410]}),
        ok(type="periodic", interval_ms=60_000, ack_url=URL, payload={"i": 5}),
        ok(reliability="at_most_once", ack_url=URL),
        ok(callback_url="http://169.254.169.254/x", payload={"i": 6}),
        ok(payload={"i": 7}, idempotency_key="c"),
    ]
    for lim in (DEFAULT_LIMITS, limits):
        bodies = [msgspec.json.encode(it) for it in items]
        reqs = [msgspec.json.decode(b, type=create_type(lim)) for b in bodies]
        got = resolve_creates(reqs, DEFAULT_POLICY, lim, NOW)
        assert len(got) == len(items)
        for body, res in zip(bodies, got, strict=True):
            try:
                want: Any = decode_create(body, DEFAULT_POLICY, lim, NOW, whole_body=False)
            except ValidationError as exc:
                want = exc
            if isinstance(want, ValidationError):
                assert isinstance(res, ValidationError)
                assert (type(res), res.message, res.field) == (type(want), want.message, want.field)
            else:
                assert res == want
    assert isinstance(got[3], PayloadTooLargeError)
    assert isinstance(got[4], ValidationError) and got[4].field == "run_at"
