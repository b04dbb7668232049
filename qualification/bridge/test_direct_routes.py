"""BR-17: direct provider routes — a chat client's background tasks asked of the model itself.

Open WebUI's titles, tags and follow-up suggestions used to run a whole agent turn
each (8 of 12 engine turns with a real model were housekeeping). Beside each engine
route the face lists ``direct:<provider>:<model>``: the transcript goes to that
model as the client wrote it — no engine prompt, no tools, no session, no
workspace data — with the client's ``response_format`` and ``max_tokens``. What the
model was sent is read from what the fake provider received.
"""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from fake_provider import Answer, Scenario
from labfy_ref.bridge import direct
from labfy_ref.bridge.direct import DirectAsk
from labfy_ref.bridge.llm import LocalProvider
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.config import RawOptions, resolve
from labfy_ref.gateway import AgentGateway
from labfy_ref.gateway.usage import UsageService
from labfy_ref.model.route import ModelRoute
from labfy_ref.workspace import open_workspace
from qualification.bridge.test_openai_face import (
    MODEL,
    FaceFactory,
    _final,
    _no_trace,
    face,
    official_client,
)
from qualification.conformance.sse import completion_chunks, delta_text
from qualification.conftest import ProviderFactory, ServerFactory
from qualification.harness import bearer_client

DIRECT = "direct:local:fake-model"
TITLE = '{"title": "Bees in the garden"}'
TASK = ("### Task: Generate a concise, 3-5 word title with an emoji summarizing the chat "
        "history.\n### Output: JSON format: { \"title\": \"your concise title here\" }\n"
        "### Chat History:\n<chat_history>\nUSER: Which bees visit lavender?\n</chat_history>")
__all__ = ["face"]  # the face fixture, shared with the OpenAI face's tests
SCHEMA = {"type": "object", "properties": {"title": {"type": "string", "maxLength": 60}},
          "required": ["title"], "additionalProperties": False}


def _usage_records(server: Any) -> list[dict[str, Any]]:
    with bearer_client(server) as http:
        records: list[dict[str, Any]] = http.get("/api/cordis/usage").json()["usage"]
    return records


@pytest.mark.req("BR-17", "BR-10")
def test_each_engine_route_has_its_direct_route_and_the_demo_agent_has_none(
        face: FaceFactory, specimen: Path, server_factory: ServerFactory) -> None:
    _, _, client = face(Scenario(name="m", answers=(), models=("fake-model",)))
    assert [m.id for m in client.models.list().data] == [MODEL, DIRECT]
    assert client.models.retrieve(DIRECT).owned_by == "local"
    demo = server_factory(specimen, bridge=True)
    with official_client(demo) as plain:
        ids = [m.id for m in plain.models.list().data]
        assert ids == ["engine:demo:deterministic-demo"], "the demo policy is no model"
        with pytest.raises(openai.NotFoundError):
            plain.chat.completions.create(model="direct:demo:deterministic-demo",
                                          messages=[{"role": "user", "content": "hi"}])


@pytest.mark.req("BR-17", "BR-14", "BR-13")
@pytest.mark.parametrize("stream", [False, True])
def test_a_direct_call_sends_the_transcript_as_written_and_nothing_else(
        face: FaceFactory, specimen: Path, stream: bool) -> None:
    server, provider, client = face(Scenario(name="direct", answers=(),
                                             direct=(Answer(content=TITLE),)))
    messages: list[Any] = [{"role": "system", "content": "You title chats."},
                           {"role": "user", "content": "Which bees visit lavender?"},
                           {"role": "assistant", "content": "Mostly bumblebees."},
                           {"role": "user", "content": TASK}]
    fmt: Any = {"type": "json_schema", "json_schema": {"name": "title", "schema": SCHEMA}}
    tools: Any = [{"type": "function", "function": {"name": "f"}}]
    if stream:
        parts = [c.choices[0].delta.content or "" for c in client.chat.completions.create(
            model=DIRECT, messages=messages, stream=True, max_tokens=50,
            response_format=fmt, tools=tools)
            if c.choices]
        text = "".join(parts)
    else:
        completion = client.chat.completions.create(
            model=DIRECT, messages=messages, max_tokens=50, response_format=fmt)
        text = completion.choices[0].message.content or ""
        assert completion.usage is not None and completion.usage.total_tokens > 0
    assert json.loads(text) == {"title": "Bees in the garden"}
    [sent] = [request.json() for request in provider.chat_requests()]
    assert sent["messages"] == messages, "the transcript as written: no engine prompt"
    assert sent["response_format"] == fmt and sent["max_tokens"] == 50
    assert sent["model"] == "fake-model" and "tools" not in sent
    [record] = _usage_records(server)
    assert (record["model"], record["caller"], record["outcome"]) == (DIRECT, "direct", "ok")
    assert record["prompt_tokens"] is not None
    _no_trace(server, specimen)


@pytest.mark.req("BR-17", "BR-13")
def test_a_title_task_beside_a_chat_is_one_model_call_and_the_chat_stays_in_step(
        face: FaceFactory, specimen: Path) -> None:
    """The chat's agent rounds and the task's direct call are answered each by their kind:
    the task costs one model call, the chat's turn goes on unaffected."""
    server, provider, client = face(Scenario(
        name="both", answers=(Answer(content=_final("Lavender: bumblebees.")),),
        direct=(Answer(content=TITLE),)))
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Which bees visit lavender?"}])
    title = client.chat.completions.create(
        model=DIRECT, max_tokens=1000, messages=[{"role": "user", "content": TASK}])
    assert chat.choices[0].message.content == "Lavender: bumblebees."
    assert json.loads(title.choices[0].message.content or "") == {"title": "Bees in the garden"}
    kinds = ["response_format" in r.json() for r in provider.chat_requests()]
    assert kinds == [True, False], "one agent round, then exactly one direct call"
    assert provider.chat_requests()[-1].json()["max_tokens"] == 1000, "the client's limit"
    callers = sorted(r["caller"] for r in _usage_records(server))
    assert callers == ["direct", "transient"]
    _no_trace(server, specimen)


@pytest.mark.req("BR-17", "BR-20", "BR-13")
@pytest.mark.parametrize(("response_format", "why"), [
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "$ref": "https://example.com/schema.json"}}}, "remote schema"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "string", "pattern": "^(?=a).*$"}}}, "lookaround"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "type": "object", "description": "x" * 17_000}}}, "bytes"),
    ({"type": "json_schema", "json_schema": {"name": "x", "schema": {
        "items": json.loads("[" * 25 + "]" * 25)}}}, "deeper"),
    ({"type": "xml"}, "must be"),
    ({"type": "json"}, "must be"),
    ({"type": "json_object", "strict": True}, "must be"),
    ({"type": "json_schema"}, "must be"),
])
def test_a_client_schema_the_model_cannot_be_given_is_refused_in_words(
        face: FaceFactory, response_format: dict[str, Any], why: str) -> None:
    server, provider, _ = face(Scenario(name="none", answers=(), direct=(Answer(content="x"),)))
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": DIRECT, "response_format": response_format,
            "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["param"] == "response_format" and why in error["message"], error
    assert provider.chat_requests() == []


@pytest.mark.req("BR-17", "BR-14", "MC-05")
def test_a_direct_call_that_fails_is_an_openai_error_and_a_ledger_record(
        face: FaceFactory, specimen: Path) -> None:
    server, _, _ = face(Scenario(name="fails", answers=(), direct=(
        Answer(status=500, raw_body='{"error": {"message": "boom"}}'),
        Answer(status=500, raw_body='{"error": {"message": "boom"}}'))))
    body = {"model": DIRECT, "messages": [{"role": "user", "content": "hi"}]}
    with bearer_client(server) as http:
        whole = http.post("/api/cordis/v1/chat/completions", json=body)
        streamed = http.post("/api/cordis/v1/chat/completions", json={**body, "stream": True})
    assert whole.status_code == 503 and whole.json()["error"]["code"] == "MODEL_UNAVAILABLE"
    chunks, done = completion_chunks(streamed.text.replace('data: {"error"', 'data: {"x":0,'
                                                           '"error"'))
    assert done and delta_text([c for c in chunks if "choices" in c]) == ""
    assert [c["error"]["code"] for c in chunks if "error" in c] == ["MODEL_UNAVAILABLE"]
    outcomes = [(r["model"], r["caller"], r["outcome"]) for r in _usage_records(server)]
    assert outcomes == [(DIRECT, "direct", "MODEL_UNAVAILABLE")] * 2
    _no_trace(server, specimen)


@pytest.mark.req("BR-17", "BR-05")
def test_a_client_that_leaves_a_direct_call_cancels_it(face: FaceFactory,
                                                       specimen: Path) -> None:
    server, provider, _ = face(Scenario(name="slow", answers=(), direct=(
        Answer(content="a slow title " * 20, chunk_chars=4, chunk_delay=0.2),)))
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30,
                      headers={"Authorization": f"Bearer {server.admin_token}"}) as http, \
            http.stream("POST", "/api/cordis/v1/chat/completions", json={
                "model": DIRECT, "stream": True,
                "messages": [{"role": "user", "content": "hi"}]}) as reply:
        for data in reply.iter_text():
            if '"content":"a sl' in data:
                break  # the client goes away mid-answer
    from qualification.harness import wait_until  # noqa: PLC0415

    wait_until(lambda: [r["outcome"] for r in _usage_records(server)] == ["CANCELLED"])
    assert len(provider.chat_requests()) == 1
    _no_trace(server, specimen)


# -- structured output through an engine route (BR-20) ---------------------------------------

GARDEN = {"type": "object", "properties": {"garden": {"type": "string"},
                                           "visits": {"type": "integer"}},
          "required": ["garden", "visits"], "additionalProperties": False}
ANSWER = "Lavender drew 62 visits, the busiest garden."


def _shaped_scenario(*direct: str) -> Scenario:
    return Scenario(name="shaped", answers=(Answer(content=_final(ANSWER)),),
                    direct=tuple(Answer(content=text) for text in direct))


@pytest.mark.req("BR-20", "BR-17")
@pytest.mark.parametrize("stream", [False, True])
def test_an_engine_route_answers_in_the_clients_json_schema(
        face: FaceFactory, specimen: Path, stream: bool) -> None:
    """The agent turn runs under its own contract; its answer is then put into the client's
    schema by one direct call of the same model, and only that JSON reaches the client."""
    server, provider, _ = face(_shaped_scenario('{"garden": "Lavender", "visits": 62}'))
    fmt = {"type": "json_schema", "json_schema": {"name": "garden", "schema": GARDEN}}
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": MODEL, "stream": stream, "response_format": fmt,
            "messages": [{"role": "user", "content": "Which garden drew most visits?"}]})
    assert answer.status_code == 200, answer.text
    if stream:
        chunks, done = completion_chunks(answer.text)
        assert done
        text = delta_text(chunks)
    else:
        text = answer.json()["choices"][0]["message"]["content"]
    assert json.loads(text) == {"garden": "Lavender", "visits": 62}
    agent_round, shaping = (request.json() for request in provider.chat_requests())
    assert agent_round["response_format"]["json_schema"]["name"].startswith("labfy_agent_")
    assert shaping["response_format"] == fmt, "the client's schema constrains the shaping call"
    assert ANSWER in shaping["messages"][-1]["content"]
    assert "Which garden drew most visits?" in shaping["messages"][-1]["content"]
    assert "tools" not in shaping
    callers = [(r["model"], r["caller"]) for r in _usage_records(server)]
    assert sorted(callers) == [(DIRECT, "transient"), (MODEL, "transient")]
    _no_trace(server, specimen)


@pytest.mark.req("BR-20")
def test_a_shape_the_model_misses_gets_one_repair_naming_the_defect(
        face: FaceFactory, specimen: Path) -> None:
    server, provider, client = face(_shaped_scenario('{"garden": "Lavender"}',
                                                     '{"garden": "Lavender", "visits": 62}'))
    completion = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Which garden?"}],
        response_format={"type": "json_schema",
                         "json_schema": {"name": "garden", "schema": GARDEN}})
    assert json.loads(completion.choices[0].message.content or "") == {
        "garden": "Lavender", "visits": 62}
    repair = provider.chat_requests()[-1].json()["messages"][-1]["content"]
    assert "'visits' is a required property" in repair
    assert completion.usage is not None and completion.usage.total_tokens > 0
    _no_trace(server, specimen)


@pytest.mark.req("BR-20")
@pytest.mark.parametrize("stream", [False, True])
def test_a_shape_missed_twice_is_a_protocol_error_in_words_never_half_an_answer(
        face: FaceFactory, specimen: Path, stream: bool) -> None:
    server, _, _ = face(_shaped_scenario("Lavender, 62.", '{"garden": 1, "visits": 62}'))
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": MODEL, "stream": stream, "response_format": {"type": "json_schema",
                                                                  "json_schema": {
                                                                      "name": "g",
                                                                      "schema": GARDEN}},
            "messages": [{"role": "user", "content": "Which garden?"}]})
    if stream:
        chunks, done = completion_chunks(answer.text)
        assert done and delta_text([c for c in chunks if "choices" in c]) == ""
        [error] = [c["error"] for c in chunks if "error" in c]
    else:
        error = answer.json()["error"]
    assert error["code"] == "MODEL_PROTOCOL_ERROR"
    assert "requested format" in error["message"] and "garden" in error["message"]
    _no_trace(server, specimen)


@pytest.mark.req("BR-20")
def test_json_object_and_the_official_clients_parse_helper(face: FaceFactory,
                                                           specimen: Path) -> None:
    from pydantic import BaseModel  # noqa: PLC0415

    class Garden(BaseModel):
        garden: str
        visits: int

    server, provider, client = face(_shaped_scenario(
        "[1, 2]", '{"garden": "Lavender", "visits": 62}',
        '{"garden": "Lavender", "visits": 62}'))
    loose = client.chat.completions.create(
        model=MODEL, response_format={"type": "json_object"},
        messages=[{"role": "user", "content": "Which garden?"}])
    assert json.loads(loose.choices[0].message.content or "") == {"garden": "Lavender",
                                                                  "visits": 62}
    provider.set_scenario(_shaped_scenario('{"garden": "Lavender", "visits": 62}'))
    parsed = client.chat.completions.parse(
        model=MODEL, response_format=Garden,
        messages=[{"role": "user", "content": "Which garden?"}])
    assert parsed.choices[0].message.parsed == Garden(garden="Lavender", visits=62)
    _no_trace(server, specimen)


@pytest.mark.req("BR-20")
def test_the_demo_agent_refuses_a_json_format_in_words(specimen: Path,
                                                       server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": "engine:demo:deterministic-demo", "response_format": {"type": "json_object"},
            "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 422
    assert "demo agent answers in words only" in answer.json()["error"]["message"]


@pytest.mark.req("BR-17")
@pytest.mark.parametrize(("asked", "sent"), [({}, 1024), ({"max_tokens": 20_000}, 8192),
                                             ({"max_completion_tokens": 7}, 7)])
def test_a_direct_call_is_bounded_even_when_the_client_names_no_limit(
        face: FaceFactory, asked: dict[str, int], sent: int) -> None:
    server, provider, _ = face(Scenario(name="d", answers=(), direct=(Answer(content="ok"),)))
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": DIRECT, "messages": [{"role": "user", "content": "hi"}], **asked})
    assert answer.status_code == 200, answer.text
    assert provider.chat_requests()[-1].json()["max_tokens"] == sent


@pytest.mark.req("BR-17")
@pytest.mark.parametrize("model", ["direct:local:" + "m" * 100, "direct:local:" + "n" * 67,
                                   "direct:nobody:fake-model"])
def test_an_unlisted_direct_route_is_refused_naming_it_up_to_80_characters(
        face: FaceFactory, model: str) -> None:
    """A direct route no provider lists is UNKNOWN_MODEL; the refusal names the route as
    sent, cut at 80 characters, and says where the routes are listed; nothing is asked."""
    server, provider, _ = face(Scenario(name="none", answers=(), direct=(Answer(content="x"),)))
    with bearer_client(server) as http:
        answer = http.post("/api/cordis/v1/chat/completions", json={
            "model": model, "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 404, answer.text
    error = answer.json()["error"]
    assert error["code"] == "UNKNOWN_MODEL"
    assert error["message"] == (f"no model {model[:80]!r}; "
                                "GET /api/cordis/v1/models lists them"), error
    assert provider.chat_requests() == []


@pytest.mark.req("BR-17", "BR-14")
def test_a_direct_calls_ledger_record_times_it_in_milliseconds_of_the_monotonic_clock(
        specimen: Path, provider_factory: ProviderFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """From before the request to after its last piece, as the monotonic clock says."""
    provider = provider_factory(Scenario("direct", (), direct=(Answer(content="Hedge"),)))
    agent = resolve(RawOptions(workspace=str(specimen), agent_mode="local-model",
                               agent_endpoint=provider.base_url, agent_model="fake-model"),
                    {}).agent
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    ticks = iter([10.0, 10.25])
    monkeypatch.setattr(direct, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))

    async def ask() -> list[str]:
        llm = LocalProvider(agent)
        try:
            asked = DirectAsk(llm, AgentGateway(workspace, store).usage,
                              ModelRoute("local", "fake-model"), StreamHandle("ttl_1", "t"))
            return [delta.content async for delta in asked.stream(
                [{"role": "user", "content": "A title?"}], None, 16)]
        finally:
            await llm.aclose()

    try:
        assert "".join(asyncio.run(ask())) == "Hedge"
        [record] = UsageService(store).report()["usage"]
    finally:
        store.close()
    assert (record["model"], record["caller"], record["outcome"]) == (DIRECT, "direct", "ok")
    assert record["latency_ms"] == 250.0
