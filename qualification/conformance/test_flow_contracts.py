"""Turn, grant and bridge contracts a broken implementation could otherwise pass the kit with
(QR-03).

Each test here was written against a mutant the kit let through
(``qualification/mutants/faults.py`` names it): a repeated start answers 200
(RT-04, SV-06), a grant counts for its own campaign only and not past its expiry
(RT-08), a second malformed reply ends the round (PR-03), a failed bridge turn
streams one ``error`` then ``done`` (BR-02), a decision after the turn ended is 409
(BR-12), deleting an unknown engine session is 404 (BR-08), and the OpenAI face
reports the provider's usage (BR-13, BR-14). One more fails fast where the kit
already failed slowly: a headless caller asked to approve is caught at the first
``approval-request``, not after a 30 s read timeout (BR-12). HTTP only, against
any target whose agent answers with the kit's provider.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from qualification.conformance.kit import KIT_MODEL, marker, nonce
from qualification.conformance.sse import completion_chunks
from qualification.conformance.test_bridge_flows import RawTurn
from qualification.conformance.test_runtime_flows import TURN_FIELDS
from qualification.harness import TERMINAL, ApiClient, wait_until
from qualification.target import Served

pytestmark = pytest.mark.conformance

NO_EXPIRY = ("the target takes no grant expiry as POST /api/v1/grants "
             "{expires_in_seconds} or shows no grants on its campaign (SPEC §15 pins neither)")


@pytest.fixture
def client(model_target: Served) -> Iterator[ApiClient]:
    """An admin client of a target whose agent answers with the kit provider."""
    client = model_target.client()
    yield client
    client.close()


def _paused(client: ApiClient) -> tuple[str, str]:
    """A research turn paused for its grant: (turn id, campaign id)."""
    turn = client.start_turn(f"Is the early ivy bee record real? {marker('research')}")
    paused = client.wait_state(str(turn["id"]), {"AUTHORIZATION_REQUIRED"} | TERMINAL)
    assert paused["state"] == "AUTHORIZATION_REQUIRED", paused
    return str(paused["id"]), str(paused["authorization"]["campaign_id"])


def _end(client: ApiClient, turn_id: str) -> None:
    """Cancel a turn left paused, so repeated runs never fill a target's live-turn cap."""
    assert client.post(f"/api/v1/agent-runtime/turns/{turn_id}/cancel").status_code in (200, 202)
    assert client.turn(turn_id)["state"] == "CANCELLED"


def _refused(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


@pytest.mark.req("RT-04", "SV-06")
def test_a_repeated_start_answers_200_with_the_same_turn(client: ApiClient) -> None:
    tag = nonce()
    body = {"message": f"once {marker('final', tag)}", "client_request_id": f"kit-{tag}"}
    first = client.post("/api/v1/agent-runtime/turns", body)
    assert first.status_code == 202, first.text
    again = client.post("/api/v1/agent-runtime/turns", body)
    assert again.status_code == 200, "the same client_request_id again: not a new turn"
    assert set(again.json()) == {"turn"} and set(again.json()["turn"]) == TURN_FIELDS
    assert again.json()["turn"]["id"] == first.json()["turn"]["id"]
    assert again.json()["turn"]["client_request_id"] == f"kit-{tag}"
    done = client.wait_state(str(first.json()["turn"]["id"]), TERMINAL)
    assert done["state"] == "COMPLETED", done


@pytest.mark.req("RT-08", "GW-07")
def test_a_grant_for_another_campaign_does_not_resume_this_one(client: ApiClient) -> None:
    turn_id, campaign_id = _paused(client)
    other_turn, other_campaign = _paused(client)
    assert other_campaign != campaign_id
    assert client.grant(other_campaign).status_code == 201
    assert _refused(client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume")) == (
        409, "GRANT_REQUIRED")
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert (campaign["status"], campaign["evidence"]) == ("PREPARED", [])
    assert client.turn(turn_id)["state"] == "AUTHORIZATION_REQUIRED"
    resumed = client.post(f"/api/v1/agent-runtime/turns/{other_turn}/resume")
    assert resumed.status_code == 202, "its own grant resumes the other turn"
    assert client.wait_state(other_turn, TERMINAL)["state"] == "COMPLETED"
    _end(client, turn_id)


@pytest.mark.req("RT-08", "GW-07")
def test_an_expired_grant_no_longer_authorizes_a_resume(client: ApiClient) -> None:
    """SPEC §15 pins no expiry field: the kit asks with ours (``expires_in_seconds``) and
    watches the campaign's ``grants`` list; a target with neither is NOT_RUN here."""
    turn_id, campaign_id = _paused(client)
    made = client.grant(campaign_id, expires_in_seconds=1)
    if made.status_code == 422:
        _end(client, turn_id)
        pytest.skip(NO_EXPIRY)
    assert made.status_code == 201, made.text
    grant = made.json()["grant"]
    assert grant["active"] is True

    def shown() -> dict[str, Any]:
        campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
        if "grants" not in campaign:
            pytest.skip(NO_EXPIRY)
        (found,) = [g for g in campaign["grants"] if g["id"] == grant["id"]]
        return dict(found)

    wait_until(lambda: shown()["active"] is False, timeout=10, interval=0.1)
    assert _refused(client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume")) == (
        409, "GRANT_REQUIRED")
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert campaign["evidence"] == [], "no research contact on an expired grant"
    _end(client, turn_id)


@pytest.mark.req("PR-03", "RT-02")
def test_a_second_malformed_reply_ends_the_turn_model_protocol_error(client: ApiClient) -> None:
    turn = client.start_turn(f"answer badly twice {marker('repair-fails')}")
    done = client.wait_state(str(turn["id"]), TERMINAL)
    assert done["state"] == "MODEL_PROTOCOL_ERROR", done
    assert done["error"]["code"] == "MODEL_PROTOCOL_ERROR"
    assert set(done["error"]) == {"code", "message"}
    assert done["final_text"] != "KIT should never be asked.", "no third request"
    assert done["tool_calls"] == []


def _session(client: ApiClient) -> str:
    response = client.post("/api/cordis/sessions", {})
    assert response.status_code == 201, response.text
    return str(response.json()["session"]["id"])


@pytest.mark.req("BR-02", "PR-03", "BR-03")
def test_a_failed_bridge_turn_streams_one_error_then_done(client: ApiClient) -> None:
    sid = _session(client)
    turn = RawTurn(client, sid, f"answer badly twice {marker('repair-fails')}")
    assert turn.status == 200 and turn.trailing == b""
    chunks = turn.chunks
    assert [c["seq"] for c in chunks] == list(range(1, len(chunks) + 1))
    assert turn.types()[-2:] == ["error", "done"], turn.types()
    assert turn.types().count("error") == 1 and turn.types().count("done") == 1
    error, done = chunks[-2], chunks[-1]
    assert error["code"] == "MODEL_PROTOCOL_ERROR" and error["message"]
    assert (done["reason"], done["interrupted"]) == ("error", False)
    assert "KIT should never be asked." not in "".join(
        c.get("text", "") for c in chunks if c["type"] == "text")


@pytest.mark.req("BR-12", "QR-07")
def test_an_approval_expires_while_its_turn_is_alive_and_then_refuses_a_decision(
        client: ApiClient) -> None:
    """The launch profile's approval timeout (QR-07): the first approval is left unanswered
    until it expires; a decision for it then, while the turn still runs, is 409."""
    sid = _session(client)
    tag = nonce()
    late: list[tuple[int, str]] = []
    asked: list[str] = []

    def wait_out_the_first(chunk: dict[str, Any]) -> None:
        url = f"/api/cordis/sessions/{sid}/approvals/"
        if chunk["type"] == "approval-request":
            asked.append(str(chunk["approval_id"]))
            if len(asked) == 2:  # the turn is alive, asking again: decide the expired one
                late.append(_refused(client.post(url + asked[0],
                                                 {"decision": "allowed-once"})))
                assert client.post(url + asked[1], {"decision": "rejected"}).status_code == 200

    turn = RawTurn(client, sid, f"write two files {marker('write-two', tag)}",
                   on_chunk=wait_out_the_first)
    decisions = [c["decision"] for c in turn.chunks if c["type"] == "approval-decision"]
    assert decisions == ["expired", "rejected"], decisions
    assert late == [(409, "APPROVAL_NOT_PENDING")], "an expired approval cannot be decided"
    results = [c for c in turn.chunks if c["type"] == "tool-result"]
    assert [r["status"] for r in results] == ["refused", "refused"], "nothing was written"
    read = RawTurn(client, sid, f"read them back {marker('read-two', tag)}")
    assert all(c["status"] != "ok" for c in read.chunks if c["type"] == "tool-result")


@pytest.mark.req("BR-12")
def test_a_decision_after_the_turn_ended_is_409(client: ApiClient) -> None:
    sid = _session(client)
    asked: list[str] = []

    def cancel_when_asked(chunk: dict[str, Any]) -> None:
        if chunk["type"] == "approval-request":
            asked.append(str(chunk["approval_id"]))
            cancelled = client.post(f"/api/cordis/sessions/{sid}/cancel")
            assert cancelled.status_code in (200, 202), cancelled.text

    turn = RawTurn(client, sid, f"write {marker('write-two')}", on_chunk=cancel_when_asked)
    assert len(asked) == 1 and turn.types()[-1] == "done"
    assert turn.chunks[-1]["reason"] == "cancelled"

    def idle() -> bool:
        return not client.get(f"/api/cordis/sessions/{sid}").json()["session"]["active_turn"]

    wait_until(idle, timeout=15)
    for decision in ("allowed-once", "rejected"):
        late = client.post(f"/api/cordis/sessions/{sid}/approvals/{asked[0]}",
                           {"decision": decision})
        assert _refused(late) == (409, "APPROVAL_NOT_PENDING"), late.text
    unknown = client.post(f"/api/cordis/sessions/{sid}/approvals/appr_{secrets.token_hex(8)}",
                          {"decision": "allowed-once"})
    assert _refused(unknown) == (409, "APPROVAL_NOT_PENDING")
    messages = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert not any(m["role"] == "tool" and m.get("status") == "ok" for m in messages), \
        "the late decision ran nothing"


@pytest.mark.req("BR-12")
def test_a_headless_turn_is_refused_without_being_asked(client: ApiClient) -> None:
    """Stops at the first ``approval-request``: a caller asked anyway fails at once, not after
    the target's approval wait."""
    sid = _session(client)
    chunks: list[dict[str, Any]] = []
    body = {"text": f"write {marker('write-two')}", "headless": True}
    with client.http.stream("POST", f"/api/cordis/sessions/{sid}/messages", json=body,
                            headers=client.headers(True), timeout=30) as reply:
        assert reply.status_code == 200
        for line in reply.iter_lines():  # ends with the stream
            chunks.append(json.loads(line))
            assert chunks[-1]["type"] != "approval-request", "a headless caller was asked"
    assert chunks[-1]["type"] == "done"
    results = [c for c in chunks if c["type"] == "tool-result"]
    assert results, [c["type"] for c in chunks]
    assert all(r["status"] == "refused" for r in results)
    assert all(r["result"]["data"]["error"]["code"] == "PERMISSION_DENIED" for r in results)


@pytest.mark.req("BR-08", "BR-04")
def test_deleting_an_unknown_engine_session_is_404(target: Served) -> None:
    client = target.client()
    try:
        made = client.post("/api/cordis/sessions", {})
        assert made.status_code == 201, made.text
        sid = made.json()["session"]["id"]
        assert client.delete(f"/api/cordis/sessions/{sid}").status_code in (200, 204)
        for gone in (sid, f"ses_{secrets.token_hex(13)}"):  # deleted once, never made
            answer = client.delete(f"/api/cordis/sessions/{gone}")
            assert _refused(answer) == (404, "SESSION_NOT_FOUND"), answer.text
            assert _refused(client.get(f"/api/cordis/sessions/{gone}")) == (
                404, "SESSION_NOT_FOUND")
    finally:
        client.close()


@pytest.mark.req("BR-13", "BR-14")
def test_the_openai_face_reports_the_providers_usage(model_target: Served) -> None:
    with httpx.Client(base_url=f"{model_target.url}/api/cordis/v1", trust_env=False, timeout=30,
                      headers={"Authorization": f"Bearer {model_target.admin_token}"}) as http:
        model = next(m["id"] for m in http.get("/models").json()["data"]
                     if m["id"].endswith(f":{KIT_MODEL}"))

        def body(**extra: Any) -> dict[str, Any]:
            return {"model": model, "messages": [
                {"role": "user", "content": f"count {marker('final')}"}]} | extra

        answer = http.post("/chat/completions", json=body())
        assert answer.status_code == 200, answer.text
        usage = answer.json()["usage"]
        assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
        assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
        stream = http.post("/chat/completions", json=body(
            stream=True, stream_options={"include_usage": True}))
        events, done = completion_chunks(stream.text)  # blank-line events (WHATWG)
        counted = [e["usage"] for e in events if e.get("usage") and not e["choices"]]
        assert len(counted) == 1, "include_usage: one chunk with no choices, the usage"
        assert counted[0]["completion_tokens"] > 0 and counted[0]["prompt_tokens"] > 0
        assert done, "the stream ends with data: [DONE]"
