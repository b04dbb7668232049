"""A JSON reader that refuses what ``json.loads`` silently accepts.

``json.loads`` keeps the last of two duplicate keys, reads ``NaN`` and
``Infinity``, turns ``1e400`` into ``inf``, raises a bare ``ValueError`` on a
5,000-digit integer and ``RecursionError`` on deep nesting, and decodes
``"\ud800"`` into a lone surrogate that no UTF-8 writer can encode later. Here
every one of those is a :class:`~labfy_ref.errors.ProtocolRefused` with a fixed
defect name (I-JSON, RFC 7493), and nothing else ever escapes. Only JSON's own
whitespace (space, tab, LF, CR) may surround the document.
"""

from __future__ import annotations

import enum
import json
import math
import re
from typing import Any

from labfy_ref.errors import ProtocolRefused
from labfy_ref.text import find_surrogate, has_surrogate

#: Deepest nesting of arrays and objects we read (an action needs about 6).
MAX_DEPTH = 32
#: Most digits an integer literal may have (int64 needs 19).
MAX_INT_DIGITS = 20
#: Largest document we read, in characters.
MAX_DOCUMENT_CHARS = 256 * 1024
#: The whitespace of RFC 8259 §2; U+00A0, U+2028, U+3000 or ``\x1c`` are not JSON.
JSON_WHITESPACE = " \t\n\r"
#: A ``\uD8xx``-``\uDFxx`` escape: the decoded value may hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class Defect(enum.StrEnum):
    """What was wrong with a refused document, in words safe to repeat to a model."""

    EMPTY = "empty reply"
    TOO_LARGE = "reply too large"
    BYTE_ORDER_MARK = "byte order mark before the JSON"
    NOT_JSON = "not a JSON document"
    TRAILING_DATA = "text after the JSON object"
    DUPLICATE_KEY = "duplicate key"
    NON_FINITE_NUMBER = "NaN or Infinity is not JSON"
    NUMBER_OUT_OF_RANGE = "number out of range"
    TOO_DEEP = "nesting too deep"
    LONE_SURROGATE = "lone surrogate: not Unicode text (I-JSON)"
    NOT_AN_OBJECT = "the reply must be one JSON object"
    WRONG_FIELDS = "wrong, missing or extra fields"
    UNKNOWN_TOOL = "unknown tool_id"
    INVALID_ARGUMENTS = "arguments do not match the tool's schema"


def refuse(defect: Defect, detail: str = "") -> ProtocolRefused:
    """Build the refusal for ``defect``; ``detail`` must never quote model text."""
    return ProtocolRefused(defect.value, f"{defect.value}{': ' + detail if detail else ''}")


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)  # built in C; a duplicate shows as a shorter dict
    if len(result) != len(pairs):
        raise refuse(Defect.DUPLICATE_KEY)
    return result


def _refuse_constant(_name: str) -> Any:
    raise refuse(Defect.NON_FINITE_NUMBER)


def _finite_float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise refuse(Defect.NUMBER_OUT_OF_RANGE)
    return value


def _bounded_int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_INT_DIGITS:
        raise refuse(Defect.NUMBER_OUT_OF_RANGE)
    return int(literal)


def _check_depth(text: str) -> None:
    """Refuse nesting deeper than MAX_DEPTH before the recursive decoder sees it.

    Nesting can exceed the bound only if there are more openers than it: counted
    at C speed, that settles almost every document (an SSE event, an action)
    without the character loop below.
    """
    if text.count("{") + text.count("[") <= MAX_DEPTH:
        return
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise refuse(Defect.TOO_DEEP)
        elif ch in "]}":
            depth -= 1


def loads_strict(text: str, *, max_chars: int = MAX_DOCUMENT_CHARS) -> Any:
    """Decode one JSON document, tolerating only surrounding whitespace."""
    if len(text) > max_chars:
        raise refuse(Defect.TOO_LARGE)
    body = text.strip(JSON_WHITESPACE)
    if not body:
        raise refuse(Defect.EMPTY)
    if body.startswith("\ufeff"):
        raise refuse(Defect.BYTE_ORDER_MARK)
    position = find_surrogate(body)
    if position is not None:
        raise refuse(Defect.LONE_SURROGATE, f"at position {position}")
    _check_depth(body)
    document = _decode(body)
    if _SURROGATE_ESCAPE.search(body) and has_surrogate(document):
        raise refuse(Defect.LONE_SURROGATE, "in an escape")
    return document


def _decode(body: str) -> Any:
    try:
        return json.loads(
            body,
            object_pairs_hook=_object_without_duplicates,
            parse_constant=_refuse_constant,
            parse_float=_finite_float,
            parse_int=_bounded_int,
        )
    except ProtocolRefused:
        raise
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise refuse(Defect.TRAILING_DATA) from exc
        raise refuse(Defect.NOT_JSON, f"{exc.msg} at position {exc.pos}") from exc
    except (ValueError, RecursionError) as exc:
        raise refuse(Defect.NOT_JSON) from exc
