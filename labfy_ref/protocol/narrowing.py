"""State-aware constrained decoding (PR-06): the action schema narrowed to what is valid now.

Each round the model is sent, as ``response_format``, the published action
schema cut down to the actions that make sense at this point of *this* turn:

* reference fields (``object_id``, ``object_refs``, ``campaign_id``, paths to
  list or read) are enums of the values the turn's own results showed; a tool
  whose required reference has no known value yet is not offered;
* a tool the caller says is unavailable now (a write in ``read-only`` with no
  human to approve it, research outside the runtime) is not offered;
* a call identical to one already answered in this turn is not offered again
  (its reference value leaves the enum; a listing already made leaves the list);
* ``research.prepare`` is offered only while the turn has no campaign;
* budget-aware: after ``conclude_after`` tool calls, in the last round of the
  round budget, and once the tool-call budget is spent, only concluding
  actions are offered (``research.prepare`` while no campaign exists, and
  ``final``), so a turn concludes instead of ending ``BUDGET_EXHAUSTED``.
  ``research.prepare`` needs a round after it (the resumed turn answers in
  it), so the very last round offers ``final`` alone;
* free strings are bounded to what one turn needs, and the round's completion
  limit (``max_tokens``) is the largest number of tokens any admitted action
  can take — counted in UTF-8 bytes with JSON escapes and the whitespace a
  grammar admits between tokens, since no token is shorter than one byte.

Everything here is a pure function of the turn's observations; the runtime
and the bridge's agent loop call the same :func:`narrow`. The reply is still
parsed against the *wide* published schema (PR-05): narrowing guides a model
that honours ``response_format`` and changes nothing for one that ignores it.
Every narrowed schema is a subset of the wide one (a property test holds it
to that): values enter an enum only if the wide schema admits them.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from labfy_ref.protocol.action import action_schema
from labfy_ref.protocol.exchange import canonical
from labfy_ref.tools.catalog import ToolCatalog

#: After this many tool calls a turn is asked to conclude (``--conclude-after``; 0 = never).
DEFAULT_CONCLUDE_AFTER = 4
#: The most reference values one enum offers (the newest are kept).
MAX_REFERENCES = 100
#: What one turn needs of the free strings (the wide schema allows more).
FINAL_TEXT_CHARS = 600
TOPIC_CHARS = 80
QUESTIONS = 3
QUESTION_CHARS = 160
OBJECT_REFS = 4
WRITE_PATH_CHARS = 256
WRITE_CONTENT_CHARS = 2000
#: Bytes a JSON grammar may place between two tokens (llama.cpp's ``space`` rule:
#: nothing, one space, or one or two newlines and up to 20 blanks).
_SPACE_BYTES = 22
#: The longest spelling of one character inside a JSON string: ``\\uXXXX``.
_CHAR_BYTES = 6
_CONCLUDING = frozenset({"research.prepare"})


@dataclasses.dataclass(frozen=True, slots=True)
class Observations:
    """What a turn's own results showed so far (the input of :func:`narrow`)."""

    objects: tuple[str, ...] = ()
    campaigns: tuple[str, ...] = ()
    #: Directories known to exist (the workspace root ``""`` always does).
    directories: tuple[str, ...] = ("",)
    files: tuple[str, ...] = ()
    #: Canonical ``[tool_id, arguments]`` of every call answered in this turn.
    answered: frozenset[str] = frozenset()
    tool_calls: int = 0

    def observe(self, tool_id: str, arguments: Mapping[str, Any],
                result: Mapping[str, Any]) -> Observations:
        """These observations plus one answered call and its wrapped result."""
        seen = dataclasses.replace(self, tool_calls=self.tool_calls + 1,
                                   answered=self.answered | {call_key(tool_id, arguments)})
        data = result.get("data")
        if result.get("ok") is not True or not isinstance(data, Mapping):
            return seen
        try:
            return _learn(seen, tool_id, data)
        except (KeyError, TypeError, AttributeError):
            return seen  # a result of another shape teaches nothing (it is data, not trusted)


def call_key(tool_id: str, arguments: Mapping[str, Any]) -> str:
    """The identity of a call: identical calls have identical keys."""
    return canonical([tool_id, arguments])


def _learn(seen: Observations, tool_id: str, data: Mapping[str, Any]) -> Observations:
    if tool_id == "workspace.list_objects":
        return dataclasses.replace(seen, objects=_merge(
            seen.objects, (item["object_id"] for item in data["objects"])))
    if tool_id == "workspace.read_object":
        return dataclasses.replace(seen, objects=_merge(seen.objects, [data["object_id"]]))
    if tool_id in ("research.prepare", "research.get_state"):
        return dataclasses.replace(seen, campaigns=_merge(seen.campaigns, [data["campaign_id"]]))
    if tool_id == "files.list":
        base = str(data["path"])
        prefix = f"{base}/" if base else ""
        entries = [(str(e["type"]), prefix + str(e["name"])) for e in data["entries"]]
        return dataclasses.replace(
            seen,
            directories=_merge(seen.directories, (p for kind, p in entries if kind == "directory")),
            files=_merge(seen.files, (p for kind, p in entries if kind == "file")))
    return seen


def _merge(known: tuple[str, ...], new: Iterable[Any]) -> tuple[str, ...]:
    """``known`` plus the new strings, first-seen order, no repeats, the newest kept."""
    merged = dict.fromkeys(known)
    for value in new:
        if isinstance(value, str):
            merged.pop(value, None)
            merged[value] = None
    values = tuple(merged)
    return values[-MAX_REFERENCES:] if len(values) > MAX_REFERENCES else values


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """Where the turn stands against its budgets, for this round."""

    round: int
    max_rounds: int
    max_tool_calls: int
    conclude_after: int = DEFAULT_CONCLUDE_AFTER


@dataclasses.dataclass(frozen=True, slots=True)
class Decoding:
    """One round's constrained decoding: the narrowed schema and the completion limit."""

    response_format: dict[str, Any]
    max_tokens: int
    concluding: bool

    @property
    def schema(self) -> dict[str, Any]:
        """The narrowed action schema."""
        schema: dict[str, Any] = self.response_format["json_schema"]["schema"]
        return schema

    @property
    def offered(self) -> frozenset[str]:
        """The tools this round offers."""
        return offered_tools(self.response_format) or frozenset()


def offered_tools(response_format: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The tool ids a ``response_format`` (an action schema) admits, if it says."""
    try:
        branches = response_format["json_schema"]["schema"]["oneOf"]  # type: ignore[index]
        return frozenset(branch["properties"]["tool_id"]["const"] for branch in branches
                         if "tool_id" in branch.get("properties", {}))
    except (KeyError, TypeError):
        return None


def concluding(observations: Observations, budget: Budget) -> bool:
    """Must this round conclude (PR-06's budget rule)?"""
    calls = observations.tool_calls
    return ((budget.conclude_after > 0 and calls >= budget.conclude_after)
            or budget.round >= budget.max_rounds or calls >= budget.max_tool_calls)


def narrow(catalog: ToolCatalog, available: Iterable[str], observations: Observations,
           budget: Budget) -> Decoding:
    """The round's :class:`Decoding`: only what is valid now, and room to say it.

    ``available`` are the tools the caller may run now (policy and surface);
    the result offers a subset of them, each with narrowed arguments, and
    always ``final``.
    """
    base = action_schema()
    tool_branch, final_branch = base["oneOf"]
    conclude = concluding(observations, budget)
    usable = set(available)
    branches: list[dict[str, Any]] = []
    for spec in catalog.values():
        if spec.tool_id not in usable or (conclude and spec.tool_id not in _CONCLUDING):
            continue
        if spec.tool_id in _CONCLUDING and (observations.tool_calls >= budget.max_tool_calls
                                            or budget.round >= budget.max_rounds):
            continue  # research pauses the turn: its resume needs a round left to answer
        arguments = _arguments(spec.tool_id, spec.input_schema, observations)
        if arguments is None:
            continue
        branches.append({**tool_branch, "properties": {
            "type": tool_branch["properties"]["type"],
            "tool_id": {"const": spec.tool_id},
            "arguments": arguments}})
    final_text = {**final_branch["properties"]["text"], "minLength": 1,
                  "maxLength": FINAL_TEXT_CHARS}
    branches.append({**final_branch, "properties": {
        "type": final_branch["properties"]["type"], "text": final_text}})
    schema = {"$schema": base["$schema"], "title": base["title"], "oneOf": branches}
    return Decoding(
        response_format={"type": "json_schema",
                         "json_schema": {"name": "labfy_agent_model_action_v1", "strict": True,
                                         "schema": schema}},
        max_tokens=max_json_bytes(schema), concluding=conclude)


def _arguments(tool_id: str, wide: Mapping[str, Any],
               seen: Observations) -> dict[str, Any] | None:
    """The narrowed arguments schema of one tool, or None when it has nothing to offer now."""
    def fresh(values: Iterable[str], field: str) -> list[str]:
        return [value for value in _admitted(wide["properties"][field], values)
                if call_key(tool_id, {field: value}) not in seen.answered]

    def closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
        return {"type": "object", "additionalProperties": False, "required": required,
                "properties": properties}

    if tool_id == "workspace.list_objects":
        if call_key(tool_id, {}) in seen.answered:
            return None  # everything was listed; a filtered listing shows nothing new
        kinds = [kind for kind in wide["properties"]["kind"]["enum"]
                 if call_key(tool_id, {"kind": kind}) not in seen.answered]
        return closed({"kind": {"type": "string", "enum": kinds}} if kinds else {}, [])
    if tool_id in ("workspace.read_object", "research.get_state", "files.list", "files.read"):
        field, pool = {"workspace.read_object": ("object_id", seen.objects),
                       "research.get_state": ("campaign_id", seen.campaigns),
                       "files.list": ("path", seen.directories),
                       "files.read": ("path", seen.files)}[tool_id]
        values = fresh(pool, field)
        return closed({field: {"type": "string", "enum": values}}, [field]) if values else None
    if tool_id == "research.prepare":
        if seen.campaigns:
            return None  # one campaign per turn: the turn pauses on it
        properties: dict[str, Any] = {
            "topic": {"type": "string", "minLength": 1, "maxLength": TOPIC_CHARS},
            "questions": {"type": "array", "minItems": 1, "maxItems": QUESTIONS,
                          "items": {"type": "string", "minLength": 1,
                                    "maxLength": QUESTION_CHARS}}}
        refs = _admitted(wide["properties"]["object_refs"]["items"], seen.objects)
        if refs:
            properties["object_refs"] = {"type": "array", "maxItems": OBJECT_REFS,
                                         "uniqueItems": True,
                                         "items": {"type": "string", "enum": refs}}
        return closed(properties, ["topic", "questions"])
    if tool_id == "files.write":
        return closed({"path": {"type": "string", "minLength": 1, "maxLength": WRITE_PATH_CHARS},
                       "content": {"type": "string", "maxLength": WRITE_CONTENT_CHARS}},
                      ["path", "content"])
    return dict(wide)  # a tool this module does not know is offered as published


def _admitted(schema: Mapping[str, Any], values: Iterable[str]) -> list[str]:
    """The ``values`` a field's wide schema admits (only those enter an enum)."""
    validator = _validator(canonical(schema))  # one lookup per field, not per value
    return [value for value in values if validator.is_valid(value)]


@functools.cache
def _validator(schema_text: str) -> Draft202012Validator:
    return Draft202012Validator(json.loads(schema_text))


def max_json_bytes(schema: Mapping[str, Any]) -> int:
    """The most UTF-8 bytes a JSON text matching ``schema`` can take, as a grammar writes it.

    Counts every character of a string at its longest escape, and the
    grammar's whitespace wherever JSON admits it. It understands the
    keywords :func:`narrow` uses; anything unbounded is refused (ValueError),
    since a completion limit must never be a guess.
    """
    if "const" in schema:
        return _literal_bytes(schema["const"])
    if "enum" in schema:
        return max((_literal_bytes(value) for value in schema["enum"]), default=0)
    if "oneOf" in schema:
        return max(max_json_bytes(branch) for branch in schema["oneOf"])
    kind = schema.get("type")
    if kind == "string":
        if "maxLength" not in schema:
            raise ValueError("an unbounded string has no completion limit")
        return 2 + _CHAR_BYTES * int(schema["maxLength"])
    if kind == "integer":
        if "minimum" not in schema or "maximum" not in schema:
            raise ValueError("an unbounded integer has no completion limit")
        return max(len(str(schema["minimum"])), len(str(schema["maximum"])))
    if kind == "boolean":
        return len("false")
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("an unbounded array has no completion limit")
        item = max_json_bytes(schema["items"])
        return 2 + _SPACE_BYTES + int(schema["maxItems"]) * (item + 1 + _SPACE_BYTES)
    if kind == "object":
        total = 2 + _SPACE_BYTES
        for key, value in schema.get("properties", {}).items():
            total += _literal_bytes(key) + 1 + _SPACE_BYTES + max_json_bytes(value) + 1 \
                + _SPACE_BYTES
        return total
    raise ValueError(f"no completion limit for a schema of type {kind!r}")


def _literal_bytes(value: Any) -> int:
    """The longer of a value's JSON spellings (escaped ASCII, or raw UTF-8)."""
    return max(len(json.dumps(value)),
               len(json.dumps(value, ensure_ascii=False).encode("utf-8")))
