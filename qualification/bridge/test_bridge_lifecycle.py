"""HO-03..HO-06, BR-01, BR-06..BR-08, BR-10: composition diagnosis, persistence, lifecycle."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fake_provider import Answer, Scenario
from labfy_ref.bridge import Engine, JsonlSessionStore, ModelRoute, ReferenceEngine
from labfy_ref.bridge.llm import DemoProvider
from labfy_ref.bridge.loop import AgentLoop
from labfy_ref.errors import RuntimeRefused, SessionInvalid, WorkspaceError
from labfy_ref.gateway import AgentGateway
from labfy_ref.host import Scope
from labfy_ref.workspace import open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, composition_without, local_agent
from qualification.harness import TurnReader, wait_until

CONTRACT = {"status", "model_configuration", "list_sessions", "get_session", "create_session",
            "update_session_settings", "decide_approval", "delete_session", "list_agents",
            "list_tools", "list_models", "send_message", "cancel",
            "run_transient",  # BR-13: one turn of a transient session
            "list_direct_models", "run_direct",  # BR-17: a provider model asked directly
            "session_context"}  # BR-22: what the model is told besides the messages


@pytest.mark.req("BR-01")
def test_the_contract_is_a_protocol_with_exactly_the_api_shapes() -> None:
    methods = {name for name, _ in inspect.getmembers(Engine, inspect.isfunction)
               if not name.startswith("_")}
    assert methods == CONTRACT
    module = inspect.getmodule(Engine)
    assert module is not None
    source = inspect.getsource(module).lower()
    for word in ("gateway", "jsonl", "llama", "sqlite", "referenceengine", "agentloop", "plugin"):
        assert word not in source, f"the contract mentions {word}"


@pytest.mark.req("HO-03", "HO-04", "HO-06")
def test_removing_system_prompt_shows_the_silent_engine_diagnosis(
        specimen: Path, tmp_path: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True,
                            composition=str(composition_without(tmp_path, "system_prompt")))
    client = server.client()
    health = client.http.get("/api/cordis/health").json()
    assert health["state"] == "failed"
    rows = {r["id"]: r for r in health["host"]["rows"]}
    assert (rows["tools"]["state"], rows["tools"]["missing"]) == ("PENDING", ["system_prompt"])
    assert rows["agent_loop"]["missing"] == ["tools", "system_prompt"]
    assert "system_prompt" in health["host"]["missing_mandatory"]
    assert "missing mandatory services" in health["detail"]
    refused = client.get("/api/cordis/sessions")
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["code"] == "CORDIS_UNAVAILABLE"
    assert "system_prompt" in error["message"] and "tools [PENDING" in error["message"]


@pytest.mark.req("HO-04", "HO-06")
def test_with_every_mandatory_service_the_bridge_is_ready_and_its_engine_serves(
        specimen: Path, server_factory: ServerFactory) -> None:
    """The other side of the missing-service diagnosis: the default composition provides
    every mandatory service, so the bridge is ready, names nothing missing, and its engine
    (one satisfying the engine contract) lists the sessions it holds."""
    client = server_factory(specimen, bridge=True).client()
    health = client.http.get("/api/cordis/health").json()
    assert health["state"] == "ready", health
    assert health["host"]["missing_mandatory"] == []
    made = client.post("/api/cordis/sessions", {})
    assert made.status_code == 201, made.text
    listed = client.get("/api/cordis/sessions").json()["sessions"]
    assert [s["id"] for s in listed] == [made.json()["session"]["id"]]


@pytest.mark.req("HO-05", "HO-06")
def test_server_shutdown_stops_the_host_and_releases_everything(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario(name="slow", answers=(
        Answer(content='{"type":"final","text":"late"}', delay=3),)))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    sid = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    TurnReader(client, sid, "slow")
    host = server.state.bridge.host
    assert host is not None
    store = host.service("sessions")
    engine = host.service("engine")
    wait_until(lambda: engine.get_session(sid)["active_turn"])
    server.stop()
    assert host.root.live_effects == [], "every effect was undone"
    assert store.closed, "the sessions directory handle was released"
    assert {s["state"] for s in host.status()["services"]} == {"pending"}
    assert {r["state"] for r in host.status()["rows"]} == {"DISPOSED"}
    assert asyncio.run(host.stop()) == [], "stop_host() twice is harmless"


@pytest.mark.req("BR-06")
def test_sessions_even_empty_survive_a_restart_and_continue_on_the_same_id(
        specimen: Path, server_factory: ServerFactory) -> None:
    first = server_factory(specimen, bridge=True)
    client = first.client()
    empty = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    used = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    chunks = TurnReader(client, used, "hello").join()
    assert chunks[-1]["reason"] == "completed"
    first.stop()
    second = server_factory(specimen, bridge=True)
    client = second.client()
    listed = [s["id"] for s in client.get("/api/cordis/sessions").json()["sessions"]]
    assert listed == [used, empty], "newest first"
    again = TurnReader(client, used, "and again").join()
    assert again[-1]["reason"] == "completed"
    roles = [m["role"] for m in client.get(f"/api/cordis/sessions/{used}").json()["session"][
        "messages"]]
    assert roles.count("user") == 2


@pytest.mark.req("BR-07")
def test_a_torn_last_line_is_dropped_with_every_complete_event_kept(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    client = server.client()
    sid = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    TurnReader(client, sid, "hello").join()
    log = specimen / "sessions" / f"{sid}.jsonl"
    before = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    with log.open("ab") as handle:
        handle.write(b'{"kind":"message","role":"user","text":"torn')
    after = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert after == before


@pytest.mark.req("BR-07", "BR-08")
def test_corrupt_or_symlinked_logs_are_refused_and_delete_removes_the_log(
        specimen: Path, tmp_path: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    client = server.client()
    corrupt = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    with (specimen / "sessions" / f"{corrupt}.jsonl").open("ab") as handle:
        handle.write(b"garbage\n{}\n")
    refused = client.get(f"/api/cordis/sessions/{corrupt}")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "SESSION_INVALID")
    outside = tmp_path / "outside.jsonl"
    outside.write_text('{"kind":"header","version":1,"session_id":"x"}\n')
    linked = "ses_" + "1" * 26
    (specimen / "sessions" / f"{linked}.jsonl").symlink_to(outside)
    assert client.get(f"/api/cordis/sessions/{linked}").status_code == 409
    gone = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    assert client.delete(f"/api/cordis/sessions/{gone}").status_code == 200
    assert not (specimen / "sessions" / f"{gone}.jsonl").exists()
    assert client.get(f"/api/cordis/sessions/{gone}").status_code == 404
    assert outside.read_text().startswith('{"kind":"header"')


@pytest.mark.req("BR-07", "HO-06")
def test_a_symlinked_sessions_directory_is_refused(
        specimen: Path, tmp_path: Path, server_factory: ServerFactory) -> None:
    sessions = specimen / "sessions"
    sessions.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    sessions.symlink_to(elsewhere)
    with pytest.raises(WorkspaceError, match="symlink"):
        server_factory(specimen, bridge=True)
    with pytest.raises(SessionInvalid):
        JsonlSessionStore(sessions)


class _NoDeleteStore:
    """A store backend without delete (BR-08): the engine must say so, not pretend."""

    deletes = False  # the capability, stated; the engine must not call delete anyway
    root = None

    def __init__(self, inner: JsonlSessionStore) -> None:
        self.max_record_bytes, self.max_log_bytes = inner.max_record_bytes, inner.max_log_bytes
        self.create, self.append, self.append_line = inner.create, inner.append, inner.append_line
        self.encode, self.check_room = inner.encode, inner.check_room
        self.read_log, self.stamp, self.list_ids = inner.read_log, inner.stamp, inner.list_ids
        self.dir_stamp = inner.dir_stamp

    def delete(self, session_id: str) -> None:
        raise AssertionError(f"the engine deleted {session_id} through a store that cannot")


@pytest.mark.req("BR-08")
def test_a_store_without_delete_answers_an_error(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    store = JsonlSessionStore(workspace.sessions_dir)
    gateway = AgentGateway(workspace, workspace.open_store())
    engine = ReferenceEngine(_NoDeleteStore(store), AgentLoop(DemoProvider(), gateway, "p"),
                             Scope("test"))
    sid = engine.create_session({})["id"]
    with pytest.raises(RuntimeRefused) as caught:
        asyncio.run(engine.delete_session(sid))
    assert (caught.value.code.value, caught.value.status) == ("DELETE_UNSUPPORTED", 501)
    assert sid in store.list_ids()


@pytest.mark.req("BR-10")
@given(st.text(min_size=1), st.text(min_size=1))
def test_qualified_routes_round_trip_any_name(provider: str, model: str) -> None:
    route = ModelRoute(provider, model)
    text = str(route)
    assert text.count(":") == 2
    assert ModelRoute.parse(text) == route


@pytest.mark.req("BR-10")
@pytest.mark.parametrize("text", [
    "other:local:m", "Engine:local:m", "engine ", ":local:m", "engine:local", "engine::m",
    "engine:local:", "engine:local:m:x", "local:m"])
def test_a_route_not_written_engine_provider_model_is_refused(text: str) -> None:
    """Only ``engine:<provider>:<model>``, both parts non-empty: another prefix (whatever its
    case), a missing or empty part, or an extra one is MODEL_NOT_FOUND."""
    with pytest.raises(RuntimeRefused) as caught:
        ModelRoute.parse(text)
    assert caught.value.code.value == "MODEL_NOT_FOUND"
