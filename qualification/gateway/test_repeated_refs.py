"""PR-07 amended: a guard relies only on what the real grammar enforces, and a harmless
repeat never fails a turn (llama-server ignores ``uniqueItems``: qualification/smoke's
keyword test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_provider import Scenario
from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.tools import default_catalog
from labfy_ref.workspace import open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import TERMINAL

READ_ONLY = CallContext(PermissionMode.READ_ONLY)


@pytest.mark.req("PR-07", "GW-04")
def test_a_repeated_object_ref_is_cited_once_and_never_fails_the_turn(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    """llama.cpp's grammar does not enforce ``uniqueItems`` (qualification/smoke's keyword
    test): a model repeats an id it may cite, so the protocol takes the repeat harmlessly."""
    workspace = open_workspace(specimen)
    oid = AgentGateway(workspace, workspace.open_store()).call(
        "workspace.list_objects", {}, READ_ONLY).result["data"]["objects"][0]["object_id"]
    assert "uniqueItems" not in json.dumps(
        default_catalog()["research.prepare"].input_schema), "the wide schema takes a repeat"
    prepare = json.dumps({"type": "tool_call", "tool_id": "research.prepare", "arguments": {
        "topic": "Ivy bees", "questions": ["When do they fly?"],
        "object_refs": [oid, oid, oid]}})
    provider = provider_factory(Scenario.replies(prepare))
    client = server_factory(specimen, **local_agent(provider.base_url)).client()
    paused = client.wait_state(client.start_turn("prepare research on ivy bees")["id"],
                               {"AUTHORIZATION_REQUIRED", *TERMINAL})
    assert paused["state"] == "AUTHORIZATION_REQUIRED", paused.get("error")
    campaign_id = paused["authorization"]["campaign_id"]
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert campaign["object_refs"] == [oid]
