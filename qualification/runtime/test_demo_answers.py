"""RT-07, RT-10: the demo agent answers the question asked, by its documented rule.

It is a demo_client, not a model: every answer says so; it reads the objects whose
words overlap the question most and quotes them, lists the workspace when
nothing matches, and prepares research (a human grant first) only when the
question asks to look something up or check it. The same rule holds on any
workspace: the second half of the tests makes its own objects.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from labfy_ref.model.demo import (
    QUOTE_CHARS,
    SAYS,
    DemoAgent,
    asks_research,
    overlap,
    question_words,
)
from labfy_ref.protocol import TOOL_RESULT_PREFIX
from labfy_ref.workspace import init_workspace, open_workspace
from qualification.harness import TERMINAL, ApiClient, LiveServer

PAUSED = {"AUTHORIZATION_REQUIRED"}


def _ask(client: ApiClient, question: str, states: set[str] = TERMINAL) -> dict[str, Any]:
    turn = client.start_turn(question)
    return client.wait_state(str(turn["id"]), states | TERMINAL)


def _titles(turn: dict[str, Any]) -> list[str]:
    """The titles of the objects the turn read, in order."""
    return [str(call["result"]["data"]["title"]) for call in turn["tool_calls"]
            if call["tool_id"] == "workspace.read_object" and call["result"]["ok"]]


@pytest.mark.req("RT-07", "RT-10")
@pytest.mark.parametrize(("question", "title", "quoted"), [
    ("Which bees visit lavender?", "Garden 4, 14 June", "Sixty-two visits to lavender"),
    ("How many bee species have been recorded so far?", "Species list size",
     "Forty-one bee species have been recorded so far"),
    ("What happened in garden 9 after the hedge was cut?", "Garden 9, 21 June",
     "No bees during the walk after the hedge was cut back"),
    ("Tell me about the nest boxes.", "Nest boxes, 12 July", "reed nest boxes sealed with mud"),
    ("Where is the study area?", "Study area", "twelve community gardens"),
    ("How is each survey walk timed?", "Survey protocol", "20-minute timed walk"),
])
def test_a_question_is_answered_by_quoting_the_objects_that_match_it(
        demo_client: ApiClient, question: str, title: str, quoted: str) -> None:
    done = _ask(demo_client, question)
    assert done["state"] == "COMPLETED", done
    text = str(done["final_text"])
    assert text.startswith(SAYS), "the demo says it is no model"
    assert title in _titles(done), "it read the object that matches"
    assert f"\u201c{title}\u201d" in text and quoted in text, text
    assert not any(c["tool_id"].startswith("research.") for c in done["tool_calls"])


@pytest.mark.req("RT-07", "RT-10")
@pytest.mark.parametrize("question", ["hi", "What is in this workspace?", "xyzzy plugh"])
def test_a_question_nothing_matches_gets_what_the_workspace_holds(
        demo_client: ApiClient, question: str) -> None:
    done = _ask(demo_client, question)
    assert done["state"] == "COMPLETED", done
    text = str(done["final_text"])
    assert text.startswith(SAYS)
    assert "This workspace holds \u201cStudy area\u201d (fact)" in text or "holds \u201c" in text
    assert [c["tool_id"] for c in done["tool_calls"]][-1] == "workspace.list_objects"
    assert not _titles(done), "nothing matched: nothing is read or quoted as an answer"


@pytest.mark.req("RT-08", "RT-10")
@pytest.mark.parametrize(("question", "title"), [
    ("Check whether the early ivy bee record is real.", "Open question: early ivy bees"),
    ("Can you look up the regional bee atlas?", "Regional bee atlas (2019)"),
    ("Please verify the hedge cutting question.", "Open question: hedge cutting"),
    ("Research something for me", None),
])
def test_a_request_to_check_prepares_research_and_waits_for_the_grant(
        demo_client: ApiClient, question: str, title: str | None) -> None:
    paused = _ask(demo_client, question, PAUSED)
    assert paused["state"] == "AUTHORIZATION_REQUIRED", paused
    calls = paused["tool_calls"]
    assert calls[-1]["tool_id"] == "research.prepare"
    prepared = calls[-1]["arguments"]
    assert prepared["questions"] == [question]
    if title is not None:
        assert _titles(paused) == [title], "the best match only"
        assert prepared["topic"] == title
    else:  # nothing matched: a note, as a reader would start
        assert len(_titles(paused)) == 1
    campaign = paused["authorization"]["campaign_id"]
    assert demo_client.grant(campaign).status_code == 201
    assert demo_client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume").status_code == 202
    done = demo_client.wait_state(str(paused["id"]), TERMINAL)
    assert done["state"] == "COMPLETED", done
    text = str(done["final_text"])
    assert text.startswith(SAYS + "the research found: \u201c"), "what the evidence says"
    evidence = done["tool_calls"][-1]["result"]["data"]["evidence"]
    assert evidence and str(evidence[0]["excerpt"])[:60] in text, text
    assert f"campaign {campaign} is COMPLETED" in text


@pytest.mark.req("RT-07", "RT-10")
def test_a_pasted_object_id_is_read_and_answered_from(demo_client: ApiClient) -> None:
    """The page's *Insert* puts an object id into the message: the demo reads that object
    first and quotes it, never refuses (the narrowing offers only its read then)."""
    objects = demo_client.get("/api/v1/objects").json()["objects"]
    nest = next(o for o in objects if o["title"] == "Nest boxes, 12 July")
    done = _ask(demo_client, f"Summarise\nthe notes about {nest['object_id']} ")
    assert done["state"] == "COMPLETED", done
    assert done["tool_calls"][0]["tool_id"] == "workspace.read_object"
    assert done["tool_calls"][0]["arguments"] == {"object_id": nest["object_id"]}
    text = str(done["final_text"])
    assert "\u201cNest boxes, 12 July\u201d" in text and "not offered" not in text, text


@pytest.mark.req("RT-10")
def test_the_rule_holds_on_objects_it_has_never_seen(tmp_path: Path) -> None:
    """A workspace of other objects: the rule, not the SPECIMEN, picks what is read."""
    path = tmp_path / "ws"
    init_workspace(path, specimen=False)
    store = open_workspace(path).open_store()
    try:
        for kind, title, body in (
                ("note", "Kettle descaling", "Boil vinegar and water. Rinse twice."),
                ("fact", "Oven temperatures", "Bread bakes at 230 degrees for 35 minutes."),
                ("fact", "Freezer inventory", "Two loaves of rye bread, one bag of peas.")):
            store.add_object(kind, title, body)
    finally:
        store.close()
    server = LiveServer(path).start()
    try:
        client = server.client()
        done = _ask(client, "How long does bread bake?")
        assert _titles(done)[0] in {"Oven temperatures", "Freezer inventory"}
        assert "Bread bakes at 230 degrees" in done["final_text"], done["final_text"]
        assert "Kettle" not in done["final_text"]
    finally:
        server.stop()


@pytest.mark.req("RT-07", "RT-10")
def test_the_words_rule_as_documented() -> None:
    assert question_words("Which BEES visit the lavender, the Lavender?") == (
        "bee", "visit", "lavender")
    assert question_words("field notes, glass cases") == ("field", "note", "glass", "case")
    assert question_words("is it ok? grass 42 a") == ("grass", "42")
    assert asks_research("please look it up") and asks_research("Find out when")
    assert asks_research("CHECK this") and not asks_research("a checklist of looks")
    assert overlap(("bee", "lavender"), "Bees on lavenders") == 2
    assert overlap(("bee",), "a beetle") == 1  # a prefix: documented, not hidden


@pytest.mark.req("RT-07", "RT-10")
@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
@example("x" * 150 + " bees")  # a word past the search's bound
def test_any_question_gets_one_valid_first_action(question: str) -> None:
    """Whatever is asked (lone surrogates, controls, any script), the first action is a
    listing whose search text is within the catalog's bound."""
    action = DemoAgent().decide([{"role": "user", "content": question}])
    parsed = json.loads(action)
    assert parsed["tool_id"] == "workspace.list_objects"
    assert len(parsed["arguments"].get("match", "x")) <= 100


def _conversation(question: str, *rounds: tuple[str, dict[str, Any], bool, dict[str, Any]]
                  ) -> list[dict[str, Any]]:
    """The messages a turn holds after ``rounds`` of (tool, arguments, ok, data): each call
    as the assistant said it, each result as the loop wraps it."""
    messages = [{"role": "user", "content": question}]
    for tool_id, arguments, ok, data in rounds:
        messages.append({"role": "assistant", "content": json.dumps(
            {"type": "tool_call", "tool_id": tool_id, "arguments": arguments})})
        messages.append({"role": "user", "content": TOOL_RESULT_PREFIX + json.dumps(
            {"tool_id": tool_id, "ok": ok, "data": data})})
    return messages


def _final_text(action: str) -> str:
    parsed = json.loads(action)
    assert parsed["type"] == "final" and parsed["text"].startswith(SAYS), parsed
    return str(parsed["text"][len(SAYS):])


def _object(number: int, title: str, kind: str = "fact") -> dict[str, Any]:
    return {"object_id": f"obj_{number}", "kind": kind, "title": title}


@pytest.mark.req("RT-07")
def test_a_failed_tool_is_named_in_the_stop_cut_at_64_characters() -> None:
    tool = "t" * 64 + "EXTRA"
    messages = _conversation("Which bees?", (tool, {}, False, {"error": {
        "code": "C" * 64 + "ODE", "message": "no"}}))
    assert _final_text(DemoAgent().decide(messages)) == (
        f"I stopped: {'t' * 64} failed with {'C' * 64}.")


@pytest.mark.req("RT-07")
@pytest.mark.parametrize(("count", "more"), [(5, ""), (6, " and 1 more"), (9, " and 4 more")])
def test_the_overview_names_five_objects_and_counts_the_rest(count: int, more: str) -> None:
    objects = [_object(n, f"Title {n}") for n in range(count)]
    messages = _conversation("xyzzy", ("workspace.list_objects", {"match": "xyzzy"}, True,
                                       {"objects": []}),
                             ("workspace.list_objects", {}, True, {"objects": objects}))
    text = _final_text(DemoAgent().decide(messages))
    shown = ", ".join(f"\u201cTitle {n}\u201d (fact)" for n in range(5))
    assert f"This workspace holds {shown}{more}; ask about one" in text, text


@pytest.mark.req("RT-07", "RT-10")
@pytest.mark.parametrize("length", [QUOTE_CHARS - 1, QUOTE_CHARS, QUOTE_CHARS + 1])
def test_a_quoted_sentence_is_whole_up_to_its_bound_then_cut(length: int) -> None:
    sentence = ("Bees " + "b" * length)[:length - 1] + "."
    body = f"Unrelated words here. {sentence}"
    messages = _conversation(
        "bees", ("workspace.list_objects", {"match": "bee"}, True,
                 {"objects": [_object(1, "Bees")]}),
        ("workspace.read_object", {"object_id": "obj_1"}, True,
         {"object_id": "obj_1", "title": "Bees", "body": body}))
    text = _final_text(DemoAgent().decide(messages))
    quoted = sentence if length <= QUOTE_CHARS else sentence[:QUOTE_CHARS - 1] + "\u2026"
    assert text.endswith(f"says: \u201c{quoted}\u201d"), text


@pytest.mark.req("RT-07", "RT-10")
def test_a_check_where_research_is_not_offered_quotes_and_says_so() -> None:
    """Asked to check something where research is not on offer (a read-only round), the
    demo answers from what it read and says research is not offered, never an error."""
    messages = _conversation(
        "Check the bees", ("workspace.list_objects", {"match": "bee"}, True,
                           {"objects": [_object(1, "Bees")]}),
        ("workspace.read_object", {"object_id": "obj_1"}, True,
         {"object_id": "obj_1", "title": "Bees", "body": "Bees were counted."}))
    offered = frozenset({"workspace.list_objects", "workspace.read_object"})
    assert _final_text(DemoAgent().decide(messages, offered)) == (
        "the object whose words best match your question: \u201cBees\u201d (obj_1) says: "
        "\u201cBees were counted.\u201d Research is not offered here.")
