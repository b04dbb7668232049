"""Text is valid Unicode at every edge (RFC 7493, I-JSON): no lone surrogates inside.

Python strings can hold lone surrogates (``"\\ud800"`` decoded from JSON, a
non-UTF-8 file name under ``surrogateescape``); UTF-8 cannot encode them, so
one such string reaching a log, a socket or SQLite raises far from where it
came in. Input edges refuse them (:func:`find_surrogate`, :func:`has_surrogate`);
records already stored with them read back with U+FFFD (:func:`scrub`).
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def find_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in ``text``, or None."""
    match = _SURROGATE.search(text)
    return None if match is None else match.start()


def has_surrogate(value: Any) -> bool:
    """Does any string (key or value) of a JSON-like value hold a lone surrogate?"""
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, dict):
        return any(has_surrogate(k) or has_surrogate(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(has_surrogate(item) for item in value)
    return False


def scrub(value: Any) -> Any:
    """A copy of a JSON-like value with every lone surrogate replaced by U+FFFD."""
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT, value)
    if isinstance(value, dict):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(item) for item in value]
    if isinstance(value, tuple):
        return tuple(scrub(item) for item in value)
    return value
