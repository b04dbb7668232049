"""BR-22, UI-05: what a session's model is told besides its messages is shown, as text.

Seed 003: "system prompts and injected context stay in Session context, closed by default,
not as user messages". ``GET /api/cordis/sessions/<id>/context`` answers the engine's system
prompt — the very text the model receives first — and the session's injected context.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_provider import Answer, Scenario
from qualification.conftest import ProviderFactory, ServerFactory, local_agent

FINAL = json.dumps({"type": "final", "text": "noted"})


@pytest.mark.req("BR-22", "UI-05", "PR-08")
def test_the_context_is_the_prompt_the_model_receives_and_nothing_is_injected(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("once", (Answer(content=FINAL),)))
    client = server_factory(specimen, bridge=True, **local_agent(provider.base_url)).client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    answer = client.get(f"/api/cordis/sessions/{session_id}/context")
    assert answer.status_code == 200, answer.text
    context = answer.json()["context"]
    assert set(context) == {"system_prompt", "injected", "guidance"}
    assert context["injected"] == []
    assert context["guidance"]["profile"] == "guided", "the profile in force (PR-08)"
    assert client.post(f"/api/cordis/sessions/{session_id}/messages",
                       {"text": "hello"}).status_code == 200
    [request] = provider.chat_requests()
    first = request.json()["messages"][0]
    assert (first["role"], first["content"]) == ("system", context["system_prompt"])
    messages = client.get(f"/api/cordis/sessions/{session_id}").json()["session"]["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"], "never a user message"
    assert context["system_prompt"] not in json.dumps(messages)


@pytest.mark.req("BR-22", "BR-04")
def test_the_context_of_an_unknown_session_is_not_found(
        specimen: Path, server_factory: ServerFactory) -> None:
    client = server_factory(specimen, bridge=True).client()
    for sid in ("ses_01M90000000000000000000000", "../x", "ses_" + "a" * 500):
        answer = client.get(f"/api/cordis/sessions/{sid}/context")
        assert answer.status_code in (404, 422), answer.text
        assert answer.json()["error"]["code"] in (
            "SESSION_NOT_FOUND", "VALIDATION_FAILED", "NOT_FOUND"), answer.text
