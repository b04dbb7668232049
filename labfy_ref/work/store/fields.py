"""What the Work store admits in a field, checked once before any write (WK-02, AV-02).

A value is stored exactly, or refused with a code before the transaction begins:
never a driver error half-way, never a silent change. Both engines admit the same
values: text holds no NUL (PostgreSQL's ``text`` cannot) and no lone surrogate
(UTF-8 cannot); JSON is written by :func:`dump_json`, so a NUL inside a JSON
string is the six characters ``\\u0000`` and reads back as it was.
"""

from __future__ import annotations

import json
import math
from typing import Any

from labfy_ref.errors import ErrorCode, RecordTooLarge, RuntimeRefused
from labfy_ref.text import find_surrogate

#: Longest free text (a task message, a final text, a stored chat message), in characters.
MAX_TEXT_CHARS = 1024 * 1024
#: Longest name (a worker, a tool id, an event type, an approval summary), in characters.
MAX_NAME_CHARS = 500
#: Largest JSON value (a model request or response, a tool result), encoded as UTF-8.
MAX_JSON_BYTES = 4 * 1024 * 1024
#: Largest step or call number (PostgreSQL's ``integer``).
MAX_COUNT = 2**31 - 1
#: Longest lease a worker may take.
MAX_LEASE_SECONDS = 24 * 3600.0


def _refused(message: str) -> RuntimeRefused:
    return RuntimeRefused(ErrorCode.VALIDATION_FAILED, message)


def text(value: object, field: str, *, limit: int = MAX_TEXT_CHARS,
         allow_empty: bool = False) -> str:
    """``value`` if it is text the store can keep exactly, else ``VALIDATION_FAILED``
    (``RECORD_TOO_LARGE`` when longer than ``limit`` characters)."""
    if not isinstance(value, str):
        raise _refused(f"{field} must be text, not {type(value).__name__}")
    if not value and not allow_empty:
        raise _refused(f"{field} must not be empty")
    if len(value) > limit:
        raise RecordTooLarge(f"{field} is longer than {limit} characters")
    nul = value.find("\x00")
    if nul >= 0:
        raise _refused(f"{field} holds a NUL character at index {nul}")
    surrogate = find_surrogate(value)
    if surrogate is not None:
        raise _refused(f"{field} holds a lone surrogate at index {surrogate}")
    return value


def name(value: object, field: str) -> str:
    """A short printable name (:data:`MAX_NAME_CHARS`), such as a worker or a tool id."""
    if isinstance(value, str) and len(value) > MAX_NAME_CHARS:
        raise _refused(f"{field} must be 1-{MAX_NAME_CHARS} characters")
    checked = text(value, field, limit=MAX_NAME_CHARS)
    if not checked.isprintable():
        raise _refused(f"{field} holds a control or format character")
    return checked


def count(value: object, field: str, *, minimum: int = 0) -> int:
    """An integer from ``minimum`` to :data:`MAX_COUNT` (a step, a call)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refused(f"{field} must be an integer")
    if not minimum <= value <= MAX_COUNT:
        raise _refused(f"{field} must be {minimum}-{MAX_COUNT}")
    return value


def seconds(value: object, field: str) -> float:
    """A positive, finite number of seconds up to :data:`MAX_LEASE_SECONDS`."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _refused(f"{field} must be a number of seconds")
    if not (math.isfinite(value) and 0 < value <= MAX_LEASE_SECONDS):
        raise _refused(f"{field} must be more than 0 and at most {MAX_LEASE_SECONDS:g}")
    return float(value)


def dump_json(value: Any, field: str) -> str:
    """The stored text of a JSON value, or ``VALIDATION_FAILED`` / ``RECORD_TOO_LARGE``.

    Keys keep their order and non-ASCII characters stay as they are, so
    :func:`load_json` gives back an equal value; NaN and infinities are refused
    (not JSON), as are lone surrogates anywhere inside.
    """
    try:
        encoded = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _refused(f"{field} is not a JSON value ({type(exc).__name__})") from None
    surrogate = find_surrogate(encoded)
    if surrogate is not None:
        raise _refused(f"{field} holds a lone surrogate")
    if len(encoded) > MAX_JSON_BYTES or len(encoded.encode("utf-8")) > MAX_JSON_BYTES:
        raise RecordTooLarge(f"{field} is larger than {MAX_JSON_BYTES} bytes as JSON")
    return encoded


def load_json(stored: str) -> Any:
    """The value :func:`dump_json` stored."""
    return json.loads(stored)
