"""ATTACKS.md §A environment (MC-02): proxies, .netrc and cookies never take effect."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_provider import Scenario
from labfy_ref.model import LocalModelClient, parse_endpoint
from qualification.conftest import SCENARIOS, ProviderFactory, client_for

HELLO = [{"role": "user", "content": "hello"}]
FINAL = '{"type":"final","text":"ok"}'


class CaptureListener:
    """A loopback TCP listener that counts every byte anyone sends it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.received = 0
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            conn.settimeout(0.5)
            try:
                while data := conn.recv(4096):
                    self.received += len(data)
            except OSError:
                pass
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()


@pytest.fixture
def capture() -> Iterator[CaptureListener]:
    listener = CaptureListener()
    yield listener
    listener.close()


PROXY_VARIABLES = ["HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY",
                   "all_proxy"]


@pytest.mark.req("MC-02")
@pytest.mark.parametrize("variable", PROXY_VARIABLES)
def test_proxy_variables_never_receive_a_byte(
        variable: str, capture: CaptureListener, provider_factory: ProviderFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    provider = provider_factory(Scenario.replies(FINAL, FINAL))
    monkeypatch.setenv(variable, capture.url)
    monkeypatch.setenv("NO_PROXY", "")

    async def run() -> None:
        async with client_for(provider) as client:
            await client.probe()
            await client.chat(HELLO)
            _ = [d async for d in client.stream_chat(HELLO)]

    asyncio.run(run())
    assert (capture.connections, capture.received) == (0, 0)
    assert len(provider.chat_requests()) == 2


@pytest.mark.req("MC-02")
def test_netrc_never_becomes_authorization(
        tmp_path: Path, provider_factory: ProviderFactory,
        monkeypatch: pytest.MonkeyPatch) -> None:
    provider = provider_factory(Scenario.replies(FINAL))
    netrc = tmp_path / ".netrc"
    netrc.write_text("machine 127.0.0.1 login alice password s3cret\n"
                     "default login bob password hunter2\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("NETRC", str(netrc))

    async def run() -> None:
        async with client_for(provider) as client:
            await client.probe()
            await client.chat(HELLO)

    asyncio.run(run())
    assert all(r.header("authorization") is None for r in provider.requests)


@pytest.mark.req("MC-02")
def test_a_set_cookie_is_never_sent_back(provider_factory: ProviderFactory) -> None:
    scenario = Scenario.load(SCENARIOS / "hostile-transport.json")
    provider = provider_factory(scenario)

    async def run() -> None:
        async with client_for(provider) as client:
            await client.chat(HELLO)  # answered with Set-Cookie
            await client.probe()  # two more requests on the same client

    asyncio.run(run())
    assert len(provider.requests) == 3
    assert all(r.header("cookie") is None for r in provider.requests)


@pytest.mark.req("MC-02")
def test_the_only_authorization_is_our_supervisors_key(provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies(FINAL))

    async def run() -> None:
        endpoint = parse_endpoint(provider.base_url)
        async with LocalModelClient(endpoint, "fake-model", api_key="fresh-key") as client:
            await client.chat(HELLO)

    asyncio.run(run())
    assert provider.chat_requests()[0].header("authorization") == "Bearer fresh-key"
