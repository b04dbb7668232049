"""NDJSON framing: one JSON value per line, ``\\n`` the only separator (BR-04, UI-06).

Encoding escapes the characters some readers treat as line breaks (U+2028,
U+2029, U+0085) and lone surrogates, so every line is valid UTF-8 and a line
is exactly what lies between two ``\\n``. Decoding splits on ``\\n`` only,
keeps a partial line (even one cut inside a UTF-8 sequence) for the next read,
and bounds the line length.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

_ESCAPE = re.compile("[\u0085\u2028\u2029\ud800-\udfff]")


def encode_line(value: Any) -> bytes:
    """One NDJSON line (with its ``\\n``)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    text = _ESCAPE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text.encode("utf-8") + b"\n"


class NdjsonError(ValueError):
    """A line is not JSON, not UTF-8, or too long."""


class NdjsonDecoder:
    """Feed bytes as they arrive; get each complete line's value."""

    def __init__(self, *, max_line_bytes: int = 8 * 1024 * 1024) -> None:
        self._buffer = bytearray()
        self._max = max_line_bytes

    def feed(self, data: bytes) -> Iterator[Any]:
        """Values of the lines completed by ``data``."""
        self._buffer += data
        while (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[:end])
            del self._buffer[: end + 1]
            if line.strip():
                try:
                    yield json.loads(line.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    raise NdjsonError(f"bad NDJSON line: {type(exc).__name__}") from exc
        if len(self._buffer) > self._max:
            raise NdjsonError("NDJSON line too long")

    def close(self) -> None:
        """The stream ended: a pending partial line is an error."""
        if self._buffer.strip():
            raise NdjsonError("stream ended inside a line")
