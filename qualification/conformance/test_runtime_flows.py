"""The runtime's turn flows over HTTP, against any target whose agent answers with the kit's
provider (QR-03): RT-02, RT-04, RT-05, RT-08, PR-03, GW-03, SV-06.

Each turn's message carries a kit marker, so the provider answers it from its own
script whatever else runs on the target; each research flow names its own campaign.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from qualification.conformance.kit import marker, nonce
from qualification.harness import TERMINAL, ApiClient
from qualification.target import Served

pytestmark = pytest.mark.conformance

TURN_FIELDS = {"id", "state", "client_request_id", "message", "rounds", "tool_calls",
               "final_text", "facts", "error", "authorization", "created_at", "updated_at"}


@pytest.fixture
def client(model_target: Served) -> Iterator[ApiClient]:
    """An admin client of a target whose agent answers with the kit provider."""
    client = model_target.client()
    yield client
    client.close()


def _paused(client: ApiClient) -> tuple[dict[str, Any], str]:
    turn = client.start_turn(f"Is the early ivy bee record real? {marker('research', nonce())}")
    paused = client.wait_state(str(turn["id"]), {"AUTHORIZATION_REQUIRED"} | TERMINAL)
    assert paused["state"] == "AUTHORIZATION_REQUIRED", paused
    assert paused["authorization"]["status"] == "REQUIRED"
    return paused, str(paused["authorization"]["campaign_id"])


@pytest.mark.req("RT-02", "SV-06", "GW-03")
def test_a_turn_lists_then_completes_with_the_wire_shape_of_section_15(client: ApiClient) -> None:
    turn = client.start_turn(f"What is in the workspace? {marker('list-final')}")
    assert turn["state"] in {"QUEUED", "RUNNING", "COMPLETED"}
    done = client.wait_state(str(turn["id"]), TERMINAL)
    assert set(done) == TURN_FIELDS
    assert done["state"] == "COMPLETED", done
    assert done["final_text"] == "KIT listed the workspace."
    (call,) = done["tool_calls"]
    assert set(call) == {"call_id", "tool_id", "arguments", "status", "result"}
    assert call["tool_id"] == "workspace.list_objects" and call["status"] == "ok"
    assert set(call["result"]) == {"trust", "tool_id", "ok", "data"}
    assert call["result"]["trust"] == "UNTRUSTED_DATA"


@pytest.mark.req("RT-04")
def test_a_repeated_client_request_id_starts_no_second_turn(client: ApiClient) -> None:
    tag = nonce()
    first = client.start_turn(f"once {marker('final', tag)}", f"kit-{tag}")
    second = client.start_turn(f"once {marker('final', tag)}", f"kit-{tag}")
    assert second["id"] == first["id"]
    done = client.wait_state(str(first["id"]), TERMINAL)
    assert done["state"] == "COMPLETED"
    assert done["final_text"].endswith(tag), "one model call: the second start ran nothing"


@pytest.mark.req("PR-03", "RT-02")
def test_one_malformed_reply_gets_one_repair_round(client: ApiClient) -> None:
    turn = client.start_turn(f"answer badly once {marker('repair')}")
    done = client.wait_state(str(turn["id"]), TERMINAL)
    assert done["state"] == "COMPLETED", done
    assert done["final_text"] == "KIT repaired."
    assert done["tool_calls"] == []


@pytest.mark.req("RT-08", "GW-07", "SV-06")
def test_research_pauses_for_a_grant_and_resumes_the_same_turn(client: ApiClient) -> None:
    paused, campaign_id = _paused(client)
    turn_id = str(paused["id"])
    assert [c["tool_id"] for c in paused["tool_calls"]] == [
        "workspace.list_objects", "research.prepare"]
    refused = client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "GRANT_REQUIRED")
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert (campaign["status"], campaign["evidence"]) == ("PREPARED", []), "no contact yet"
    grant = client.grant(campaign_id)
    assert grant.status_code == 201
    assert {"id", "campaign_id", "workspace", "active", "created_at"} <= set(grant.json()["grant"])
    assert client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume").status_code == 202
    done = client.wait_state(turn_id, TERMINAL)
    assert (done["id"], done["state"]) == (turn_id, "COMPLETED")
    assert done["authorization"] == {"campaign_id": campaign_id, "status": "GRANTED"}
    assert done["tool_calls"][-1]["tool_id"] == "research.get_state"
    assert done["tool_calls"][-1]["result"]["data"]["evidence"], "the adapter answered"


@pytest.mark.req("RT-08", "GW-07")
def test_a_revoked_grant_no_longer_authorizes_a_resume(client: ApiClient) -> None:
    paused, campaign_id = _paused(client)
    grant = client.grant(campaign_id).json()["grant"]
    revoked = client.delete(f"/api/v1/grants/{grant['id']}")
    assert revoked.status_code == 200, revoked.text
    unknown = client.delete(f"/api/v1/grants/grant_{nonce()}")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "GRANT_NOT_FOUND")
    refused = client.post(f"/api/v1/agent-runtime/turns/{paused['id']}/resume")
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "GRANT_REQUIRED")
    turn = client.turn(str(paused["id"]))
    assert turn["state"] == "AUTHORIZATION_REQUIRED"
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert campaign["evidence"] == [], "no research contact without a live grant"


@pytest.mark.req("RT-05", "RT-02")
def test_a_cancelled_turn_runs_no_tool_the_model_asked_for_afterwards(client: ApiClient) -> None:
    turn = client.start_turn(f"slow {marker('slow-call')}")
    turn_id = str(turn["id"])
    client.wait_state(turn_id, {"RUNNING"} | TERMINAL)
    cancelled = client.post(f"/api/v1/agent-runtime/turns/{turn_id}/cancel")
    assert cancelled.status_code in (200, 202), cancelled.text
    done = client.wait_state(turn_id, TERMINAL)
    assert done["state"] == "CANCELLED", done
    assert done["tool_calls"] == [], "the reply that arrived after cancel ran nothing"
    again = client.turn(turn_id)  # terminal is final: still cancelled, still no call
    assert (again["state"], again["tool_calls"]) == ("CANCELLED", [])
