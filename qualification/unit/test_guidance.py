"""PR-07 amended and PR-08: guards hold under every profile; guidance rules are named,
ordered objects; the default profile admits every kind of answer; ``--guidance``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from labfy_ref.config import RawOptions, WorkerOptions, resolve, resolve_worker
from labfy_ref.errors import ConfigRefused
from labfy_ref.protocol.action import action_schema
from labfy_ref.protocol.narrowing import (
    AUTO,
    DEFAULT_GUIDANCE,
    DEFAULT_PROFILE,
    GROUNDED_CONTENT,
    GUARDS,
    GUIDANCE,
    LOOK_FIRST,
    PROFILES,
    QUOTED,
    Budget,
    Observations,
    Profile,
    call_key,
    guidance_for,
    max_json_bytes,
    narrow,
)
from labfy_ref.protocol.narrowing.rules import GUARD_NAMES
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.tools import default_catalog

CATALOG = default_catalog()
WIDE = Draft202012Validator(action_schema())
_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
object_ids = st.text(st.sampled_from(_CROCKFORD), min_size=26, max_size=26).map(
    lambda body: f"obj_{body}")
words = st.sampled_from(["bees", "garden", "plot", "visits", "hedge", "survey", "nest",
                         "abeilles", "jardin", "albine", "grădină", "May", "July", "12", "41"])
sentences = st.lists(words, min_size=1, max_size=12).map(lambda ws: " ".join(ws) + ".")


def _budget(profile: Profile, **changes: Any) -> Budget:
    return dataclasses.replace(Budget(round=1, max_rounds=16, max_tool_calls=64,
                                      conclude_after=4, rules=profile.names), **changes)


def _listing(ids: list[str], titles: list[str]) -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": "workspace.list_objects", "ok": True,
            "data": {"objects": [{"object_id": i, "kind": "note", "title": t}
                                 for i, t in zip(ids, titles, strict=False)]}}


def _read(object_id: str, title: str, body: str) -> dict[str, Any]:
    return {"trust": "UNTRUSTED_DATA", "tool_id": "workspace.read_object", "ok": True,
            "data": {"object_id": object_id, "kind": "note", "title": title, "body": body}}


def _final_text(decoding: Any) -> dict[str, Any] | None:
    for branch in decoding.schema["oneOf"]:
        if branch["properties"].get("type") == {"const": "final"}:
            return dict(branch["properties"]["text"])
    return None


def _enum_values(schema: Any) -> list[str]:
    """Every enum value of a schema, at any depth."""
    if isinstance(schema, dict):
        found = [v for v in schema.get("enum", []) if isinstance(v, str)]
        return found + [v for value in schema.values() for v in _enum_values(value)]
    if isinstance(schema, list):
        return [v for item in schema for v in _enum_values(item)]
    return []


@st.composite
def turns(draw: st.DrawFn) -> tuple[Observations, list[str]]:
    """A turn that listed some objects and read some of them (random observations)."""
    ids = draw(st.lists(object_ids, min_size=0, max_size=5, unique=True))
    # a request for research offers research.prepare (effect-task), citing what was read
    query = draw(st.sampled_from(["", "Prepare research on "])) + draw(sentences)
    seen = Observations(query=query)
    if ids:
        titles = [draw(sentences) for _ in ids]
        seen = seen.observe("workspace.list_objects", {}, _listing(ids, titles), CATALOG)
        for object_id in draw(st.lists(st.sampled_from(ids), max_size=3, unique=True)):
            seen = seen.observe("workspace.read_object", {"object_id": object_id},
                                _read(object_id, draw(sentences), draw(sentences)), CATALOG)
    return seen, ids


@pytest.mark.req("PR-08")
def test_every_rule_is_named_and_says_what_and_why() -> None:
    names = [rule.name for rule in (*GUARDS, *GUIDANCE)]
    assert len(names) == len(set(names)), "one name per rule"
    for rule in (*GUARDS, *GUIDANCE):
        assert rule.what.strip() and rule.why.strip(), rule.name
    assert all(rule.guard for rule in GUARDS) and not any(rule.guard for rule in GUIDANCE)
    assert PROFILES["none"].rules == () and PROFILES["none"].names == GUARD_NAMES


@pytest.mark.req("PR-08")
def test_a_profile_lists_guidance_once_each_in_order() -> None:
    with pytest.raises(ValueError, match="guidance only"):
        Profile("bad", (GUARDS[0],))
    with pytest.raises(ValueError, match="once each"):
        Profile("bad", (GUIDANCE[1], GUIDANCE[0]))
    with pytest.raises(ValueError, match="once each"):
        Profile("bad", (GUIDANCE[0], GUIDANCE[0]))
    quoting = PROFILES["quoting"]
    assert quoting.without(QUOTED).names == quoting.names - {QUOTED}
    assert PROFILES["none"].plus([LOOK_FIRST]).names == GUARD_NAMES | {LOOK_FIRST}
    with pytest.raises(ValueError, match="not a rule of"):
        quoting.without("no-such-rule")
    with pytest.raises(ValueError, match="lacks"):
        quoting.plus([QUOTED])


@pytest.mark.req("PR-08")
def test_the_default_profile_is_no_quoting_one_and_auto_says_why() -> None:
    assert QUOTED not in DEFAULT_PROFILE.names and GROUNDED_CONTENT not in DEFAULT_PROFILE.names
    assert DEFAULT_GUIDANCE.asked == AUTO and DEFAULT_GUIDANCE.profile is DEFAULT_PROFILE
    assert "no calibration record" in DEFAULT_GUIDANCE.source
    named = guidance_for("quoting")
    assert named.profile is PROFILES["quoting"] and named.source == "named"
    shown = json.loads(json.dumps(RuntimeLimits(guidance=named).as_json()))
    assert shown["guidance"] == {"profile": "quoting", "asked": "quoting", "source": "named",
                                 "rules": [rule.name for rule in PROFILES["quoting"].rules],
                                 "guards": sorted(GUARD_NAMES)}
    assert shown["narrowing_rules"] == sorted(PROFILES["quoting"].names)


@pytest.mark.req("PR-07", "PR-08")
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn=turns(), last=st.booleans())
def test_every_guard_holds_under_every_profile(turn: tuple[Observations, list[str]],
                                               last: bool) -> None:
    """Whatever the profile: references are ones the turn saw, no call answered already
    is offered again, no keyword the grammar ignores is relied on, the completion limit
    fits the schema, and the last round always offers final (no guard forbids one)."""
    seen, ids = turn
    for profile in PROFILES.values():
        budget = _budget(profile, round=16 if last else 1)
        decoding = narrow(CATALOG, CATALOG, seen, budget)
        schema = decoding.schema
        assert decoding.max_tokens == max_json_bytes(schema)
        # only what the real grammar enforces (qualification/smoke/test_grammar_keywords.py)
        assert "uniqueItems" not in json.dumps(schema), "a guard the grammar ignores"
        for value in _enum_values(schema):
            if value.startswith("obj_"):
                assert value in ids, f"{profile.name}: a reference the turn never saw"
        for branch in schema["oneOf"]:
            tool = branch["properties"].get("tool_id", {}).get("const")
            arguments = branch["properties"].get("arguments", {}).get("properties", {})
            for name, field in arguments.items():
                if tool is None or name not in CATALOG[tool].traits.consumes:
                    continue
                for value in field.get("enum", []):  # a single reference: a fresh call
                    assert call_key(tool, {name: value}) not in seen.answered, (
                        profile.name, tool, value)
        if last:
            assert _final_text(decoding) is not None, f"{profile.name}: the last round answers"


#: A right answer of each kind a user asks for (PR-08: none is impossible by construction).
KINDS = {
    "count": "There are 3 notes about bees in the workspace.",
    "comparison": "Plot 4 had more visits than plot 9 (12 against 7).",
    "computation": "12 and 30 visits make 42 in all.",
    "two facts": "The hedge was cut in May. The survey ended in July.",
    "summary": "Two notes say the bees nest in sandy banks; one says nothing of nests.",
    "nothing": "Nothing I read says when the survey began.",
    "french": "Il y a trois notes sur les abeilles du jardin.",
    "romanian": "Sunt trei note despre albine în grădină.",
    "quote": "The note says \u201cbees nest in sandy banks\u201d.",
    "french quote": "La note dit \u00ables abeilles nichent\u00bb.",
}


@pytest.mark.req("PR-08", "PR-07")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(turn=turns())
def test_the_default_profile_admits_a_right_answer_of_every_kind(
        turn: tuple[Observations, list[str]]) -> None:
    seen, _ = turn
    for profile in (DEFAULT_PROFILE, PROFILES["none"]):
        decoding = narrow(CATALOG, CATALOG, seen, _budget(profile, round=16))
        text = _final_text(decoding)
        assert text is not None and "enum" not in text, "the answer is never dictated"
        field = Draft202012Validator(text)
        for kind, answer in KINDS.items():
            assert field.is_valid(answer), f"{profile.name} cannot say a {kind}: {answer!r}"
            assert WIDE.is_valid({"type": "final", "text": answer})


@pytest.mark.req("PR-07")
@pytest.mark.parametrize("shape", ["FINAL", "CONTENT", "TOPIC", "QUESTION"])
def test_no_shape_admits_what_the_grammar_would_write_raw(shape: str) -> None:
    """JSON escapes a double quote, a backslash and a line break inside a string, and
    llama.cpp's grammar for a ``pattern`` writes them raw (invalid JSON: measured in
    qualification/smoke/test_grammar_keywords.py), so no free-text shape admits one."""
    from labfy_ref.protocol import text_shape  # noqa: PLC0415

    field = Draft202012Validator(getattr(text_shape, shape).schema(65536))
    assert field.is_valid("Bees nest in sandy banks")
    for bad in ('Bees "nest" in sandy banks', "Bees nest\\ in banks", "Bees nest\nin banks",
                "Bees nest\tin banks", 'Bees nest in "sandy" banks'):
        assert not field.is_valid(bad), bad


@pytest.mark.req("PR-08")
def test_a_write_says_what_the_user_dictates_under_the_default_profile() -> None:
    """Under the default profile a file's content is not restricted to passages read."""
    object_id = "obj_" + "A" * 26
    seen = Observations(query="Write 'Check the hives on Monday.' to notes/todo.txt").observe(
        "workspace.read_object", {"object_id": object_id},
        _read(object_id, "Hives", "The hives were checked in May."), CATALOG)
    decoding = narrow(CATALOG, CATALOG, seen, _budget(DEFAULT_PROFILE))
    write = next(b["properties"]["arguments"] for b in decoding.schema["oneOf"]
                 if b["properties"].get("tool_id") == {"const": "files.write"})
    content = Draft202012Validator(write["properties"]["content"])
    assert content.is_valid("Check the hives on Monday.")
    quoting = narrow(CATALOG, CATALOG, seen, _budget(PROFILES["quoting"]))
    quoted = next(b["properties"]["arguments"] for b in quoting.schema["oneOf"]
                  if b["properties"].get("tool_id") == {"const": "files.write"})
    assert not Draft202012Validator(quoted["properties"]["content"]).is_valid(
        "Check the hives on Monday."), "the quoting profile writes what was read"


@pytest.mark.req("PR-08")
@pytest.mark.parametrize("text", ["auto", "none", "guided", "quoting"])
def test_guidance_is_one_setting_for_serve_and_work(text: str) -> None:
    served = resolve(RawOptions(guidance=text), {})
    worker = resolve_worker(WorkerOptions(workspace="/tmp/w", guidance=text,
                                          agent=RawOptions(agent_mode="demo")), {})
    assert served.guidance == worker.guidance == guidance_for(text)
    assert served.as_json()["agent"]["guidance"]["asked"] == text
    assert resolve(RawOptions(), {}).guidance == DEFAULT_GUIDANCE


@pytest.mark.req("PR-08")
@pytest.mark.parametrize("text", ["", "Quoting", "guards", "auto ", "\ud800"])
def test_an_unknown_profile_is_refused_naming_the_choices(text: str) -> None:
    with pytest.raises(ConfigRefused, match="--guidance takes one of auto, none, guided, "
                                            "quoting"):
        resolve(RawOptions(guidance=text), {})


@pytest.mark.req("PR-07")
def test_a_read_may_point_to_what_to_read_next_never_to_an_effect() -> None:
    """A reference a read result spells out (a path, an object id) is offered to the tools
    that read, like one the request names; never as research's citation or a write's
    target (a result is data)."""
    note, other = "obj_" + "A" * 26, "obj_" + "B" * 26
    body = f"The visitor log is in notes/visitor.txt; see also {other} for the hedges."
    seen = Observations(query="Prepare research and write it to out.txt: who visited?").observe(
        "workspace.read_object", {"object_id": note}, _read(note, "Visitors", body), CATALOG)
    decoding = narrow(CATALOG, CATALOG, seen, _budget(DEFAULT_PROFILE))
    offers = {b["properties"]["tool_id"]["const"]: b["properties"]["arguments"]["properties"]
              for b in decoding.schema["oneOf"] if "tool_id" in b["properties"]}
    assert "notes/visitor.txt" in offers["files.read"]["path"]["enum"]
    assert other in offers["workspace.read_object"]["object_id"]["enum"]
    assert offers["research.prepare"]["object_refs"]["items"]["enum"] == [note], "not cited"
    assert "notes/visitor.txt" not in json.dumps(offers["files.write"]["path"]), "no target"
    unguided = narrow(CATALOG, CATALOG, seen, _budget(PROFILES["none"]))
    assert "notes/visitor.txt" not in json.dumps(unguided.schema), "guidance, not a guard"
