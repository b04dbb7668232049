"""The action contract ``labfy.agent_model_action.v1`` (PR-01, PR-02, PR-05).

A model reply becomes an action only through :meth:`ActionParser.parse`:
strict JSON (see :mod:`strict_json`), then the published action schema, then
a catalog lookup, then the tool's closed input schema. There is no other way
in. Self-authorization has no way in either: there is no grant, approval,
scope or policy tool, and fields such as ``authorized`` are extra fields.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from labfy_ref.protocol.strict_json import Defect, loads_strict, refuse
from labfy_ref.tools.catalog import ToolCatalog

CONTRACT_ID = "labfy.agent_model_action.v1"
ACTION_SCHEMA_RESOURCE = "agent_model_action.v1.json"


@dataclasses.dataclass(frozen=True, slots=True)
class ToolCall:
    """The model asks the gateway to run ``tool_id`` with ``arguments``."""

    tool_id: str
    arguments: dict[str, Any]


@dataclasses.dataclass(frozen=True, slots=True)
class Final:
    """The model's final answer for the turn."""

    text: str


Action = ToolCall | Final


@functools.cache
def action_schema() -> dict[str, Any]:
    """The published action schema, as shipped (shared: treat it as read-only)."""
    source = resources.files(__package__).joinpath("schemas", ACTION_SCHEMA_RESOURCE)
    text = source.read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return schema


def bound_action_schema(catalog: ToolCatalog) -> dict[str, Any]:
    """The action schema specialised to ``catalog``: one branch per tool.

    This is what is sent as ``response_format`` for constrained decoding. It is
    composed from the same schema objects the parser validates with, and the
    test-suite proves it accepts exactly what :class:`ActionParser` accepts.
    """
    base = action_schema()
    tool_branch, final_branch = base["oneOf"]
    branches: list[dict[str, Any]] = []
    for spec in catalog.values():
        branch = copy.deepcopy(tool_branch)
        branch["properties"]["tool_id"] = {"const": spec.tool_id}
        branch["properties"]["arguments"] = copy.deepcopy(dict(spec.input_schema))
        branches.append(branch)
    branches.append(copy.deepcopy(final_branch))
    return {
        "$schema": base["$schema"],
        "title": base["title"],
        "oneOf": branches,
    }


class ActionParser:
    """Turns one model reply into an :data:`Action` or raises ``ProtocolRefused``."""

    def __init__(self, catalog: ToolCatalog) -> None:
        self._catalog = catalog
        self._validator = Draft202012Validator(action_schema())

    def parse(self, reply: str) -> Action:
        """Parse the model's whole reply; whitespace around the object is the only tolerance."""
        document = loads_strict(reply)
        if not isinstance(document, dict):
            raise refuse(Defect.NOT_AN_OBJECT)
        if not (plainly_valid(document) or self._validator.is_valid(document)):
            raise refuse(Defect.WRONG_FIELDS, _field_hint(document))
        if document["type"] == "final":
            return Final(text=document["text"])
        spec = self._catalog.get(document["tool_id"])
        if spec is None:
            raise refuse(Defect.UNKNOWN_TOOL, "choose one of " + ", ".join(sorted(self._catalog)))
        arguments = document["arguments"]
        if spec.input_validator.is_valid(arguments):
            return ToolCall(tool_id=spec.tool_id, arguments=arguments)
        error = min(spec.input_validator.iter_errors(arguments), key=str, default=None)
        if error is not None:
            where = "/".join(str(part) for part in error.absolute_path) or "arguments"
            detail = f"{spec.tool_id} at '{_safe(where)}' ({error.validator})"
            raise refuse(Defect.INVALID_ARGUMENTS, detail)
        return ToolCall(tool_id=spec.tool_id, arguments=arguments)


_TOOL_CALL_KEYS = frozenset({"type", "tool_id", "arguments"})
_FINAL_KEYS = frozenset({"type", "text"})


def plainly_valid(document: dict[str, Any]) -> bool:
    """Does ``document`` match a branch of the action schema in its plainest form?

    A shortcut, never a second definition: True only for what the published
    schema accepts (a property test holds it to that); anything else — every
    refusal included — is judged by the schema itself. It saves the schema's
    ``oneOf`` walk (~30 µs, most of a round's parse) on the replies that are
    plainly right.
    """
    keys = document.keys()
    if keys == _TOOL_CALL_KEYS:
        tool_id = document["tool_id"]
        return (document["type"] == "tool_call" and type(tool_id) is str
                and 0 < len(tool_id) <= 64 and type(document["arguments"]) is dict)
    if keys == _FINAL_KEYS:
        text = document["text"]
        return document["type"] == "final" and type(text) is str and len(text) <= 65536
    return False


def _safe(text: str, limit: int = 64) -> str:
    """A field name fit to repeat to the model: printable ASCII identifiers, cut short."""
    cleaned = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "_./-") else "?" for ch in text)
    return cleaned[:limit]


def _field_hint(document: dict[str, Any]) -> str:
    kind = document.get("type")
    expected: tuple[str, ...]
    if kind == "tool_call":
        expected = ("type", "tool_id", "arguments")
    elif kind == "final":
        expected = ("type", "text")
    else:
        return "'type' must be \"tool_call\" or \"final\""
    extra = sorted(_safe(key) for key in document if key not in expected)
    missing = [key for key in expected if key not in document]
    parts = []
    if missing:
        parts.append("missing " + ", ".join(missing))
    if extra:
        parts.append("extra " + ", ".join(extra[:5]))
    if not parts:
        parts.append("a field has the wrong type")
    return f"{kind} takes exactly {', '.join(expected)}; " + "; ".join(parts)
