"""SV-01: the server's accepted sockets have ``TCP_NODELAY`` (nothing here is timed).

Without it, a response written in two pieces (uvicorn writes headers and body
separately) waits for the client's delayed ACK: ~40 ms per kept-alive request.
asyncio sets the option on an accepted socket only when the listener was made
with ``IPPROTO_TCP``, so ``bind_socket`` makes it that way; these tests read the
option back from the sockets the server actually accepted.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx
import pytest

from labfy_ref.server.serve import bind_socket
from qualification.conftest import ServerFactory
from qualification.harness import wait_until


def _nodelay(sock: socket.socket) -> bool:
    return bool(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))


@pytest.mark.req("SV-01")
def test_an_asyncio_server_on_the_listener_accepts_sockets_with_tcp_nodelay() -> None:
    listener = bind_socket("127.0.0.1", None)
    assert listener.proto == socket.IPPROTO_TCP
    port = listener.getsockname()[1]
    accepted: list[bool] = []

    async def accept_one() -> None:
        made = asyncio.Event()

        class Record(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                accepted.append(_nodelay(transport.get_extra_info("socket")))
                made.set()

        # What uvicorn does with the sockets it is given: loop.create_server(sock=...).
        server = await asyncio.get_running_loop().create_server(Record, sock=listener)
        async with server:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            await asyncio.wait_for(made.wait(), timeout=10)
            writer.close()

    try:
        asyncio.run(accept_one())
    finally:
        listener.close()
    assert accepted == [True]


@pytest.mark.req("SV-01")
def test_the_running_server_holds_its_kept_alive_connection_with_tcp_nodelay(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    connections = server.server.server_state.connections
    with httpx.Client(trust_env=False, base_url=server.url) as http:
        for _ in range(2):  # the second request reuses the connection
            assert http.get("/api/health").status_code == 200
        wait_until(lambda: len(connections) == 1)
        [protocol] = list(connections)
        transport = getattr(protocol, "transport", None)
        assert transport is not None
        assert _nodelay(transport.get_extra_info("socket"))
