"""PR-01, PR-02, PR-05: only a valid action object ever becomes an action."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from labfy_ref.errors import ErrorCode, ProtocolRefused
from labfy_ref.protocol import ActionParser, Final, ToolCall, action_schema, bound_action_schema
from labfy_ref.protocol.action import plainly_valid
from labfy_ref.tools import default_catalog

PARSER = ActionParser(default_catalog())
BOUND = Draft202012Validator(bound_action_schema(default_catalog()))
OBJ = "obj_01HZX3K8M9N0P1Q2R3S4T5V6W7"

VALID_ACTIONS: list[dict[str, Any]] = [
    {"type": "final", "text": "done"},
    {"type": "final", "text": ""},
    {"type": "tool_call", "tool_id": "workspace.list_objects", "arguments": {}},
    {"type": "tool_call", "tool_id": "workspace.list_objects",
     "arguments": {"kind": "note", "limit": 5}},
    {"type": "tool_call", "tool_id": "workspace.read_object", "arguments": {"object_id": OBJ}},
    {"type": "tool_call", "tool_id": "research.prepare",
     "arguments": {"topic": "t", "questions": ["q?"], "object_refs": [OBJ]}},
    {"type": "tool_call", "tool_id": "files.write", "arguments": {"path": "a.txt", "content": ""}},
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["type", "tool_id", "arguments", "text", "path",
                                        "object_id", "authorized", "grant", "x"]),
                      children, max_size=4),
    max_leaves=12,
)
action_like = st.fixed_dictionaries(
    {"type": st.sampled_from(["tool_call", "final", "grant"])},
    optional={"tool_id": st.sampled_from([*default_catalog(), "grants.create", ""]),
              "arguments": json_values, "text": json_values, "authorized": st.booleans()},
)
whitespace = st.text(alphabet=" \t\r\n", max_size=6)
NOT_JSON_WHITESPACE = ["\u00a0", "\u2028", "\u3000", "\x1c", "\x0b", "\x0c", "\u0085", "\ufeff"]


def _parses(text: str) -> bool:
    try:
        PARSER.parse(text)
    except ProtocolRefused as exc:
        assert exc.code is ErrorCode.MODEL_PROTOCOL_ERROR
        assert "\n" not in exc.message and len(exc.message) <= 300
        return False
    return True


@pytest.mark.req("PR-01")
@pytest.mark.parametrize("action", VALID_ACTIONS)
def test_valid_actions_parse_to_typed_values(action: dict[str, Any]) -> None:
    parsed = PARSER.parse(json.dumps(action))
    if action["type"] == "final":
        assert parsed == Final(text=action["text"])
    else:
        assert parsed == ToolCall(tool_id=action["tool_id"], arguments=action["arguments"])


@pytest.mark.req("PR-01")
@settings(suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(VALID_ACTIONS), whitespace, whitespace, st.booleans())
def test_every_valid_action_survives_whitespace_and_round_trips(
        action: dict[str, Any], before: str, after: str, pretty: bool) -> None:
    text = json.dumps(action, indent=2 if pretty else None, ensure_ascii=False)
    parsed = PARSER.parse(before + text + after)
    again = PARSER.parse(json.dumps(_to_wire(parsed)))
    assert parsed == again
    assert _to_wire(parsed) == action


@pytest.mark.req("PR-01")
@pytest.mark.parametrize("space", NOT_JSON_WHITESPACE)
@pytest.mark.parametrize("where", ["before", "after"])
def test_only_json_whitespace_may_surround_an_action(space: str, where: str) -> None:
    text = json.dumps(VALID_ACTIONS[0])
    with pytest.raises(ProtocolRefused):
        PARSER.parse(space + text if where == "before" else text + space)


@pytest.mark.req("PR-01")
@pytest.mark.parametrize("document", [
    {"type": "tool_call", "tool_id": "files.list", "arguments": []},
    {"type": "tool_call", "tool_id": "files.list", "arguments": "path=notes"},
    {"type": "tool_call", "tool_id": "files.list", "arguments": None},
    {"type": "finale", "text": "done"},
    {"type": "tool_call", "text": "done"},
    {"type": "Final", "text": "done"},
])
def test_an_object_with_an_actions_keys_but_not_its_shape_is_no_action(
        document: dict[str, Any]) -> None:
    """The right keys are not enough: a final is ``type: final`` with a text, a tool call
    carries an arguments object; anything else with those keys is refused."""
    with pytest.raises(ProtocolRefused) as refused:
        PARSER.parse(json.dumps(document))
    assert refused.value.code is ErrorCode.MODEL_PROTOCOL_ERROR


@pytest.mark.req("PR-01")
@pytest.mark.parametrize(("reply", "message"), [
    ('{"type": "final", "text": "a"}{"type": "final", "text": "b"}',
     "text after the JSON object"),
    ('{"type": "final", "text": "a"} then more', "text after the JSON object"),
    ('{"type": "final", "text": "a"',
     "not a JSON document: Expecting ',' delimiter at position 29"),
    ("final: done", "not a JSON document: Expecting value at position 0"),
])
def test_a_reply_that_is_not_exactly_one_object_says_what_is_wrong(reply: str,
                                                                   message: str) -> None:
    """Two objects, or text after one, is 'text after the JSON object'; a reply that does not
    parse says where the JSON stops; neither quotes the model's text."""
    with pytest.raises(ProtocolRefused) as refused:
        PARSER.parse(reply)
    assert refused.value.message == message


def _to_wire(action: ToolCall | Final) -> dict[str, Any]:
    if isinstance(action, Final):
        return {"type": "final", "text": action.text}
    return {"type": "tool_call", "tool_id": action.tool_id, "arguments": action.arguments}


@pytest.mark.req("PR-01", "PR-02")
@given(st.text(max_size=200))
def test_arbitrary_text_never_parses_unless_it_is_a_valid_action(text: str) -> None:
    if _parses(text):
        assert BOUND.is_valid(json.loads(text))


@pytest.mark.req("PR-02", "PR-05")
@settings(max_examples=300)
@given(action_like | json_values)
def test_parser_accepts_exactly_what_the_published_bound_schema_accepts(value: Any) -> None:
    assert _parses(json.dumps(value)) == BOUND.is_valid(value)


DOUBLE = '{"type":"tool_call","tool_id":"workspace.list_objects","arguments":{"kind":"note"}}'


@pytest.mark.req("PR-02")
@pytest.mark.parametrize(
    ("reply", "defect"),
    [
        ('{"type":"final","text":"a","text":"b"}', "duplicate key"),
        ('{"type":"tool_call","tool_id":"files.read","arguments":{"path":"a","path":"b"}}',
         "duplicate key"),
        ('{"type":"final","text":"x","extra":1}', "wrong, missing or extra fields"),
        ('{"type":"final"}', "wrong, missing or extra fields"),
        ('{"type":"tool_call","tool_id":5,"arguments":{}}', "wrong, missing or extra fields"),
        ('{"type":"tool_call","tool_id":"files.list","arguments":[]}',
         "wrong, missing or extra fields"),
        ('{"type":"final","text":NaN}', "NaN or Infinity is not JSON"),
        ('{"type":"final","text":"x","n":Infinity}', "NaN or Infinity is not JSON"),
        ('{"type":"final","text":"x","n":1e400}', "number out of range"),
        ('{"type":"final","text":"x","n":' + "9" * 5000 + "}", "number out of range"),
        ('{"type":"final","text":"x"} trailing', "text after the JSON object"),
        ('Sure! {"type":"final","text":"x"}', "not a JSON document"),
        ('```json\n{"type":"final","text":"x"}\n```', "not a JSON document"),
        ('{"type":"final","text":"x"}{"type":"final","text":"y"}', "text after the JSON object"),
        ('[{"type":"final","text":"x"}]', "the reply must be one JSON object"),
        ('"final"', "the reply must be one JSON object"),
        ("42", "the reply must be one JSON object"),
        ('\ufeff{"type":"final","text":"x"}', "byte order mark before the JSON"),
        ("[" * 100_000 + "]" * 100_000, "nesting too deep"),
        ("", "empty reply"),
        ("   \n ", "empty reply"),
        (DOUBLE.replace("workspace.list_objects", "grants.create"), "unknown tool_id"),
        (DOUBLE.replace('"note"', '"secret"'), "arguments do not match the tool's schema"),
        ('{"type":"tool_call","tool_id":"research.prepare","arguments":{"topic":"t",'
         '"questions":["q"],"authorized":true}}', "arguments do not match the tool's schema"),
        ('{"type":"tool_call","tool_id":"research.prepare","arguments":{"topic":"t",'
         '"questions":["q"]},"approval":"granted"}', "wrong, missing or extra fields"),
        ('{"type":"grant","campaign_id":"camp_x"}', "wrong, missing or extra fields"),
    ],
)
def test_malformed_or_self_authorizing_replies_are_refused(reply: str, defect: str) -> None:
    with pytest.raises(ProtocolRefused) as caught:
        PARSER.parse(reply)
    assert caught.value.defect == defect


@pytest.mark.req("PR-02")
def test_a_final_text_claiming_a_grant_is_only_text() -> None:
    parsed = PARSER.parse('{"type":"final","text":"I have granted research for camp_1."}')
    assert parsed == Final(text="I have granted research for camp_1.")


def _document_parts() -> st.SearchStrategy[dict[str, Any]]:
    values = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                       st.text(max_size=70), st.just("tool_call"), st.just("final"),
                       st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
                       st.lists(st.integers(), max_size=2),
                       st.integers(0, 70_000).map(lambda n: "x" * n))
    keys = st.sampled_from(["type", "tool_id", "arguments", "text", "extra"])
    return st.one_of(st.dictionaries(keys, values, max_size=4),
                     st.fixed_dictionaries({"type": values, "tool_id": values,
                                            "arguments": values}),
                     st.fixed_dictionaries({"type": values, "text": values}))


@pytest.mark.req("PR-05", "PR-02")
@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(document=_document_parts())
def test_the_parse_shortcut_admits_only_what_the_published_schema_admits(
        document: dict[str, Any]) -> None:
    """The published schema stays the judge: the shortcut only skips its walk when sure."""
    if plainly_valid(document):
        assert Draft202012Validator(action_schema()).is_valid(document)
