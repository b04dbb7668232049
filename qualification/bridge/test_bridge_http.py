"""BR-01..BR-12, HO-06: the bridge end to end over HTTP against the fake provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.bridge import Engine
from labfy_ref.netutil import free_port
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import ApiClient, LiveServer, TurnReader, wait_until

FINAL_TEXT = "Lavender drew 62 visits — the busiest garden.\nLine two: « ünïcödé » 𝄞 \u2028 end."


def _final(text: str) -> str:
    return json.dumps({"type": "final", "text": text})


def _call(tool_id: str, **arguments: Any) -> str:
    return json.dumps({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})


def _bridge(specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
            *answers: Answer, **options: Any) -> tuple[LiveServer, ApiClient, Any]:
    provider = provider_factory(Scenario(name="bridge", answers=answers))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url), **options)
    return server, server.client(), provider


def _session(client: ApiClient, **settings: str) -> str:
    response = client.post("/api/cordis/sessions", settings)
    assert response.status_code == 201, response.text
    session = response.json()["session"]
    assert set(session) >= {"id", "created_at", "settings"}
    return str(session["id"])


@pytest.mark.req("HO-06", "BR-04")
def test_the_bridge_is_off_by_default(demo_client: ApiClient) -> None:
    response = demo_client.get("/api/cordis/sessions")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "CORDIS_DISABLED"
    health = demo_client.http.get("/api/cordis/health").json()
    assert (health["state"], health["host"]) == ("disabled", None)


@pytest.mark.req("BR-01", "BR-02", "BR-04")
def test_a_final_answer_streams_as_text_chunks_while_the_model_decodes(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    server, client, _ = _bridge(specimen, provider_factory, server_factory,
                                Answer(content=_final(FINAL_TEXT), reasoning="Thinking aloud.",
                                       chunk_chars=5, chunk_delay=0.01))
    assert isinstance(server.state.bridge.engine(), Engine)
    sid = _session(client)
    reader = TurnReader(client, sid, "How busy was garden 4?")
    chunks = reader.join()
    assert reader.status == 200
    assert reader.headers["content-type"] == "application/x-ndjson"
    assert reader.headers["cache-control"] == "no-store"
    assert reader.headers["x-accel-buffering"] == "no"
    types = [c["type"] for c in chunks]
    assert types[-1] == "done" and chunks[-1]["reason"] == "completed"
    assert types.count("text") > 3, "text arrives in pieces while decoding"
    assert "".join(c["text"] for c in chunks if c["type"] == "text") == FINAL_TEXT
    assert "".join(c["text"] for c in chunks if c["type"] == "reasoning") == "Thinking aloud."
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert all(c["session_id"] == sid and c["agent_id"] == "assistant" for c in chunks)
    messages = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert [(m["role"], m["text"]) for m in messages] == [
        ("user", "How busy was garden 4?"), ("assistant", FINAL_TEXT)]


@pytest.mark.req("BR-02", "BR-11")
def test_tool_calls_and_results_stream_and_stay_attached_after_reload(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, _ = _bridge(specimen, provider_factory, server_factory,
                           Answer(content=_call("files.list", path="notes")),
                           Answer(content=_final("One note file.")))
    sid = _session(client)
    chunks = TurnReader(client, sid, "What is in notes?").join()
    types = [c["type"] for c in chunks]
    runs = [t for i, t in enumerate(types) if i == 0 or t != types[i - 1]]
    assert runs == ["tool-call", "tool-result", "text", "facts", "done"]
    call, result = chunks[0], chunks[1]
    assert call["call_id"] == result["call_id"] and call["tool_id"] == "files.list"
    assert result["result"]["trust"] == "UNTRUSTED_DATA"
    assert result["result"]["data"]["entries"][0]["name"] == "field-log.txt"
    tool = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"][1]
    assert (tool["role"], tool["call_id"], tool["status"]) == ("tool", call["call_id"], "ok")


@pytest.mark.req("BR-12", "BR-11")
def test_allow_once_runs_that_single_write_and_changes_no_mode(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, _ = _bridge(specimen, provider_factory, server_factory,
                           Answer(content=_call("files.write", path="a.txt", content="one")),
                           Answer(content=_call("files.write", path="b.txt", content="two")),
                           Answer(content=_final("done")))
    sid = _session(client)
    reader = TurnReader(client, sid, "write two files")
    first = reader.wait_for("approval-request")
    assert first["summary"].startswith("files.write a.txt")
    assert not (specimen / "files" / "a.txt").exists(), "nothing before the decision"
    url = f"/api/cordis/sessions/{sid}/approvals/{first['approval_id']}"
    assert client.post(url, {"decision": "allowed-once"}).status_code == 200
    again = client.post(url, {"decision": "allowed-once"})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "APPROVAL_NOT_PENDING"
    wait_until(lambda: reader.types().count("approval-request") == 2)
    second = [c for c in reader.chunks if c["type"] == "approval-request"][1]
    client.post(f"/api/cordis/sessions/{sid}/approvals/{second['approval_id']}",
                {"decision": "rejected"})
    chunks = reader.join()
    assert (specimen / "files" / "a.txt").read_text() == "one"
    assert not (specimen / "files" / "b.txt").exists()
    decisions = [c["decision"] for c in chunks if c["type"] == "approval-decision"]
    assert decisions == ["allowed-once", "rejected"]
    results = [c for c in chunks if c["type"] == "tool-result"]
    assert [r["status"] for r in results] == ["ok", "refused"]
    assert results[1]["result"]["data"]["error"]["code"] == "PERMISSION_DENIED"
    session = client.get(f"/api/cordis/sessions/{sid}").json()["session"]
    assert session["settings"]["permission_mode"] == "read-only"


@pytest.mark.req("BR-12")
def test_a_headless_caller_gets_an_automatic_refusal(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, _ = _bridge(specimen, provider_factory, server_factory,
                           Answer(content=_call("files.write", path="h.txt", content="x")),
                           Answer(content=_final("refused")))
    sid = _session(client)
    chunks = TurnReader(client, sid, "write", headless=True).join()
    assert "approval-request" not in [c["type"] for c in chunks]
    result = next(c for c in chunks if c["type"] == "tool-result")
    assert result["result"]["data"]["error"]["code"] == "PERMISSION_DENIED"
    assert not (specimen / "files" / "h.txt").exists()


@pytest.mark.req("BR-11")
def test_a_workspace_write_session_writes_without_asking(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, _ = _bridge(specimen, provider_factory, server_factory,
                           Answer(content=_call("files.write", path="w.txt", content="ok")),
                           Answer(content=_final("written")))
    sid = _session(client, permission_mode="workspace-write")
    chunks = TurnReader(client, sid, "write").join()
    assert "approval-request" not in [c["type"] for c in chunks]
    assert (specimen / "files" / "w.txt").read_text() == "ok"
    escape = client.post("/api/cordis/sessions", {"permission_mode": "root"})
    assert escape.status_code == 422


@pytest.mark.req("BR-09")
def test_settings_are_durable_and_refused_while_a_turn_runs(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, _ = _bridge(specimen, provider_factory, server_factory,
                           Answer(content=_call("files.write", path="s.txt", content="x")),
                           Answer(content=_final("ok")))
    sid = _session(client)
    reader = TurnReader(client, sid, "write")
    approval = reader.wait_for("approval-request")
    busy = client.patch(f"/api/cordis/sessions/{sid}/settings",
                        {"permission_mode": "workspace-write"})
    assert busy.status_code == 409
    assert busy.json()["error"]["code"] == "SESSION_BUSY"
    client.post(f"/api/cordis/sessions/{sid}/approvals/{approval['approval_id']}",
                {"decision": "rejected"})
    reader.join()
    changed = client.patch(f"/api/cordis/sessions/{sid}/settings",
                           {"permission_mode": "workspace-write"})
    assert changed.status_code == 200
    assert changed.json()["session"]["settings"]["permission_mode"] == "workspace-write"
    unknown = client.patch(f"/api/cordis/sessions/{sid}/settings", {"mood": "happy"})
    assert unknown.status_code == 422


@pytest.mark.req("BR-09", "BR-11")
def test_a_settings_change_names_what_changes_and_keeps_the_rest(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    """PATCH settings changes only the settings it names; a model of this engine's own
    provider is accepted, another provider's or an unknown mode is refused and changes
    nothing; what was changed is read back the same after a restart."""
    server, client, fake = _bridge(specimen, provider_factory, server_factory,
                                   Answer(content=_final("ok")))
    provider_url = fake.base_url
    sid = _session(client, permission_mode="workspace-write")
    settings = f"/api/cordis/sessions/{sid}/settings"
    default = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["settings"]
    assert default["permission_mode"] == "workspace-write"
    own = default["model"]  # the engine's default route, engine:<provider>:<model>
    provider = own.split(":")[1]
    moved = client.patch(settings, {"model": f"engine:{provider}:another-model"})
    assert moved.status_code == 200, moved.text
    assert moved.json()["session"]["settings"] == {
        "model": f"engine:{provider}:another-model", "permission_mode": "workspace-write"}
    kept = client.patch(settings, {"permission_mode": "read-only"})
    assert kept.json()["session"]["settings"] == {
        "model": f"engine:{provider}:another-model", "permission_mode": "read-only"}
    foreign = client.patch(settings, {"model": f"engine:not-{provider}:m"})
    assert (foreign.status_code, foreign.json()["error"]["code"]) == (422, "MODEL_NOT_FOUND")
    bogus = client.patch(settings, {"permission_mode": "everything"})
    assert (bogus.status_code, bogus.json()["error"]["code"]) == (422, "VALIDATION_FAILED")
    after = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["settings"]
    assert after == kept.json()["session"]["settings"]
    server.stop()  # durable events: a restarted server reads the same settings from the log
    again = server_factory(specimen, bridge=True, **local_agent(provider_url)).client()
    assert again.get(f"/api/cordis/sessions/{sid}").json()["session"]["settings"] == after


@pytest.mark.req("BR-05", "BR-03")
def test_a_client_disconnect_cancels_the_turn(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    server, client, provider = _bridge(
        specimen, provider_factory, server_factory,
        Answer(content=_final("x" * 400), chunk_chars=2, chunk_delay=0.05),
        Answer(content=_final("never requested")))
    sid = _session(client)
    reader = TurnReader(client, sid, "long answer")
    reader.wait_for("text")
    reader.disconnect()
    engine = server.state.bridge.engine()
    wait_until(lambda: not engine.get_session(sid)["active_turn"])  # the turn's task is over
    assert len(provider.chat_requests()) == 1, "no further provider request"
    messages = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert [m["role"] for m in messages] == ["user"], "finished messages stay readable"


@pytest.mark.req("BR-05")
def test_cancel_ends_the_stream_with_done_cancelled(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, provider = _bridge(specimen, provider_factory, server_factory,
                                  Answer(content=_final("late"), delay=3))
    sid = _session(client)
    reader = TurnReader(client, sid, "slow")
    wait_until(lambda: bool(provider.chat_requests()))
    assert client.post(f"/api/cordis/sessions/{sid}/cancel").json() == {"cancelled": True}
    chunks = reader.join()
    assert chunks[-1] == {**chunks[-1], "type": "done", "reason": "cancelled",
                          "interrupted": True}


@pytest.mark.req("BR-02")
def test_an_invalid_action_after_streaming_started_ends_with_one_error(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, provider = _bridge(specimen, provider_factory, server_factory,
                                  Answer(content='{"type":"final","text":"partial", "x": 1}',
                                         chunk_chars=4))
    sid = _session(client)
    chunks = TurnReader(client, sid, "hi").join()
    types = [c["type"] for c in chunks]
    assert types.count("error") == 1 and types[-1] == "done"
    assert types[-2] == "error" and chunks[-2]["code"] == "MODEL_PROTOCOL_ERROR"
    assert "text" in types
    assert len(provider.chat_requests()) == 1, "no repair once text was shown"


@pytest.mark.req("BR-10")
def test_models_are_the_providers_real_models_with_qualified_routes(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    _, client, _ = _bridge(specimen, provider_factory, server_factory)
    listed = client.get("/api/cordis/models").json()
    assert listed["default"] == "engine:local:fake-model"
    assert listed["models"] == [{"id": "engine:local:fake-model", "provider": "local",
                                 "model": "fake-model", "available": True}]
    sid = _session(client, model="engine:local:fake-model")
    assert client.get(f"/api/cordis/sessions/{sid}").json()["session"]["settings"]["model"] == \
        "engine:local:fake-model"
    for bad in ("fake-model", "engine:cloud:gpt", "engine::x"):
        assert client.post("/api/cordis/sessions", {"model": bad}).status_code == 422


@pytest.mark.req("BR-10", "MC-05", "BR-19")
def test_an_unreachable_provider_is_listed_unavailable_not_replaced(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True, agent_mode="local-model",
                            agent_endpoint=f"http://127.0.0.1:{free_port()}",
                            agent_model="fake-model")
    client = server.client()
    response = client.get("/api/cordis/models")
    assert response.status_code == 200
    [listed] = response.json()["models"]
    assert (listed["id"], listed["available"]) == ("engine:local:fake-model", False)
    assert "connection" in listed["reason"], listed
    sid = _session(client)
    chunks = TurnReader(client, sid, "hello").join()
    assert [c["type"] for c in chunks] == ["error", "done"]
    assert chunks[0]["code"] == "MODEL_UNAVAILABLE"
