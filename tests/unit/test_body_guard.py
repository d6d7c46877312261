"""The JSON depth guard every request body passes (molens/web/body.py): it measures nesting as a
decoder would, ignores brackets inside strings, and refuses in the API's words."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from molens.errors import ValidationError
from molens.web.body import Body, decode, too_deep

JSONS = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet='[]{}"\\ab,:'),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(alphabet='[]{"\\', max_size=3), kids, max_size=3),
    max_leaves=40,
)


def depth(v: Any) -> int:
    if isinstance(v, list):
        return 1 + max(map(depth, v), default=0)
    if isinstance(v, dict):
        return 1 + max(map(depth, v.values()), default=0)
    return 0


@given(JSONS, st.integers(0, 12))
def test_too_deep_measures_nesting_as_a_decoder_does(v: Any, limit: int) -> None:
    raw = json.dumps(v).encode()
    assert too_deep(raw, limit) == (depth(v) > limit)


def test_brackets_inside_strings_do_not_count() -> None:
    assert not too_deep(b'{"a": "[[[[[[[[[[", "b": "\\"[[[[[[[["}', 1)
    assert too_deep(b'{"a": [[1]], "s": "[[[["}', 2)
    assert not too_deep(b'{"a": [[1]], "s": "[[[["}', 3)


def test_ten_thousand_levels_are_too_deep_and_cost_no_recursion() -> None:
    assert too_deep(b"[" * 10_000 + b"]" * 10_000, 64)
    assert too_deep(b'{"a":' * 10_000 + b"1" + b"}" * 10_000, 64)
    assert too_deep(b"[" * 10_000, 64)  # unclosed: still refused before any decoder


def test_decode_says_what_is_wrong_in_the_apis_words() -> None:
    for raw in (b'{"a": NaN}', b"[1,", b"{'a': 1}", b"\xff"):
        with pytest.raises(ValidationError) as e:
            decode(raw)
        assert e.value.field == "body" and e.value.message.startswith("request body is not valid JSON")
        assert "Expecting" not in e.value.message and "line 1" not in e.value.message


@pytest.mark.parametrize(("method", "body"), [("GET", Body.NONE), ("DELETE", Body.NONE), ("HEAD", Body.NONE),
                                              ("POST", Body.JSON), ("PUT", Body.JSON), ("PATCH", Body.JSON)])
def test_a_route_takes_a_body_by_its_method_unless_it_says(method: str, body: Body) -> None:
    assert Body.default_for(method) is body
