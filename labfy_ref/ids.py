"""Opaque identifiers: a prefix and 26 Crockford base-32 characters (time + randomness).

The layout is the one of ULID: 48 bits of milliseconds then 80 random bits, so
ids sort by creation time and never collide in practice. Within one process they
are monotonic (ULID's rule): an id made in the same millisecond as the previous
one is that one plus one, so "newest first" never depends on a clock tie.
"""

from __future__ import annotations

import re
import secrets
import threading
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
_BODY = "[0-9A-HJKMNP-TV-Z]{26}"


_last = [0]
_lock = threading.Lock()


def new_id(prefix: str) -> str:
    """A fresh id such as ``obj_01JD…`` for ``prefix="obj"``; later ids sort after."""
    with _lock:
        value = max((int(time.time() * 1000) << 80) | secrets.randbits(80), _last[0] + 1)
        _last[0] = value
    chars = []
    for _ in range(26):
        value, digit = divmod(value, 32)
        chars.append(_ALPHABET[digit])
    return f"{prefix}_{''.join(reversed(chars))}"


def id_pattern(prefix: str) -> re.Pattern[str]:
    """The exact pattern of ids made by :func:`new_id` with ``prefix``."""
    return re.compile(rf"{re.escape(prefix)}_{_BODY}", re.ASCII)
