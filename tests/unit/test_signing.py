"""Callback signatures: format, verification, rotation, tolerance, malformed input."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from molens.signing import (
    compute_v1,
    parse_signature,
    sign,
    signature_header,
    verify_signature,
)

T = 1_760_000_000_000
BODY = b'{"order": 42}'
FIRE = "t-abc-3"


def _headers(sig: str, fire_id: str = FIRE) -> dict[str, str]:
    return {"X-Fire-ID": fire_id, "X-Molens-Signature": sig}


def test_signature_is_hmac_sha256_of_t_fire_id_body() -> None:
    want = hmac.new(b"s3cret", f"{T}.{FIRE}.".encode() + BODY, hashlib.sha256).hexdigest()
    assert sign("s3cret", FIRE, BODY, T) == f"t={T},v1={want}"
    assert sign(b"s3cret", FIRE, BODY, T) == f"t={T},v1={want}"


def test_valid_signature_verifies() -> None:
    assert verify_signature(_headers(sign("k", FIRE, BODY, T)), BODY, ["k"], now_ms=T)


def test_header_names_are_case_insensitive() -> None:
    sig = sign("k", FIRE, BODY, T)
    assert verify_signature({"x-fire-id": FIRE, "x-molens-signature": sig}, BODY, ["k"], now_ms=T)
    assert verify_signature({"X-FIRE-ID": FIRE, "X-MOLENS-SIGNATURE": sig}, BODY, [b"k"], now_ms=T)


def test_tampered_body_fire_id_or_wrong_secret_rejected() -> None:
    sig = sign("k", FIRE, BODY, T)
    assert not verify_signature(_headers(sig), BODY + b" ", ["k"], now_ms=T)
    assert not verify_signature(_headers(sig, fire_id="t-abc-4"), BODY, ["k"], now_ms=T)
    assert not verify_signature(_headers(sig), BODY, ["other"], now_ms=T)
    assert not verify_signature(_headers(sig), BODY, [], now_ms=T)
    tampered_t = sig.replace(f"t={T}", f"t={T + 1}")
    assert not verify_signature(_headers(tampered_t), BODY, ["k"], now_ms=T)


def test_timestamp_outside_tolerance_rejected_both_directions() -> None:
    sig = sign("k", FIRE, BODY, T)
    assert verify_signature(_headers(sig), BODY, ["k"], tolerance_ms=1000, now_ms=T + 1000)
    assert verify_signature(_headers(sig), BODY, ["k"], tolerance_ms=1000, now_ms=T - 1000)
    assert not verify_signature(_headers(sig), BODY, ["k"], tolerance_ms=1000, now_ms=T + 1001)
    assert not verify_signature(_headers(sig), BODY, ["k"], tolerance_ms=1000, now_ms=T - 1001)


def test_rotation_header_carries_one_v1_per_secret_and_either_secret_verifies() -> None:
    sig = signature_header(["old", "new"], FIRE, BODY, T)
    assert sig == f"t={T},v1={compute_v1('old', FIRE, BODY, T)},v1={compute_v1('new', FIRE, BODY, T)}"
    assert verify_signature(_headers(sig), BODY, ["old"], now_ms=T)
    assert verify_signature(_headers(sig), BODY, ["new"], now_ms=T)
    assert verify_signature(_headers(sig), BODY, ["unrelated", "new"], now_ms=T)
    assert not verify_signature(_headers(sig), BODY, ["unrelated"], now_ms=T)
    # a receiver that already knows both secrets accepts a worker still signing with the old one
    assert verify_signature(_headers(sign("old", FIRE, BODY, T)), BODY, ["new", "old"], now_ms=T)


def test_signature_header_needs_a_secret() -> None:
    with pytest.raises(ValueError):
        signature_header(["", b""], FIRE, BODY, T)


def test_unknown_schemes_are_ignored() -> None:
    sig = sign("k", FIRE, BODY, T) + ",v2=zzz,v0=" + "0" * 64
    assert verify_signature(_headers(sig), BODY, ["k"], now_ms=T)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        "t=,v1=" + "0" * 64,
        "t=abc,v1=" + "0" * 64,
        "t=-5,v1=" + "0" * 64,
        f"t={T}",
        f"t={T},v1=short",
        f"t={T},v1={'é' * 64}",
        f"t={T},t={T},v1={'0' * 64}",
        f"v1={'0' * 64}",
        "t=" + "9" * 40 + ",v1=" + "0" * 64,
        f"t={T},v1={'0' * 64}," + "x" * 5000,
        f"t={T},,v1={'0' * 64}",
    ],
)
def test_malformed_headers_are_rejected_without_raising(value: str) -> None:
    assert not verify_signature(_headers(value), BODY, ["k"], now_ms=T)


def test_missing_headers_or_wrong_types_never_raise() -> None:
    assert not verify_signature({}, BODY, ["k"], now_ms=T)
    assert not verify_signature({"X-Molens-Signature": sign("k", FIRE, BODY, T)}, BODY, ["k"], now_ms=T)
    assert not verify_signature(_headers(sign("k", FIRE, BODY, T)), "not bytes", ["k"], now_ms=T)  # type: ignore[arg-type]
    assert not verify_signature({1: 2}, BODY, ["k"], now_ms=T)  # type: ignore[dict-item]
    assert not verify_signature(_headers(sign("k", FIRE, BODY, T)), BODY, [1], now_ms=T)  # type: ignore[list-item]


def test_parse_signature_returns_all_v1s() -> None:
    a, b = "a" * 64, "B" * 64
    assert parse_signature(f"t=5, v1={a}, v1={b}") == (5, [a, b.lower()])


def test_a_single_str_or_bytes_secret_is_one_secret_not_one_per_character() -> None:
    genuine = _headers(sign("s3cret", FIRE, BODY, T))
    one_letter = _headers(sign("s", FIRE, BODY, T))
    # iterating b"s3cret" gave ints: all-zero keys, which HMAC pads into the empty key
    empty_key = _headers(f"t={T},v1={compute_v1(b'', FIRE, BODY, T)}")
    for secrets in ("s3cret", b"s3cret"):
        assert verify_signature(genuine, BODY, secrets, now_ms=T)
        assert not verify_signature(one_letter, BODY, secrets, now_ms=T)
        assert not verify_signature(empty_key, BODY, secrets, now_ms=T)
    assert signature_header("s3cret", FIRE, BODY, T) == signature_header(b"s3cret", FIRE, BODY, T) == sign(
        "s3cret", FIRE, BODY, T
    )
