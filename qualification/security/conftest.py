"""The server the route matrices attack: every route served (bridge on), an admin and a user.

With ``--target-url`` it is the conformance target (QR-03) and the user is the
``--target-user-token`` login (else the user-role cases are NOT_RUN). Otherwise
one per module, so the matrices do not start a server per case. The clients are
logged in once; the matrices send their attacks with these sessions and log in
no more, so no case can push a session past its account's cap (AV-03). The bearer variants
(SV-08) send the same codes as ``Authorization: Bearer`` from a client that
never logs in and so never holds a cookie.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from labfy_ref.server.auth import token_hash
from labfy_ref.workspace import init_workspace
from qualification.conformance.plugin import NO_USER, remote_target
from qualification.harness import ApiClient, LiveServer
from qualification.target import Served

USER_TOKEN = "bob-token-0123456789"


@pytest.fixture(scope="module")
def route_server(request: pytest.FixtureRequest,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A demo-agent server with the bridge on and one ``user`` account, ``bob``."""
    if remote_target(request.config) is not None:
        yield request.getfixturevalue("target")
        return
    root = tmp_path_factory.mktemp("routes")
    init_workspace(root / "ws", specimen=True)
    accounts = root / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "bob"\ntoken_sha256 = "{token_hash(USER_TOKEN)}"\n')
    server = LiveServer(root / "ws", bridge=True, accounts=str(accounts)).start()
    server.user_token = USER_TOKEN
    yield server
    server.stop()


@pytest.fixture(scope="module")
def admin_client(route_server: Served) -> Iterator[ApiClient]:
    """The admin (launch code) on :func:`route_server`, logged out after the module."""
    client = route_server.client()
    yield client
    client.close()


@pytest.fixture(scope="module")
def user_client(route_server: Served) -> Iterator[ApiClient]:
    """The ``user`` account ``bob`` on :func:`route_server` (NOT_RUN if a target has none)."""
    client = route_server.client(token=user_token_of(route_server))
    yield client
    client.close()


def user_token_of(server: Served) -> str:
    """The server's ``user`` login code; NOT_RUN where a target was given none."""
    if server.user_token is None:
        pytest.skip(NO_USER)
    return server.user_token


def bearer(token: str) -> dict[str, str]:
    """The header an API client sends instead of a cookie (SV-08)."""
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def bearer_http(route_server: Served) -> Iterator[httpx.Client]:
    """A client of :func:`route_server` that never logs in: its requests carry no cookie.

    The cookie jar is checked empty afterwards: a bearer request must never be
    answered with a session cookie.
    """
    with httpx.Client(base_url=route_server.url, trust_env=False, timeout=10) as http:
        yield http
        assert not http.cookies, "a bearer request was answered with a cookie"
