"""An incremental, bounded decoder for ``text/event-stream`` (the SSE of the WHATWG spec).

Bytes arrive in arbitrary splits (mid-line, mid-UTF-8 sequence); the decoder
yields one ``data`` payload per complete event. Lines end at CRLF, LF or CR,
as the SSE grammar says. Every buffer is bounded: a line longer than
``max_line_chars`` is an error, never an unbounded buffer.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator

_LINE_END = re.compile(r"\r\n|\r|\n")


class SSEError(ValueError):
    """The byte stream is not a well-formed, bounded event stream."""


class SSEDecoder:
    """Feed bytes with :meth:`feed`; collect complete events' data strings."""

    def __init__(self, *, max_line_chars: int = 256 * 1024) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="strict")
        self._max_line_chars = max_line_chars
        self._partial = ""
        self._pending_cr = False
        self._data: list[str] = []
        self._data_chars = 0

    def feed(self, chunk: bytes) -> Iterator[str]:
        """Decode ``chunk`` and yield the data of every event it completes."""
        try:
            text = self._utf8.decode(chunk)
        except UnicodeDecodeError as exc:
            raise SSEError("event stream is not valid UTF-8") from exc
        if not text:
            return
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]
        self._pending_cr = text.endswith("\r")
        *lines, self._partial = _LINE_END.split(self._partial + text)
        if len(self._partial) > self._max_line_chars:
            raise SSEError(f"event stream line longer than {self._max_line_chars} characters")
        for line in lines:
            event = self._line(line)
            if event is not None:
                yield event

    def close(self) -> None:
        """Check that the stream ended on a character boundary."""
        try:
            self._utf8.decode(b"", final=True)
        except UnicodeDecodeError as exc:
            raise SSEError("event stream ends inside a UTF-8 sequence") from exc

    def _line(self, line: str) -> str | None:
        if not line:
            if not self._data:
                return None
            data, self._data, self._data_chars = "\n".join(self._data), [], 0
            return data
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
            self._data_chars += len(value) + 1
            if self._data_chars > self._max_line_chars:
                raise SSEError(f"event larger than {self._max_line_chars} characters")
        return None
