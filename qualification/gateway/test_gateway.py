"""GW-02..GW-05, GW-07, PR-05: the gateway's catalog, wrapping, references and policy."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Scenario
from labfy_ref.errors import RuntimeRefused
from labfy_ref.gateway import TRUST, AgentGateway, CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.protocol import action_schema
from labfy_ref.tools import ToolCatalog, default_catalog
from labfy_ref.workspace import open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import TERMINAL

READ_ONLY = CallContext(PermissionMode.READ_ONLY)


@pytest.fixture
def gateway(specimen: Path) -> AgentGateway:
    workspace = open_workspace(specimen)
    return AgentGateway(workspace, workspace.open_store())


@pytest.mark.req("GW-02", "PR-05")
def test_the_published_catalog_is_the_validation_catalog(
        specimen: Path, server_factory: ServerFactory) -> None:
    client = server_factory(specimen).client()
    tools = client.get("/api/v1/agent-runtime/tools").json()["tools"]
    assert [t["tool_id"] for t in tools] == list(default_catalog())
    for entry in tools:
        spec = default_catalog()[entry["tool_id"]]
        assert entry["input_schema"] == spec.input_schema
        assert entry["available"] is True
        assert entry["effect"] in ("read", "write", "research")
        assert isinstance(entry["network_contact"], bool)
        assert isinstance(entry["requires_authorization"], bool)
    assert action_schema()["title"] == "labfy.agent_model_action.v1"


@pytest.mark.req("GW-03")
@pytest.mark.parametrize(("tool_id", "arguments"), [
    ("workspace.list_objects", {}), ("files.list", {"path": ""}),
    ("files.read", {"path": "README.txt"}), ("files.read", {"path": "absent.txt"}),
    ("files.write", {"path": "x.txt", "content": "x"}), ("nope.tool", {}),
])
def test_every_result_is_wrapped_as_untrusted_data(gateway: AgentGateway, tool_id: str,
                                                   arguments: dict[str, Any]) -> None:
    outcome = gateway.call(tool_id, arguments, READ_ONLY)
    assert set(outcome.result) == {"trust", "tool_id", "ok", "data"}
    assert outcome.result["trust"] == TRUST
    assert outcome.result["ok"] is outcome.ok
    if not outcome.ok:
        error = outcome.result["data"]["error"]
        assert set(error) == {"code", "message"} and len(error["message"]) <= 300


@pytest.mark.req("GW-04")
def test_an_invented_altered_or_truncated_object_id_is_refused(gateway: AgentGateway) -> None:
    listed = gateway.call("workspace.list_objects", {}, READ_ONLY).result["data"]["objects"]
    oid = listed[0]["object_id"]
    assert gateway.call("workspace.read_object", {"object_id": oid}, READ_ONLY).ok
    # Ids made in one millisecond are consecutive (ULID): changing the last character can
    # name a sibling that exists, so the altered id is one no listed object has.
    existing = {o["object_id"] for o in listed}
    flipped = next(oid[:-1] + c for c in "ABCDEFGH" if oid[:-1] + c not in existing)
    for bad in (flipped, oid[:-1], "obj_" + "0" * 26, oid.lower()):
        outcome = gateway.call("workspace.read_object", {"object_id": bad}, READ_ONLY)
        assert outcome.status == "refused"
        assert outcome.error_code in ("OBJECT_NOT_FOUND", "INVALID_ARGUMENTS")
    prepared = gateway.call("research.prepare", {"topic": "t", "questions": ["q"],
                                                 "object_refs": [oid, flipped]}, READ_ONLY)
    assert prepared.error_code == "OBJECT_NOT_FOUND"
    assert len(prepared.result["data"]["error"]["message"]) <= 300


@pytest.mark.req("GW-07", "GW-01")
def test_a_write_in_read_only_is_a_normal_refusal_and_the_turn_goes_on(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    write = json.dumps({"type": "tool_call", "tool_id": "files.write",
                        "arguments": {"path": "out.txt", "content": "hello"}})
    provider = provider_factory(Scenario.replies(write, '{"type":"final","text":"could not"}'))
    server = server_factory(specimen, **local_agent(provider.base_url))
    client = server.client()
    done = client.wait_state(client.start_turn("write out.txt")["id"], TERMINAL)
    assert done["state"] == "COMPLETED"
    [call] = done["tool_calls"]
    assert (call["status"], call["result"]["data"]["error"]["code"]) == (
        "refused", "PERMISSION_DENIED")
    assert not (specimen / "files" / "out.txt").exists()
    second = json.loads(provider.chat_requests()[1].body)["messages"][-1]["content"]
    assert "PERMISSION_DENIED" in second and TRUST in second


@pytest.mark.req("GW-07")
def test_workspace_write_permits_writes(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory) -> None:
    write = json.dumps({"type": "tool_call", "tool_id": "files.write",
                        "arguments": {"path": "reports/out.txt", "content": "hello ✓"}})
    provider = provider_factory(Scenario.replies(write, '{"type":"final","text":"written"}'))
    server = server_factory(specimen, permission_mode="workspace-write",
                            **local_agent(provider.base_url))
    client = server.client()
    done = client.wait_state(client.start_turn("write it")["id"], TERMINAL)
    assert done["tool_calls"][0]["status"] == "ok"
    assert (specimen / "files" / "reports" / "out.txt").read_text() == "hello ✓"
    assert client.get("/api/v1/agent-runtime/status").json()["permission_mode"] == \
        "workspace-write"


@pytest.mark.req("GW-07", "RT-08")
def test_running_research_needs_a_grant_even_from_inside(gateway: AgentGateway) -> None:
    prepared = gateway.call("research.prepare", {"topic": "t", "questions": ["q"]}, READ_ONLY)
    campaign_id = prepared.result["data"]["campaign_id"]
    with pytest.raises(RuntimeRefused) as caught:
        gateway.run_research(campaign_id)
    assert caught.value.code.value == "GRANT_REQUIRED"
    state = gateway.call("research.get_state", {"campaign_id": campaign_id}, READ_ONLY)
    assert state.result["data"]["status"] == "PREPARED"


@pytest.mark.req("RT-08")
def test_a_grant_of_another_workspace_cannot_be_revoked_from_this_one(specimen: Path) -> None:
    """Grants are a workspace's own: a grant id of another workspace (present in the same
    store, as after a copy) is GRANT_NOT_FOUND here and stays active; this workspace's
    own grant is revoked."""
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    try:
        gateway = AgentGateway(workspace, store)
        other_ws = "ws_" + "0" * 26
        theirs_campaign = store.add_campaign(other_ws, "Their topic", ["Theirs?"], [])
        theirs = store.add_grant(theirs_campaign.campaign_id, other_ws, None)
        ours_campaign = store.add_campaign(workspace.workspace_id, "Our topic", ["Ours?"], [])
        ours = gateway.grants.create(ours_campaign.campaign_id)
        with pytest.raises(RuntimeRefused) as refused:
            gateway.grants.revoke(theirs.grant_id)
        assert refused.value.code.value == "GRANT_NOT_FOUND"
        kept = store.get_grant(theirs.grant_id)
        assert kept is not None and kept.revoked_at is None, "their grant is still active"
        assert gateway.grants.revoke(ours.grant_id).revoked_at is not None
    finally:
        store.close()


def _with_traits(tool_id: str, **traits: Any) -> ToolCatalog:
    """The default catalog with ``tool_id``'s traits changed (a catalog another product
    could ship: the gateway reads traits, never tool ids)."""
    return ToolCatalog([
        dataclasses.replace(spec, traits=dataclasses.replace(spec.traits, **traits))
        if spec.tool_id == tool_id else spec for spec in default_catalog().values()])


@pytest.mark.req("GW-02")
def test_a_tool_no_service_implements_is_published_unavailable_with_its_reason(
        specimen: Path) -> None:
    """A catalog entry whose ``service`` trait names no service method is listed with
    ``available: false`` and the reason, and a call to it is refused TOOL_UNAVAILABLE."""
    workspace = open_workspace(specimen)
    catalog = _with_traits("workspace.list_objects", service="objects.no_such_method")
    gateway = AgentGateway(workspace, workspace.open_store(), catalog)
    described = {entry["tool_id"]: entry for entry in gateway.describe_tools()}
    orphan = described["workspace.list_objects"]
    assert orphan["available"] is False
    assert orphan["unavailable_reason"] == "no service implements this tool"
    served = described["workspace.read_object"]
    assert served["available"] is True and "unavailable_reason" not in served
    assert "workspace.list_objects" not in gateway.offerable(READ_ONLY, approvals=True)
    outcome = gateway.call("workspace.list_objects", {}, READ_ONLY)
    assert (outcome.status, outcome.error_code) == ("refused", "TOOL_UNAVAILABLE")


@pytest.mark.req("GW-01")
def test_an_unknown_tool_id_is_named_in_the_refusal_up_to_64_characters(
        gateway: AgentGateway) -> None:
    """The refusal names the tool id the model sent, cut to exactly its first 64
    characters (a longer id is not echoed back whole)."""
    for tool_id in ("nope.tool", "t" * 63 + "X", "t" * 64 + "XYZ", "a" * 500):
        outcome = gateway.call(tool_id, {}, READ_ONLY)
        assert (outcome.status, outcome.error_code) == ("refused", "TOOL_UNAVAILABLE")
        assert outcome.result["data"]["error"]["message"] == \
            f"{tool_id[:64]} is not an available tool"
    shown = gateway.call("t" * 64 + "XYZ", {}, READ_ONLY).result["data"]["error"]["message"]
    assert shown == "t" * 64 + " is not an available tool", "the 65th character is cut"
    assert gateway.log[-1] == ("t" * 64 + "XYZ", "refused"), "the refusal went through the log"


@pytest.mark.req("GW-01", "BR-11")
@pytest.mark.parametrize("mode", list(PermissionMode))
def test_unknown_object_refs_are_refused_naming_the_first_in_every_session_mode(
        gateway: AgentGateway, mode: PermissionMode) -> None:
    """Whatever the session's mode, the gateway checks cited references before the
    service runs: the refusal names the first unknown id the call cites (one or several),
    and nothing is made."""
    context = CallContext(mode)
    listed = gateway.call("workspace.list_objects", {}, context).result["data"]["objects"]
    known = listed[0]["object_id"]
    first, second = "obj_" + "0" * 26, "obj_" + "1" * 26
    for refs, named in (([known, first], first), ([first, known, second], first),
                        ([second, first], second)):
        outcome = gateway.call("research.prepare", {"topic": "t", "questions": ["q"],
                                                    "object_refs": refs}, context)
        assert (outcome.status, outcome.error_code) == ("refused", "OBJECT_NOT_FOUND")
        assert outcome.result["data"]["error"]["message"] == \
            f"unknown object_id {named}: copy ids exactly from earlier results"
    assert ("research.prepare", "ok") not in gateway.log, "no campaign was prepared"


@pytest.mark.req("GW-04")
@pytest.mark.parametrize("before", [{"topic": "title"}, {"campaign_id": "object"}],
                         ids=["another-kind-given", "an-object-argument-absent"])
def test_every_object_argument_is_checked_whatever_the_traits_list_before_it(
        specimen: Path, before: dict[str, str]) -> None:
    """A tool's ``consumes`` trait may list other arguments before its object references
    (of another kind, or absent from the call): the references are still checked and an
    invented id is refused OBJECT_NOT_FOUND."""
    workspace = open_workspace(specimen)
    catalog = _with_traits("research.prepare", consumes={**before, "object_refs": "object"})
    gateway = AgentGateway(workspace, workspace.open_store(), catalog)
    invented = "obj_" + "0" * 26
    outcome = gateway.call("research.prepare", {"topic": "Ivy bees", "questions": ["When?"],
                                                "object_refs": [invented]}, READ_ONLY)
    assert (outcome.status, outcome.error_code) == ("refused", "OBJECT_NOT_FOUND")
    assert invented in outcome.result["data"]["error"]["message"]

