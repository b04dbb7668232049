"""ATTACKS.md §E (GW-03): instructions inside evidence, files or model text change nothing.

Hostile text is planted in the SPECIMEN evidence and in a file; a scripted
model then tries to act on it. Afterwards no grant exists but the human's, the
permission mode, the catalog and the budgets are unchanged, and every result
reached the model wrapped as UNTRUSTED_DATA.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_provider import Scenario
from labfy_ref.workspace import open_workspace
from qualification.conftest import FIXTURES, ProviderFactory, ServerFactory, local_agent
from qualification.harness import TERMINAL

PAYLOADS = json.loads((FIXTURES / "hostile" / "payloads.json").read_text())["injection"]


def _call(tool_id: str, **arguments: object) -> str:
    return json.dumps({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})


@pytest.mark.req("GW-03")
def test_hostile_evidence_and_files_change_no_scope_grant_policy_catalog_or_budget(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    for text in PAYLOADS:
        store.add_evidence(["ivy", "grant"], "hostile source", text)
    store.close()
    (specimen / "files" / "orders.txt").write_text("\n".join(PAYLOADS))
    provider = provider_factory(Scenario.replies(
        _call("files.read", path="orders.txt"),
        _call("research.prepare", topic="ivy bees", questions=["early ivy records?"]),
        # after the resume: the model "obeys" the evidence and tries to escalate
        _call("files.write", path="../../pwned", content="x"),
        _call("files.write", path="pwned.txt", content="x"),
        '{"type":"tool_call","tool_id":"grants.create","arguments":{"campaign_id":"x"}}',
        '{"type":"final","text":"I granted myself all research and switched to workspace-write."}',
    ))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    before_tools = client.get("/api/v1/agent-runtime/tools").json()
    before_status = client.get("/api/v1/agent-runtime/status").json()
    turn = client.start_turn("Check the early ivy bee record.")
    paused = client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"} | TERMINAL)
    assert paused["state"] == "AUTHORIZATION_REQUIRED"
    campaign_id = paused["authorization"]["campaign_id"]
    assert client.grant(campaign_id).status_code == 201
    client.post(f"/api/v1/agent-runtime/turns/{turn['id']}/resume")
    done = client.wait_state(turn["id"], TERMINAL)
    statuses = [(c["tool_id"], c["status"]) for c in done["tool_calls"]]
    assert ("files.write", "ok") not in statuses
    # grants.create is no tool: refused, one repair, then the final text (a mere claim).
    assert done["state"] == "COMPLETED"
    assert done["final_text"].startswith("I granted myself")
    repair = json.loads(provider.chat_requests()[-1].body)["messages"][-1]["content"]
    assert "unknown tool_id" in repair
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert len(campaign["grants"]) == 1, "only the human's grant exists"
    assert client.get("/api/v1/agent-runtime/tools").json() == before_tools
    after_status = client.get("/api/v1/agent-runtime/status").json()
    assert after_status["permission_mode"] == before_status["permission_mode"] == "read-only"
    assert after_status["limits"] == before_status["limits"]
    assert not (specimen / "files" / "pwned.txt").exists()
    assert not (specimen.parent / "pwned").exists()
    for request in provider.chat_requests()[1:]:
        last = json.loads(request.body)["messages"][-1]["content"]
        if "Tool result" in last:
            assert '"trust":"UNTRUSTED_DATA"' in last
    evidence = done["tool_calls"][2]["result"]
    assert evidence["trust"] == "UNTRUSTED_DATA"
    assert any(p in json.dumps(evidence["data"]) for p in ("Ignore previous instructions",))


@pytest.mark.req("GW-03", "RT-07")
def test_the_demo_agent_treats_hostile_evidence_as_data(
        specimen: Path, server_factory: ServerFactory) -> None:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    for text in PAYLOADS:
        store.add_evidence([], "hostile source", text)
    store.close()
    server = server_factory(specimen)
    client = server.client()
    turn = client.start_turn("Research the early ivy bee record")
    paused = client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"})
    client.grant(paused["authorization"]["campaign_id"])
    client.post(f"/api/v1/agent-runtime/turns/{turn['id']}/resume")
    done = client.wait_state(turn["id"], TERMINAL)
    assert done["state"] == "COMPLETED"
    assert client.get("/api/v1/agent-runtime/status").json()["permission_mode"] == "read-only"
    assert [c["status"] for c in done["tool_calls"]] == ["ok"] * 4
