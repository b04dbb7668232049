"""PR-09 end to end: a final's checked facts in the turn record, the NDJSON ``facts`` chunk
before ``done``, and the OpenAI face's ``labfy_facts`` — the answer text never rewritten."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Scenario
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import TERMINAL, TurnReader, bearer_client, object_id

#: Said of the object read, in words; a count; a number the user said; one nobody said.
ANSWER = ("Sixty-two visits were counted, and the user asked about 12 gardens; "
          "the count reached 9731 in 1875.")


def _replies(garden: str) -> list[str]:
    read = {"type": "tool_call", "tool_id": "workspace.read_object",
            "arguments": {"object_id": garden}}
    return [json.dumps(read), json.dumps({"type": "final", "text": ANSWER})]


def _by_text(facts: list[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    return {fact["text"]: (fact["status"], fact["where"]) for fact in facts}


@pytest.mark.req("PR-09", "RT-01")
def test_a_turns_record_holds_its_final_facts_and_the_text_as_said(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    garden = object_id(specimen, "Garden 4, 14 June")
    provider = provider_factory(Scenario.replies(*_replies(garden)))
    client = server_factory(specimen, **local_agent(provider.base_url)).client()
    done = client.wait_state(client.start_turn("How many visits, about 12 gardens?")["id"],
                             TERMINAL)
    assert done["state"] == "COMPLETED" and done["final_text"] == ANSWER, "never rewritten"
    facts = _by_text(done["facts"])
    read_call = done["tool_calls"][0]["call_id"]
    assert facts["Sixty-two"] == ("found", read_call), "a number word found in the read"
    assert facts["12"] == ("found", "said"), "what the user said counts"
    assert facts["9731"] == ("not_found", None)
    assert all(fact["text"] in ANSWER for fact in done["facts"])


@pytest.mark.req("PR-09", "BR-02")
def test_the_bridge_streams_the_facts_after_the_text_and_before_done(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    garden = object_id(specimen, "Garden 4, 14 June")
    provider = provider_factory(Scenario.replies(*_replies(garden)))
    client = server_factory(specimen, bridge=True, **local_agent(provider.base_url)).client()
    created = client.post("/api/cordis/sessions", {})
    assert created.status_code == 201, created.text
    reader = TurnReader(client, created.json()["session"]["id"],
                        "How many visits, about 12 gardens?")
    chunks = reader.join()
    types = [chunk["type"] for chunk in chunks]
    assert types[-2:] == ["facts", "done"] and types.index("text") < types.index("facts")
    facts = _by_text(chunks[-2]["facts"])
    assert facts["Sixty-two"][0] == "found" and facts["9731"] == ("not_found", None)
    assert "".join(c["text"] for c in chunks if c["type"] == "text") == ANSWER


@pytest.mark.req("PR-09")
@pytest.mark.parametrize("stream", [False, True])
def test_the_openai_face_carries_labfy_facts(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
        stream: bool) -> None:
    garden = object_id(specimen, "Garden 4, 14 June")
    provider = provider_factory(Scenario.replies(*_replies(garden)))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    with bearer_client(server) as client:
        engine = client.get("/api/cordis/v1/models").json()["data"][0]["id"]
        answer = client.post("/api/cordis/v1/chat/completions", json={
            "model": engine, "stream": stream,
            "messages": [{"role": "user", "content": "How many visits, about 12 gardens?"}]})
    assert answer.status_code == 200, answer.text
    if stream:
        events = [json.loads(line[len("data: "):]) for line in answer.text.splitlines()
                  if line.startswith("data: {")]
        finish = next(e for e in events if e["choices"] and e["choices"][0]["finish_reason"])
        facts, text = finish["labfy_facts"], "".join(
            e["choices"][0]["delta"].get("content", "") for e in events if e["choices"])
    else:
        document = answer.json()
        facts, text = document["labfy_facts"], document["choices"][0]["message"]["content"]
    assert text == ANSWER
    assert _by_text(facts)["9731"] == ("not_found", None)
    assert _by_text(facts)["Sixty-two"][0] == "found"


@pytest.mark.req("PR-09")
def test_a_facts_check_past_its_deadline_leaves_no_facts_and_says_so(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The check runs off the event loop with a deadline: a loop never waits on it."""
    import asyncio  # noqa: PLC0415
    import time  # noqa: PLC0415

    from labfy_ref.runtime import driver  # noqa: PLC0415

    conversation = driver.Conversation.start([{"role": "user", "content": "How many?"}])

    def slow(*_: Any) -> tuple[Any, ...]:
        time.sleep(0.5)
        return ()

    monkeypatch.setattr(type(conversation.sources), "check", slow)
    monkeypatch.setattr(driver, "FACTS_SECONDS", 0.05)

    async def checked() -> tuple[tuple[dict[str, Any], ...], int]:
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        ticker = asyncio.ensure_future(tick())
        facts = await driver._facts(conversation, "Twelve.")
        ticker.cancel()
        return facts, ticks

    with caplog.at_level("WARNING", logger="labfy_ref.runtime"):
        facts, ticks = asyncio.run(checked())
    assert facts == () and ticks >= 2, "the loop kept running while the check ran"
    assert "deadline" in caplog.text
