"""BR-14: every model call of the runtime and the engine is in the usage ledger, as reported.

A real server and a scripted fake provider that keeps what it reported
(``FakeProvider.reported``): the ledger's tokens are the provider's, to the
token, for whole and streamed calls, runtime, session and transient turns; a
call that failed is there with its error code and no invented token; a repair
is a call of its own. ``GET /api/cordis/usage`` pages the records newest first
and totals them per model and per day.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_provider import Answer, FakeProvider, Scenario
from labfy_ref.bridge import ReferenceEngine
from labfy_ref.bridge.contract import Transcript
from labfy_ref.bridge.llm import LocalProvider
from labfy_ref.bridge.loop import AgentLoop
from labfy_ref.bridge.plugins import bridge_surface
from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.config import RawOptions, resolve
from labfy_ref.gateway import AgentGateway
from labfy_ref.host.scope import Scope
from labfy_ref.workspace import init_workspace, open_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent, scenario
from qualification.harness import ApiClient, LiveServer, TurnReader, wait_until

MODEL = "engine:local:fake-model"
FINAL = '{"type":"final","text":"Done."}'
LIST = '{"type":"tool_call","tool_id":"workspace.list_objects","arguments":{}}'
Tokens = tuple[int | None, int | None, int | None]


def _usage(client: ApiClient, query: str = "") -> dict[str, Any]:
    response = client.get(f"/api/cordis/usage{'?' + query if query else ''}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _oldest_first(client: ApiClient) -> list[dict[str, Any]]:
    return list(reversed(_usage(client, "limit=500")["usage"]))


def _tokens(record: dict[str, Any]) -> Tokens:
    return record["prompt_tokens"], record["completion_tokens"], record["cached_tokens"]


def _reported(provider: FakeProvider) -> list[Tokens]:
    """What the provider said it spent, per completion, in the same order."""
    said = []
    for usage in provider.reported:
        assert usage is not None, "every stream asked for its usage"
        said.append((usage["prompt_tokens"], usage["completion_tokens"],
                     usage["prompt_tokens_details"]["cached_tokens"]))
    return said


def _serve(specimen: Path, provider: FakeProvider, server_factory: ServerFactory) -> LiveServer:
    return server_factory(specimen, bridge=True, **local_agent(provider.base_url))


def _sums(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The totals of ``records`` as the API writes them (a sum of nothing reported is null)."""
    def total(key: str) -> int | None:
        known = [r[key] for r in records if r[key] is not None]
        return sum(known) if known else None

    return {"calls": len(records), "prompt_tokens": total("prompt_tokens"),
            "completion_tokens": total("completion_tokens"),
            "cached_tokens": total("cached_tokens"),
            "errors": sum(r["outcome"] not in ("ok", "CANCELLED") for r in records),
            "cancelled": sum(r["outcome"] == "CANCELLED" for r in records)}


def _check_totals(body: dict[str, Any], records: list[dict[str, Any]]) -> None:
    models = sorted({r["model"] for r in records})
    assert body["totals"]["by_model"] == [
        {"model": m, **_sums([r for r in records if r["model"] == m])} for m in models]
    days = sorted({r["at"][:10] for r in records}, reverse=True)
    assert body["totals"]["by_day"] == [
        {"day": d, **_sums([r for r in records if r["at"][:10] == d])} for d in days]


@pytest.mark.req("BR-14")
def test_a_runtime_turn_records_each_whole_call_with_the_tokens_the_provider_reported(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))
    client = _serve(specimen, provider, server_factory).client()
    assert _usage(client) == {"usage": [], "totals": {"by_model": [], "by_day": []},
                              "next_cursor": None}, "a new workspace has spent nothing"
    turn = client.start_turn("What is in the workspace?")
    client.wait_state(turn["id"], {"COMPLETED"})
    records = _oldest_first(client)
    assert [_tokens(r) for r in records] == _reported(provider)
    assert len(records) == 2 and records[1]["cached_tokens"] > 0, "the second call reused a prefix"
    assert {(r["model"], r["outcome"], r["caller"]) for r in records} == {(MODEL, "ok", turn["id"])}
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    for record in records:
        assert record["latency_ms"] > 0
        assert datetime.datetime.fromisoformat(record["at"].replace("Z", "+00:00")) > started
    assert [r["at"] for r in records] == sorted(r["at"] for r in records)
    _check_totals(_usage(client), records)


@pytest.mark.req("BR-14")
def test_a_bridge_turn_asks_for_the_stream_usage_and_records_it(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))
    client = _serve(specimen, provider, server_factory).client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    chunks = TurnReader(client, session_id, "What is in the workspace?").join()
    assert (chunks[-1]["type"], chunks[-1]["reason"]) == ("done", "completed")
    for request in provider.chat_requests():
        body = request.json()
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    records = _oldest_first(client)
    assert [_tokens(r) for r in records] == _reported(provider)
    assert all(None not in _tokens(r) for r in records), "a stream's usage chunk was read"
    assert {(r["model"], r["outcome"], r["caller"]) for r in records} == {(MODEL, "ok", session_id)}
    _check_totals(_usage(client), records)


@pytest.mark.req("BR-14", "PR-03", "MC-03")
def test_failed_calls_are_recorded_with_their_error_and_no_invented_tokens(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("failing", (
        Answer(status=500, raw_body='{"error": {"message": "boom"}}'),  # the runtime's call
        Answer(content=FINAL, drop_after_chunks=1),  # the bridge's stream, cut mid-way
        Answer(content="Sure! " + LIST), Answer(content="```\n" + LIST + "\n```"),  # repaired
    )))
    client = _serve(specimen, provider, server_factory).client()
    failed = client.start_turn("hi")
    client.wait_state(failed["id"], {"MODEL_UNAVAILABLE"})
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    chunks = TurnReader(client, session_id, "hi").join()
    assert [c["code"] for c in chunks if c["type"] == "error"] == ["MODEL_UNAVAILABLE"]
    refused = client.start_turn("again")
    client.wait_state(refused["id"], {"MODEL_PROTOCOL_ERROR"})

    records = _oldest_first(client)
    assert [(r["outcome"], r["caller"], _tokens(r)) for r in records[:2]] == [
        ("MODEL_UNAVAILABLE", failed["id"], (None, None, None)),
        ("MODEL_UNAVAILABLE", session_id, (None, None, None))], "nothing was reported"
    # Both answers of the repaired round were calls the provider answered: two records,
    # each with its own tokens; refusing the reply is the turn's outcome, not the call's.
    assert [(r["outcome"], r["caller"]) for r in records[2:]] == [("ok", refused["id"])] * 2
    assert [_tokens(r) for r in records[2:]] == _reported(provider)
    body = _usage(client)
    _check_totals(body, records)
    assert body["totals"]["by_model"][0]["errors"] == 2


@pytest.mark.req("BR-14", "BR-05")
def test_a_call_cut_off_by_a_client_that_goes_away_is_recorded_cancelled(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("slow", (
        Answer(content=FINAL, reasoning="thinking " * 200, chunk_chars=2, chunk_delay=0.01),)))
    client = _serve(specimen, provider, server_factory).client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    reader = TurnReader(client, session_id, "hi")
    reader.wait_for("reasoning")
    reader.disconnect()
    records: list[dict[str, Any]] = []

    def recorded() -> bool:
        records[:] = _usage(client)["usage"]
        return bool(records)

    wait_until(recorded, timeout=15)
    assert [(r["outcome"], r["caller"], _tokens(r)) for r in records] == [
        ("CANCELLED", session_id, (None, None, None))]
    assert provider.reported == [], "the stream never reached its usage chunk"
    [total] = _usage(client)["totals"]["by_model"]
    assert (total["cancelled"], total["errors"]) == (1, 0), "a stop is no error"


@pytest.mark.req("BR-14", "BR-13")
def test_a_transient_turn_is_recorded_as_transient(specimen: Path,
                                                    provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))
    workspace = open_workspace(specimen)
    store = workspace.open_store()
    sessions = JsonlSessionStore(workspace.sessions_dir)
    gateway = AgentGateway(workspace, store)
    agent = resolve(RawOptions(workspace=str(specimen), agent_mode="local-model",
                               agent_endpoint=provider.base_url, agent_model="fake-model"),
                    {}).agent
    llm = LocalProvider(agent)
    engine = ReferenceEngine(sessions, AgentLoop(llm, bridge_surface(gateway), "p"),
                             Scope("test"))

    async def run() -> list[dict[str, Any]]:
        handle = await engine.run_transient(Transcript(MODEL, (), (), "What is there?"))
        chunks = [chunk async for chunk in handle.iterate()]
        await llm.aclose()
        return chunks

    try:
        assert asyncio.run(run())[-1]["reason"] == "completed"
        records = gateway.usage.report()["usage"]
    finally:
        sessions.close()
        store.close()
    records.reverse()
    assert [_tokens(r) for r in records] == _reported(provider)
    assert {(r["model"], r["outcome"], r["caller"]) for r in records} == {
        (MODEL, "ok", "transient")}


@pytest.mark.req("BR-14")
def test_usage_pages_newest_first_and_since_bounds_records_and_totals(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("finals", (Answer(content=FINAL),),
                                         when_exhausted="repeat_last"))
    client = _serve(specimen, provider, server_factory).client()
    for number in range(5):
        turn = client.start_turn(f"turn {number}")
        client.wait_state(turn["id"], {"COMPLETED"})
    whole = _usage(client)["usage"]
    assert len(whole) == 5
    paged, cursor = [], None
    for _ in range(10):  # bounded: 5 records, 2 a page
        body = _usage(client, "limit=2" + (f"&cursor={cursor}" if cursor else ""))
        assert len(body["usage"]) <= 2
        _check_totals(body, whole)  # the totals are every record's, whatever the page
        paged += body["usage"]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert paged == whole
    later = whole[1]["at"]
    since = _usage(client, f"since={later}")
    assert since["usage"] == [r for r in whole if r["at"] >= later]
    _check_totals(since, since["usage"])
    future = _usage(client, "since=2999-01-01T00:00:00%2B02:00")
    assert (future["usage"], future["totals"]) == ([], {"by_model": [], "by_day": []})
    for query in ("limit=0", "limit=501", "since=yesterday", "since=0001-01-01T00:00:00%2B01:00",
                  "cursor=-1", "cursor=12a", "cursor=9999999999999999999",
                  f"cursor={2**63}"):
        response = client.get(f"/api/cordis/usage?{query}")
        assert response.status_code == 422, query
        assert response.json()["error"]["code"] == "VALIDATION_FAILED", query


@pytest.mark.req("BR-14", "AV-02")
@settings(deadline=None, max_examples=40)
@given(value=st.one_of(st.binary(max_size=40),
                       st.text(st.characters(codec=None, categories=["Cs", "Nd", "P", "L"]),
                               max_size=30),
                       st.integers(min_value=-1, max_value=10**21).map(str)))
def test_any_since_or_cursor_is_a_page_or_one_refusal(usage_client: ApiClient,
                                                      value: bytes | str) -> None:
    raw = value if isinstance(value, bytes) else value.encode("utf-8", "surrogatepass")
    for name in ("since", "cursor"):
        response = usage_client.get(f"/api/cordis/usage?{name}={quote_from_bytes(raw)}")
        assert response.status_code in (200, 422), (name, raw, response.text)
        body = response.json()
        if response.status_code == 422:
            assert body["error"]["code"] == "VALIDATION_FAILED"
            assert "\n" not in body["error"]["message"]
        else:
            assert set(body) == {"usage", "totals", "next_cursor"}


@pytest.fixture(scope="module")
def usage_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiClient]:
    """An admin client of a demo server whose ledger holds a demo turn's three calls."""
    path = tmp_path_factory.mktemp("usage") / "specimen"
    init_workspace(path, specimen=True)
    server = LiveServer(path).start()
    try:
        client = server.client()
        turn = client.start_turn("Check the early ivy bee record.")
        client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"})  # search, read, prepare
        assert [(r["model"], _tokens(r)) for r in _usage(client)["usage"]] == [
            ("engine:demo:deterministic-demo", (None, None, None))] * 3, "the demo reports none"
        yield client
    finally:
        server.stop()


def _envelope(content: str, usage: dict[str, Any]) -> str:
    """A whole chat completion whose ``usage`` says what a test wants a provider to say."""
    return json.dumps({"id": "c", "object": "chat.completion", "model": "fake-model",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": content}}],
                       "usage": usage})


@pytest.mark.req("BR-14", "MC-03", "AV-01")
def test_absurd_token_counts_are_not_said_and_never_break_the_ledger(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    """A provider's counts are untrusted: past 2**40 (or negative, or not integers) a count is
    not reported (null); summed over the ledger nothing overflows SQLite's 64-bit integers."""
    huge = {"prompt_tokens": 2**63, "completion_tokens": 2**62,
            "prompt_tokens_details": {"cached_tokens": -1}}
    bound = {"prompt_tokens": 2**40, "completion_tokens": 2**40,
             "prompt_tokens_details": {"cached_tokens": 2**40}}
    odd = {"prompt_tokens": 1.5, "completion_tokens": "7", "prompt_tokens_details": []}
    answers = [Answer(raw_body=_envelope(LIST, huge)), Answer(raw_body=_envelope(LIST, bound)),
               Answer(raw_body=_envelope(LIST, bound)), Answer(raw_body=_envelope(FINAL, odd))]
    provider = provider_factory(Scenario("absurd", tuple(answers)))
    client = _serve(specimen, provider, server_factory).client()
    turn = client.start_turn("What is in the workspace?")
    assert client.wait_state(turn["id"], {"COMPLETED"})["state"] == "COMPLETED"
    records = _oldest_first(client)
    assert [_tokens(r) for r in records] == [
        (None, None, None), (2**40, 2**40, 2**40), (2**40, 2**40, 2**40), (None, None, None)]
    assert {r["outcome"] for r in records} == {"ok"}
    totals = _usage(client)["totals"]["by_model"]
    assert [(t["calls"], t["prompt_tokens"]) for t in totals] == [(4, 2 * 2**40)]
