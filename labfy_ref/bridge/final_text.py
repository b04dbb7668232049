"""Stream a final answer's text while the model is still decoding its action JSON.

The model answers ``{"type":"final","text":"..."}``. When its reply begins
exactly like that (JSON whitespace allowed between the tokens), the characters
of the ``text`` string are decoded incrementally — escapes included, a
``\\uXXXX`` pair split across deltas too — and handed out as they arrive. The
text is provisional: the whole reply is still parsed strictly once complete.

Linear in the reply: each delta is looked at once (whitespace and plain runs by
regular expression), only an unfinished escape is carried over, and the whole
reply is joined once when asked for. Anything the strict parser would refuse —
a control character, a malformed or lone-surrogate escape — stops the stream
there instead of showing it: what was shown is always text the parser accepts.
"""

from __future__ import annotations

import re

_PREFIX = ("{", '"type"', ":", '"final"', ",", '"text"', ":", '"')
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_PLAIN = re.compile(r'[^"\\\x00-\x1f]+')
_HEX4 = re.compile(r"[0-9a-fA-F]{4}")
#: The start of a ``\\uXXXX`` escape cut by the end of a delta (or nothing yet).
_CUT = re.compile(r"(?:\\(?:u[0-9a-fA-F]{0,3})?)?")
_SIMPLE = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r",
           "t": "\t"}


class FinalTextExtractor:
    """Feed content deltas; get the decoded text pieces of a final answer."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._joined: str | None = ""
        self._token = 0  # which token of _PREFIX is being matched
        self._offset = 0  # how much of it has matched so far
        self._pending = ""  # an escape cut by the end of a delta
        self._in_text = False
        self._closed = False
        self.started = False

    def feed(self, delta: str) -> str:
        """The newly decoded text (empty when none, or when this is not a final answer)."""
        if delta:
            self._parts.append(delta)
            self._joined = None
        if self._closed:
            return ""
        if not self._in_text:
            rest = self._match_prefix(delta)
            if rest is None:
                return ""
            delta = rest
        piece = self._decode(self._pending + delta)
        if piece:
            self.started = True
        return piece

    @property
    def content(self) -> str:
        """Everything fed so far."""
        if self._joined is None:
            self._joined = "".join(self._parts)
        return self._joined

    def _match_prefix(self, delta: str) -> str | None:
        """Advance over the prefix; the text after it once complete, else None."""
        index = 0
        while index < len(delta):
            if self._offset == 0:  # between tokens: JSON whitespace is allowed
                index = _JSON_SPACE.match(delta, index).end()  # type: ignore[union-attr]
                if index == len(delta):
                    return None
            token = _PREFIX[self._token]
            take = min(len(token) - self._offset, len(delta) - index)
            if delta[index : index + take] != token[self._offset : self._offset + take]:
                self._closed = True  # not a final answer: nothing is streamed
                return None
            index += take
            self._offset += take
            if self._offset == len(token):
                self._token, self._offset = self._token + 1, 0
                if self._token == len(_PREFIX):
                    self._in_text = True
                    return delta[index:]
        return None

    def _decode(self, text: str) -> str:
        """Decode string characters up to the closing quote; keep a cut escape pending."""
        self._pending = ""
        out: list[str] = []
        index, end = 0, len(text)
        while index < end:
            plain = _PLAIN.match(text, index)
            if plain is not None:
                out.append(plain.group())
                index = plain.end()
                continue
            if text[index] != "\\":  # the closing quote, or a raw control character
                self._closed = True
                break
            decoded, used = _escape(text, index)
            if used == 0:  # cut by the end of this delta
                self._pending = text[index:]
                break
            if decoded is None:
                self._closed = True  # malformed: the strict parse will refuse it
                break
            out.append(decoded)
            index += used
        return "".join(out)


def _escape(text: str, index: int) -> tuple[str | None, int]:
    """The escape at ``index``: (its text, its length); (None, n) if refused; (_, 0) if cut."""
    if index + 1 >= len(text):
        return None, 0
    code = text[index + 1]
    if code in _SIMPLE:
        return _SIMPLE[code], 2
    if code != "u":
        return None, 2
    high = _unit(text, index)
    if high is None or high < 0:
        return None, 0 if high is None else 6
    if 0xDC00 <= high <= 0xDFFF:
        return None, 6  # a lone low surrogate
    if not 0xD800 <= high <= 0xDBFF:
        return chr(high), 6
    low = _unit(text, index + 6)
    if low is None:
        return None, 0
    if not 0xDC00 <= low <= 0xDFFF:
        return None, 6  # a high surrogate without its low half
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)), 12


def _unit(text: str, index: int) -> int | None:
    """The value of ``\\uXXXX`` at ``index``; None if cut short; -1 if malformed."""
    chunk = text[index : index + 6]
    if len(chunk) < 6:
        return None if _CUT.fullmatch(chunk) else -1
    if not chunk.startswith("\\u") or not _HEX4.fullmatch(chunk, 2):
        return -1
    return int(chunk[2:], 16)
