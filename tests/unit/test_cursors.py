"""List cursors (molens.web.cursors): plain for a key of every namespace, sealed for a key of some,
and refused when they are not what this API issued to this key."""

from __future__ import annotations

import base64

import pytest

from molens.errors import ValidationError
from molens.web.cursors import CURSOR_RE, cursor_key, decode_cursor, encode_cursor, seal, unseal

KEY, OTHER = cursor_key(b"salt-of-one-key"), cursor_key(b"salt-of-another")
POSITIONS = ["01ARZ3NDEKTSV4RRFFQ69G5FAV", "1795978283937:01ARZ3NDEKTSV4RRFFQ69G5FAV",
             ("0" * 16 + "01ARZ3NDEKTSV4RRFFQ69G5FAV-12.3").encode().hex(), "7", "1234567"]


@pytest.mark.parametrize("pos", POSITIONS)
def test_a_sealed_cursor_opens_under_its_key_only_and_hides_its_position(pos: str) -> None:
    c = encode_cursor("d", pos, KEY)
    assert CURSOR_RE.fullmatch(c) and decode_cursor("d", c, KEY) == pos
    if len(pos) >= 6:  # a shorter text turns up in random bytes by chance (one digit: one time in ten)
        assert pos.encode() not in base64.urlsafe_b64decode(c + "=" * (-len(c) % 4))
    assert encode_cursor("d", pos, KEY) != c  # a fresh nonce each time
    for kind, key in (("d", OTHER), ("d", b""), ("t", KEY)):
        with pytest.raises(ValidationError):
            decode_cursor(kind, c, key)
    with pytest.raises(ValidationError):
        decode_cursor("d", encode_cursor("d", pos), KEY)  # a plain cursor is not this key's


def test_every_altered_byte_of_a_sealed_cursor_is_refused() -> None:
    sealed = seal(KEY, b"d:01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert unseal(KEY, sealed) == b"d:01ARZ3NDEKTSV4RRFFQ69G5FAV"
    for i in range(len(sealed)):
        bad = bytearray(sealed)
        bad[i] ^= 0x01
        assert unseal(KEY, bytes(bad)) is None, i
    assert unseal(KEY, sealed[:28]) is None and unseal(KEY, b"") is None


def test_the_longest_position_the_lists_issue_fits_a_cursor() -> None:
    longest = ("f" * 16 + "01ARZ3NDEKTSV4RRFFQ69G5FAV-1000000.1000").encode().hex()  # a dead letter's time key
    assert CURSOR_RE.fullmatch(encode_cursor("d", longest, KEY))
