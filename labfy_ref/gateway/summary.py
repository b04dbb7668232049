"""The one line a human reads before approving a call (BR-12, WK-05).

The bridge's approval-request and Work's stored approval say the same thing: a
write (traits ``targets`` and ``written``) names its target, the size of what it
stores in UTF-8 **bytes**, and that content quoted as JSON — data, never a line of
its own; any other call names its arguments as JSON. Whatever a model put in the
call (lone surrogates, NUL, controls), the line is printable and at most
:data:`MAX_SUMMARY_CHARS` characters.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labfy_ref.protocol.jsonfmt import encode_json
from labfy_ref.tools.catalog import ToolSpec

MAX_SUMMARY_CHARS = 200
#: The most of a write's target the line shows.
MAX_TARGET_CHARS = 100


def approval_summary(spec: ToolSpec, arguments: Mapping[str, Any]) -> str:
    """One printable line saying what the call of ``spec`` with ``arguments`` would do."""
    target, written = spec.target, spec.traits.written
    if target is not None and written is not None:
        content = str(arguments.get(written, ""))
        size = len(content.encode("utf-8", "surrogatepass"))
        head = f"{spec.tool_id} {str(arguments.get(target, ''))[:MAX_TARGET_CHARS]} ({size} bytes)"
        text = f"{head}: {encode_json(content)}"
        if len(text) > MAX_SUMMARY_CHARS:
            text = text[:MAX_SUMMARY_CHARS - 1] + "…"
    else:
        text = f"{spec.tool_id} {encode_json(dict(arguments))}"
    printable = "".join(c if c.isprintable() else "?" for c in text)
    return printable[:MAX_SUMMARY_CHARS]
