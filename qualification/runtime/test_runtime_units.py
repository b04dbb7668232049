"""RT-01, RT-02, RT-06, GW-01: states, the event log, and what the runtime may hold."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from labfy_ref.runtime import (
    TRANSITIONS,
    EventLog,
    IllegalTransition,
    RuntimeLimits,
    Turn,
    TurnState,
)
from qualification.conftest import REPO, ServerFactory
from qualification.harness import TERMINAL

NON_TERMINAL = {TurnState.QUEUED, TurnState.RUNNING, TurnState.AUTHORIZATION_REQUIRED}


@pytest.mark.req("RT-02")
def test_there_are_exactly_nine_states_and_terminal_ones_are_final() -> None:
    assert {s.value for s in TurnState} == TERMINAL | {s.value for s in NON_TERMINAL}
    assert len(TurnState) == 9
    for state in TurnState:
        assert state.terminal == (state not in NON_TERMINAL)
        if state.terminal:
            assert TRANSITIONS[state] == frozenset()


@pytest.mark.req("RT-02")
@pytest.mark.parametrize("current", list(TurnState))
@pytest.mark.parametrize("target", list(TurnState))
def test_every_transition_is_either_in_the_table_or_refused(
        current: TurnState, target: TurnState) -> None:
    turn = Turn("turn_x", "m", None, state=current)
    if target in TRANSITIONS[current]:
        turn.move(target)
        assert turn.state is target
    else:
        with pytest.raises(IllegalTransition):
            turn.move(target)
        assert turn.state is current


@pytest.mark.req("RT-02")
def test_the_table_allows_the_documented_paths() -> None:
    assert TRANSITIONS[TurnState.QUEUED] == {TurnState.RUNNING, TurnState.CANCELLED}
    assert TRANSITIONS[TurnState.AUTHORIZATION_REQUIRED] == {TurnState.QUEUED,
                                                              TurnState.CANCELLED}
    assert TRANSITIONS[TurnState.RUNNING] == {s for s in TurnState if s.terminal} | {
        TurnState.AUTHORIZATION_REQUIRED}


@pytest.mark.req("RT-06")
def test_the_event_log_is_bounded_paged_and_tells_a_lagging_client() -> None:
    log = EventLog(capacity=4)
    for index in range(10):
        log.append("turn_a", "turn.state", {"i": index})
    page = log.page(0)
    assert [e["seq"] for e in page["events"]] == [7, 8, 9, 10]
    assert (page["oldest_cursor"], page["missed"], page["next_cursor"]) == (6, True, 10)
    assert log.page(8, limit=1)["events"][0]["seq"] == 9
    caught_up = log.page(10)
    assert (caught_up["events"], caught_up["missed"], caught_up["next_cursor"]) == ([], False, 10)


@pytest.mark.req("RT-06")
def test_a_client_at_the_oldest_cursor_missed_nothing_one_before_it_did() -> None:
    """The boundary of "fell behind": at the oldest cursor every retained event is still
    ahead of the client; one before it, the evicted event is lost."""
    log = EventLog(capacity=3)
    for index in range(5):
        log.append("turn_a", "turn.state", {"i": index})
    oldest = log.page(0)["oldest_cursor"]
    assert oldest == 2
    at = log.page(oldest)
    assert (at["missed"], [e["seq"] for e in at["events"]]) == (False, [3, 4, 5])
    before = log.page(oldest - 1)
    assert (before["missed"], [e["seq"] for e in before["events"]]) == (True, [3, 4, 5])
    fresh = EventLog(capacity=3)
    assert fresh.page(0)["missed"] is False, "an empty log has lost nothing"


@pytest.mark.req("RT-06")
def test_events_are_served_by_cursor(specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    client = server.client()
    turn = client.start_turn("Check the early ivy bee record.")
    client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"})
    page = client.get("/api/v1/agent-runtime/events?cursor=0").json()
    assert set(page) == {"events", "next_cursor", "oldest_cursor", "missed"}
    assert all(set(e) == {"seq", "turn_id", "type", "data", "at"} for e in page["events"])
    types = [e["type"] for e in page["events"]]
    assert types.count("turn.tool_call") == 3
    later = client.get(f"/api/v1/agent-runtime/events?cursor={page['next_cursor']}").json()
    assert later["events"] == []
    assert client.get("/api/v1/agent-runtime/events?cursor=-1").status_code == 422


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


FORBIDDEN_FOR_RUNTIME = {"sqlite3", "os", "pathlib", "shutil", "subprocess", "socket",
                         "labfy_ref.workspace", "labfy_ref.workspace.store",
                         "labfy_ref.workspace.layout", "labfy_ref.gateway.files",
                         "labfy_ref.gateway.services", "labfy_ref.gateway.research", "httpx"}


@pytest.mark.req("GW-01", "RT-01")
def test_the_runtime_holds_no_store_path_shell_or_adapter() -> None:
    for path in sorted((REPO / "labfy_ref" / "runtime").glob("*.py")):
        imported = _imports(path)
        leaked = {name for name in imported
                  if name in FORBIDDEN_FOR_RUNTIME or name.startswith("labfy_ref.workspace")}
        assert leaked == set(), f"{path.name} imports {sorted(leaked)}"


@pytest.mark.req("RT-01", "RT-04")
def test_finished_turns_keep_no_conversation_and_retention_is_bounded(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, limits=RuntimeLimits(max_retained_turns=3))
    client = server.client()
    ids = []
    for index in range(5):
        turn = client.post("/api/v1/agent-runtime/turns", {
            "message": f"Check the early ivy bee record, {index}.",
            "client_request_id": f"request-{index}"}).json()["turn"]
        client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"})
        client.post(f"/api/v1/agent-runtime/turns/{turn['id']}/cancel")
        ids.append(turn["id"])
    runtime = server.state.runtime
    retained = [t.id for t in runtime.list_turns()]
    assert len(retained) == 3 and set(retained) == set(ids[2:])
    assert all(len(t.conversation.messages) == 0 for t in runtime.list_turns())
    assert client.get(f"/api/v1/agent-runtime/turns/{ids[0]}").status_code == 404
    # the index of request ids is bounded with the turns: a forgotten turn's id goes too
    assert sorted(runtime._by_request) == ["request-2", "request-3", "request-4"]


@pytest.mark.req("RT-06")
def test_a_page_of_events_holds_100_unless_asked_otherwise() -> None:
    log = EventLog(capacity=500)
    for number in range(150):
        log.append("turn_x", "turn.state", {"n": number})
    first = log.page(0)
    assert [e["seq"] for e in first["events"]] == list(range(1, 101))
    assert first["next_cursor"] == 100 and first["missed"] is False
    rest = log.page(first["next_cursor"])
    assert [e["seq"] for e in rest["events"]] == list(range(101, 151))
    assert [e["seq"] for e in log.page(0, limit=7)["events"]] == list(range(1, 8))
