"""ATTACKS.md §A redirects and proof by peer (MC-02, MC-03)."""

from __future__ import annotations

import asyncio
import socket

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.errors import ModelUnavailable
from qualification.conftest import SCENARIOS, ProviderFactory, client_for

HELLO = [{"role": "user", "content": "hello"}]
FINAL = '{"type":"final","text":"ok"}'


@pytest.mark.req("MC-02")
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("stream", [False, True])
def test_a_redirect_is_never_followed(status: int, stream: bool,
                                      provider_factory: ProviderFactory) -> None:
    target = provider_factory(Scenario.replies(FINAL, FINAL))
    location = target.base_url + "/v1/chat/completions"
    origin = provider_factory(Scenario(name="redirect", answers=(
        Answer(status=status, headers=(("Location", location),)),)))

    async def run() -> str:
        async with client_for(origin) as client:
            with pytest.raises(ModelUnavailable) as caught:
                if stream:
                    _ = [d async for d in client.stream_chat(HELLO)]
                else:
                    await client.chat(HELLO)
            return caught.value.message

    message = asyncio.run(run())
    assert message == f"provider answered HTTP {status}; redirects are never followed"
    assert target.requests == []
    assert len(origin.requests) == 1


@pytest.mark.req("MC-02", "MC-03")
def test_hostile_transport_answers_are_unavailable_one_by_one(
        provider_factory: ProviderFactory) -> None:
    scenario = Scenario.load(SCENARIOS / "hostile-transport.json")
    provider = provider_factory(scenario)

    async def run() -> list[str]:
        out = []
        async with client_for(provider) as client:
            await client.chat(HELLO)
            for _ in range(6):
                with pytest.raises(ModelUnavailable) as caught:
                    await client.chat(HELLO)
                out.append(caught.value.message)
        return out

    assert asyncio.run(run()) == [
        "provider answered HTTP 302; redirects are never followed",
        "provider answered HTTP 307; redirects are never followed",
        "provider answered HTTP 308; redirects are never followed",
        "provider answered HTTP 500",
        "provider reply is not valid JSON",
        "transport error (RemoteProtocolError)",
    ]
    assert len(provider.chat_requests()) == 8, "the dropped connection was opened once more"


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.req("MC-01", "MC-02")
@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
def test_the_peer_the_provider_saw_is_the_validated_address(
        host: str, provider_factory: ProviderFactory) -> None:
    if host == "::1" and not _ipv6_loopback():
        pytest.skip("IPv6 loopback is not available on this machine")
    provider = provider_factory(Scenario.replies(FINAL), host=host)

    async def run() -> None:
        async with client_for(provider) as client:
            await client.chat(HELLO)

    asyncio.run(run())
    [request] = provider.requests
    assert request.local == (host, provider.port)
    assert request.peer[0] == host
