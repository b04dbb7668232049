"""The kit's reader of ``text/event-stream`` bodies, by the WHATWG rules (BR-13, QR-03).

https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation:
lines end in CRLF, LF or CR; a blank line dispatches the event; a line starting
with ``:`` is a comment (a keep-alive) and is ignored; ``field: value`` loses one
leading space; ``data`` lines of one event are joined with ``\\n``; an event with
no data is not dispatched, nor is one the stream ended before its blank line.
Splitting a body on ``\\n`` instead passes two events merged into one, or an event
never ended: this reader does not. It is the kit's own, so the kit does not judge
a target with the product's decoder; a test compares it with the ``openai``
client's parse.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

_LINE_END = re.compile(r"\r\n|\r|\n")


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One dispatched event: its type (``message`` unless named), its data, the last id."""

    event: str
    data: str
    id: str | None


def events(body: str) -> list[Event]:
    """Every event ``body`` dispatches, in order."""
    lines = _LINE_END.split(body.removeprefix("\ufeff"))
    lines.pop()  # what follows the last line end is no complete line
    found: list[Event] = []
    data: list[str] = []
    kind = ""
    last_id: str | None = None
    for line in lines:
        if not line:
            if data:
                found.append(Event(kind or "message", "\n".join(data), last_id))
            data, kind = [], ""
            continue
        if line.startswith(":"):
            continue
        field, colon, value = line.partition(":")
        value = value.removeprefix(" ") if colon else ""
        if field == "data":
            data.append(value)
        elif field == "event":
            kind = value
        elif field == "id" and "\0" not in value:
            last_id = value
    return found


def completion_chunks(body: str) -> tuple[list[dict[str, Any]], bool]:
    """An OpenAI stream's JSON chunks, and whether it ended with ``data: [DONE]``.

    Every event's data must be one JSON document or the final ``[DONE]``; anything
    else (two chunks merged into one event) fails the JSON parse, loudly.
    """
    found = events(body)
    done = bool(found) and found[-1].data == "[DONE]"
    return [json.loads(e.data) for e in (found[:-1] if done else found)], done


def delta_text(chunks: list[dict[str, Any]]) -> str:
    """The streamed content: every chunk's ``choices[0].delta.content`` joined."""
    return "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c.get("choices"))
