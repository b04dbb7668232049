"""ATTACKS.md §B sessions and roles (SV-03): no cookie, forged or expired → 401; flags checked."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.server.auth import cookie_name, token_hash
from qualification.conftest import ServerFactory
from qualification.harness import LAUNCH_CODE, ApiClient, LiveServer
from qualification.security.server_routes import PROTECTED


@pytest.mark.req("SV-03")
@pytest.mark.parametrize("cookie", [None, "forged", "", f"{'A' * 43}", "a=b; c=d"])
@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_without_a_valid_session_every_api_route_answers_401(
        demo_server: LiveServer, cookie: str | None, method: str, path: str, body: Any) -> None:
    client = ApiClient(demo_server.url)
    name = cookie_name(demo_server.port)
    headers = {} if cookie is None else {"Cookie": f"{name}={cookie}"}
    response = client.http.request(method, path, json=body, headers=headers | {
        "Origin": demo_server.url})
    client.close()
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.req("SV-03")
def test_health_is_the_only_route_without_a_session(demo_server: LiveServer) -> None:
    client = ApiClient(demo_server.url)
    assert client.http.get("/api/health").json() == {"status": "ok"}
    client.close()


@pytest.mark.req("SV-03")
def test_login_sets_a_host_only_strict_httponly_cookie_with_bounded_lifetime(
        demo_server: LiveServer) -> None:
    client = ApiClient(demo_server.url)
    response = client.http.post("/api/v1/session", json={"token": LAUNCH_CODE},
                                headers={"Origin": demo_server.url})
    client.close()
    assert response.status_code == 200
    assert set(response.json()) == {"role", "csrf_token"}
    assert response.json()["role"] == "admin"
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "path", "max-age", "samesite"} <= attributes
    assert "domain" not in attributes
    assert "samesite=strict" in cookie.lower()
    assert "max-age=3600" in cookie.lower()
    assert "path=/" in cookie.lower()


@pytest.mark.req("SV-03")
@pytest.mark.parametrize("token", ["wrong", "", LAUNCH_CODE + "x", LAUNCH_CODE.upper(), "x" * 300])
def test_a_wrong_code_gets_no_session(demo_server: LiveServer, token: str) -> None:
    client = ApiClient(demo_server.url)
    response = client.login(token)
    client.close()
    assert response.status_code in (401, 422)
    assert "set-cookie" not in response.headers


@pytest.mark.req("SV-03")
def test_an_expired_session_is_401_and_a_new_login_issues_fresh_secrets(
        demo_server: LiveServer) -> None:
    auth = demo_server.state.auth
    lifetime = auth.lifetime_seconds
    auth.lifetime_seconds = 1
    try:
        client = demo_server.client()
        old_cookie, old_csrf = client.cookie, client.csrf
        assert client.get("/api/v1/session").status_code == 200
        time.sleep(1.2)
        assert client.get("/api/v1/session").status_code == 401
        client.login(LAUNCH_CODE)
        assert (client.cookie, client.csrf) != (old_cookie, old_csrf)
        assert client.get("/api/v1/session").status_code == 200
        client.cookie = old_cookie
        assert client.get("/api/v1/session").status_code == 401, "the old cookie stays invalid"
    finally:
        auth.lifetime_seconds = lifetime


@pytest.mark.req("SV-03")
def test_user_accounts_log_in_with_hashed_tokens(specimen: Path, tmp_path: Path,
                                                 server_factory: ServerFactory) -> None:
    accounts = tmp_path / "accounts.toml"
    digest = token_hash("alice-token")
    accounts.write_text(f'[[account]]\nname = "alice"\ntoken_sha256 = "{digest}"\n')
    server = server_factory(specimen, accounts=str(accounts))
    client = server.client(token="alice-token")
    assert client.get("/api/v1/session").json()["role"] == "user"
    assert "alice-token" not in accounts.read_text()
    assert client.get("/api/v1/agent-runtime/status").status_code == 200


@pytest.mark.req("SV-03")
def test_logout_invalidates_the_session(demo_server: LiveServer) -> None:
    client = demo_server.client()
    assert client.delete("/api/v1/session").status_code == 200
    assert client.get("/api/v1/session").status_code == 401


@pytest.mark.req("SV-03")
def test_two_servers_on_one_host_keep_separate_cookies(
        demo_server: LiveServer, specimen: Path, server_factory: ServerFactory) -> None:
    other = server_factory(specimen)
    first, second = demo_server.client(), other.client()
    assert first.cookie_name != second.cookie_name
    both = {"Cookie": f"{first.cookie_name}={first.cookie}; {second.cookie_name}={second.cookie}"}
    assert first.http.get("/api/v1/session", headers=both).status_code == 200
    assert second.http.get("/api/v1/session", headers=both).status_code == 200
    swapped = {"Cookie": f"{first.cookie_name}={second.cookie}"}
    assert first.http.get("/api/v1/session", headers=swapped).status_code == 401
