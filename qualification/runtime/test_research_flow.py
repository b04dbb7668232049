"""RT-08, WS-04, GW-07: research pauses for a human grant and resumes the same turn."""

from __future__ import annotations

import datetime
import itertools
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.workspace import init_workspace, open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent, scenario
from qualification.harness import TERMINAL, LiveServer, wait_until

QUESTION = "Check whether the early ivy bee record is real."


def _paused(server: LiveServer) -> tuple[dict[str, Any], str]:
    client = server.client()
    turn = client.start_turn(QUESTION)
    paused = client.wait_state(str(turn["id"]), {"AUTHORIZATION_REQUIRED"} | TERMINAL)
    assert paused["state"] == "AUTHORIZATION_REQUIRED", paused
    authorization = paused["authorization"]
    assert isinstance(authorization, dict)
    assert authorization["status"] == "REQUIRED"
    return paused, str(authorization["campaign_id"])


@pytest.mark.req("RT-08", "GW-01", "WS-04")
def test_the_research_flow_with_a_scripted_model(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("read-prepare-final"))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    paused, campaign_id = _paused(server)
    turn_id = str(paused["id"])
    assert [c["tool_id"] for c in paused["tool_calls"]] == [
        "workspace.list_objects", "research.prepare"]
    wait_until(lambda: not server.state.runtime.busy)  # the paused turn holds no task
    assert len(provider.chat_requests()) == 2, "no model call while waiting for the grant"
    refused = client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "GRANT_REQUIRED"
    state = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert (state["status"], state["evidence"]) == ("PREPARED", []), "no contact before grant"
    grant = client.grant(campaign_id)
    assert grant.status_code == 201
    assert grant.json()["grant"]["active"] is True
    resumed = client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume")
    assert resumed.status_code == 202
    done = client.wait_state(turn_id, TERMINAL)
    assert done["state"] == "COMPLETED"
    assert done["id"] == turn_id
    assert done["final_text"].startswith("The evidence suggests")
    assert done["authorization"] == {"campaign_id": campaign_id, "status": "GRANTED"}
    calls = done["tool_calls"]
    assert [c["tool_id"] for c in calls][-1] == "research.get_state"
    evidence = calls[-1]["result"]["data"]["evidence"]
    assert evidence, "the SPECIMEN adapter returned canned evidence"
    assert len(provider.chat_requests()) == 3


@pytest.mark.req("RT-07", "RT-08")
def test_the_demo_agent_completes_the_same_flow_with_no_model(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    client = server.client()
    status = client.get("/api/v1/agent-runtime/status").json()
    assert (status["mode"], status["label"]) == ("demo", "Deterministic demo agent")
    paused, campaign_id = _paused(server)
    assert client.grant(campaign_id).status_code == 201
    assert client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume").status_code == 202
    done = client.wait_state(str(paused["id"]), TERMINAL)
    assert done["state"] == "COMPLETED"
    assert "evidence item" in str(done["final_text"])
    assert [c["tool_id"] for c in done["tool_calls"]] == [
        "workspace.list_objects", "workspace.read_object", "research.prepare",
        "research.get_state"]


@pytest.mark.req("RT-08")
def test_a_grant_survives_a_server_restart(specimen: Path,
                                           server_factory: ServerFactory) -> None:
    first = server_factory(specimen)
    _, campaign_id = _paused(first)
    assert first.client().grant(campaign_id).status_code == 201
    first.stop()
    second = server_factory(specimen)
    client = second.client()
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert [g["active"] for g in campaign["grants"]] == [True]
    assert second.state.gateway.grants.has_active(campaign_id)


@pytest.mark.req("RT-08")
def test_revoked_and_expired_grants_do_not_count(specimen: Path,
                                                 server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    client = server.client()
    paused, campaign_id = _paused(server)
    grant = client.grant(campaign_id).json()["grant"]
    revoked = client.delete(f"/api/v1/grants/{grant['id']}")
    assert revoked.status_code == 200
    assert revoked.json()["grant"]["active"] is False
    refused = client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume")
    assert refused.json()["error"]["code"] == "GRANT_REQUIRED"
    short = client.grant(campaign_id, expires_in_seconds=1).json()["grant"]
    assert short["active"] is True
    wait_until(lambda: not client.get(f"/api/v1/research/campaigns/{campaign_id}").json()[
        "campaign"]["grants"][-1]["active"], timeout=5)  # the one-second grant expired
    refused = client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume")
    assert refused.json()["error"]["code"] == "GRANT_REQUIRED"
    history = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert [g["active"] for g in history["grants"]] == [False, False]
    assert history["grants"][0]["revoked_at"] is not None


@pytest.mark.req("RT-08")
def test_another_workspaces_campaigns_and_grants_are_invisible_and_unusable(
        specimen: Path, tmp_path: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    _, campaign_id = _paused(server)
    other_dir = tmp_path / "other"
    init_workspace(other_dir, specimen=True)
    other = server_factory(other_dir)
    client = other.client()
    assert client.get(f"/api/v1/research/campaigns/{campaign_id}").status_code == 404
    assert client.grant(campaign_id).status_code == 404
    # A grant row of another workspace planted in this store does not count either.
    server.stop()
    workspace = open_workspace(specimen)
    with sqlite3.connect(workspace.store_path) as db:
        db.execute("INSERT INTO grants VALUES ('grant_forged', ?, ?, ?, NULL, NULL)",
                   (campaign_id, open_workspace(other_dir).workspace_id,
                    datetime.datetime.now(datetime.UTC).isoformat()))
    again = server_factory(specimen)
    assert not again.state.gateway.grants.has_active(campaign_id)


@pytest.mark.req("WS-04")
def test_a_live_workspace_has_no_research_adapter(
        tmp_path: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    live = tmp_path / "live"
    init_workspace(live, specimen=False)
    provider = provider_factory(scenario("read-prepare-final"))
    server = server_factory(live, **local_agent(provider.base_url))
    client = server.client()
    paused, campaign_id = _paused(server)
    assert client.grant(campaign_id).status_code == 201
    assert client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume").status_code == 202
    failed = client.wait_state(str(paused["id"]), TERMINAL)
    assert failed["state"] == "FAILED"
    assert failed["error"]["code"] == "RESEARCH_ADAPTER_UNAVAILABLE"


@pytest.mark.req("PR-06", "RT-08")
def test_each_round_is_narrowed_prefix_stable_and_reports_its_tokens(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("read-prepare-final"))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    paused, campaign_id = _paused(server)
    assert client.grant(campaign_id).status_code == 201
    assert client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume").status_code == 202
    assert client.wait_state(str(paused["id"]), TERMINAL)["state"] == "COMPLETED"
    bodies = [r.json() for r in provider.chat_requests()]
    offered = [[b["properties"]["tool_id"]["const"]
                for b in body["response_format"]["json_schema"]["schema"]["oneOf"]
                if "tool_id" in b["properties"]] for body in bodies]
    assert "workspace.read_object" not in offered[0], "no object id was seen yet"
    notes = [o["object_id"] for o in client.get("/api/v1/objects").json()["objects"]
             if o["kind"] == "note"]
    read = next(b for b in bodies[1]["response_format"]["json_schema"]["schema"]["oneOf"]
                if b["properties"].get("tool_id") == {"const": "workspace.read_object"})
    offered_ids = read["properties"]["arguments"]["properties"]["object_id"]["enum"]
    assert sorted(offered_ids) == sorted(notes), "the ids listed, ordered by relevance"
    assert "research.prepare" not in offered[2], "the turn's campaign exists"
    assert all(body["max_tokens"] > 0 for body in bodies)
    for before, after in itertools.pairwise(bodies):
        assert after["messages"][:len(before["messages"])] == before["messages"], \
            "every request extends the previous one (prefix-stable)"
    events = client.get("/api/v1/agent-runtime/events").json()["events"]
    rounds = [e["data"] for e in events if e["type"] == "turn.round"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert all(r["prompt_tokens"] > 0 and r["ms"] >= 0 for r in rounds)
    for before, later in itertools.pairwise(rounds):
        # the whole last prompt is reused (how much that is of the next one depends on the
        # prompt's length and the results added: a figure for the bench, not a bound here)
        assert before["prompt_tokens"] - 1 <= later["cached_tokens"] < later["prompt_tokens"], \
            "the whole last prompt"


@pytest.mark.req("RT-08", "GW-07")
def test_a_campaign_and_grants_of_another_workspace_in_this_store_are_refused_over_http(
        specimen: Path, server_factory: ServerFactory) -> None:
    """Rows of another workspace in this very store (as after a copy): its campaign is not
    shown nor granted, its grant not revoked, and a grant it holds for *our* campaign's id
    neither shows on our campaign nor resumes our paused turn."""
    server = server_factory(specimen)
    client = server.client()
    paused, ours = _paused(server)
    workspace = open_workspace(specimen)
    other_ws = "ws_" + "0" * 26
    store = workspace.open_store()
    try:
        theirs = store.add_campaign(other_ws, "Their topic", ["Theirs?"], [])
        their_grant = store.add_grant(theirs.campaign_id, other_ws, None)
        planted = store.add_grant(ours, other_ws, None)
    finally:
        store.close()

    def refused(answer: Any) -> tuple[int, str]:
        return answer.status_code, answer.json()["error"]["code"]

    assert refused(client.get(f"/api/v1/research/campaigns/{theirs.campaign_id}")) == \
        (404, "CAMPAIGN_NOT_FOUND")
    assert refused(client.grant(theirs.campaign_id)) == (404, "CAMPAIGN_NOT_FOUND")
    assert refused(client.delete(f"/api/v1/grants/{their_grant.grant_id}")) == \
        (404, "GRANT_NOT_FOUND")
    assert refused(client.delete(f"/api/v1/grants/{planted.grant_id}")) == \
        (404, "GRANT_NOT_FOUND")
    shown = client.get(f"/api/v1/research/campaigns/{ours}").json()["campaign"]
    assert shown["grants"] == [], "their grant for our campaign's id is not ours"
    assert refused(client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume")) == \
        (409, "GRANT_REQUIRED")
    assert client.wait_state(str(paused["id"]), {"AUTHORIZATION_REQUIRED"} | TERMINAL)[
        "state"] == "AUTHORIZATION_REQUIRED"
    store = workspace.open_store()
    try:
        for grant in (their_grant, planted):
            kept = store.get_grant(grant.grant_id)
            assert kept is not None and kept.revoked_at is None, "theirs stay untouched"
    finally:
        store.close()
    assert client.grant(ours).status_code == 201
    assert client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume").status_code == 202
