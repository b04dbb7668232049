"""Opaque identifiers: a prefix and 26 Crockford base-32 characters (time + randomness).

The layout is the one of ULID: 48 bits of milliseconds then 80 random bits, so
ids sort by creation time and never collide in practice. Within one process they
are monotonic (ULID's rule): an id made in the same millisecond as the previous
one is that one plus one, so "newest first" never depends on a clock tie.
"""

from __future__ import annotations

import contextlib
import random
import re
import secrets
import threading
import time
from collections.abc import Iterator

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_BODY = "[0-9A-HJKMNP-TV-Z]{26}"


_last = [0]
_lock = threading.Lock()
#: While :func:`repeatable` holds: the seeded source of every id (None: time + secrets).
_seeded: list[random.Random | None] = [None]
_count = [0]
#: 2026-01-01T00:00:00Z, the clock of repeatable ids.
_EPOCH_MS = 1_767_225_600_000


def new_id(prefix: str) -> str:
    """A fresh id such as ``obj_01JD…`` for ``prefix="obj"``; later ids sort after."""
    with _lock:
        seeded = _seeded[0]
        if seeded is None:
            value = max((int(time.time() * 1000) << 80) | secrets.randbits(80), _last[0] + 1)
        elif _count[0] == 0:  # as a real init: one millisecond, then ULID's +1 rule
            _count[0] = value = (_EPOCH_MS << 80) | seeded.getrandbits(79)
        else:
            _count[0] = value = _count[0] + 1
        _last[0] = max(value, _last[0])
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return f"{prefix}_{''.join(reversed(chars))}"


@contextlib.contextmanager
def repeatable(seed: str) -> Iterator[None]:
    """Within this block every new id is drawn from ``seed``: the same seed, the same ids.

    Only ``labfy-ref eval`` uses it, so that a task's workspace — and so the
    prompt a model sees — is the same at every run (temperature 0 then
    repeats). Such ids are made as a real workspace init makes them — all in
    one millisecond of a fixed clock, each the previous one plus one (ULID's
    monotonic rule), from a seeded start — so they differ in their last
    characters as real ones do; they never serve a real workspace.
    """
    with _lock:
        if _seeded[0] is not None:
            raise RuntimeError("repeatable ids are already in use")
        _seeded[0] = random.Random(seed)  # noqa: S311  # repeatable on purpose, never secret
        _count[0] = 0
    try:
        yield
    finally:
        with _lock:
            _seeded[0] = None


def id_pattern(prefix: str) -> re.Pattern[str]:
    """The exact pattern of ids made by :func:`new_id` with ``prefix``."""
    return re.compile(rf"{re.escape(prefix)}_{_BODY}", re.ASCII)
