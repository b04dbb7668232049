"""BR-06, BR-07, AV-07: a session's history is a cached projection extended on append.

A turn used to read and parse its whole log again; now the engine reads a log
once, extends what it projected with its own appends, reads it again only when
the log changed behind its back, and keeps a bounded number of sessions.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.bridge import JsonlSessionStore, ReferenceEngine
from labfy_ref.bridge.llm import DemoProvider
from labfy_ref.bridge.loop import AgentLoop
from labfy_ref.bridge.plugins import bridge_surface
from labfy_ref.bridge.store.history import HistoryCache, SessionState
from labfy_ref.bridge.store.projection import chat_history, check_log, project_messages
from labfy_ref.errors import SessionInvalid
from labfy_ref.gateway import AgentGateway
from labfy_ref.host import Scope
from labfy_ref.protocol import ChatMessage
from labfy_ref.workspace import open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import TurnReader

FINAL = json.dumps({"type": "final", "text": "noted"})
LIST = json.dumps({"type": "tool_call", "tool_id": "files.list", "arguments": {"path": ""}})


def _counting(store: JsonlSessionStore, reads: list[str]) -> None:
    """Count every read of a log through this store (the real reads still happen)."""
    for name in ("read", "read_log"):
        real: Callable[[str], Any] = getattr(store, name)

        def counted(session_id: str, real: Callable[[str], Any] = real,
                    name: str = name) -> Any:
            reads.append(name)
            return real(session_id)

        setattr(store, name, counted)


def _fresh_history(sessions: Path, session_id: str) -> list[ChatMessage]:
    store = JsonlSessionStore(sessions)
    try:
        header, events = store.read(session_id)
    finally:
        store.close()
    check_log(session_id, header, events)
    return chat_history(project_messages(events))


@pytest.mark.req("BR-06", "AV-07", "BR-15")
def test_turns_never_read_their_log_again(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    sessions = JsonlSessionStore(workspace.sessions_dir)
    reads: list[str] = []
    _counting(sessions, reads)
    engine = ReferenceEngine(sessions, AgentLoop(
        DemoProvider(), bridge_surface(AgentGateway(workspace, store)), "p"), Scope("test"))

    async def run() -> str:
        session_id: str = engine.create_session({})["id"]
        for number in range(30):
            chunks = [c async for c in engine.send_message(session_id, f"turn {number}")
                      .iterate()]
            assert chunks[-1]["reason"] == "completed", chunks[-2:]
        return session_id

    session_id = asyncio.run(run())
    assert reads == [], "the engine wrote this log: it never had to read it"
    state = engine.catalog.state(session_id)
    assert state.history() == _fresh_history(workspace.sessions_dir, session_id)
    assert engine.get_session(session_id)["messages"] == project_messages(
        sessions.read_log(session_id).events)
    assert sum(m["role"] == "user" for m in state.messages) == 30
    store.close()
    sessions.close()


@pytest.mark.req("BR-05", "AV-07")
def test_a_turn_cancelled_before_its_first_step_ends_its_stream_and_is_forgotten(
        specimen: Path) -> None:
    """A client gone before the turn's task ever ran: its stream still ends with one
    ``done`` (cancelled, interrupted), and the engine forgets the turn."""
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    sessions = JsonlSessionStore(workspace.sessions_dir)
    engine = ReferenceEngine(sessions, AgentLoop(
        DemoProvider(), bridge_surface(AgentGateway(workspace, store)), "p"), Scope("test"))

    async def run() -> tuple[str, list[dict[str, Any]]]:
        session_id: str = engine.create_session({})["id"]
        handle = engine.send_message(session_id, "never started")
        handle.cancel()  # before the event loop ran the turn's task at all

        async def read() -> list[dict[str, Any]]:
            return [chunk async for chunk in handle.iterate()]

        chunks = await asyncio.wait_for(read(), timeout=10)
        for _ in range(500):  # bounded: the engine forgets it once its records are written
            if not engine.get_session(session_id)["active_turn"]:
                break
            await asyncio.sleep(0.01)
        return session_id, chunks

    try:
        session_id, chunks = asyncio.run(run())
        assert [(c["type"], c.get("reason"), c.get("interrupted")) for c in chunks] == [
            ("done", "cancelled", True)]
        assert not engine.get_session(session_id)["active_turn"]
        assert engine.status()["active_turns"] == 0
    finally:
        store.close()
        sessions.close()


@pytest.mark.req("BR-06", "BR-15")
def test_each_turn_sends_the_model_the_history_its_log_holds(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("alternate", (Answer(content=LIST),
                                                       Answer(content=FINAL)) * 6))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    for number in range(6):
        before = _fresh_history(specimen / "sessions", session_id)
        assert TurnReader(client, session_id, f"turn {number}").join()[-1]["reason"] == \
            "completed"
        sent = json.loads(provider.chat_requests()[-2].body)["messages"]
        assert sent[1:] == [*before, {"role": "user", "content": f"turn {number}"}]


@pytest.mark.req("BR-06", "BR-07")
def test_a_log_edited_behind_the_servers_back_is_read_again(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario.always(FINAL))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    TurnReader(client, session_id, "first").join()
    path = specimen / "sessions" / f"{session_id}.jsonl"

    def messages() -> list[tuple[str, str]]:
        reply = client.get(f"/api/cordis/sessions/{session_id}")
        assert reply.status_code == 200, reply.text
        return [(m["role"], m["text"]) for m in reply.json()["session"]["messages"]]

    assert messages() == [("user", "first"), ("assistant", "noted")]
    outside = JsonlSessionStore(specimen / "sessions")  # another tool appends
    outside.append(session_id, {"kind": "message", "role": "user", "text": "from elsewhere",
                                "at": "2026-01-01T00:00:00Z"})
    outside.close()
    assert messages()[-1] == ("user", "from elsewhere")
    TurnReader(client, session_id, "second").join()
    sent = json.loads(provider.chat_requests()[-1].body)["messages"]
    assert {"role": "user", "content": "from elsewhere"} in sent
    header = path.read_bytes().split(b"\n")[0] + b"\n"
    path.write_bytes(header)  # cut back to the header: the log shrank
    assert messages() == []
    path.write_bytes(header + b'{"kind":"message","role":"user","text":5}\n')
    refused = client.get(f"/api/cordis/sessions/{session_id}")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "SESSION_INVALID")
    sent_again = client.post(f"/api/cordis/sessions/{session_id}/messages", {"text": "x"})
    assert sent_again.status_code == 409, "a cached projection never hides a bad log"


@pytest.mark.req("AV-07")
def test_the_history_cache_is_bounded_by_sessions_and_bytes(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    sessions = JsonlSessionStore(workspace.sessions_dir)
    engine = ReferenceEngine(sessions, AgentLoop(
        DemoProvider(), bridge_surface(AgentGateway(workspace, store)), "p"), Scope("test"))
    cache: HistoryCache = engine.catalog.cache
    cache.max_sessions = 4
    made = [engine.create_session({})["id"] for _ in range(12)]
    for session_id in made:
        engine.get_session(session_id)
    assert len(cache) == 4 and all(sid in cache for sid in made[-4:])
    engine.get_session(made[0])  # read again, now the most recent
    assert made[0] in cache and made[-4] not in cache and len(cache) == 4
    cache.max_bytes = 1  # every log is larger: only the one in use stays
    cache.trim()
    assert len(cache) == 1 and made[0] in cache
    store.close()
    sessions.close()


@pytest.mark.req("AV-07")
def test_a_cache_of_states_evicts_the_least_recently_used(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    states = []
    for number in range(5):
        session_id = f"ses_{number:026d}"
        states.append(SessionState.load(session_id, store.create(session_id, {
            "created_at": "2026-01-01T00:00:00Z",
            "settings": {"model": "engine:demo:d", "permission_mode": "read-only"},
            "pad": "x" * (100 * number)})))
    weights = [state.weight for state in states]
    cache = HistoryCache(max_sessions=3, max_bytes=weights[2] + weights[3] + weights[4])
    for state in states:
        cache.put(state)
    assert [s.session_id in cache for s in states] == [False, False, True, True, True]
    assert cache.get(states[2].session_id) is states[2]
    cache.put(SessionState.load(states[0].session_id, store.read_log(states[0].session_id)))
    assert [s.session_id in cache for s in states] == [True, False, True, False, True]
    store.close()


def _state_with_weight(template: SessionState, number: int, weight: int) -> SessionState:
    """A state like ``template`` whose log weighs ``weight`` bytes (its summary's end)."""
    session_id = f"ses_{number:026d}"
    summary = dataclasses.replace(template.summary, session_id=session_id, end=weight)
    return SessionState(session_id, template.header, summary, [], template.lines)


@pytest.mark.req("BR-15", "AV-07")
def test_the_history_cache_keeps_the_documented_64_sessions_and_64_mib(tmp_path: Path) -> None:
    # docs/bridge.md: "the 64 most recently used sessions (at most 64 MiB of logs)".
    store = JsonlSessionStore(tmp_path)
    template = SessionState.load("ses_" + "0" * 26, store.create("ses_" + "0" * 26, {
        "created_at": "2026-01-01T00:00:00Z",
        "settings": {"model": "engine:demo:d", "permission_mode": "read-only"}}))
    store.close()
    by_count = HistoryCache()
    small = [_state_with_weight(template, n, 1000) for n in range(1, 66)]
    for state in small[:64]:
        by_count.put(state)
    assert len(by_count) == 64, "64 sessions of a kilobyte all stay"
    by_count.put(small[64])
    assert len(by_count) == 64 and small[0].session_id not in by_count
    by_bytes = HistoryCache()
    quarter = 16 * 1024 * 1024
    full = [_state_with_weight(template, n, quarter) for n in range(100, 104)]
    for state in full:
        by_bytes.put(state)
    assert len(by_bytes) == 4, "64 MiB of logs exactly: every one stays"
    by_bytes.put(_state_with_weight(template, 104, 1))
    assert len(by_bytes) == 4 and full[0].session_id not in by_bytes, "one byte over: evicted"


@pytest.mark.req("BR-15", "BR-07")
def test_a_record_appended_to_a_cached_history_is_checked_at_its_line(tmp_path: Path) -> None:
    store = JsonlSessionStore(tmp_path)
    session_id = "ses_" + "1" * 26
    store.create(session_id, {"created_at": "2026-01-01T00:00:00Z",
                              "settings": {"model": "engine:demo:d",
                                           "permission_mode": "read-only"}})
    for text in ("one", "two", "three"):
        store.append(session_id, {"kind": "message", "role": "user", "text": text})
    state = SessionState.load(session_id, store.read_log(session_id))
    good = {"kind": "message", "role": "assistant", "text": "four"}
    assert state.extend(good, store.append(session_id, good))
    assert [m["text"] for m in state.messages] == ["one", "two", "three", "four"]
    bad = {"kind": "message", "role": "nobody", "text": "six"}
    with pytest.raises(SessionInvalid, match="line 6 is not a valid"):
        state.extend(bad, store.append(session_id, bad))
    store.close()


@pytest.mark.req("BR-15")
def test_a_log_removed_by_hand_drops_only_its_own_cached_history(specimen: Path) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    sessions = JsonlSessionStore(workspace.sessions_dir)
    engine = ReferenceEngine(sessions, AgentLoop(
        DemoProvider(), bridge_surface(AgentGateway(workspace, store)), "p"), Scope("test"))
    made = [engine.create_session({})["id"] for _ in range(3)]
    for session_id in made:
        engine.get_session(session_id)
    cache: HistoryCache = engine.catalog.cache
    kept = {sid: cache.get(sid) for sid in made[:2]}
    (workspace.sessions_dir / f"{made[2]}.jsonl").unlink()
    listed = [s["id"] for s in engine.list_sessions()["sessions"]]
    assert sorted(listed) == sorted(made[:2])
    assert made[2] not in cache
    assert all(cache.get(sid) is state for sid, state in kept.items()), \
        "the histories of the logs still there are kept, not read again"
    store.close()
    sessions.close()
