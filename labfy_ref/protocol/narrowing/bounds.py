"""What a narrowed schema may hold and how long its longest reply is (PR-06).

Values enter an enum only if the wide schema admits them (:func:`admitted`), and the
round's completion limit is the most bytes any admitted action can take as a
llama.cpp grammar writes it (:func:`max_json_bytes`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from labfy_ref.protocol.jsonfmt import canonical
from labfy_ref.text import has_surrogate

#: Bytes a JSON grammar may place between two tokens (llama.cpp's ``space`` rule:
#: nothing, one space, or one or two newlines and up to 20 blanks).
_SPACE_BYTES = 22
#: The longest spelling of one character inside a JSON string: ``\\uXXXX``.
_CHAR_BYTES = 6


def admitted(schema: Mapping[str, Any], values: Iterable[str]) -> list[str]:
    """The ``values`` a field's wide schema admits (only those enter an enum)."""
    admits = _admits(canonical(schema))  # one lookup per field, not per value
    return [value for value in values if admits(value)]


@functools.cache
def _admits(schema_text: str) -> Callable[[str], bool]:
    """Does the schema (its canonical text) admit a value? Each value is judged once while
    recent: a turn offers the same references round after round (512 kept per schema)."""
    validator = Draft202012Validator(json.loads(schema_text))

    @functools.lru_cache(maxsize=512)
    def admits(value: str) -> bool:
        return not has_surrogate(value) and validator.is_valid(value)

    return admits



def max_json_bytes(schema: Mapping[str, Any]) -> int:
    """The most UTF-8 bytes a JSON text matching ``schema`` can take, as a grammar writes it.

    Counts every character of a string at its longest escape, and the grammar's widest
    whitespace wherever llama.cpp's ``json_schema`` grammar puts its ``space`` rule: after
    ``{``, ``[``, ``,`` and ``:``, after each key and after each value, the whole text's
    last included. It understands the keywords :func:`narrow` uses; anything unbounded is
    refused (ValueError), since a completion limit must never be a guess.
    """
    if "const" in schema:
        return _literal_bytes(schema["const"]) + _SPACE_BYTES
    if "enum" in schema:
        return max((_literal_bytes(value) for value in schema["enum"]), default=0) \
            + _SPACE_BYTES
    if "oneOf" in schema:
        return max(max_json_bytes(branch) for branch in schema["oneOf"])
    kind = schema.get("type")
    if kind == "string":
        if "maxLength" not in schema:
            raise ValueError("an unbounded string has no completion limit")
        return 2 + _CHAR_BYTES * int(schema["maxLength"]) + _SPACE_BYTES
    if kind == "integer":
        if "minimum" not in schema or "maximum" not in schema:
            raise ValueError("an unbounded integer has no completion limit")
        return max(len(str(schema["minimum"])), len(str(schema["maximum"]))) + _SPACE_BYTES
    if kind == "boolean":
        return len("false") + _SPACE_BYTES
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("an unbounded array has no completion limit")
        items = int(schema["maxItems"])
        return _enclosed([max_json_bytes(schema["items"])] * items)
    if kind == "object":
        return _enclosed([_literal_bytes(key) + _SPACE_BYTES + 1 + _SPACE_BYTES
                          + max_json_bytes(value)
                          for key, value in schema.get("properties", {}).items()])
    raise ValueError(f"no completion limit for a schema of type {kind!r}")


def _enclosed(members: list[int]) -> int:
    """An object's or an array's bytes: its brackets, each followed by a space, its
    members (each with its own), a comma and a space between two."""
    return 2 + 2 * _SPACE_BYTES + sum(members) + max(len(members) - 1, 0) * (1 + _SPACE_BYTES)


def _literal_bytes(value: Any) -> int:
    """The longer of a value's JSON spellings (escaped ASCII, or raw UTF-8)."""
    if isinstance(value, str) and len(value) <= _KEPT_LITERAL:
        return _kept_string_bytes(value)  # enum values: the same references every round
    return _spelled_bytes(value)


def _spelled_bytes(value: Any) -> int:
    return max(len(json.dumps(value)),
               len(json.dumps(value, ensure_ascii=False).encode("utf-8")))


_KEPT_LITERAL = 128  # the longest string whose size is kept (1,024 of them at most)
_kept_string_bytes = functools.lru_cache(maxsize=1024)(_spelled_bytes)
