"""WS-04: what the SPECIMEN research adapter returns for a granted campaign.

The bundled adapter answers from the workspace's canned evidence only: the
entries whose keywords meet the campaign's topic or questions, else the
general entries (those with no keyword), at most eight, in the order the
workspace holds them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.workspace import open_workspace
from labfy_ref.workspace.store import WorkspaceStore

READ_ONLY = CallContext(PermissionMode.READ_ONLY)
#: The specimen's canned evidence (labfy_ref/workspace/specimen/objects.json), by source.
ATLAS = "Specimen adapter: atlas record notes"
GUIDE = "Specimen adapter: identification guide"
MANAGEMENT = "Specimen adapter: management study summary"
NEST_BOXES = "Specimen adapter: nest box survey"
OVERVIEW = "Specimen adapter: regional overview"


@pytest.fixture
def opened(specimen: Path) -> tuple[AgentGateway, WorkspaceStore]:
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    return AgentGateway(workspace, store), store


def _researched(gateway: AgentGateway, topic: str, questions: list[str]) -> list[str]:
    """The evidence sources of a campaign prepared, granted and run."""
    prepared = gateway.call("research.prepare", {"topic": topic, "questions": questions},
                            READ_ONLY)
    campaign_id = prepared.result["data"]["campaign_id"]
    gateway.grant(campaign_id)
    gateway.run_research(campaign_id)
    campaign = gateway.campaign(campaign_id)
    assert campaign.status == "COMPLETED"
    for entry in campaign.evidence:
        assert set(entry) == {"source", "excerpt"} and entry["excerpt"]
    return [entry["source"] for entry in campaign.evidence]


@pytest.mark.req("WS-04")
def test_the_specimen_adapter_returns_only_the_entries_the_campaign_speaks_of(
        opened: tuple[AgentGateway, WorkspaceStore]) -> None:
    gateway, _ = opened
    assert _researched(gateway, "Hedge mowing", ["Does it matter?"]) == [MANAGEMENT]
    assert _researched(gateway, "Nest boxes", ["Which are used?"]) == [NEST_BOXES]
    assert _researched(gateway, "Ivy", ["What does the guide say?"]) == [ATLAS, GUIDE], \
        "every entry a word meets, in the workspace's order; the general one is not added"
    assert _researched(gateway, "Colletes phenology", ["Which hedge management?"]) == [
        ATLAS, GUIDE, MANAGEMENT], "the questions count as much as the topic"


@pytest.mark.req("WS-04")
def test_a_campaign_no_keyword_meets_gets_the_general_entries_only(
        opened: tuple[AgentGateway, WorkspaceStore]) -> None:
    gateway, _ = opened
    assert _researched(gateway, "Garden spiders", ["How many webs?"]) == [OVERVIEW]


@pytest.mark.req("WS-04")
def test_a_campaign_gets_at_most_eight_evidence_entries_in_order(
        opened: tuple[AgentGateway, WorkspaceStore]) -> None:
    gateway, store = opened
    for index in range(10):
        store.add_evidence(["beetle"], f"Beetle record {index}", f"Excerpt {index}.")
    assert _researched(gateway, "Beetle", ["How many?"]) == [
        f"Beetle record {index}" for index in range(8)]
    for index in range(3):
        store.add_evidence([], f"General record {index}", f"Overview {index}.")
    assert _researched(gateway, "Moths", ["Where?"]) == [OVERVIEW] + [
        f"General record {index}" for index in range(3)], "fewer than eight: all of them"
