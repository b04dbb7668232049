"""BR-13: the engine in any chat client — the official ``openai`` client against the engine.

Every test runs the real server with the bridge on, a scripted fake provider
behind it, and talks to ``/api/cordis/v1`` as a chat client does: the ``openai``
SDK with the login code as its API key (a bearer, SV-08), or plain HTTP where
the SDK cannot say what is tested (a disconnect, raw bytes). What the engine
told the model is read from what the fake provider received.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_provider import Answer, FakeProvider, Scenario
from labfy_ref.bridge.engine import MAX_MESSAGE_CHARS
from labfy_ref.errors import LabfyError
from labfy_ref.protocol import canonical
from labfy_ref.server.auth import token_hash
from labfy_ref.server.openai_routes import IGNORED_FIELDS
from labfy_ref.workspace import init_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.docs.pages import block
from qualification.harness import (
    LAUNCH_CODE,
    LiveServer,
    bearer_client,
    reference_engine,
    session_files,
    wait_until,
)
from qualification.server.test_boundaries import bound_rows

MODEL = "engine:local:fake-model"
FINAL_TEXT = "Lavender drew 62 visits — the busiest garden. « ünïcödé » 𝄞 \u2028 end."


def _final(text: str) -> str:
    return json.dumps({"type": "final", "text": text})


def _call(tool_id: str, **arguments: Any) -> str:
    return json.dumps({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})


FaceFactory = Callable[..., tuple[LiveServer, FakeProvider, openai.OpenAI]]


def official_client(server: LiveServer, key: str = LAUNCH_CODE) -> openai.OpenAI:
    """The official client pointed at the engine, ``key`` its API key (a bearer, SV-08)."""
    return openai.OpenAI(base_url=f"{server.url}/api/cordis/v1", api_key=key, max_retries=0,
                         timeout=30)


@pytest.fixture
def face(specimen: Path, provider_factory: ProviderFactory,
         server_factory: ServerFactory) -> Iterator[FaceFactory]:
    """Start a server with the bridge on, its fake provider, and an official client."""
    clients: list[openai.OpenAI] = []

    def start(scenario: Scenario, **options: Any) -> tuple[LiveServer, FakeProvider,
                                                           openai.OpenAI]:
        provider = provider_factory(scenario)
        server = server_factory(specimen, bridge=True, **local_agent(provider.base_url),
                                **options)
        clients.append(official_client(server))
        return server, provider, clients[-1]

    yield start
    for client in clients:
        client.close()


def _no_trace(server: LiveServer, workspace: Path) -> None:
    """No transient session is held, listed, counted or stored once its turn ended."""
    engine = reference_engine(server)
    wait_until(lambda: engine.retained_turns == 0)
    with bearer_client(server) as http:
        listed = http.get("/api/cordis/sessions")
    assert listed.status_code == 200, listed.text
    assert listed.json() == {"sessions": [], "next_cursor": None}
    assert engine.status()["sessions"] == 0
    assert engine.list_agents()[0]["running_sessions"] == []
    assert session_files(workspace) == []


def _ledger(server: LiveServer) -> list[dict[str, Any]]:
    """The usage ledger's records, newest first (BR-14: every model call, cancelled too)."""
    with bearer_client(server) as http:
        records: list[dict[str, Any]] = http.get("/api/cordis/usage").json()["usage"]
    return records


def _sent(provider: FakeProvider, number: int = -1) -> list[dict[str, Any]]:
    """The messages of one chat request the provider received."""
    messages: list[dict[str, Any]] = provider.chat_requests()[number].json()["messages"]
    return messages


def _total(reported: list[dict[str, Any] | None]) -> dict[str, Any]:
    """What the provider reported for a turn's calls, summed as OpenAI's usage reads."""
    calls = [usage for usage in reported if usage is not None]
    prompt = sum(usage["prompt_tokens"] for usage in calls)
    completion = sum(usage["completion_tokens"] for usage in calls)
    cached = sum(usage["prompt_tokens_details"]["cached_tokens"] for usage in calls)
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion, "cached_tokens": cached}


def _usage(usage: Any) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.total_tokens,
            "cached_tokens": usage.prompt_tokens_details.cached_tokens}


@pytest.mark.req("BR-13", "BR-10", "SV-08")
def test_the_official_client_lists_the_engine_routes_as_models(
        face: FaceFactory) -> None:
    _, _, client = face(Scenario(name="models", answers=(), models=("fake-model", "a b/c")))
    listed = client.models.list()
    assert [(m.id, m.object, m.owned_by, m.created) for m in listed.data] == [
        (MODEL, "model", "local", 0), ("engine:local:a%20b%2Fc", "model", "local", 0),
        ("direct:local:fake-model", "model", "local", 0),
        ("direct:local:a%20b%2Fc", "model", "local", 0)]


@pytest.mark.req("BR-13", "BR-06", "SV-08")
def test_the_official_client_streams_a_completion_and_no_trace_is_left(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, client = face(Scenario(name="stream", when_exhausted="repeat_last",
                                             answers=(Answer(content=_final(FINAL_TEXT),
                                                             reasoning="Counting the visits.",
                                                             chunk_chars=5),)))
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "How busy was garden 4?"}],
        stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    text = [d.content for d in deltas if d.content]
    assert len(text) > 3, "the answer arrives in pieces while the model decodes"
    assert "".join(text) == FINAL_TEXT
    reasoning = [(d.model_extra or {}).get("reasoning_content") for d in deltas]
    assert "".join(r for r in reasoning if r) == "Counting the visits."
    assert [c.choices[0].finish_reason for c in chunks[:-1]] == [None] * (len(chunks) - 2) + [
        "stop"]
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].id.startswith("chatcmpl-tmp_")
    assert {c.model for c in chunks} == {MODEL}
    # Asked for with include_usage: one last chunk without choices, as OpenAI sends it.
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert _usage(chunks[-1].usage) == _total(provider.reported)
    assert all(c.usage is None for c in chunks[:-1])
    plain = list(client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "again"}], stream=True))
    assert plain[-1].choices[0].finish_reason == "stop", "no usage chunk unless asked"
    assert plain[-1].usage is not None, "the finish chunk carries the usage, as llama-server's"
    assert _usage(plain[-1].usage) == _total(provider.reported[1:])
    _no_trace(server, specimen)


@pytest.mark.req("BR-13", "BR-06", "SV-08")
def test_the_official_client_gets_a_whole_completion_and_no_trace_is_left(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, client = face(Scenario(name="whole", answers=(
        Answer(content=_call("files.list", path="notes")), Answer(content=_final(FINAL_TEXT)))))
    completion = client.chat.completions.create(  # sampling fields: accepted, not applied
        model=MODEL, messages=[{"role": "user", "content": "What is in notes?"}],
        temperature=1, top_p=0.5, max_tokens=7, seed=3, stop=["x"], user="me")
    choice = completion.choices[0]
    assert (completion.object, choice.finish_reason) == ("chat.completion", "stop")
    assert choice.message.content == FINAL_TEXT, "the tool call and result stay out of the text"
    assert choice.message.tool_calls is None
    assert len(provider.chat_requests()) == 2, "the tool ran inside the engine, one turn"
    sent = [request.json() for request in provider.chat_requests()]
    assert all(r.get("max_tokens") != 7 and r.get("seed") != 3 and "user" not in r
               for r in sent), "the action contract sets the decoding, not the client"
    told = _sent(provider)[-1]["content"]
    assert "field-log.txt" in told and "UNTRUSTED_DATA" in told
    assert completion.usage is not None
    assert _usage(completion.usage) == _total(provider.reported), "both calls counted"
    _no_trace(server, specimen)


@pytest.mark.req("BR-13")
def test_system_messages_reach_the_model_as_context_and_never_as_user_turns(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, client = face(Scenario.always(_final("Arr.")))
    client.chat.completions.create(model=MODEL, messages=[
        {"role": "system", "content": "CONTEXT-ONE: answer as a pirate."},
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "first answer"},
        {"role": "developer", "content": [{"type": "text", "text": "CONTEXT-"},
                                          {"type": "text", "text": "TWO: be brief."}]},
        {"role": "user", "content": "second question"}])
    messages = _sent(provider)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    system = messages[0]["content"]
    assert server.state.bridge.host is not None
    assert system.startswith(server.state.bridge.host.service("system_prompt")), \
        "the engine's own prompt comes first"
    assert system.index("CONTEXT-ONE: answer as a pirate.") < system.index("CONTEXT-TWO: be brief.")
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "first question", "second question"]
    assert messages[2]["content"] == canonical({"type": "final", "text": "first answer"}), \
        "an earlier answer reads to the model as its own final answer"
    assert not any("CONTEXT-" in m["content"] for m in messages[1:])
    _no_trace(server, specimen)


@pytest.mark.req("BR-13")
def test_two_concurrent_requests_never_see_each_others_history(
        face: FaceFactory, specimen: Path) -> None:
    # Two slots (MC-06): with one, the second request's model call would wait its turn.
    server, provider, client = face(
        Scenario.always(_final("noted"), chunk_chars=2, chunk_delay=0.01, delay=1.0),
        agent_slots="2")
    transcripts: dict[str, Any] = {
        name: [{"role": "system", "content": f"{name}-context"},
               {"role": "user", "content": f"{name}-question-1"},
               {"role": "assistant", "content": f"{name}-answer-1"},
               {"role": "user", "content": f"{name}-question-2"}]
        for name in ("ALPHA", "BRAVO")}
    start = threading.Barrier(2)
    answers: dict[str, str | None] = {}

    def ask(name: str) -> None:
        start.wait(timeout=10)
        stream = client.chat.completions.create(model=MODEL, messages=transcripts[name],
                                                stream=True)
        answers[name] = "".join(c.choices[0].delta.content or "" for c in stream)

    threads = [threading.Thread(target=ask, args=(name,)) for name in transcripts]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(provider.chat_requests()) == 2, timeout=15)
    assert reference_engine(server).retained_turns == 2, "both turns ran at the same time"
    for thread in threads:
        thread.join(timeout=30)
    assert answers == {"ALPHA": "noted", "BRAVO": "noted"}
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "alone"}])
    seen = [json.dumps(request.json()["messages"]) for request in provider.chat_requests()]
    assert len(seen) == 3
    for name, other in (("ALPHA", "BRAVO"), ("BRAVO", "ALPHA")):
        own = [text for text in seen if name in text]
        assert len(own) == 1, f"{name}'s transcript reached the model once"
        assert all(f"{name}-{part}" in own[0]
                   for part in ("context", "question-1", "answer-1", "question-2"))
        assert other not in own[0], f"{name} saw {other}'s history"
    assert "ALPHA" not in seen[2] and "BRAVO" not in seen[2], "a later request starts afresh"
    _no_trace(server, specimen)


@pytest.mark.req("BR-13", "BR-05")
def test_a_client_that_disconnects_mid_stream_cancels_the_turn_and_leaves_no_trace(
        face: FaceFactory, specimen: Path) -> None:
    # 20 s to send whole: only a cancel ends the turn sooner than _no_trace's wait.
    server, provider, client = face(Scenario(name="long", answers=(
        Answer(content=_final("x" * 400), chunk_chars=2, chunk_delay=0.1),
        Answer(content=_final("never requested")))))
    stream = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "a long answer"}], stream=True)
    pieces = iter(stream)
    while not (next(pieces).choices[0].delta.content or ""):
        pass  # up to the first piece of text: the turn is under way
    engine = reference_engine(server)
    assert engine.retained_turns == 1
    with bearer_client(server) as http:
        assert http.get("/api/cordis/sessions").json()["sessions"] == [], "never listed"
    assert session_files(specimen) == [], "never stored, even while it runs"
    stream.close()  # the client goes away mid-stream
    _no_trace(server, specimen)
    assert len(provider.chat_requests()) == 1, "no further provider request"
    wait_until(lambda: len(_ledger(server)) == 1)
    assert [(r["caller"], r["outcome"]) for r in _ledger(server)] == [
        ("transient", "CANCELLED")], "the cancel reached the model request"


@pytest.mark.req("BR-13", "BR-05")
def test_a_client_that_leaves_before_a_whole_completion_cancels_the_turn(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, _ = face(Scenario(name="slow", answers=(
            Answer(content=_call("files.list", path="notes"), chunk_chars=1, chunk_delay=0.05),
            Answer(content=_final("never requested")))))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "list notes"}]}
    with bearer_client(server) as http, pytest.raises(httpx.ReadTimeout):
        http.post("/api/cordis/v1/chat/completions", json=body, timeout=httpx.Timeout(
            30, read=0.5))  # the client gives up while the model still answers
    _no_trace(server, specimen)
    # Uncancelled, the call would have run and the model been asked again.
    assert len(provider.chat_requests()) == 1, "the turn ended with its first model call"
    wait_until(lambda: len(_ledger(server)) == 1)
    assert [(r["caller"], r["outcome"]) for r in _ledger(server)] == [
        ("transient", "CANCELLED")], "the cancel reached the model request"


@pytest.mark.req("BR-13", "BR-12")
def test_a_turn_that_would_need_approval_is_refused_headless(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, client = face(Scenario(name="write", answers=(
            Answer(content=_call("files.write", path="h.txt", content="x")),
            Answer(content=_final("I could not write the file.")))))
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "write h.txt"}], timeout=10)
    assert completion.choices[0].message.content == "I could not write the file."
    assert not (specimen / "files" / "h.txt").exists()
    told = _sent(provider)[-1]["content"]
    assert "PERMISSION_DENIED" in told, "the model got the refusal as the call's result"
    assert "approval" not in completion.choices[0].message.content.lower()
    _no_trace(server, specimen)


@pytest.mark.req("BR-13", "BR-10")
@pytest.mark.parametrize("model", ["fake-model", "engine:local:other-model",
                                   "engine:demo:deterministic-demo", "engine:local",
                                   "engine:local:fake-model:extra"])
def test_an_unknown_model_is_an_openai_shaped_404(
        face: FaceFactory, specimen: Path, model: str) -> None:
    server, provider, client = face(Scenario.always(_final("never")))
    with pytest.raises(openai.NotFoundError) as refused:
        client.chat.completions.create(model=model,
                                       messages=[{"role": "user", "content": "hi"}])
    error = refused.value.body
    assert isinstance(error, dict)
    assert (error["type"], error["code"]) == ("invalid_request_error", "UNKNOWN_MODEL")
    assert provider.chat_requests() == []
    _no_trace(server, specimen)


HI = [{"role": "user", "content": "hi"}]


@pytest.mark.req("BR-13", "SV-05", "BR-20")
@pytest.mark.parametrize(("messages", "extra", "param"), [
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "prefill"}], {},
     "messages.1"),
    ([{"role": "system", "content": "only context"}], {}, "messages.0"),
    ([{"role": "tool", "content": "42", "tool_call_id": "call_1"},
      {"role": "user", "content": "hi"}], {}, "messages.0.role"),
    ([{"role": "user", "content": [{"type": "image_url",
                                    "image_url": {"url": "data:image/png;base64,AA=="}}]}], {},
     "messages.0.content.0"),
    ([{"role": "user", "content": [{"type": "text", "text": "hi", "cache": 1}]}], {},
     "messages.0.content.0"),
    ([{"role": "user", "content": [{"text": "hi"}]}], {}, "messages.0.content"),
    (HI, {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
          "tool_choice": "required"}, "tool_choice"),
    (HI, {"tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
    (HI, {"tool_choice": "sometimes"}, "tool_choice"),
    (HI, {"tools": [{"type": "code_interpreter"}]}, "tools.0.type"),
    (HI, {"logprobs": True}, "logprobs"),
    (HI, {"top_logprobs": 2}, "top_logprobs"),
    (HI, {"modalities": ["text", "audio"]}, "modalities.1"),
    (HI, {"frobnicate": True}, "frobnicate"),
    (HI, {"n": 2}, "n"),
    (HI, {"n": True}, "n"),  # JSON true is not the number 1
    (HI, {"n": 1.0}, "n"),
    (HI, {"n": 0}, "n"),
    ([{"role": "user", "content": ""}], {}, "messages.0.content"),
    ([], {}, "messages"),
])
def test_a_request_the_engine_cannot_answer_is_refused_whole_naming_the_field(
        face: FaceFactory, specimen: Path, messages: list[dict[str, Any]],
        extra: dict[str, Any], param: str) -> None:
    server, provider, _ = face(Scenario.always(_final("never")))
    with bearer_client(server) as http:
        response = http.post("/api/cordis/v1/chat/completions",
                             json={"model": MODEL, "messages": messages, **extra})
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert (error["type"], error["code"], error["param"]) == (
        "invalid_request_error", "VALIDATION_FAILED", param)
    assert error["message"].startswith(f"{param}: "), error["message"]
    assert "\n" not in error["message"] and len(error["message"]) <= 300
    assert provider.chat_requests() == []
    _no_trace(server, specimen)


@pytest.mark.req("BR-13", "BR-04")
def test_the_chat_routes_are_the_admins(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
        tmp_path: Path) -> None:
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "bob"\ntoken_sha256 = "{token_hash("bob-t")}"\n')
    provider = provider_factory(Scenario.always(_final("never")))
    server = server_factory(specimen, bridge=True, accounts=str(accounts),
                            **local_agent(provider.base_url))
    for key, error_class, kind in (("bob-t", openai.PermissionDeniedError, "permission_error"),
                                   ("wrong", openai.AuthenticationError, "authentication_error")):
        with official_client(server, key) as client:
            with pytest.raises(error_class) as refused:
                client.chat.completions.create(model=MODEL,
                                               messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(error_class):
                client.models.list()
        assert isinstance(refused.value.body, dict)
        assert refused.value.body.get("type") == kind
    assert provider.chat_requests() == []


@pytest.mark.req("BR-13", "BR-02")
def test_a_failed_turn_is_an_error_event_in_a_stream_and_an_error_body_otherwise(
        face: FaceFactory, specimen: Path) -> None:
    broken = Answer(content="not an action at all")
    server, _, client = face(Scenario(name="broken", answers=(broken,),
                                       when_exhausted="repeat_last"))
    with pytest.raises(openai.APIStatusError) as whole:
        client.chat.completions.create(model=MODEL,
                                       messages=[{"role": "user", "content": "hi"}])
    assert whole.value.status_code == 502
    assert isinstance(whole.value.body, dict) and whole.value.body["code"] == "MODEL_PROTOCOL_ERROR"
    with bearer_client(server) as http, http.stream(
            "POST", "/api/cordis/v1/chat/completions",
            json={"model": MODEL, "stream": True,
                  "messages": [{"role": "user", "content": "hi"}]}) as reply:
        assert reply.status_code == 200
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.headers["cache-control"] == "no-store"
        events = [line for line in reply.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "MODEL_PROTOCOL_ERROR")
    with pytest.raises(openai.APIError):
        list(client.chat.completions.create(model=MODEL, stream=True,
                                            messages=[{"role": "user", "content": "hi"}]))
    _no_trace(server, specimen)


# -- any text, any bytes ------------------------------------------------------------------


@pytest.fixture(scope="module")
def echo_face(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer,
                                                                           FakeProvider]]:
    """One server whose model always answers, for many requests."""
    root = tmp_path_factory.mktemp("face") / "specimen"
    init_workspace(root, specimen=True)
    provider = FakeProvider(Scenario.always(_final("seen"))).start()
    options: dict[str, Any] = {"bridge": True, **local_agent(provider.base_url)}
    server = LiveServer(root, **options).start()
    yield server, provider
    server.stop()
    provider.stop()


@pytest.mark.req("BR-13")
def test_the_last_user_message_is_bounded_at_the_engines_message_length(
        echo_face: tuple[LiveServer, FakeProvider]) -> None:
    """The transient turn's message holds the engine's bound: on it the model is asked, one
    character past it is 422 VALIDATION_FAILED and the model is not."""
    server, provider = echo_face
    with bearer_client(server) as http:
        for length, status in ((MAX_MESSAGE_CHARS, 200), (MAX_MESSAGE_CHARS + 1, 422)):
            before = len(provider.chat_requests())
            answer = http.post("/api/cordis/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "x" * length}]})
            assert answer.status_code == status, answer.text[:300]
            assert len(provider.chat_requests()) == before + (status == 200)
            if status == 200:  # one choice, the first: index 0 (as the spec's wire shape)
                [choice] = answer.json()["choices"]
                assert (choice["index"], choice["finish_reason"]) == (0, "stop")
    assert answer.json()["error"]["code"] == "VALIDATION_FAILED"


def _ignored_bounds() -> list[tuple[str, str, int, str]]:
    """(field, keyword, bound, value type) of every ignored field bounded in
    ``qualification/bounds.toml`` (pinned there, never read from the schema under test)."""
    return [(row["field"], keyword, int(row[keyword]), row.get("values", "string"))
            for row in bound_rows() if row["route"] == "POST /api/cordis/v1/chat/completions"
            and row["field"] in IGNORED_FIELDS
            for keyword in ("maxLength", "maxProperties") if keyword in row]


def _sized(keyword: str, size: int, kind: str) -> Any:
    if keyword == "maxLength":
        return "u" * size
    return {str(n): (0 if kind == "number" else "v") for n in range(size)}


@pytest.mark.req("BR-20", "BR-13")
@pytest.mark.parametrize(("field", "keyword", "bound", "kind"), _ignored_bounds())
def test_an_ignored_field_is_accepted_to_its_bound_and_refused_past_it(
        echo_face: tuple[LiveServer, FakeProvider], field: str, keyword: str, bound: int,
        kind: str) -> None:
    """Fields a client may send and the engine ignores are still bounded (a 1,024-entry
    ``logit_bias``, 16 ``metadata`` pairs, 256 characters of ``user``): on the bound the
    chat is answered, one past it is 422 naming the field, and the model is not asked."""
    assert bound > 0
    server, provider = echo_face
    with bearer_client(server) as http:
        for size, status in ((bound, 200), (bound + 1, 422)):
            before = len(provider.chat_requests())
            answer = http.post("/api/cordis/v1/chat/completions", json={
                "model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                field: _sized(keyword, size, kind)})
            assert answer.status_code == status, (size, answer.text[:300])
            assert len(provider.chat_requests()) == before + (status == 200)
    assert answer.json()["error"]["param"] == field


texts = st.text(st.characters(codec=None), max_size=40) | st.text(
    st.characters(categories=["Cs"]), min_size=1, max_size=3)


#: Raw bytes spliced into a JSON string (no quote or backslash: they would end or escape it).
raw_bytes = st.binary(max_size=24).map(lambda raw: raw.replace(b'"', b"").replace(b"\\", b""))


@pytest.mark.req("BR-13", "SV-05")
@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(system=texts, user=texts, raw=raw_bytes)
def test_any_transcript_text_reaches_the_model_as_sent_or_is_refused_whole(
        echo_face: tuple[LiveServer, FakeProvider], system: str, user: str,
        raw: bytes) -> None:
    server, provider = echo_face
    before = len(provider.chat_requests())
    body = json.dumps({"model": MODEL, "messages": [{"role": "system", "content": system},
                                                     {"role": "user", "content": user}]})
    with bearer_client(server) as http:
        response = http.post("/api/cordis/v1/chat/completions", content=body.encode(
            "utf-8", "surrogatepass"), headers={"Content-Type": "application/json"})
        # As the server reads the body: an escaped surrogate pair is one character.
        system, user = (m["content"] for m in json.loads(body)["messages"])
        lone = any(0xD800 <= ord(c) <= 0xDFFF for c in system + user)
        if lone or not user:
            assert response.status_code == 422, response.text
            assert response.json()["error"]["code"] == "VALIDATION_FAILED"
            assert len(provider.chat_requests()) == before
        else:
            assert response.status_code == 200, response.text
            assert response.json()["choices"][0]["message"]["content"] == "seen"
            messages = _sent(provider)
            assert messages[-1] == {"role": "user", "content": user}
            assert messages[0]["content"].endswith("\n\n" + system)
        spliced = (b'{"model": "' + MODEL.encode() + b'", "messages": [{"role": "user", '
                   b'"content": "' + raw + b'"}]}')
        raw_reply = http.post("/api/cordis/v1/chat/completions", content=spliced,
                              headers={"Content-Type": "application/json"})
    try:
        decoded = json.loads(spliced)["messages"][0]["content"]
    except (UnicodeDecodeError, ValueError):
        decoded = None
    if decoded:
        assert raw_reply.status_code == 200, raw_reply.text
        assert _sent(provider)[-1] == {"role": "user", "content": decoded}
    else:
        assert raw_reply.status_code == 422, raw_reply.text
    wait_until(lambda: reference_engine(server).retained_turns == 0)


# -- the README ---------------------------------------------------------------------------


@pytest.mark.req("BR-13", "DOC-01")
def test_the_readme_openai_flow_runs_as_written(tmp_path: Path) -> None:
    code = block("openai-flow")  # docs/openai.md
    env = {**os.environ, "XDG_DATA_HOME": str(tmp_path / "data"),
           "READY": str(tmp_path / "ready.json"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    answer = done.stdout.strip()
    assert answer and "\n" not in answer, done.stdout
    assert "Traceback" not in done.stderr
    sessions = next((tmp_path / "data").rglob("sessions"))
    assert [p.name for p in sessions.iterdir() if not p.name.startswith(".index.sqlite")] == []


@pytest.mark.req("BR-13", "SV-05", "SV-08")
def test_the_security_checks_refuse_a_chat_client_in_its_own_error_shape(
        echo_face: tuple[LiveServer, FakeProvider]) -> None:
    """Refusals the security middleware answers before any route (a foreign Origin, a form
    body, an oversized or duplicate-key body, a wrong key) are OpenAI-shaped on the chat
    API too, with the server's code kept, so a client reads every refusal alike."""
    server, provider = echo_face
    before = len(provider.chat_requests())
    route = "/api/cordis/v1/chat/completions"
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    cases = [
        ({"Origin": "http://evil.example"}, body, "application/json", 403,
         "ORIGIN_NOT_ALLOWED", "permission_error"),
        ({}, "model=x", "application/x-www-form-urlencoded", 415,
         "UNSUPPORTED_MEDIA_TYPE", "invalid_request_error"),
        ({}, '{"model": "a", "model": "b", "messages": []}', "application/json", 422,
         "VALIDATION_FAILED", "invalid_request_error"),
        ({}, "x" * (65 * 1024), "application/json", 413,
         "BODY_TOO_LARGE", "invalid_request_error"),
        ({"Authorization": "Bearer wrong"}, body, "application/json", 401,
         "UNAUTHENTICATED", "authentication_error"),
    ]
    with bearer_client(server) as http:
        for headers, content, media, status, code, kind in cases:
            response = http.post(route, content=content,
                                 headers={"Content-Type": media, **headers})
            assert response.status_code == status, (code, response.text)
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"}, error
            assert (error["code"], error["type"], error["param"]) == (code, kind, None)
            assert "\n" not in error["message"]
        native = http.post("/api/cordis/sessions", content="model=x",
                           headers={"Content-Type": "application/x-www-form-urlencoded"})
        assert set(native.json()["error"]) == {"code", "message"}, "other APIs keep theirs"
    assert len(provider.chat_requests()) == before, "no refused request reached the model"


@pytest.mark.req("BR-13", "SV-05")
@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/api/cordis/v1/nope", 404), ("GET", "/api/cordis/v1", 404),
    ("GET", "/api/cordis/v1/models/x/y", 404), ("POST", "/api/cordis/v1/embeddings", 404),
    ("GET", "/api/cordis/v1/chat/completions", 405),
    ("DELETE", "/api/cordis/v1/chat/completions", 405)])
def test_a_route_the_face_does_not_have_answers_in_openais_error_shape(
        face: FaceFactory, method: str, path: str, status: int) -> None:
    # A chat client reads error.message and error.type: before, an unknown route under the
    # face answered the workspace API's {"error": {"code", "message"}}.
    server, provider, _ = face(Scenario.always(_final("never")))
    with bearer_client(server) as http:
        response = http.request(method, path)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] is None
    assert error["code"] == ("NOT_FOUND" if status == 404 else "METHOD_NOT_ALLOWED")
    assert provider.chat_requests() == []


# -- BR-20: what mainstream clients send ---------------------------------------------------

CLIENT_TOOLS = [{"type": "function", "function": {
    "name": name, "description": f"{name} of the client",
    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}
    for name in ("get_current_timestamp", "search_memories", "write_note")]
#: A value a client would send for each field the face accepts and ignores.
IGNORED_VALUES: dict[str, Any] = {
    "temperature": 0.8, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "typical_p": 1.0,
    "repeat_penalty": 1.1, "max_tokens": 128, "max_completion_tokens": 256,
    "presence_penalty": 0.0, "frequency_penalty": 0.0, "seed": 7, "stop": ["\n\n"],
    "logit_bias": {"50256": -100}, "user": "me", "reasoning_effort": "medium", "store": False,
    "metadata": {"app": "chat"}, "service_tier": "auto", "parallel_tool_calls": True,
    "tools": CLIENT_TOOLS, "tool_choice": "auto", "logprobs": False, "top_logprobs": 0,
    "modalities": ["text"]}


@pytest.mark.req("BR-20", "BR-13")
@pytest.mark.parametrize("choice", [None, "auto", "none"])
def test_client_tools_that_are_not_forced_are_answered_without_calling_them(
        face: FaceFactory, specimen: Path, choice: str | None) -> None:
    """Open WebUI sends its built-in functions with every chat: the engine answers with its
    own tools, never offers the client's to its model, and asks the client to run none."""
    server, provider, client = face(Scenario(name="tools", answers=(
        Answer(content=_call("files.list", path="notes")), Answer(content=_final(FINAL_TEXT)))))
    extra: dict[str, Any] = {} if choice is None else {"tool_choice": choice}
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "What is in notes?"}],
        tools=CLIENT_TOOLS, **extra)  # type: ignore[arg-type]
    choice_ = completion.choices[0]
    assert (choice_.message.content, choice_.message.tool_calls) == (FINAL_TEXT, None)
    assert choice_.finish_reason == "stop"
    for request in provider.chat_requests():
        body = request.body.decode()
        assert "tools" not in request.json() and "search_memories" not in body, \
            "the client's functions never reach the engine's model"
    _no_trace(server, specimen)


@pytest.mark.req("BR-20")
def test_every_ignored_field_is_accepted_and_changes_nothing_the_model_is_sent(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, _ = face(Scenario.always(_final("same")))
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}
    with bearer_client(server) as http:
        plain = http.post("/api/cordis/v1/chat/completions", json=body)
        loaded = http.post("/api/cordis/v1/chat/completions", json=body | IGNORED_VALUES)
    assert (plain.status_code, loaded.status_code) == (200, 200), loaded.text
    assert loaded.json()["choices"] == plain.json()["choices"]
    first, second = (request.json() for request in provider.chat_requests())
    assert first == second, "the decoding is the action contract's, whatever a client asks"
    assert set(IGNORED_VALUES) == set(IGNORED_FIELDS), "a value for each listed field"
    _no_trace(server, specimen)


@pytest.mark.req("BR-20", "DOC-01")
def test_the_ignored_fields_are_listed_in_the_api_docs() -> None:
    assert block("ignored-fields").split() == list(IGNORED_FIELDS)


@pytest.mark.req("BR-20", "BR-14", "BR-13")
@pytest.mark.parametrize("stream", [False, True])
def test_usage_is_on_every_completion_null_where_the_model_said_nothing(
        face: FaceFactory, stream: bool) -> None:
    server, provider, _ = face(Scenario.replies(_final("quiet"), _final("quiet"), reports=()))
    options: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}} \
        if stream else {}
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": MODEL, "messages": [{"role": "user", "content": "hi"}], **options})
    assert answer.status_code == 200
    if stream:
        documents = [json.loads(line.removeprefix("data: ")) for line in answer.text.split("\n\n")
                     if line.startswith("data: {")]
        usage = documents[-1]["usage"]
        assert documents[-1]["choices"] == []
    else:
        usage = answer.json()["usage"]
    assert usage == {"prompt_tokens": None, "completion_tokens": None, "total_tokens": None}, \
        "a model ran and reported nothing: unknown, never 0"
    assert len(provider.chat_requests()) == 1


@pytest.mark.req("BR-20")
def test_the_demo_agent_reports_zero_usage_and_the_official_client_reads_it(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    with official_client(server) as client:
        model = client.models.list().data[0].id
        completion = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What is in this workspace?"}])
        streamed = list(client.chat.completions.create(
            model=model, stream=True, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "What is in this workspace?"}]))
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens,
            completion.usage.total_tokens) == (0, 0, 0), "no model ran"
    assert streamed[-1].usage is not None and streamed[-1].usage.total_tokens == 0


@pytest.mark.req("BR-20", "BR-10")
def test_the_official_client_retrieves_one_model_and_an_unknown_one_is_openai_shaped(
        face: FaceFactory) -> None:
    _, _, client = face(Scenario.always(_final("never")))
    retrieved = client.models.retrieve(MODEL)
    assert (retrieved.id, retrieved.object, retrieved.owned_by) == (MODEL, "model", "local")
    assert retrieved.model_dump() == next(
        m.model_dump() for m in client.models.list().data if m.id == MODEL)
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve("engine:local:nope")
    error = missing.value.body
    assert isinstance(error, dict)
    assert (error["code"], error["type"]) == ("UNKNOWN_MODEL", "invalid_request_error")


@pytest.mark.req("BR-20", "BR-13")
def test_a_stream_sends_comment_keep_alives_while_the_engine_works(
        face: FaceFactory, specimen: Path) -> None:
    """The model takes a second; with ``--sse-keepalive 0.2`` the stream carries ``:``
    comment lines meanwhile, which the official client skips as the SSE rules say."""
    slow = Scenario.replies(_final("took a while"), _final("took a while"), delay=1.0)
    server, _, client = face(slow, sse_keepalive="0.2")
    with bearer_client(server) as http:
        raw = http.post("/api/cordis/v1/chat/completions", json={
            "model": MODEL, "stream": True,
            "messages": [{"role": "user", "content": "hi"}]}).text
    events = raw.split("\n\n")
    assert events[0].startswith("data: {"), "the role chunk goes first, at once"
    assert events[1] == ": keep-alive", events[:4]
    first_content = next(i for i, e in enumerate(events) if '"content":"took' in e)
    assert all(e == ": keep-alive" for e in events[1:first_content])
    assert events.count(": keep-alive") >= 2
    parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
        model=MODEL, stream=True, messages=[{"role": "user", "content": "again"}])
        if c.choices]
    assert "".join(parts) == "took a while"
    _no_trace(server, specimen)


@pytest.mark.req("BR-20", "CLI-01")
@pytest.mark.parametrize("value", ["0", "15.5", "-1", "nan", "soon"])
def test_a_keep_alive_outside_0_to_15_seconds_is_refused(value: str) -> None:
    from labfy_ref.config import RawOptions, resolve  # noqa: PLC0415

    with pytest.raises(LabfyError, match="--sse-keepalive"):
        resolve(RawOptions(sse_keepalive=value), {})
    assert resolve(RawOptions(), {}).keepalive_seconds == 15.0
