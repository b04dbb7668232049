"""The one line a human reads before approving a call (BR-12, WK-05).

The bridge's approval-request and Work's stored approval say the same thing: a
write (traits ``targets`` and ``written``) names its target, the size of what it
stores in UTF-8 **bytes**, and that content quoted as JSON — data, never a line of
its own; any other call names its arguments as JSON. Whatever a model put in the
call (lone surrogates, NUL, controls, a direction override), the line is printable and at
most :data:`MAX_SUMMARY_CHARS` characters: each character that is not printable is shown
as ``⟨U+XXXX⟩``, as the pages show them, never dropped and never honoured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labfy_ref.protocol.jsonfmt import encode_json
from labfy_ref.tools.catalog import ToolSpec

MAX_SUMMARY_CHARS = 200
#: The most of a write's target the line shows.
MAX_TARGET_CHARS = 100


def visible(text: str, limit: int) -> str:
    """``text`` with every character that is not printable as ``⟨U+XXXX⟩``, in at most
    ``limit`` characters: cut (never inside such a mark) and ended with ``…`` when longer."""
    shown: list[str] = []
    size = 0
    for index, char in enumerate(text):
        part = char if char.isprintable() else f"⟨U+{ord(char):04X}⟩"
        last = index == len(text) - 1
        if size + len(part) > (limit if last else limit - 1):
            shown.append("…")
            break
        shown.append(part)
        size += len(part)
    return "".join(shown)


def approval_summary(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """One printable line saying what the call of ``spec`` with ``arguments`` would do."""
    target, written = spec.target, spec.traits.written
    if target is not None and written is not None:
        content = str(arguments.get(written, ""))
        size = len(content.encode("utf-8", "surrogatepass"))
        path = visible(str(arguments.get(target, "")), MAX_TARGET_CHARS)
        head = f"{spec.tool_id} {path} ({size} bytes): "
        text = head + visible(encode_json(content), MAX_SUMMARY_CHARS - len(head))
    else:
        text = visible(f"{spec.tool_id} {encode_json(dict(arguments))}", MAX_SUMMARY_CHARS)
    return text
