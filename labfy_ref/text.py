"""Text is valid Unicode at every edge (RFC 7493, I-JSON): no lone surrogates inside.

Python strings can hold lone surrogates (``"\\ud800"`` decoded from JSON, a
non-UTF-8 file name under ``surrogateescape``); UTF-8 cannot encode them, so
one such string reaching a log, a socket or SQLite raises far from where it
came in. Input edges refuse them (:func:`find_surrogate`, :func:`has_surrogate`);
records already stored with them read back with U+FFFD (:func:`scrub`).
Text shown on a terminal goes through :func:`terminal`: a foreign string (an
old report, a model file name, a folder name) never moves the cursor,
recolours the screen or spells a CI command.
"""

from __future__ import annotations

import re
from typing import Any

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")
#: C0 and C1 controls and DEL (ESC starts a terminal sequence; CR and BS overwrite a line),
#: and the bidirectional overrides and isolates that reorder what is shown.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


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


def terminal(text: str, *, limit: int | None = None) -> str:
    """``text`` safe to print: controls spelled ``\\x1b``, surrogates U+FFFD, at most ``limit``.

    A line that starts with ``::`` (a CI runner's command syntax) gets a space first.
    """
    shown = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}" if ord(found.group()) < 256
                         else f"\\u{ord(found.group()):04x}", _SURROGATE.sub(REPLACEMENT, text))
    if limit is not None and len(shown) > limit:
        shown = shown[: max(0, limit - 1)] + "…"
    return " " + shown if shown.startswith("::") else shown
