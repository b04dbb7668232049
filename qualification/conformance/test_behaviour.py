"""Behaviour a target must show beyond the HTTP checklist (QR-03, issue 22): approvals across
sessions, a delete while the model answers, the page bounds, an idempotency key retried
with another body, the repeated-failure rule with each kind of failure, and the usage
ledger's numbers as the provider reported them.

Each test was written against a fault of ``qualification/mutants/faults_teeth.py``
(written first, from SPEC alone) that the kit let through. HTTP only, against any
target whose agent answers with the kit's provider (the scripts of
``fixtures/scenarios/conformance.json``).
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from qualification.conformance.kit import KIT_MODEL, marker, nonce
from qualification.conformance.test_bridge_flows import RawTurn
from qualification.harness import TERMINAL, ApiClient, wait_until
from qualification.target import Served

pytestmark = pytest.mark.conformance


@pytest.fixture
def client(model_target: Served) -> Iterator[ApiClient]:
    """An admin client of a target whose agent answers with the kit provider."""
    client = model_target.client()
    yield client
    client.close()


def _refused(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, response.json()["error"]["code"]


def _session(client: ApiClient) -> str:
    response = client.post("/api/cordis/sessions", {})
    assert response.status_code == 201, response.text
    return str(response.json()["session"]["id"])


def _ledger(client: ApiClient, caller: str, since: str) -> list[dict[str, Any]]:
    """The usage records of ``caller`` made at or after ``since``, oldest first."""
    answer = client.get("/api/cordis/usage", params={"since": since, "limit": 500})
    assert answer.status_code == 200, answer.text
    return [r for r in reversed(answer.json()["usage"]) if r["caller"] == caller]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).isoformat()


# -- ownership across sessions ---------------------------------------------------------------

@pytest.mark.req("BR-12")
def test_a_decision_through_another_sessions_url_is_refused(client: ApiClient) -> None:
    """An approval id is this session's: sent through another live session's URL it is 409
    and stays pending for its own session, which then decides it."""
    mine, other = _session(client), _session(client)
    foreign: list[tuple[int, str]] = []

    def decide(chunk: dict[str, Any]) -> None:
        if chunk["type"] != "approval-request":
            return
        approval = chunk["approval_id"]
        if not foreign:
            foreign.append(_refused(client.post(
                f"/api/cordis/sessions/{other}/approvals/{approval}",
                {"decision": "allowed-once"})))
        own = client.post(f"/api/cordis/sessions/{mine}/approvals/{approval}",
                          {"decision": "rejected"})
        assert own.status_code == 200, own.text

    turn = RawTurn(client, mine, f"write two {marker('write-two')}", on_chunk=decide)
    assert foreign == [(409, "APPROVAL_NOT_PENDING")]
    decisions = [c["decision"] for c in turn.chunks if c["type"] == "approval-decision"]
    assert decisions == ["rejected", "rejected"], "the foreign decision allowed nothing"
    assert all(c["status"] == "refused" for c in turn.chunks if c["type"] == "tool-result")


@pytest.mark.req("BR-12", "BR-05")
def test_two_sessions_asking_at_once_each_refuse_the_others_decision_and_cancel(
        model_target: Served, client: ApiClient) -> None:
    """Both sessions wait on an approval of their own: each approval id sent through the
    other live session's URL is 409 and leaves both pending; a cancel through a third,
    idle session cancels nothing; each is then decided through its own URL."""
    mine, theirs, idle = _session(client), _session(client), _session(client)
    other = model_target.client()
    theirs_first: list[str] = []
    asked = threading.Event()

    def on_theirs(chunk: dict[str, Any]) -> None:
        if chunk["type"] != "approval-request":
            return
        if not theirs_first:  # left pending until the other session has tried it
            theirs_first.append(chunk["approval_id"])
            asked.set()
            return
        own = other.post(f"/api/cordis/sessions/{theirs}/approvals/{chunk['approval_id']}",
                         {"decision": "rejected"})
        assert own.status_code == 200, own.text

    turns: dict[str, RawTurn] = {}
    reader = threading.Thread(target=lambda: turns.setdefault("theirs", RawTurn(
        other, theirs, f"write two {marker('write-two')}", on_chunk=on_theirs)), daemon=True)
    reader.start()
    assert asked.wait(20), "their turn asked for approval"
    crossed: list[tuple[int, str]] = []
    cancelled: list[Any] = []

    def on_mine(chunk: dict[str, Any]) -> None:
        if chunk["type"] != "approval-request":
            return
        approval = chunk["approval_id"]
        if not crossed:
            crossed.append(_refused(client.post(
                f"/api/cordis/sessions/{theirs}/approvals/{approval}",
                {"decision": "allowed-once"})))
            crossed.append(_refused(client.post(
                f"/api/cordis/sessions/{mine}/approvals/{theirs_first[0]}",
                {"decision": "allowed-once"})))
            answer = client.post(f"/api/cordis/sessions/{idle}/cancel", {})
            cancelled.append((answer.status_code, answer.json()))
            theirs_own = client.post(
                f"/api/cordis/sessions/{theirs}/approvals/{theirs_first[0]}",
                {"decision": "rejected"})
            assert theirs_own.status_code == 200, "still pending for its own session"
        own = client.post(f"/api/cordis/sessions/{mine}/approvals/{approval}",
                          {"decision": "rejected"})
        assert own.status_code == 200, own.text

    turn = RawTurn(client, mine, f"write two {marker('write-two')}", on_chunk=on_mine)
    reader.join(30)
    other.close()
    assert crossed == [(409, "APPROVAL_NOT_PENDING")] * 2
    assert cancelled == [(200, {"cancelled": False})]
    for ended in (turn, turns["theirs"]):
        decisions = [c["decision"] for c in ended.chunks if c["type"] == "approval-decision"]
        assert decisions == ["rejected", "rejected"], "a crossed decision allowed nothing"
        assert all(c["status"] == "refused"
                   for c in ended.chunks if c["type"] == "tool-result")
        assert ended.chunks[-1]["type"] == "done" and ended.chunks[-1]["reason"] == "completed"


# -- time and ordering while a turn runs -----------------------------------------------------

@pytest.mark.req("BR-08", "BR-05")
def test_deleting_a_session_while_the_model_answers_cancels_the_turn_first(
        client: ApiClient) -> None:
    """A delete that lands while the model is still streaming its answer ends the turn
    (``done`` cancelled) before the log goes: the tool it was asking for never runs."""
    sid = _session(client)
    deleted: list[int] = []

    def delete_while_thinking(chunk: dict[str, Any]) -> None:
        if chunk["type"] == "reasoning" and not deleted:
            deleted.append(client.delete(f"/api/cordis/sessions/{sid}").status_code)

    turn = RawTurn(client, sid, f"think slowly {marker('slow-answer')}",
                   on_chunk=delete_while_thinking)
    assert deleted and deleted[0] in (200, 204), deleted
    assert turn.types()[-1] == "done", turn.types()
    assert (turn.chunks[-1]["reason"], turn.chunks[-1]["interrupted"]) == ("cancelled", True)
    assert "tool-call" not in turn.types() and "tool-result" not in turn.types()
    assert _refused(client.get(f"/api/cordis/sessions/{sid}")) == (404, "SESSION_NOT_FOUND")
    listed = client.get("/api/cordis/sessions", params={"limit": 200}).json()["sessions"]
    assert sid not in {s["id"] for s in listed}


@pytest.mark.req("BR-05")
def test_a_client_that_leaves_while_asked_for_approval_cancels_the_turn(
        client: ApiClient) -> None:
    """A disconnect while the human is asked is a cancel, not a 'Deny': the turn ends there,
    the tool never runs nor is refused, and the model is not asked again."""
    sid = _session(client)
    path = f"/api/cordis/sessions/{sid}/messages"
    asked = False
    with client.http.stream("POST", path, json={"text": f"write {marker('write-two')}"},
                            headers=client.headers(True), timeout=30) as reply:
        assert reply.status_code == 200
        for data in reply.iter_raw():
            if b'"approval-request"' in data:
                asked = True
                break  # the client goes away while the approval is pending
    assert asked

    def idle() -> bool:
        return not client.get(f"/api/cordis/sessions/{sid}").json()["session"]["active_turn"]

    wait_until(idle, timeout=15)
    messages = client.get(f"/api/cordis/sessions/{sid}").json()["session"]["messages"]
    assert [m for m in messages if m["role"] == "tool"] == [], messages
    assert [m["role"] for m in messages].count("assistant") <= 1, "the model was not asked again"


# -- bounds of human-supplied fields ---------------------------------------------------------

@pytest.mark.req("BR-15")
@pytest.mark.parametrize(("limit", "status"), [
    (1, 200), (200, 200), (0, 422), (201, 422), (-1, 422)])
def test_session_pages_admit_limit_1_to_200_exactly(target: Served, limit: int,
                                                    status: int) -> None:
    client = target.client()
    try:
        _session(client)
        answer = client.get("/api/cordis/sessions", params={"limit": limit})
        assert answer.status_code == status, answer.text
        if status == 200:
            assert 1 <= len(answer.json()["sessions"]) <= limit
        else:
            assert answer.json()["error"]["code"] == "VALIDATION_FAILED"
    finally:
        client.close()


@pytest.mark.req("WK-05")
def test_a_work_page_that_ends_the_list_exactly_has_no_next_cursor(target: Served) -> None:
    """Paging the Work tasks (no worker needed: they stay queued): a page holding the last
    tasks exactly says ``next_cursor: null``, never a cursor to an empty page."""
    client = target.client()
    try:
        tag = nonce()
        mine: list[str] = []
        for index in range(3):
            made = client.post("/api/v1/work/tasks", {"message": f"kit page {tag} {index}"})
            assert made.status_code == 201, made.text
            mine.append(made.json()["task"]["id"])
        ids: list[str] = []
        cursor: str | None = None
        for _ in range(1000):  # bounded: a page of 100 at a time
            params: dict[str, Any] = {"limit": 100} | ({"cursor": cursor} if cursor else {})
            page = client.get("/api/v1/work/tasks", params=params).json()
            ids += [task["id"] for task in page["tasks"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert page["tasks"], "a cursor led to an empty page"
        assert len(ids) == len(set(ids)) >= 3
        last = client.get("/api/v1/work/tasks", params={"limit": 2, "cursor": ids[-3]}).json()
        assert [task["id"] for task in last["tasks"]] == ids[-2:]
        assert last["next_cursor"] is None, "the last two tasks exactly: no next page"
        for task_id in mine:  # only this test's own tasks: the target may hold others'
            client.post(f"/api/v1/work/tasks/{task_id}/cancel")
    finally:
        client.close()


@pytest.mark.req("RT-04")
def test_a_client_request_id_retried_with_another_message_is_the_same_turn(
        client: ApiClient) -> None:
    """The key decides: a retry carrying another message is still the first turn, with its
    first message (a client that edits a retried body gets no second turn)."""
    tag = nonce()
    key = f"kit-{tag}"
    first = client.post("/api/v1/agent-runtime/turns",
                        {"message": f"once {marker('final', tag)}", "client_request_id": key})
    assert first.status_code == 202, first.text
    again = client.post("/api/v1/agent-runtime/turns",
                        {"message": f"twice {marker('final')}", "client_request_id": key})
    assert again.status_code == 200, again.text
    turn = again.json()["turn"]
    assert turn["id"] == first.json()["turn"]["id"]
    assert turn["message"] == f"once {marker('final', tag)}"
    assert client.wait_state(str(turn["id"]), TERMINAL)["state"] == "COMPLETED"


# -- the repeated-failure rule with each kind of failure -------------------------------------

@pytest.mark.req("GW-05")
@pytest.mark.parametrize("script", ["repeat-refused", "repeat-error"])
def test_a_failed_call_repeated_at_once_ends_repeated_tool_failure(client: ApiClient,
                                                                  script: str) -> None:
    """The rule holds for a call the gateway refused (an invented object id) and for one its
    service failed (a missing file): the same call again ends the turn, and the model is
    not asked a third time."""
    turn = client.start_turn(f"fail twice {marker(script)}")
    done = client.wait_state(str(turn["id"]), TERMINAL)
    assert (done["state"], done["error"]["code"]) == ("FAILED", "REPEATED_TOOL_FAILURE"), done
    assert done["final_text"] != "KIT should never be asked."
    assert len(done["tool_calls"]) == 1, "the repeat itself is not run"


# -- usage as the provider reported it -------------------------------------------------------

@pytest.mark.req("BR-14")
def test_a_failed_model_call_is_recorded_with_its_error_code(client: ApiClient) -> None:
    since = _now()
    turn = client.start_turn(f"provider down {marker('provider-fails')}")
    done = client.wait_state(str(turn["id"]), TERMINAL, timeout=30)
    assert done["state"] != "COMPLETED" and done["error"], done
    records = _ledger(client, str(turn["id"]), since)
    assert records, "a call that failed is still a call: it is recorded"
    assert {r["outcome"] for r in records} == {done["error"]["code"]}, records
    assert all(r["prompt_tokens"] is None for r in records), "nothing was reported"


@pytest.mark.req("BR-14")
def test_the_usage_ledger_keeps_an_unreported_count_null(client: ApiClient) -> None:
    """A provider that leaves a count out (the cached tokens, or every count) leaves it
    unknown in the ledger: null, never 0."""
    since = _now()
    sid = _session(client)
    for script in ("uncached", "unreported"):
        turn = RawTurn(client, sid, f"count {marker(script)}")
        assert turn.types()[-1] == "done" and turn.chunks[-1]["reason"] == "completed"
    records = _ledger(client, sid, since)
    assert [r["outcome"] for r in records] == ["ok"] * 3, records
    assert [(r["prompt_tokens"] is None, r["completion_tokens"] is None, r["cached_tokens"])
            for r in records] == [(False, False, None), (False, False, None),
                                  (True, True, None)]


def _completion(target: Served, script: str) -> dict[str, Any]:
    with httpx.Client(base_url=f"{target.url}/api/cordis/v1", trust_env=False, timeout=30,
                      headers={"Authorization": f"Bearer {target.admin_token}"}) as http:
        model = next(m["id"] for m in http.get("/models").json()["data"]
                     if m["id"].endswith(f":{KIT_MODEL}"))
        answer = http.post("/chat/completions", json={"model": model, "messages": [
            {"role": "user", "content": f"count {marker(script)}"}]})
        assert answer.status_code == 200, answer.text
        body: dict[str, Any] = answer.json()
        return body


@pytest.mark.req("BR-14", "BR-13")
def test_a_token_count_the_provider_never_reported_stays_null(model_target: Served) -> None:
    """Two model calls, neither reporting cached tokens: the completion's usage sums what
    was said and says nothing of the cache (no ``prompt_tokens_details``), not 0."""
    usage = _completion(model_target, "uncached")["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] > 0
    assert "prompt_tokens_details" not in usage, usage


@pytest.mark.req("BR-14", "BR-13", "BR-20")
def test_a_completions_usage_sums_every_model_call_of_its_turn(model_target: Served) -> None:
    """The kit provider counts a completion token per word of its reply: the tool call (1)
    and the final answer (4) make 5, the turn's, not the last call's 4."""
    usage = _completion(model_target, "count-two")["usage"]
    assert usage["completion_tokens"] == 5, usage
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5


@pytest.mark.req("BR-14")
def test_a_usage_records_latency_is_in_milliseconds(client: ApiClient) -> None:
    """The kit provider holds this answer 0.4 s: its record says at least 400 ms."""
    since = _now()
    sid = _session(client)
    turn = RawTurn(client, sid, f"take your time {marker('slow-final')}")
    assert turn.chunks[-1]["reason"] == "completed"
    (record,) = _ledger(client, sid, since)
    assert 400 <= record["latency_ms"] < 30_000, record
    assert record["outcome"] == "ok"



# -- second batch: turns cancelled while queued or paused, bounds, repairs, round usage -------

def _paused_turn(client: ApiClient) -> tuple[str, str]:
    turn = client.start_turn(f"Is the early ivy bee record real? {marker('research', nonce())}")
    paused = client.wait_state(str(turn["id"]), {"AUTHORIZATION_REQUIRED"} | TERMINAL)
    assert paused["state"] == "AUTHORIZATION_REQUIRED", paused
    return str(paused["id"]), str(paused["authorization"]["campaign_id"])


def _cancel(client: ApiClient, turn_id: str) -> dict[str, Any]:
    answer = client.post(f"/api/v1/agent-runtime/turns/{turn_id}/cancel")
    assert answer.status_code == 200, answer.text
    turn: dict[str, Any] = answer.json()["turn"]
    return turn


def _rounds(client: ApiClient, turn_id: str) -> list[dict[str, Any]]:
    """The ``turn.round`` events of one turn (the log keeps the newest ones: read at once)."""
    answer = client.get("/api/v1/agent-runtime/events", params={"limit": 500})
    assert answer.status_code == 200, answer.text
    return [e["data"] for e in answer.json()["events"]
            if e["turn_id"] == turn_id and e["type"] == "turn.round"]


@pytest.mark.req("RT-05")
def test_a_turn_cancelled_while_queued_never_runs(client: ApiClient) -> None:
    """One worker: while a slow turn holds it, a second turn waits QUEUED. Cancelled there,
    it is CANCELLED at once and stays so after the worker frees: no round, no answer."""
    holder = client.start_turn(f"hold the worker {marker('hold')}")
    client.wait_state(str(holder["id"]), {"RUNNING"} | TERMINAL)
    queued = client.start_turn(f"wait your turn {marker('final')}")
    assert queued["state"] == "QUEUED", queued
    assert _cancel(client, str(queued["id"]))["state"] == "CANCELLED"
    assert client.wait_state(str(holder["id"]), TERMINAL, timeout=30)["state"] == "COMPLETED"
    after = client.turn(str(queued["id"]))
    assert (after["state"], after["rounds"], after["final_text"]) == ("CANCELLED", 0, None)


@pytest.mark.req("RT-05")
def test_cancelling_a_turn_twice_is_harmless(client: ApiClient) -> None:
    """A cancel after the end is answered with the turn as it is: completed stays
    completed, cancelled stays cancelled, never an error."""
    done = client.start_turn(f"quick {marker('final')}")
    finished = client.wait_state(str(done["id"]), TERMINAL)
    assert finished["state"] == "COMPLETED"
    assert _cancel(client, str(done["id"]))["state"] == "COMPLETED"
    turn_id, _ = _paused_turn(client)
    assert _cancel(client, turn_id)["state"] == "CANCELLED"
    assert _cancel(client, turn_id)["state"] == "CANCELLED"


@pytest.mark.req("RT-08", "RT-02")
def test_a_turn_cancelled_while_paused_cannot_be_resumed(client: ApiClient) -> None:
    """Cancelled while it waited for its grant, a turn is final: a grant made afterwards
    resumes nothing (409 TURN_NOT_RESUMABLE) and no research runs."""
    turn_id, campaign_id = _paused_turn(client)
    assert _cancel(client, turn_id)["state"] == "CANCELLED"
    assert client.grant(campaign_id).status_code == 201
    refused = client.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume")
    assert _refused(refused) == (409, "TURN_NOT_RESUMABLE")
    assert client.turn(turn_id)["state"] == "CANCELLED"
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}").json()["campaign"]
    assert campaign["evidence"] == [], "no research contact for a cancelled turn"


@pytest.mark.req("RT-03")
def test_a_message_of_exactly_the_bound_is_a_turn_one_more_is_refused(client: ApiClient) -> None:
    """The bound the target reports (``limits.max_message_chars``) is inclusive, in
    characters: that many (non-ASCII among them) is a turn, one more is 422."""
    bound = int(client.get("/api/v1/agent-runtime/status").json()["limits"]["max_message_chars"])
    head = f"bound {marker('final')} "
    exact = head + "é" * (bound - len(head))
    assert len(exact) == bound
    started = client.post("/api/v1/agent-runtime/turns", {"message": exact})
    assert started.status_code == 202, started.text
    assert client.wait_state(str(started.json()["turn"]["id"]), TERMINAL)["state"] == "COMPLETED"
    over = client.post("/api/v1/agent-runtime/turns", {"message": exact + "é"})
    assert _refused(over) == (422, "VALIDATION_FAILED")
    empty = client.post("/api/v1/agent-runtime/turns", {"message": ""})
    assert _refused(empty) == (422, "VALIDATION_FAILED")


@pytest.mark.req("RT-04")
@pytest.mark.parametrize(("length", "status"), [(1, 202), (128, 202), (129, 422)])
def test_a_client_request_id_is_bounded_in_characters(client: ApiClient, length: int,
                                                       status: int) -> None:
    """1-128 printable characters, counted as characters: 128 accented letters (256 bytes
    of UTF-8) are a key, 129 are refused."""
    key = (nonce() + "é" * 128)[:length]
    answer = client.post("/api/v1/agent-runtime/turns",
                         {"message": f"key {marker('final')}", "client_request_id": key})
    assert answer.status_code == status, answer.text
    if status == 202:
        assert answer.json()["turn"]["client_request_id"] == key
        client.wait_state(str(answer.json()["turn"]["id"]), TERMINAL)
    else:
        assert answer.json()["error"]["code"] == "VALIDATION_FAILED"


@pytest.mark.req("WK-05")
@pytest.mark.parametrize(("limit", "ok"), [(1, True), (200, True), (0, False), (201, False),
                                           (-1, False)])
def test_work_pages_admit_limit_1_to_200_exactly(target: Served, limit: int, ok: bool) -> None:
    """A Work page limit outside 1-200 is refused VALIDATION_FAILED, never clamped."""
    client = target.client()
    try:
        made = client.post("/api/v1/work/tasks", {"message": f"kit limit {nonce()}"})
        assert made.status_code == 201, made.text
        answer = client.get("/api/v1/work/tasks", params={"limit": limit})
        if ok:
            assert answer.status_code == 200, answer.text
            assert 1 <= len(answer.json()["tasks"]) <= limit
        else:
            assert answer.status_code == 422, answer.text
            assert answer.json()["error"]["code"] == "VALIDATION_FAILED"
        client.post(f"/api/v1/work/tasks/{made.json()['task']['id']}/cancel")
    finally:
        client.close()


@pytest.mark.req("PR-03")
def test_a_reply_the_client_refuses_gets_the_repair_round_too(client: ApiClient) -> None:
    """A reply refused before the action parser sees it (a lone surrogate escape, not
    I-JSON) is a refusal like any other: one repair request, then the turn completes."""
    turn = client.start_turn(f"answer with a lone surrogate {marker('client-refused')}")
    done = client.wait_state(str(turn["id"]), TERMINAL)
    assert done["state"] == "COMPLETED", done
    assert done["final_text"] == "KIT repaired the refused reply."
    assert done["tool_calls"] == []


@pytest.mark.req("BR-14")
def test_a_rounds_event_keeps_an_unreported_count_null(client: ApiClient) -> None:
    """A provider that reports no usage leaves the round's counts unknown in its event."""
    turn = client.start_turn(f"no count {marker('unreported')}")
    assert client.wait_state(str(turn["id"]), TERMINAL)["state"] == "COMPLETED"
    (round_,) = _rounds(client, str(turn["id"]))
    assert (round_["prompt_tokens"], round_["completion_tokens"], round_["cached_tokens"]) == (
        None, None, None), round_
    assert round_["ms"] >= 0


@pytest.mark.req("BR-14", "PR-03")
def test_a_repaired_rounds_tokens_are_both_requests(client: ApiClient) -> None:
    """A round that needed a repair cost two model calls: its event counts the tokens of
    both, as the ledger recorded each."""
    since = _now()
    turn = client.start_turn(f"answer badly once {marker('repair')}")
    turn_id = str(turn["id"])
    assert client.wait_state(turn_id, TERMINAL)["state"] == "COMPLETED"
    (round_,) = _rounds(client, turn_id)
    calls = _ledger(client, turn_id, since)
    assert len(calls) == 2, calls
    for field in ("prompt_tokens", "completion_tokens"):
        assert round_[field] == sum(int(c[field]) for c in calls), (field, round_, calls)
