"""MC-02, MC-03: LocalModelClient against the real fake provider."""

from __future__ import annotations

import asyncio
import json

import pytest

from fake_provider import Scenario
from labfy_ref.errors import ModelUnavailable
from labfy_ref.model import ClientLimits
from labfy_ref.protocol import bound_action_schema
from labfy_ref.tools import default_catalog
from qualification.conftest import ProviderFactory, client_for, scenario

HELLO = [{"role": "user", "content": "hello"}]


@pytest.mark.req("MC-02")
def test_plain_and_streamed_completions_reach_only_the_chat_path(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))

    async def run() -> tuple[str, str, str]:
        async with client_for(provider) as client:
            plain = await client.chat(HELLO)
            pieces = [d async for d in client.stream_chat(HELLO)]
        return (plain.content, "".join(p.content for p in pieces),
                "".join(p.reasoning for p in pieces))

    plain, streamed, reasoning = asyncio.run(run())
    assert json.loads(plain)["tool_id"] == "workspace.list_objects"
    assert json.loads(streamed)["text"].endswith("Ünïcödé ✓ 𝄞")
    assert reasoning == "Exposed reasoning from the provider."
    assert [(r.method, r.path) for r in provider.requests] == [
        ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions")]


@pytest.mark.req("MC-02", "PR-05")
def test_the_action_schema_is_sent_as_response_format(provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies('{"type":"final","text":"x"}'))
    schema = bound_action_schema(default_catalog())
    response_format = {"type": "json_schema",
                       "json_schema": {"name": "action", "strict": True, "schema": schema}}

    async def run() -> None:
        async with client_for(provider) as client:
            await client.chat(HELLO, response_format=response_format)

    asyncio.run(run())
    sent = provider.chat_requests()[0].json()
    assert sent["response_format"]["json_schema"]["schema"] == schema


@pytest.mark.req("MC-02")
def test_probe_reports_loading_then_ready_using_health_and_models(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("loading-then-ready"))

    async def run() -> list[tuple[bool, str]]:
        async with client_for(provider) as client:
            return [((a := await client.probe()).available, a.diagnostic) for _ in range(3)]

    results = asyncio.run(run())
    assert results[0][0] is False and "503" in results[0][1]
    assert results[1][0] is False
    assert results[2] == (True, "ready")
    assert {r.path for r in provider.requests} == {"/health", "/v1/models"}


@pytest.mark.req("MC-02")
def test_probe_says_when_the_configured_model_is_not_served(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))

    async def run() -> str:
        async with client_for(provider, model="other") as client:
            availability = await client.probe()
            assert not availability.available
            return availability.diagnostic

    assert asyncio.run(run()) == "model 'other' is not served (served: fake-model)"


def _failures(provider_scenario: Scenario, count: int, *, stream: bool,
              provider_factory: ProviderFactory,
              limits: ClientLimits | None = None) -> list[str]:
    provider = provider_factory(provider_scenario)

    async def run() -> list[str]:
        messages = []
        async with client_for(provider, limits=limits) as client:
            for _ in range(count):
                with pytest.raises(ModelUnavailable) as caught:
                    if stream:
                        _ = [d async for d in client.stream_chat(HELLO)]
                    else:
                        await client.chat(HELLO)
                assert len(caught.value.message) <= 300
                messages.append(caught.value.message)
        return messages

    return asyncio.run(run())


@pytest.mark.req("MC-03")
def test_an_oversized_body_and_an_oversized_stream_are_unavailable(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("oversized"))

    async def run() -> list[str]:
        out = []
        async with client_for(provider) as client:
            with pytest.raises(ModelUnavailable) as body:
                await client.chat(HELLO)
            out.append(body.value.message)
            with pytest.raises(ModelUnavailable) as stream:
                _ = [d async for d in client.stream_chat(HELLO)]
            out.append(stream.value.message)
        return out

    assert asyncio.run(run()) == ["reply exceeds 1048576 bytes", "stream exceeds 4194304 bytes"]


@pytest.mark.req("MC-03")
def test_a_stream_without_done_or_cut_mid_way_is_unavailable(
        provider_factory: ProviderFactory) -> None:
    messages = _failures(scenario("broken-streams"), 2, stream=True,
                         provider_factory=provider_factory)
    assert messages[0] == "stream ended before [DONE]"
    assert messages[1].startswith("transport error")


@pytest.mark.req("MC-03")
def test_a_reply_slower_than_the_read_timeout_is_unavailable(
        provider_factory: ProviderFactory) -> None:
    messages = _failures(scenario("slow"), 1, stream=False, provider_factory=provider_factory,
                         limits=ClientLimits.with_timeout(0.5))
    assert messages == ["timed out (ReadTimeout)"]


@pytest.mark.req("MC-03")
def test_a_stream_past_its_total_deadline_is_unavailable(
        provider_factory: ProviderFactory) -> None:
    slow_drip = Scenario.replies('{"type":"final","text":"' + "z" * 40 + '"}',
                                 chunk_chars=1, chunk_delay=0.05)
    limits = ClientLimits(read_timeout=5, total_timeout=0.5)
    messages = _failures(slow_drip, 1, stream=True, provider_factory=provider_factory,
                         limits=limits)
    assert messages == ["stream exceeds 0.5 s"]


@pytest.mark.req("MC-03")
def test_a_closed_port_is_unavailable_not_a_crash(provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies())
    provider.stop()

    async def run() -> str:
        async with client_for(provider) as client:
            availability = await client.probe()
            with pytest.raises(ModelUnavailable) as caught:
                await client.chat(HELLO)
            assert not availability.available
            return caught.value.message

    assert asyncio.run(run()) == "connection refused or failed"
