"""The bridge over HTTP against any target whose engine answers with the kit's provider
(QR-03): NDJSON framing and chunk shapes (BR-02, BR-04), tool activity (BR-11), approvals
"Allow once / Deny" (BR-12), disconnect (BR-05), delete (BR-08), the OpenAI face (BR-13).

The stream is read as raw bytes and split on ``\\n`` here: the kit trusts no decoder of
ours, and a line holding two chunks (or half of one) fails as it would in a browser.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from qualification.conformance.kit import KIT_MODEL, marker, nonce
from qualification.conformance.sse import completion_chunks, delta_text
from qualification.harness import ApiClient, wait_until
from qualification.target import Served

pytestmark = pytest.mark.conformance

CHUNK_TYPES = {"text", "reasoning", "tool-call", "tool-result", "approval-request",
               "approval-decision", "facts", "error", "done"}


@pytest.fixture
def client(model_target: Served) -> Iterator[ApiClient]:
    """An admin client of a target whose engine answers with the kit provider."""
    client = model_target.client()
    yield client
    client.close()


def _session(client: ApiClient, **settings: str) -> str:
    response = client.post("/api/cordis/sessions", settings)
    assert response.status_code == 201, response.text
    return str(response.json()["session"]["id"])


class RawTurn:
    """One streamed turn, its response head and every line, read as raw bytes."""

    def __init__(self, client: ApiClient, session_id: str, text: str, *,
                 headless: bool = False, on_chunk: Any = None) -> None:
        body: dict[str, Any] = {"text": text}
        if headless:
            body["headless"] = True
        self.lines: list[bytes] = []
        with client.http.stream("POST", f"/api/cordis/sessions/{session_id}/messages",
                                json=body, headers=client.headers(True), timeout=30) as reply:
            self.status = reply.status_code
            self.headers = reply.headers
            pending = b""
            for data in reply.iter_raw():
                pending += data
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    self.lines.append(line)
                    if on_chunk is not None:
                        on_chunk(json.loads(line))
            self.trailing = pending
        self.chunks = [json.loads(line) for line in self.lines]

    def types(self) -> list[str]:
        """The chunk types in order."""
        return [chunk["type"] for chunk in self.chunks]


@pytest.mark.req("BR-02", "BR-04")
def test_a_turn_streams_one_chunk_per_line_in_sequence_and_ends_with_done(
        client: ApiClient) -> None:
    sid = _session(client)
    tag = nonce()
    turn = RawTurn(client, sid, f"Say it {marker('final', tag)}")
    assert turn.status == 200
    assert turn.headers["content-type"] == "application/x-ndjson"
    assert turn.headers["cache-control"] == "no-store"
    assert turn.headers["x-accel-buffering"] == "no"
    assert turn.trailing == b"", "the last chunk ends with its newline"
    for line in turn.lines:
        chunk = json.loads(line)  # one JSON object per line: two on one line do not parse
        assert isinstance(chunk, dict) and chunk["type"] in CHUNK_TYPES, line
    chunks = turn.chunks
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert all(c["session_id"] == sid and c["agent_id"] for c in chunks)
    assert turn.types()[-1] == "done" and chunks[-1]["reason"] == "completed"
    assert turn.types().count("error") == 0
    text = "".join(c["text"] for c in chunks if c["type"] == "text")
    assert text == f"KIT final « ünïcödé » 𝄞 {tag}"
    assert "".join(c["text"] for c in chunks if c["type"] == "reasoning") == "Kit reasoning."
    messages = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert [(m["role"], m["text"]) for m in messages][-1] == ("assistant", text)


@pytest.mark.req("BR-02", "BR-11")
def test_a_tool_call_and_its_result_stream_and_stay_attached(client: ApiClient) -> None:
    sid = _session(client)
    turn = RawTurn(client, sid, f"What is in notes? {marker('files-list')}")
    types = turn.types()
    assert [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]] == [
        "tool-call", "tool-result", "text", "facts", "done"]
    call, result = turn.chunks[0], turn.chunks[1]
    assert call["call_id"] == result["call_id"] and call["tool_id"] == "files.list"
    assert result["result"]["trust"] == "UNTRUSTED_DATA"
    assert result["status"] == "ok"
    stored = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    tool = next(m for m in stored if m["role"] == "tool")
    assert (tool["call_id"], tool["status"]) == (call["call_id"], "ok")


@pytest.mark.req("BR-12", "BR-11", "GW-07")
def test_allow_once_runs_that_one_write_and_deny_refuses_the_next(client: ApiClient) -> None:
    sid = _session(client)
    tag = nonce()
    decided: list[str] = []

    def decide(chunk: dict[str, Any]) -> None:
        if chunk["type"] != "approval-request":
            return
        url = f"/api/cordis/sessions/{sid}/approvals/{chunk['approval_id']}"
        decision = "allowed-once" if not decided else "rejected"
        decided.append(decision)
        answer = client.post(url, {"decision": decision})
        assert answer.status_code == 200, answer.text
        again = client.post(url, {"decision": decision})
        assert (again.status_code, again.json()["error"]["code"]) == (409,
                                                                      "APPROVAL_NOT_PENDING")

    turn = RawTurn(client, sid, f"write two files {marker('write-two', tag)}", on_chunk=decide)
    assert decided == ["allowed-once", "rejected"]
    assert [c["decision"] for c in turn.chunks if c["type"] == "approval-decision"] == decided
    results = [c for c in turn.chunks if c["type"] == "tool-result"]
    assert [r["status"] for r in results] == ["ok", "refused"]
    assert results[1]["result"]["data"]["error"]["code"] == "PERMISSION_DENIED"
    settings = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["settings"]
    assert settings["permission_mode"] == "read-only", "allow once changes no mode"
    read = RawTurn(client, sid, f"read them back {marker('read-two', tag)}")
    reads = [c for c in read.chunks if c["type"] == "tool-result"]
    assert reads[0]["status"] == "ok" and reads[0]["result"]["data"]["content"] == "one"
    assert reads[1]["status"] != "ok", "the denied write wrote nothing"


@pytest.mark.req("BR-12")
def test_a_headless_caller_gets_an_automatic_refusal(client: ApiClient) -> None:
    sid = _session(client)
    turn = RawTurn(client, sid, f"write {marker('write-two')}", headless=True)
    assert "approval-request" not in turn.types()
    results = [c for c in turn.chunks if c["type"] == "tool-result"]
    assert results and all(r["result"]["data"]["error"]["code"] == "PERMISSION_DENIED"
                           for r in results)


@pytest.mark.req("BR-05", "BR-08")
def test_a_disconnect_cancels_the_turn_and_a_deleted_session_is_gone(client: ApiClient) -> None:
    sid = _session(client)
    path = f"/api/cordis/sessions/{sid}/messages"
    with client.http.stream("POST", path, json={"text": f"long {marker('long-final')}"},
                            headers=client.headers(True), timeout=30) as reply:
        assert reply.status_code == 200
        for data in reply.iter_raw():
            if b'"text"' in data:
                break  # the client goes away mid-answer

    def idle() -> bool:
        session = client.get(f"/api/cordis/sessions/{sid}").json()["session"]
        return not session["active_turn"]

    wait_until(idle, timeout=15)
    messages = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert [m["role"] for m in messages] == ["user"], "no answer is stored for a cancelled turn"
    assert client.delete(f"/api/cordis/sessions/{sid}").status_code in (200, 204)
    gone = client.get(f"/api/cordis/sessions/{sid}")
    assert gone.status_code == 404


@pytest.mark.req("BR-13", "SV-08", "BR-20")
def test_the_openai_face_answers_a_chat_client_with_a_bearer(model_target: Served) -> None:
    with httpx.Client(base_url=f"{model_target.url}/api/cordis/v1", trust_env=False, timeout=30,
                      headers={"Authorization": f"Bearer {model_target.admin_token}"}) as http:
        models = http.get("/models")
        assert models.status_code == 200
        ids = [m["id"] for m in models.json()["data"]]
        model = next(i for i in ids if i.endswith(f":{KIT_MODEL}"))
        tag = nonce()
        body = {"model": model, "messages": [
            {"role": "user", "content": f"hello {marker('final', tag)}"}]}
        answer = http.post("/chat/completions", json=body)
        assert answer.status_code == 200, answer.text
        choice = answer.json()["choices"][0]
        assert choice["message"]["content"] == f"KIT final « ünïcödé » 𝄞 {tag}"
        stream = http.post("/chat/completions", json=body | {"stream": True, "messages": [
            {"role": "user", "content": f"hello {marker('final', tag + 'b')}"}]})
        chunks, done = completion_chunks(stream.text)  # blank-line events (WHATWG)
        assert done, "the stream ends with data: [DONE]"
        assert delta_text(chunks) == f"KIT final « ünïcödé » 𝄞 {tag}b"
        unknown = http.post("/chat/completions", json=body | {"model": "engine:x:nope"})
        assert unknown.status_code == 404
        assert unknown.json()["error"]["code"] == "UNKNOWN_MODEL"


@pytest.mark.req("BR-13")
def test_the_official_openai_client_streams_what_the_kit_reads(model_target: Served) -> None:
    client = openai.OpenAI(base_url=f"{model_target.url}/api/cordis/v1", max_retries=0,
                           api_key=model_target.admin_token, timeout=30)
    with client:
        model = next(m.id for m in client.models.list() if m.id.endswith(f":{KIT_MODEL}"))
        tag = nonce()
        stream = client.chat.completions.create(model=model, stream=True, messages=[
            {"role": "user", "content": f"hello {marker('final', tag)}"}])
        parts = [chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices]
    assert "".join(parts) == f"KIT final « ünïcödé » 𝄞 {tag}"
    assert len(parts) >= 2, "a role chunk, then the content: each its own event"


@pytest.mark.req("BR-13", "BR-04")
def test_a_completions_transient_session_is_no_session_of_the_session_routes(
        model_target: Served) -> None:
    """While a streamed completion runs, its transient session (the id in ``chatcmpl-ID``) is
    reached through none of the session routes: each is 404 SESSION_NOT_FOUND, and the
    completion ends as if nobody had tried."""
    admin = model_target.client()
    with httpx.Client(base_url=f"{model_target.url}/api/cordis/v1", trust_env=False, timeout=30,
                      headers={"Authorization": f"Bearer {model_target.admin_token}"}) as http:
        model = next(m["id"] for m in http.get("/models").json()["data"]
                     if m["id"].endswith(f":{KIT_MODEL}"))
        body = {"model": model, "stream": True, "messages": [
            {"role": "user", "content": f"think {marker('slow-answer')}"}]}
        tried: dict[str, tuple[int, str]] = {}
        text = ""
        with http.stream("POST", "/chat/completions", json=body) as reply:
            assert reply.status_code == 200
            for data in reply.iter_text():
                text += data
                if tried or "\n\n" not in text:
                    continue
                first = json.loads(text.split("\n\n")[0].removeprefix("data: "))
                transient = str(first["id"]).removeprefix("chatcmpl-")
                path = f"/api/cordis/sessions/{transient}"
                for name, answer in (
                        ("get", admin.get(path)), ("delete", admin.delete(path)),
                        ("settings", admin.patch(f"{path}/settings",
                                                 {"permission_mode": "workspace-write"})),
                        ("messages", admin.post(f"{path}/messages", {"text": "hi"})),
                        ("cancel", admin.post(f"{path}/cancel", {})),
                        ("approval", admin.post(f"{path}/approvals/appr_x",
                                                {"decision": "allowed-once"}))):
                    tried[name] = (answer.status_code, answer.json()["error"]["code"])
                assert "[DONE]" not in text, "tried while the completion still ran"
    admin.close()
    assert set(tried.values()) == {(404, "SESSION_NOT_FOUND")}, tried
    assert len(tried) == 6
    chunks, done = completion_chunks(text)
    assert done and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert delta_text(chunks) == "KIT should never be asked."


# -- what mainstream clients send (BR-20) and direct routes (BR-17) ----------------------------

def _face(model_target: Served) -> httpx.Client:
    return httpx.Client(base_url=f"{model_target.url}/api/cordis/v1", trust_env=False,
                        timeout=30,
                        headers={"Authorization": f"Bearer {model_target.admin_token}"})


def _kit_models(http: httpx.Client) -> tuple[str, str | None]:
    ids = [m["id"] for m in http.get("/models").json()["data"]]
    engine = next(i for i in ids if i.startswith("engine:") and i.endswith(f":{KIT_MODEL}"))
    direct = next((i for i in ids if i.startswith("direct:") and i.endswith(f":{KIT_MODEL}")),
                  None)
    return engine, direct


@pytest.mark.req("BR-20", "BR-13")
def test_client_tools_are_answered_without_calls_and_a_forced_one_is_refused_by_name(
        model_target: Served) -> None:
    tools = [{"type": "function", "function": {"name": "get_current_timestamp",
                                               "parameters": {"type": "object"}}}]
    with _face(model_target) as http:
        engine, _ = _kit_models(http)
        tag = nonce()
        body = {"model": engine, "tools": tools, "top_k": 40, "reasoning_effort": "medium",
                "messages": [{"role": "user", "content": f"hi {marker('final', tag)}"}]}
        answered = http.post("/chat/completions", json=body)
        assert answered.status_code == 200, answered.text
        message = answered.json()["choices"][0]["message"]
        assert message["content"] == f"KIT final « ünïcödé » 𝄞 {tag}"
        assert not message.get("tool_calls")
        assert set(answered.json()["usage"]) >= {"prompt_tokens", "completion_tokens",
                                                 "total_tokens"}
        forced = http.post("/chat/completions", json={**body, "tool_choice": "required"})
        assert forced.status_code == 422
        assert forced.json()["error"]["param"] == "tool_choice"


@pytest.mark.req("BR-20", "BR-10")
def test_one_model_is_retrieved_and_an_unknown_one_is_an_openai_404(model_target: Served) -> None:
    with _face(model_target) as http:
        engine, _ = _kit_models(http)
        one = http.get(f"/models/{engine}")
        assert one.status_code == 200 and one.json()["id"] == engine
        assert one.json()["object"] == "model"
        missing = http.get("/models/engine:kit:nope")
        assert missing.status_code == 404
        assert set(missing.json()["error"]) == {"message", "type", "param", "code"}


@pytest.mark.req("BR-17")
def test_a_direct_route_answers_with_the_models_own_text(model_target: Served) -> None:
    """The engine route gives the agent's answer; the direct route the model's reply as it
    wrote it (here the kit script's raw action JSON): no agent, no tools."""
    with _face(model_target) as http:
        _, direct = _kit_models(http)
        assert direct is not None, "every engine route of a model has its direct route"
        tag = nonce()
        raw = http.post("/chat/completions", json={"model": direct, "messages": [
            {"role": "user", "content": f"title this {marker('final', tag)}"}]})
        assert raw.status_code == 200, raw.text
        text = raw.json()["choices"][0]["message"]["content"]
        assert json.loads(text) == {"type": "final", "text": f"KIT final « ünïcödé » 𝄞 {tag}"}
        usage = model_target.client().get("/api/cordis/usage", params={"limit": 20})
        assert any(r["model"] == direct and r["caller"] == "direct"
                   for r in usage.json()["usage"])


@pytest.mark.exclusive  # it switches the target's bridge off: no other kit test meanwhile
@pytest.mark.req("BR-16", "HO-06")
def test_the_admin_releases_the_engine_and_enables_it_again(client: ApiClient) -> None:
    sid = _session(client)
    tag = nonce()
    assert RawTurn(client, sid, f"Before {marker('final', tag)}").chunks[-1]["reason"] == (
        "completed")

    def health() -> dict[str, Any]:
        answer: dict[str, Any] = client.http.get("/api/cordis/health").json()
        return answer

    off = client.post("/api/cordis/admin/disable", {})
    try:
        assert (off.status_code, off.json()) == (200, {"bridge": {"state": "disabled"}})
        assert health()["state"] == "disabled"
        for path in ("/api/cordis/sessions", "/api/cordis/v1/models"):
            refused = client.get(path)
            assert refused.status_code == 503, (path, refused.text)
            assert "CORDIS_DISABLED" in refused.text, path
        assert client.get("/api/v1/agent-runtime/status").status_code == 200, "the runtime too"
    finally:
        on = client.post("/api/cordis/admin/enable", {})
        wait_until(lambda: health()["state"] != "starting", timeout=60)
    assert on.status_code == 200 and on.json()["bridge"]["state"] in ("starting", "ready")
    assert health()["state"] == "ready", health()
    session = client.get(f"/api/cordis/sessions/{sid}").json()["session"]
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"], "durable"
    again = RawTurn(client, _session(client), f"After {marker('final')}")
    assert again.chunks[-1]["reason"] == "completed", "a new host runs turns"


@pytest.mark.req("BR-19", "BR-10")
def test_every_providers_models_are_listed_and_a_down_one_answers_for_no_other(
        client: ApiClient, model_target: Served) -> None:
    """The profile's providers (QR-07): the kit's provider again as ``kit-b``, and
    ``kit-down``, which never answers."""
    listed = client.get("/api/cordis/models").json()["models"]
    available = {m["id"]: m["available"] for m in listed}
    assert available[f"engine:local:{KIT_MODEL}"] is True
    assert available[f"engine:kit-b:{KIT_MODEL}"] is True
    [down] = [m for m in listed if m["provider"] == "kit-down"]
    assert (down["id"], down["available"]) == ("engine:kit-down:absent", False)
    assert isinstance(down["reason"], str) and down["reason"], "the reason is said"
    with _face(model_target) as http:
        face = {m["id"]: m["owned_by"] for m in http.get("/models").json()["data"]}
    assert face[f"engine:kit-b:{KIT_MODEL}"] == "kit-b"
    assert face["engine:kit-down:absent"] == "kit-down"

    tag = nonce()
    other = RawTurn(client, _session(client, model=f"engine:kit-b:{KIT_MODEL}"),
                    f"Another provider {marker('final', tag)}")
    assert other.chunks[-1]["reason"] == "completed"
    assert tag in "".join(c["text"] for c in other.chunks if c["type"] == "text")
    gone = RawTurn(client, _session(client, model="engine:kit-down:absent"),
                   f"Nobody home {marker('final')}")
    assert [c["type"] for c in gone.chunks] == ["error", "done"], gone.chunks
    assert gone.chunks[0]["code"] == "MODEL_UNAVAILABLE", "said down, never replaced"
