"""PR-06: the narrowed action schema, as a pure function of a turn's observations.

Properties over any observation history (results of any shape, ids real or
invented, hostile strings): the narrowed schema is a valid JSON Schema; every
action it admits is accepted by the wide published parser (PR-05) — so it is
a subset of the wide schema; it never admits an id the turn did not see, nor
a reference call already answered; it fits the round's completion limit; and
the budget rule leaves only concluding actions.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.protocol import (
    ActionParser,
    Budget,
    Final,
    Observations,
    ToolCall,
    call_key,
    max_json_bytes,
    narrow,
)
from labfy_ref.protocol.text_shape import FINAL
from labfy_ref.tools import default_catalog
from labfy_ref.workspace import open_workspace
from qualification.strategies import instances

CATALOG = default_catalog()
PARSER = ActionParser(CATALOG)
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
REFERENCE_FIELDS = {"workspace.read_object": "object_id", "research.get_state": "campaign_id",
                    "files.list": "path", "files.read": "path"}

# Any text: lone surrogates and every plane included (ATTACKS.md §G).
texts = st.text(st.characters(codec=None), max_size=40)
ids = st.one_of(
    st.builds(lambda p, s: f"{p}_{s}", st.sampled_from(["obj", "camp"]),
              st.text(st.sampled_from(_CROCKFORD), min_size=26, max_size=26)),
    texts)


def _results() -> st.SearchStrategy[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(tool_id, arguments, wrapped result): real shapes, broken shapes, failures."""
    listing = st.builds(lambda objs: {"objects": [{"object_id": o, "kind": "note", "title": "t"}
                                                  for o in objs]}, st.lists(ids, max_size=6))
    files = st.builds(lambda base, entries: {"path": base, "entries": [
        {"name": n, "type": t} for n, t in entries], "skipped": 0},
        st.sampled_from(["", "notes", "a/b"]),
        st.lists(st.tuples(texts, st.sampled_from(["file", "directory", "other"])), max_size=5))
    data = {
        "workspace.list_objects": listing,
        "workspace.read_object": st.builds(lambda o: {"object_id": o}, ids),
        "research.prepare": st.builds(lambda c: {"campaign_id": c, "status": "PREPARED"}, ids),
        "research.get_state": st.builds(lambda c: {"campaign_id": c, "evidence": []}, ids),
        "files.list": files,
        "files.read": st.builds(lambda p: {"path": p, "content": "x"}, texts),
        "files.write": st.just({"path": "x", "bytes_written": 1}),
    }

    def wrap(tool_id: str) -> st.SearchStrategy[tuple[str, dict[str, Any], dict[str, Any]]]:
        arguments = st.dictionaries(st.sampled_from(["path", "object_id", "campaign_id", "kind"]),
                                    ids, max_size=2)
        payload = st.one_of(data[tool_id], st.dictionaries(texts, texts, max_size=2))
        return st.tuples(st.just(tool_id), arguments, st.builds(
            lambda ok, d: {"trust": "UNTRUSTED_DATA", "tool_id": tool_id, "ok": ok, "data": d},
            st.booleans(), payload))

    return st.sampled_from(sorted(data)).flatmap(wrap)


histories = st.lists(_results(), max_size=8)
budgets = st.builds(Budget, round=st.integers(1, 16), max_rounds=st.integers(1, 16),
                    max_tool_calls=st.integers(1, 64), conclude_after=st.integers(0, 6))
availability = st.sets(st.sampled_from(sorted(CATALOG)))


def _observe(history: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> Observations:
    seen = Observations()
    for tool_id, arguments, result in history:
        seen = seen.observe(tool_id, arguments, result)
    return seen


def _seen_values(history: list[tuple[str, dict[str, Any], dict[str, Any]]]) -> set[str]:
    """Every string that appears anywhere in the history's results."""
    found: set[str] = {""}

    def walk(value: Any) -> None:
        if isinstance(value, str):
            found.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for _, _, result in history:
        walk(result)
    # a listed entry's path is its listing's path joined with its name
    bases = {r["data"].get("path") for _, _, r in history if isinstance(r.get("data"), dict)}
    names = set(found)
    found.update(f"{b}/{n}" for b in bases if isinstance(b, str) and b for n in names)
    return found


@pytest.mark.req("PR-06", "PR-05")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(history=histories, budget=budgets, available=availability, data=st.data())
def test_any_history_gives_a_valid_subset_schema_that_admits_no_unseen_reference(
        history: list[tuple[str, dict[str, Any], dict[str, Any]]], budget: Budget,
        available: set[str], data: st.DataObject) -> None:
    seen = _observe(history)
    decoding = narrow(CATALOG, available, seen, budget)
    Draft202012Validator.check_schema(decoding.schema)
    assert set(decoding.offered) <= available
    instance = data.draw(instances(decoding.schema))
    Draft202012Validator(decoding.schema).validate(instance)
    text = json.dumps(instance, ensure_ascii=False)
    assert len(text.encode("utf-8")) <= decoding.max_tokens, "the completion limit fits it"
    action = PARSER.parse(text)  # the wide schema accepts whatever the narrow one admits
    if isinstance(action, Final):
        assert 1 <= len(action.text) <= FINAL.max_chars
        return
    assert isinstance(action, ToolCall)
    assert action.tool_id in decoding.offered
    assert not decoding.concluding or action.tool_id == "research.prepare"
    values = _seen_values(history)
    field = REFERENCE_FIELDS.get(action.tool_id)
    if field is not None:
        assert action.arguments[field] in values, "an unseen reference is never admitted"
        assert call_key(action.tool_id, action.arguments) not in seen.answered
    for ref in action.arguments.get("object_refs", []):
        assert ref in values
    if action.tool_id == "research.prepare":
        assert not seen.campaigns, "one campaign per turn"
        if any(CATALOG[tool_id].traits.progress for tool_id in available):
            assert seen.progress, "a listing alone is not enough to prepare research on"


@pytest.mark.req("PR-06")
def test_references_come_only_from_this_turns_results_and_leave_once_answered() -> None:
    obj = "obj_" + "A" * 26
    listing = {"ok": True, "data": {"objects": [{"object_id": obj, "kind": "note", "title": "t"},
                                                {"object_id": "not-an-id", "kind": "x"}]}}
    budget = Budget(round=1, max_rounds=16, max_tool_calls=64, conclude_after=0)
    first = narrow(CATALOG, CATALOG, Observations(), budget)
    assert "workspace.read_object" not in first.offered, "no id known yet"
    assert "research.get_state" not in first.offered, "no campaign yet"
    assert "files.read" not in first.offered, "no file listed yet"
    seen = Observations(query="Prepare research on it").observe(
        "workspace.list_objects", {}, listing)
    second = narrow(CATALOG, CATALOG, seen, budget)
    assert "workspace.list_objects" not in second.offered, "the same listing is not offered again"
    assert second.schema["oneOf"][-1]["properties"].get("type") != {"const": "final"}, \
        "a turn that can still read looks before it answers (PR-07)"
    read = next(b for b in second.schema["oneOf"]
                if b["properties"].get("tool_id") == {"const": "workspace.read_object"})
    assert read["properties"]["arguments"]["properties"]["object_id"]["enum"] == [obj]
    seen = seen.observe("workspace.read_object", {"object_id": obj},
                        {"ok": True, "data": {"object_id": obj}})
    third = narrow(CATALOG, CATALOG, seen, budget)
    assert "workspace.read_object" not in third.offered, "the only id was read already"
    assert "research.prepare" in third.offered


def _objects(ids: list[str], titles: list[str]) -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": "workspace.list_objects", "ok": True,
            "data": {"objects": [{"object_id": i, "kind": "note", "title": t}
                                 for i, t in zip(ids, titles, strict=True)]}}


@pytest.mark.req("PR-06", "PR-07")
def test_a_listed_title_is_kept_whatever_its_spelling_so_a_request_can_name_it() -> None:
    """Each reference a result shows is kept with its name (an object's title) whether the
    title sorts before or after the id: a request that names any of them has that one read
    first, and only that one."""
    ids = ["obj_" + letter * 26 for letter in "ABC"]
    titles = ["Field plan 2026", "zinnia beds 2026", "2026 ivy bee survey"]
    listed = Observations().observe("workspace.list_objects", {}, _objects(ids, titles))
    budget = Budget(round=1, max_rounds=16, max_tool_calls=64)
    for object_id, title in zip(ids, titles, strict=True):
        seen = dataclasses.replace(listed, query=f"Read the note called {title}, please.")
        decoding = narrow(CATALOG, CATALOG, seen, budget)
        assert decoding.offered == {"workspace.read_object"}, title
        read = next(b for b in decoding.schema["oneOf"]
                    if b["properties"].get("tool_id") == {"const": "workspace.read_object"})
        assert read["properties"]["arguments"]["properties"]["object_id"]["enum"] == [
            object_id], title
    assert dict(listed.names) == dict(zip(ids, titles, strict=True))


@pytest.mark.req("PR-06")
def test_what_a_long_turn_remembers_of_its_references_is_bounded_newest_kept() -> None:
    """A turn that lists more references than it keeps remembers what it saw of at most
    4 x MAX_REFERENCES of them (their labels and names), the newest: its memory does not
    grow with its length, and the references still on offer are the ones it remembers."""
    from labfy_ref.protocol.narrowing import MAX_REFERENCES  # noqa: PLC0415

    kept = MAX_REFERENCES * 4
    seen = Observations(query="Which note is about hedges?")
    listed: list[str] = []
    for page, kind in enumerate(["note", "fact", "observation", "source", "note", "fact"]):
        ids = [f"obj_{page:02}{n:024}" for n in range(MAX_REFERENCES)]
        seen = seen.observe("workspace.list_objects", {"kind": kind},
                            _objects(ids, [f"Survey {page} entry {n}" for n in range(len(ids))]))
        listed.extend(ids)
    assert len(listed) > kept
    assert list(seen.labels) == listed[-kept:], "the newest labels, in the order seen"
    assert list(seen.names) == listed[-kept:], "the newest names, in the order seen"
    assert seen.names[listed[-1]] == f"Survey 5 entry {MAX_REFERENCES - 1}"
    decoding = narrow(CATALOG, CATALOG, seen, Budget(round=1, max_rounds=16,
                                                      max_tool_calls=64))
    read = next(b for b in decoding.schema["oneOf"]
                if b["properties"].get("tool_id") == {"const": "workspace.read_object"})
    offered = read["properties"]["arguments"]["properties"]["object_id"]["enum"]
    assert set(offered) == set(listed[-MAX_REFERENCES:]) <= set(seen.labels)


@pytest.mark.req("PR-06", "GW-07")
def test_tools_unavailable_now_are_not_offered(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        gateway = AgentGateway(workspace, store)
        read_only = CallContext(PermissionMode.READ_ONLY)
        assert "files.write" not in gateway.offerable(read_only, approvals=False)
        assert "files.write" in gateway.offerable(read_only, approvals=True), "Allow once"
        writable = CallContext(PermissionMode.WORKSPACE_WRITE)
        assert "files.write" in gateway.offerable(writable, approvals=False)
        surface = gateway.surface(["files.list", "files.read"])
        assert surface.offerable(writable, approvals=True) == ["files.list", "files.read"]
    finally:
        store.close()


@pytest.mark.req("PR-06", "PR-07")
@pytest.mark.parametrize(("calls", "round_", "campaign", "expected"), [
    (4, 1, False, {"research.prepare"}),       # conclude after 4 tool calls
    (4, 15, False, {"research.prepare"}),      # concluding, a round left: a resume can answer
    (1, 16, False, set()),                     # the last round of 16: final alone
    (4, 1, True, set()),                       # a campaign exists: only final
    (64, 1, False, set()),                     # the tool-call budget is spent
    (3, 15, False, None),                      # neither: the usual narrowing
])
def test_budget_rule_leaves_only_concluding_actions(
        calls: int, round_: int, campaign: bool, expected: set[str] | None) -> None:
    seen = Observations(tool_calls=calls, progress=1, query="Prepare research on ivy bees.",
                        refs={"campaign": ("camp_" + "B" * 26,)} if campaign else {})
    decoding = narrow(CATALOG, CATALOG, seen, Budget(round=round_, max_rounds=16,
                                                      max_tool_calls=64, conclude_after=4))
    if expected:  # research concludes a turn only when the request is for research (PR-07)
        asked = dataclasses.replace(seen, query="How many bee species were recorded?")
        assert narrow(CATALOG, CATALOG, asked, Budget(
            round=round_, max_rounds=16, max_tool_calls=64, conclude_after=4)).offered == set()
    if expected is None:
        assert not decoding.concluding and "files.list" in decoding.offered
    else:
        assert decoding.concluding and set(decoding.offered) == expected
    final = decoding.schema["oneOf"][-1]["properties"]["type"] == {"const": "final"}
    assert final != ("research.prepare" in decoding.offered), \
        "final, unless the research the user asked for is still on offer (PR-07)"


@pytest.mark.req("PR-06")
def test_conclude_after_zero_never_concludes_early() -> None:
    seen = Observations(tool_calls=40)
    decoding = narrow(CATALOG, CATALOG, seen, Budget(round=2, max_rounds=16,
                                                      max_tool_calls=64, conclude_after=0))
    assert not decoding.concluding


@pytest.mark.req("PR-06")
def test_the_completion_limit_is_the_largest_admitted_action_at_its_longest() -> None:
    decoding = narrow(CATALOG, ["files.list"], Observations(progress=1),
                      Budget(round=1, max_rounds=16, max_tool_calls=64))
    # final: {"type":"final","text": its longest shaped text, each character as a 6-byte escape}
    longest_final = max_json_bytes(decoding.schema["oneOf"][-1])
    assert decoding.max_tokens == max(longest_final, max_json_bytes(decoding.schema["oneOf"][0]))
    assert decoding.max_tokens >= 6 * FINAL.max_chars
    with pytest.raises(ValueError, match="unbounded"):
        max_json_bytes({"type": "string"})


#: llama.cpp's widest ``space`` (``| " " | "\n"{1,2} [ \t]{0,20}``, json-schema-to-grammar):
#: its grammar lets it follow ``{``, ``[``, ``,``, ``:``, every key and every value.
WIDEST_SPACE = "\n\n" + " " * 20


@pytest.mark.req("PR-06")
@pytest.mark.parametrize("items", [1, 2, 3, 5])
def test_the_completion_limit_fits_an_array_at_its_longest_with_the_grammars_whitespace(
        items: int) -> None:
    """An array of ``maxItems`` values, each spelled at its longest (every character a
    6-byte escape), a comma between two, and the grammar's widest whitespace (a blank line
    and 20 blanks) after ``[``, after each comma and before ``]``, is a reply the grammar
    can write: the round's completion limit holds it."""
    values = [letter * 12 for letter in "éèêëē"]
    schema = {"type": "array", "minItems": 1, "maxItems": items, "uniqueItems": True,
              "items": {"type": "string", "enum": values}}
    chosen = values[:items]
    text = ("[" + WIDEST_SPACE + ("," + WIDEST_SPACE).join(json.dumps(v) for v in chosen)
            + WIDEST_SPACE + "]")
    assert Draft202012Validator(schema).is_valid(json.loads(text))
    assert all(len(json.dumps(v)) == 2 + 6 * 12 for v in chosen), "each at its longest"
    assert len(text.encode("utf-8")) <= max_json_bytes(schema)


def _longest_text(schema: dict[str, Any], nth: int = 0) -> str:
    """The longest text llama.cpp's grammar for ``schema`` writes: every optional property,
    ``maxItems`` items, ``maxLength`` characters of a string each as a ``\\uXXXX`` escape,
    every value followed by the widest space (``nth`` picks a distinct value for unique
    items). A string with a pattern is written from the pattern alone, unescaped, and its
    pattern admits at most ``maxLength`` characters (text_shape): the escaped spelling is
    longer than any it can take, so the pattern is what its validity check leaves out."""
    def spelled(value: Any) -> str:  # a const or enum value is the grammar's literal
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))

    if "const" in schema:
        return spelled(schema["const"]) + WIDEST_SPACE
    if "enum" in schema:
        ranked = sorted(schema["enum"], key=lambda v: -len(spelled(v).encode("utf-8")))
        return spelled(ranked[nth]) + WIDEST_SPACE
    if "oneOf" in schema:
        return max((_longest_text(branch) for branch in schema["oneOf"]),
                   key=lambda text: len(text.encode("utf-8")))
    kind = schema["type"]
    if kind == "string":  # a pattern's characters are never escaped: this is longer still
        return '"' + f"\\u{0xE9 + nth:04x}" * int(schema["maxLength"]) + '"' + WIDEST_SPACE
    if kind == "integer":
        return max(str(schema["minimum"]), str(schema["maximum"]), key=len) + WIDEST_SPACE
    if kind == "boolean":
        return "false" + WIDEST_SPACE
    if kind == "array":
        count = schema["maxItems"]
        if schema.get("uniqueItems") and "enum" in schema["items"]:
            count = min(count, len(schema["items"]["enum"]))
        items = [_longest_text(schema["items"], n if schema.get("uniqueItems") else 0)
                 for n in range(count)]
        return "[" + WIDEST_SPACE + ("," + WIDEST_SPACE).join(items) + "]" + WIDEST_SPACE
    assert kind == "object", kind
    pairs = [json.dumps(key, ensure_ascii=False) + WIDEST_SPACE + ":" + WIDEST_SPACE
             + _longest_text(value) for key, value in schema.get("properties", {}).items()]
    return "{" + WIDEST_SPACE + ("," + WIDEST_SPACE).join(pairs) + "}" + WIDEST_SPACE


def _unpatterned(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _unpatterned(v) for k, v in schema.items() if k != "pattern"}
    return [_unpatterned(v) for v in schema] if isinstance(schema, list) else schema


@pytest.mark.req("PR-06")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.data_too_large])
@given(history=histories, budget=budgets, available=availability)
def test_the_completion_limit_holds_the_longest_reply_the_grammar_can_write(
        history: list[tuple[str, dict[str, Any], dict[str, Any]]], budget: Budget,
        available: set[str]) -> None:
    """Each action the round offers, written at its longest with llama.cpp's widest
    whitespace wherever its grammar puts a ``space``, is valid and fits ``max_tokens``
    (a token is at least one byte)."""
    decoding = narrow(CATALOG, available, _observe(history), budget)
    for branch in decoding.schema["oneOf"]:
        text = _longest_text(branch)
        assert Draft202012Validator(_unpatterned(branch)).is_valid(json.loads(text)), text[:200]
        assert len(text.encode("utf-8")) <= decoding.max_tokens, branch


@pytest.mark.req("PR-06")
@given(outcomes=st.lists(st.sampled_from(["ok", "refused", "failed", "not a mapping"]),
                         min_size=1, max_size=8),
       conclude_after=st.integers(1, 8))
def test_every_answered_call_counts_toward_the_budget_rule_whatever_its_outcome(
        outcomes: list[str], conclude_after: int) -> None:
    """The budget rule counts calls made, not calls that succeeded: a turn whose calls are
    refused or fail concludes after ``conclude_after`` of them like any other."""
    results = {"ok": {"trust": "UNTRUSTED_DATA", "tool_id": "files.list", "ok": True,
                      "data": {"entries": []}},
               "refused": {"trust": "UNTRUSTED_DATA", "tool_id": "files.list", "ok": False,
                           "error": {"code": "POLICY_DENIED", "message": "no"}},
               "failed": {"trust": "UNTRUSTED_DATA", "tool_id": "files.list", "ok": False,
                          "error": {"code": "FILE_NOT_FOUND", "message": "gone"}},
               "not a mapping": {"trust": "UNTRUSTED_DATA", "tool_id": "files.list",
                                 "ok": True, "data": ["a", "list"]}}
    seen = Observations(progress=1, query="What do the notes say?")
    for number, outcome in enumerate(outcomes):
        seen = seen.observe("files.list", {"path": f"notes/{number}"}, results[outcome])
    assert seen.tool_calls == len(outcomes)
    decoding = narrow(CATALOG, CATALOG, seen, Budget(round=2, max_rounds=16, max_tool_calls=64,
                                                      conclude_after=conclude_after))
    assert decoding.concluding == (len(outcomes) >= conclude_after)
