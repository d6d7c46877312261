"""BoundedLru (molens/web/lru.py): at most ``max_items`` keys, the least recently written forgotten first."""

from __future__ import annotations

from molens.web.lru import BoundedLru


def test_the_least_recently_written_key_is_forgotten_past_the_bound() -> None:
    seen: BoundedLru[str, int] = BoundedLru(2)
    seen.put("a", 1)
    seen.put("b", 2)
    seen.put("a", 3)  # "a" is the newest again
    seen.put("c", 4)
    assert ("a" in seen, "b" in seen, "c" in seen) == (True, False, True)
    assert (seen.get("a"), seen.get("b"), len(seen)) == (3, None, 2)


def test_reading_a_key_does_not_keep_it() -> None:
    seen: BoundedLru[str, int] = BoundedLru(2)
    seen.put("a", 1)
    seen.put("b", 2)
    assert seen.get("a") == 1
    seen.put("c", 3)
    assert "a" not in seen and "b" in seen
