"""PR-01, PR-02, PR-03, PR-05: the action parser's bounds, shortcut and refusal texts, exactly.

The schema's own bounds (a tool id of 1..64 characters, a final text of at most
65,536) are pinned on both sides through the parser, whose shortcut
(:func:`plainly_valid`) must never accept what the published schema refuses;
the refusal details (PR-03's repair message names them) are pinned verbatim.
These are the cases the mutation run (QR-04) needs.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from labfy_ref.errors import ProtocolRefused
from labfy_ref.protocol.action import (
    CONTRACT_ID,
    ActionParser,
    Final,
    ToolCall,
    action_schema,
    bound_action_schema,
    plainly_valid,
)
from labfy_ref.protocol.strict_json import Defect
from labfy_ref.tools.catalog import default_catalog

CATALOG = default_catalog()
PARSER = ActionParser(CATALOG)


def _refused(document: Any) -> ProtocolRefused:
    with pytest.raises(ProtocolRefused) as caught:
        PARSER.parse(json.dumps(document, ensure_ascii=False))
    return caught.value


@pytest.mark.req("PR-02", "PR-05")
def test_a_tool_id_of_64_characters_is_a_tool_call_of_65_wrong_fields() -> None:
    unknown = _refused({"type": "tool_call", "tool_id": "t" * 64, "arguments": {}})
    assert unknown.defect == Defect.UNKNOWN_TOOL
    assert unknown.message == (f"{Defect.UNKNOWN_TOOL.value}: choose one of "
                               + ", ".join(sorted(CATALOG)))
    for tool_id in ("t" * 65, ""):
        assert _refused({"type": "tool_call", "tool_id": tool_id,
                         "arguments": {}}).defect == Defect.WRONG_FIELDS


@pytest.mark.req("PR-01", "PR-05")
def test_a_final_text_of_65536_characters_is_read_of_65537_refused() -> None:
    text = json.dumps({"type": "final", "text": "é" * 65536}, ensure_ascii=False)
    assert PARSER.parse(text) == Final("é" * 65536)
    assert _refused({"type": "final", "text": "é" * 65537}).defect == Defect.WRONG_FIELDS


@pytest.mark.req("PR-05")
@pytest.mark.parametrize(("document", "plain"), [
    ({"type": "final", "text": ""}, True), ({"type": "final", "text": "t" * 65536}, True),
    ({"type": "tool_call", "tool_id": "x", "arguments": {}}, True),
    ({"type": "tool_call", "tool_id": "x" * 64, "arguments": {"a": 1}}, True),
    ({"type": "final", "text": "t" * 65537}, False), ({"type": "final", "text": 5}, False),
    ({"type": "tool_call", "text": "t"}, False), ({"type": "final", "tool_id": "x",
                                                  "arguments": {}}, False),
    ({"type": "tool_call", "tool_id": "", "arguments": {}}, False),
    ({"type": "tool_call", "tool_id": "x" * 65, "arguments": {}}, False),
    ({"type": "tool_call", "tool_id": 5, "arguments": {}}, False),
    ({"type": "tool_call", "tool_id": "x", "arguments": []}, False),
    ({"type": "final"}, False), ({"type": "final", "text": "t", "extra": 1}, False),
])
def test_the_shortcut_accepts_only_what_the_schema_accepts(document: dict[str, Any],
                                                           plain: bool) -> None:
    assert plainly_valid(document) is plain
    if plain:
        assert Draft202012Validator(action_schema()).is_valid(document)


@pytest.mark.req("PR-02", "PR-03")
@pytest.mark.parametrize(("document", "hint"), [
    ({"type": "tool_call", "tool_id": "files.list"},
     "tool_call takes exactly type, tool_id, arguments; missing arguments"),
    ({"type": "final", "text": "t", "grant": True, "approved": 1},
     "final takes exactly type, text; extra approved, grant"),
    ({"type": "final"}, "final takes exactly type, text; missing text"),
    ({"type": "final", "text": 5}, "final takes exactly type, text; a field has the wrong type"),
    ({"type": "tool_call", "tool_id": "files.list", "arguments": {}, "b": 1, "a": 2, "e": 3,
      "d": 4, "c": 5, "f": 6}, "tool_call takes exactly type, tool_id, arguments; extra a, b, c, "
                               "d, e"),
    ({"type": "final", "text": "t", "b\u202ed" * 40: 1},
     "final takes exactly type, text; extra " + "b?d" * 21 + "b"),
    ({"type": "final", "text": "t", "clé٣_./-": 1},
     "final takes exactly type, text; extra cl??_./-"),
    ({"type": "other"}, "'type' must be \"tool_call\" or \"final\""),
    ({"text": "t"}, "'type' must be \"tool_call\" or \"final\""),
    ({"type": "tool_call", "text": "t"},
     "tool_call takes exactly type, tool_id, arguments; missing tool_id, arguments; extra text"),
])
def test_the_field_hint_names_what_is_missing_and_extra(document: dict[str, Any],
                                                        hint: str) -> None:
    refusal = _refused(document)
    assert refusal.defect == Defect.WRONG_FIELDS
    assert refusal.message == f"{Defect.WRONG_FIELDS.value}: {hint}"


@pytest.mark.req("PR-02", "PR-03")
@pytest.mark.parametrize(("tool_id", "arguments", "detail"), [
    ("files.read", {}, "files.read at 'arguments' (required)"),
    ("files.read", {"path": 5}, "files.read at 'path' (type)"),
    ("workspace.list_objects", {"limit": 101}, "workspace.list_objects at 'limit' (maximum)"),
    ("workspace.list_objects", {"limit": 0}, "workspace.list_objects at 'limit' (minimum)"),
    ("research.prepare", {"topic": "t", "questions": ["q", ""]},
     "research.prepare at 'questions/1' (minLength)"),
    ("files.list", {"path": "p", "x\u0000y": 1},
     "files.list at 'arguments' (additionalProperties)"),
])
def test_invalid_arguments_name_the_tool_the_place_and_the_rule(
        tool_id: str, arguments: dict[str, Any], detail: str) -> None:
    refusal = _refused({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})
    assert refusal.defect == Defect.INVALID_ARGUMENTS
    assert refusal.message == f"{Defect.INVALID_ARGUMENTS.value}: {detail}"


@pytest.mark.req("PR-01")
def test_valid_arguments_make_the_tool_call() -> None:
    parsed = PARSER.parse(' {"type":"tool_call","tool_id":"files.read","arguments":'
                          '{"path":"a.txt"}}\n')
    assert parsed == ToolCall("files.read", {"path": "a.txt"})
    assert _refused([1]).defect == Defect.NOT_AN_OBJECT


@pytest.mark.req("PR-05", "PR-06")
def test_the_bound_schema_has_one_branch_per_tool_and_the_final() -> None:
    published = action_schema()
    assert published["title"] == CONTRACT_ID
    before = json.dumps(published, sort_keys=True)
    bound = bound_action_schema(CATALOG)
    assert set(bound) == {"$schema", "title", "oneOf"}
    assert (bound["$schema"], bound["title"]) == (published["$schema"], CONTRACT_ID)
    *tools, final = bound["oneOf"]
    assert final == published["oneOf"][1]
    assert [branch["properties"]["tool_id"] for branch in tools] == [
        {"const": tool_id} for tool_id in CATALOG]
    for branch, spec in zip(tools, CATALOG.values(), strict=True):
        assert branch["properties"]["arguments"] == dict(spec.input_schema)
        assert branch["required"] == ["type", "tool_id", "arguments"]
    tools[0]["properties"]["arguments"]["x"] = 1  # a copy: neither source changes
    assert json.dumps(action_schema(), sort_keys=True) == before
    assert "x" not in next(iter(CATALOG.values())).input_schema
    Draft202012Validator.check_schema(bound)


@pytest.mark.req("PR-01")
def test_a_parsed_action_cannot_be_altered_after_validation() -> None:
    # What was validated is what runs: neither action can be changed on its way to the gateway.
    final = PARSER.parse('{"type":"final","text":"t"}')
    call = PARSER.parse('{"type":"tool_call","tool_id":"files.list","arguments":{"path":""}}')
    assert isinstance(final, Final) and isinstance(call, ToolCall)
    with pytest.raises(dataclasses.FrozenInstanceError):
        final.text = "other"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        call.tool_id = "files.write"  # type: ignore[misc]
    assert final == Final("t") and call == ToolCall("files.list", {"path": ""})
