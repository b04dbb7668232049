"""RT-02..RT-05, RT-09, GW-05, PR-03, MC-05: how turns end, against the fake provider."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_provider import Scenario
from labfy_ref.netutil import free_port
from labfy_ref.runtime import RuntimeLimits
from qualification.conftest import ProviderFactory, ServerFactory, local_agent, scenario
from qualification.harness import TERMINAL, wait_until


@pytest.mark.req("PR-03", "RT-02")
def test_two_malformed_outputs_end_in_protocol_error_with_no_tool_run(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("two-malformed"))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    turn = client.start_turn("list the files")
    done = client.wait_state(turn["id"], TERMINAL)
    assert done["state"] == "MODEL_PROTOCOL_ERROR"
    assert done["error"]["code"] == "MODEL_PROTOCOL_ERROR"
    assert done["tool_calls"] == []
    assert list(server.state.gateway.log) == [], "the gateway executed nothing"
    wait_until(lambda: not server.state.runtime.busy)  # the turn's task is over
    assert len(provider.chat_requests()) == 2, "one repair, never a third request"


@pytest.mark.req("MC-05", "MC-03", "RT-02")
def test_an_unreachable_endpoint_is_model_unavailable_with_no_fallback(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, **local_agent(f"http://127.0.0.1:{free_port()}"))
    client = server.client()
    status = client.get("/api/v1/agent-runtime/status").json()
    assert (status["mode"], status["available"]) == ("local-model", False)
    assert status["label"] == "Local agent · fake-model"
    turn = client.start_turn("hello")
    done = client.wait_state(turn["id"], TERMINAL)
    assert done["state"] == "MODEL_UNAVAILABLE"
    assert done["error"]["code"] == "MODEL_UNAVAILABLE"
    assert done["tool_calls"] == [] and done["final_text"] is None


@pytest.mark.req("GW-05")
def test_an_identical_call_after_a_failure_ends_the_turn(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("repeated-failure"))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    done = client.wait_state(client.start_turn("read it")["id"], TERMINAL)
    assert done["state"] == "FAILED"
    assert done["error"]["code"] == "REPEATED_TOOL_FAILURE"
    [call] = done["tool_calls"]
    assert call["status"] == "error"
    assert call["result"]["data"]["error"]["code"] == "FILE_NOT_FOUND"
    assert len(call["result"]["data"]["error"]["message"]) <= 300
    assert list(server.state.gateway.log) == [("files.read", "error")], "executed once only"
    assert len(provider.chat_requests()) == 2


@pytest.mark.req("RT-03")
@pytest.mark.parametrize(("limits", "rounds", "calls", "reason"), [
    (RuntimeLimits(max_rounds=4), 4, 4, "4 rounds used"),
    (RuntimeLimits(max_tool_calls=2), 3, 2, "2 tool calls used"),
    (RuntimeLimits(max_context_bytes=12_000), None, None, "context exceeds 12000 bytes"),
])
def test_each_budget_ends_the_turn(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
        limits: RuntimeLimits, rounds: int | None, calls: int | None, reason: str) -> None:
    provider = provider_factory(scenario("endless-listing"))
    server = server_factory(specimen, limits=limits, **local_agent(provider.base_url))
    client = server.client()
    done = client.wait_state(client.start_turn("go")["id"], TERMINAL)
    assert done["state"] == "BUDGET_EXHAUSTED"
    assert done["error"] == {"code": "BUDGET_EXHAUSTED", "message": reason}
    if rounds is not None:
        assert (done["rounds"], len(done["tool_calls"])) == (rounds, calls)
    assert client.get("/api/v1/agent-runtime/status").json()["limits"] == limits.as_json()


@pytest.mark.req("RT-03")
def test_a_full_queue_refuses_with_429(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("slow-final"))
    server = server_factory(specimen, limits=RuntimeLimits(max_queued_turns=1, max_live_turns=2),
                            **local_agent(provider.base_url))
    client = server.client()
    first = client.start_turn("one")
    client.wait_state(first["id"], {"RUNNING"})
    second = client.start_turn("two")
    refused = client.post("/api/v1/agent-runtime/turns", {"message": "three"})
    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "QUEUE_FULL"
    client.post(f"/api/v1/agent-runtime/turns/{second['id']}/cancel")
    again = client.post("/api/v1/agent-runtime/turns", {"message": "three"})
    assert again.status_code == 202, "a cancelled turn frees its place at once"


@pytest.mark.req("RT-03")
def test_resuming_a_paused_turn_with_the_live_cap_full_is_admitted(
        specimen: Path, server_factory: ServerFactory) -> None:
    """A paused turn is live already: resuming it adds none, so a full live cap of paused
    turns still lets each be resumed once granted (a new turn would supersede one)."""
    server = server_factory(specimen, limits=RuntimeLimits(max_live_turns=2))
    client = server.client()
    paused = []
    for _ in range(2):
        turn = client.start_turn("Check the early ivy bee record.")
        paused.append(client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"}))
    first = paused[0]
    assert client.grant(first["authorization"]["campaign_id"]).status_code == 201
    resumed = client.post(f"/api/v1/agent-runtime/turns/{first['id']}/resume")
    assert resumed.status_code == 202, resumed.text
    assert client.wait_state(first["id"], {"COMPLETED"})["state"] == "COMPLETED"
    assert client.turn(paused[1]["id"])["state"] == "AUTHORIZATION_REQUIRED"


@pytest.mark.req("RT-04", "RT-03")
def test_a_retried_start_while_the_queue_is_full_is_the_same_turn(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    """A client retrying the start of a turn that is already queued gets that turn (200),
    full queue or not: the key is looked up before the capacity is; a new key is 429."""
    provider = provider_factory(scenario("slow-final"))
    server = server_factory(specimen, limits=RuntimeLimits(max_queued_turns=1, max_live_turns=2),
                            **local_agent(provider.base_url))
    client = server.client()
    first = client.start_turn("one")
    client.wait_state(first["id"], {"RUNNING"})
    queued = client.post("/api/v1/agent-runtime/turns",
                         {"message": "two", "client_request_id": "retry-2"})
    assert queued.status_code == 202, queued.text
    again = client.post("/api/v1/agent-runtime/turns",
                        {"message": "two", "client_request_id": "retry-2"})
    assert again.status_code == 200, again.text
    assert again.json()["turn"]["id"] == queued.json()["turn"]["id"]
    fresh = client.post("/api/v1/agent-runtime/turns",
                        {"message": "two", "client_request_id": "retry-3"})
    assert (fresh.status_code, fresh.json()["error"]["code"]) == (429, "QUEUE_FULL")
    for turn_id in (first["id"], queued.json()["turn"]["id"]):
        client.post(f"/api/v1/agent-runtime/turns/{turn_id}/cancel")


@pytest.mark.req("RT-04")
def test_turn_start_is_idempotent_by_client_request_id(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    client = server.client()
    first = client.post("/api/v1/agent-runtime/turns", {"message": "m", "client_request_id": "r-1"})
    again = client.post("/api/v1/agent-runtime/turns", {"message": "m", "client_request_id": "r-1"})
    other = client.post("/api/v1/agent-runtime/turns", {"message": "m", "client_request_id": "r-2"})
    assert (first.status_code, again.status_code, other.status_code) == (202, 200, 202)
    assert first.json()["turn"]["id"] == again.json()["turn"]["id"]
    assert other.json()["turn"]["id"] != first.json()["turn"]["id"]
    assert len(client.get("/api/v1/agent-runtime/turns").json()["turns"]) == 2


@pytest.mark.req("RT-05", "RT-02")
def test_cancel_during_an_in_flight_request_discards_its_answer(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("slow-final"))
    server = server_factory(specimen, permission_mode="workspace-write",
                            **local_agent(provider.base_url))
    client = server.client()
    turn = client.start_turn("write late.txt")
    client.wait_state(turn["id"], {"RUNNING"})
    wait_until(lambda: bool(provider.chat_requests()))
    cancelled = client.post(f"/api/v1/agent-runtime/turns/{turn['id']}/cancel")
    assert cancelled.json()["turn"]["state"] == "CANCELLED"
    again = client.post(f"/api/v1/agent-runtime/turns/{turn['id']}/cancel")
    assert again.status_code == 200 and again.json()["turn"]["state"] == "CANCELLED"
    wait_until(lambda: provider.answered == 1, timeout=10)  # the late answer (a write) came
    final = client.turn(turn["id"])
    assert final["state"] == "CANCELLED" and final["tool_calls"] == []
    assert list(server.state.gateway.log) == []
    assert not (specimen / "files" / "late.txt").exists()
    assert len(provider.chat_requests()) == 1


@pytest.mark.req("RT-09")
def test_shutdown_cancels_running_turns_and_stops_the_worker(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("slow-final"))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    running = client.start_turn("one")
    queued = client.start_turn("two")
    client.wait_state(running["id"], {"RUNNING"})
    runtime = server.state.runtime
    server.stop()
    assert not runtime.running
    assert runtime.get(running["id"]).state.value == "CANCELLED"
    assert runtime.get(queued["id"]).state.value == "CANCELLED"


def _read(object_id: str) -> str:
    return ('{"type":"tool_call","tool_id":"workspace.read_object","arguments":{"object_id":"'
            + object_id + '"}}')


@pytest.mark.req("RT-03")
def test_refused_calls_spend_the_tool_call_budget(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    """Every call the model makes counts against ``max_tool_calls``, refused ones too: three
    different invented ids under a budget of two end the turn BUDGET_EXHAUSTED."""
    invented = [f"obj_01KZZZZZZZZZZZZZZZZZZZZZZ{digit}" for digit in "ABC"]
    provider = provider_factory(Scenario.replies(
        *(_read(object_id) for object_id in invented), '{"type":"final","text":"read all"}'))
    server = server_factory(specimen, limits=RuntimeLimits(max_tool_calls=2),
                            **local_agent(provider.base_url))
    client = server.client()
    turn = client.start_turn("Read the three objects.")
    done = client.wait_state(turn["id"], TERMINAL)
    assert (done["state"], done["error"]["code"]) == ("BUDGET_EXHAUSTED", "BUDGET_EXHAUSTED"), done
    assert [c["status"] for c in done["tool_calls"]] == ["refused", "refused"]
