"""Stream a final answer's text while the model is still decoding its action JSON.

The model answers ``{"type":"final","text":"..."}``. When its reply begins
exactly like that (whitespace allowed), the characters of the ``text``
string are decoded incrementally — escapes included, a ``\\uXXXX`` pair split
across deltas too — and handed out as they arrive. The text is provisional:
the whole reply is still parsed strictly once complete.
"""

from __future__ import annotations

import json
import re

_PREFIX = re.compile(r'\s*\{\s*"type"\s*:\s*"final"\s*,\s*"text"\s*:\s*"')
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t"}


class FinalTextExtractor:
    """Feed content deltas; get the decoded text pieces of a final answer."""

    def __init__(self) -> None:
        self._content = ""
        self._start: int | None = None
        self._position = 0
        self._closed = False
        self.started = False

    def feed(self, delta: str) -> str:
        """The newly decoded text (empty when none, or when this is not a final answer)."""
        self._content += delta
        if self._closed:
            return ""
        if self._start is None:
            match = _PREFIX.match(self._content)
            if match is None:
                return ""
            self._start = self._position = match.end()
        out: list[str] = []
        text, i = self._content, self._position
        while i < len(text):
            ch = text[i]
            if ch == '"':
                self._closed = True
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            if i + 1 >= len(text):
                break
            code = text[i + 1]
            if code in _SIMPLE:
                out.append(_SIMPLE[code])
                i += 2
                continue
            if code != "u" or i + 6 > len(text):
                break
            unit = text[i : i + 6]
            value = int(unit[2:], 16) if re.fullmatch(r"\\u[0-9a-fA-F]{4}", unit) else None
            if value is None:
                self._closed = True  # malformed: the strict parse will refuse it
                break
            if 0xD800 <= value < 0xDC00:
                if i + 12 > len(text):
                    break
                try:
                    out.append(json.loads(f'"{text[i : i + 12]}"'))
                except json.JSONDecodeError:
                    self._closed = True
                    break
                i += 12
                continue
            out.append(chr(value))
            i += 6
        self._position = i
        piece = "".join(out)
        if piece:
            self.started = True
        return piece

    @property
    def content(self) -> str:
        """Everything fed so far."""
        return self._content
