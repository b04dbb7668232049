"""WS-02: object ids are opaque, sortable by creation, and repeatable only where asked."""

from __future__ import annotations

import itertools
import secrets
import time

import pytest

from labfy_ref.ids import id_pattern, new_id, repeatable

ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford's base 32, as ULIDs spell it
EPOCH_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _value(made: str) -> int:
    """The 130-bit number an id's 26 characters spell."""
    value = 0
    for char in made.split("_", 1)[1]:
        value = value * 32 + ALPHABET.index(char)
    return value


@pytest.mark.req("WS-02")
def test_ids_made_in_one_millisecond_still_sort_in_the_order_they_were_made(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """When the clock stands still and the random part comes out smaller each time, every id
    is still the one before plus one: later ids sort after, none repeats."""
    monkeypatch.setattr(time, "time", lambda: 4_000_000_000.0)
    draws = iter(range(2**79, 0, -(2**70)))
    monkeypatch.setattr(secrets, "randbits", lambda _bits: next(draws))
    made = [new_id("obj") for _ in range(40)]
    assert all(id_pattern("obj").fullmatch(m) for m in made)
    values = [_value(m) for m in made]
    assert values == sorted(values) and len(set(values)) == 40
    assert all(b == a + 1 for a, b in itertools.pairwise(values)), \
        "the random part only falls behind: each id is the previous plus one"


@pytest.mark.req("WS-02", "EV-01")
def test_repeatable_ids_start_at_a_fixed_millisecond_and_count_up_by_one() -> None:
    """Inside ``repeatable``, ids are those a workspace init would make at 2026-01-01: the
    first holds that millisecond and a seeded random part below 2**79, each next one is the
    previous plus one; the same seed gives the same ids, another seed others."""
    with repeatable("seed-a"):
        first = [new_id("obj") for _ in range(5)]
    with repeatable("seed-a"):
        again = [new_id("obj") for _ in range(5)]
    with repeatable("seed-b"):
        other = [new_id("obj") for _ in range(5)]
    assert first == again and first != other
    values = [_value(m) for m in first]
    assert values[0] >> 80 == EPOCH_MS
    assert values[0] % 2**80 < 2**79
    assert values == list(range(values[0], values[0] + 5))
    after = _value(new_id("obj"))
    assert after >> 80 != EPOCH_MS, "outside the block, ids come from the clock again"
