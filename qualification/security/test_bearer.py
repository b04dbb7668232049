"""ATTACKS.md §B sessions, for API clients (SV-08): what a bearer token may and may not do.

``Authorization: Bearer <launch code or account token>`` stands for a session of
that code's role, for one request: no cookie, no CSRF token, nothing stored. The
route matrices (Host, Origin, fetch metadata, CSRF, 401, roles) run their bearer
variants in the neighbouring files; this file holds what only a bearer has: a
cookie and a bearer together are refused (400, whatever either is worth, so the
answer is no oracle), the cookie session's own routes refuse a bearer (a bearer is
never exchanged for a cookie, nor "logged out"), bearer traffic cannot fill the
session caps (AV-03), and no bearer, right or wrong, ever shows in a log or answer.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.server.auth import (
    MAX_SESSIONS_PER_ACCOUNT,
    MAX_TOKEN_CHARS,
    bearer_token,
    cookie_name,
    token_hash,
)
from qualification.conftest import ServerFactory
from qualification.harness import LAUNCH_CODE, TERMINAL, ApiClient, LiveServer, wait_until
from qualification.security.conftest import USER_TOKEN, bearer
from qualification.security.server_routes import BEARER_REFUSED, SERVED, Route, params
from qualification.target import Served

API = tuple(row for row in SERVED if row.api)
INVALID_BEARER = b'{"error":{"code":"UNAUTHENTICATED","message":"invalid bearer token"}}'


def _http(server: Served) -> httpx.Client:
    """A client that never logs in (its jar stays empty: no answer here sets a cookie)."""
    return httpx.Client(base_url=server.url, trust_env=False, timeout=10)


def _error(response: httpx.Response) -> tuple[int, str]:
    code = response.json()["error"]["code"] if response.status_code >= 400 else ""
    return response.status_code, code


@pytest.mark.req("SV-08")
@pytest.mark.parametrize(("values", "token"), [
    (["Bearer abc"], "abc"), (["bearer abc"], "abc"),
    (["BEARER a-b.c_d~e+f/g=="], "a-b.c_d~e+f/g=="),
    ([f"Bearer {'a' * MAX_TOKEN_CHARS}"], "a" * MAX_TOKEN_CHARS),
    ([f"Bearer {'a' * (MAX_TOKEN_CHARS + 1)}"], None), ([], None), ([""], None),
    (["Bearer"], None), (["Bearer "], None), (["Bearer  abc"], None), (["Bearer abc "], None),
    (["Bearer a b"], None), (["Bearer\tabc"], None), (["Basic abc"], None), (["abc"], None),
    (["Bearer a=b"], None), (["Bearer =abc"], None), (["Bearer abc,"], None),
    (["Bearer ab\u00e9"], None), (["Bearer \u00c3\u00a9"], None), (["Bearer ab\x00"], None),
    (["Bearer abc", "Bearer abc"], None), (["Bearer abc", "Basic x"], None),
    (["Bearerabc"], None), (["Bearer: abc"], None),
], ids=repr)
def test_what_counts_as_a_bearer_header(values: list[str], token: str | None) -> None:
    """The decision table of ``Authorization`` parsing (RFC 6750 §2.1, RFC 7235 §2.1)."""
    assert bearer_token(values) == token


@pytest.mark.conformance
@pytest.mark.req("SV-08", "API-01")
@pytest.mark.parametrize("route", params(API))
def test_a_cookie_and_a_bearer_together_are_refused_400_on_every_api_route(
        route_server: Served, admin_client: ApiClient, user_client: ApiClient,
        route: Route) -> None:
    """Refused on presence, before either is checked: valid or not, the answer is the same."""
    ours, admin = admin_client.cookie_name, route_server.admin_token
    user = route_server.user_token or USER_TOKEN
    pairs = [  # (Cookie header, Authorization header): a fixed list, bounded
        (f"{ours}={admin_client.cookie}", f"Bearer {admin}"),
        (f"{ours}={user_client.cookie}", f"Bearer {admin}"),
        (f"{ours}={admin_client.cookie}", f"Bearer {user}"),
        (f"{ours}=forged", "Bearer wrong-token"),
        (f"{ours}=", "Basic eA=="),
        (f"a=b; {ours}={admin_client.cookie}", f"bearer {admin}"),
    ]
    with _http(route_server) as http:
        for cookie, authorization in pairs:
            response = http.request(route.method, route.url, json=route.body, headers={
                "Cookie": cookie, "Authorization": authorization,
                "X-CSRF-Token": str(admin_client.csrf), "Origin": route_server.url})
            assert _error(response) == (400, "AUTH_AMBIGUOUS"), (cookie, authorization)
            assert "set-cookie" not in response.headers
        assert not http.cookies


@pytest.mark.conformance
@pytest.mark.req("SV-08", "API-01")
@pytest.mark.parametrize("route", params(BEARER_REFUSED))
def test_the_cookie_session_routes_refuse_any_bearer(route_server: Served,
                                                     route: Route) -> None:
    """No bearer is exchanged for a cookie, shown a CSRF secret, or "logged out".

    The login is sent a valid code in its body too: with a bearer beside it, it still
    issues no cookie. Right and wrong bearers get the same answer (no oracle here).
    """
    admin = route_server.admin_token
    body = {"token": admin} if route.body is not None else None
    with _http(route_server) as http:
        for token in (admin, route_server.user_token or USER_TOKEN, "wrong-token"):
            response = http.request(route.method, route.url, json=body, headers=bearer(token))
            assert _error(response) == (400, "BEARER_NOT_ACCEPTED"), token
            assert "set-cookie" not in response.headers
            assert "csrf_token" not in response.text
        assert not http.cookies


@pytest.mark.req("SV-08", "AV-03")
def test_bearer_requests_create_no_session_and_use_no_cap(specimen: Path, tmp_path: Path,
                                                          server_factory: ServerFactory) -> None:
    """Each account holds its cap of cookie sessions; many bearer requests later all live.

    Any session a bearer request stored would have ended that account's oldest.
    """
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "bob"\ntoken_sha256 = "{token_hash(USER_TOKEN)}"\n')
    server = server_factory(specimen, accounts=str(accounts))
    name = cookie_name(server.port)
    with _http(server) as http:
        cookies: dict[str, list[str]] = {LAUNCH_CODE: [], USER_TOKEN: []}
        for token, held in cookies.items():
            for _ in range(MAX_SESSIONS_PER_ACCOUNT):
                login = http.post("/api/v1/session", json={"token": token})
                assert login.status_code == 200
                held.append(login.cookies[name])
                http.cookies.clear()
        for token in cookies:
            for _ in range(3 * MAX_SESSIONS_PER_ACCOUNT):
                assert http.get("/api/v1/agent-runtime/status",
                                headers=bearer(token)).status_code == 200
                assert http.post("/api/v1/agent-runtime/turns/turn_x/cancel",
                                 headers=bearer(token)).status_code == 404
        assert not http.cookies
        for token, held in cookies.items():
            alive = [http.get("/api/v1/session", headers={"Cookie": f"{name}={value}"})
                     .status_code for value in held]
            assert alive == [200] * MAX_SESSIONS_PER_ACCOUNT, token


@pytest.mark.req("SV-08", "RT-01", "BR-04")
def test_an_api_client_runs_turns_with_nothing_but_a_bearer(route_server: LiveServer,
                                                            bearer_http: httpx.Client) -> None:
    """A user's research turn (pause, grant, resume) and the admin's engine stream, with no
    cookie, CSRF token or Origin ever sent."""
    user = bearer(USER_TOKEN)
    started = bearer_http.post("/api/v1/agent-runtime/turns",
                               json={"message": "Check the early ivy bee record."},
                               headers=user)
    assert started.status_code == 202, started.text
    turn_id = started.json()["turn"]["id"]
    seen: dict[str, Any] = {}

    def reached(states: set[str]) -> bool:
        seen.update(bearer_http.get(f"/api/v1/agent-runtime/turns/{turn_id}",
                                    headers=user).json()["turn"])
        return seen["state"] in states

    wait_until(lambda: reached(TERMINAL | {"AUTHORIZATION_REQUIRED"}), timeout=15)
    assert seen["state"] == "AUTHORIZATION_REQUIRED", seen
    grant = bearer_http.post("/api/v1/grants", headers=user,
                             json={"campaign_id": seen["authorization"]["campaign_id"]})
    assert grant.status_code == 201, grant.text
    resumed = bearer_http.post(f"/api/v1/agent-runtime/turns/{turn_id}/resume", headers=user)
    assert resumed.status_code == 202, resumed.text
    wait_until(lambda: reached(TERMINAL), timeout=15)
    assert seen["state"] == "COMPLETED", seen

    admin = bearer(LAUNCH_CODE)
    created = bearer_http.post("/api/cordis/sessions", json={}, headers=admin)
    assert created.status_code == 201, created.text
    sid = created.json()["session"]["id"]
    with bearer_http.stream("POST", f"/api/cordis/sessions/{sid}/messages",
                            json={"text": "hi"}, headers=admin) as reply:
        assert reply.status_code == 200
        chunks = [line for line in reply.iter_lines() if line]
    assert '"type":"done"' in chunks[-1].replace(" ", "") and "completed" in chunks[-1]
    listed = bearer_http.get(f"/api/cordis/sessions/{sid}", headers=admin).json()
    assert [m["role"] for m in listed["session"]["messages"]][:1] == ["user"]


@pytest.mark.req("SV-08")
@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "bEaReR"])
def test_the_scheme_name_is_case_insensitive(bearer_http: httpx.Client, scheme: str) -> None:
    """RFC 7235 §2.1: the scheme is case-insensitive; the token itself is not."""
    assert bearer_http.get("/api/cordis/models", headers={
        "Authorization": f"{scheme} {LAUNCH_CODE}"}).status_code == 200
    assert bearer_http.get("/api/cordis/models", headers={
        "Authorization": f"{scheme} {LAUNCH_CODE.upper()}"}).status_code == 401


@pytest.mark.req("SV-08")
def test_pages_ignore_authorization(route_server: LiveServer, admin_client: ApiClient,
                                    bearer_http: httpx.Client) -> None:
    """Pages and assets are public and read no credential: a bearer there changes nothing."""
    both = {"Authorization": "Bearer wrong-token",
            "Cookie": f"{admin_client.cookie_name}={admin_client.cookie}"}
    for route in (row for row in SERVED if not row.api):  # the table's pages: bounded
        assert bearer_http.get(route.url, headers=bearer("wrong-token")).status_code == 200
        assert bearer_http.get(route.url, headers=both).status_code == 200


@pytest.mark.req("SV-08", "SV-03")
def test_only_this_servers_cookie_makes_a_bearer_ambiguous(route_server: LiveServer,
                                                           bearer_http: httpx.Client) -> None:
    """A browser holds other servers' cookies (one per port): they are not ours."""
    other = cookie_name(route_server.port + 1)
    response = bearer_http.get("/api/cordis/sessions", headers=bearer(LAUNCH_CODE) | {
        "Cookie": f"{other}=someone-elses; theme=dark"})
    assert response.status_code == 200


def _header_safe(raw: bytes) -> bytes:
    """``raw`` as an HTTP field value can carry it: controls become ``?``, no edge spaces."""
    return bytes(b if b == 0x09 or 0x20 <= b != 0x7F else 0x3F for b in raw).strip(b" \t")


tokens = (st.text(st.characters(codec=None, categories=["Cs"]) | st.characters(), max_size=80)
          .map(lambda text: text.encode("utf-8", "surrogatepass"))
          | st.binary(max_size=300))


@pytest.mark.req("SV-08")
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=tokens)
def test_arbitrary_bearer_bytes_get_the_one_401(bearer_http: httpx.Client, raw: bytes) -> None:
    """Surrogates, raw bytes, huge or tiny: anything but a valid code is the same 401."""
    value = _header_safe(raw)
    for header in ((b"Bearer " + value).strip(b" \t"), value):  # as the token, as the header
        response = bearer_http.get("/api/v1/agent-runtime/status",
                                   headers=[(b"Authorization", header)])
        assert response.status_code == 401, header
        assert response.content == INVALID_BEARER
        assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.req("SV-08", "SV-05")
def test_no_bearer_right_or_wrong_is_ever_logged_or_echoed(
        route_server: LiveServer, bearer_http: httpx.Client,
        caplog: pytest.LogCaptureFixture) -> None:
    canary = "canary-bearer-4f1d9c"
    caplog.set_level(logging.DEBUG)
    answers = [
        bearer_http.get("/api/v1/agent-runtime/status", headers=bearer(canary)),
        bearer_http.get("/api/v1/agent-runtime/status", headers={"Authorization": canary}),
        bearer_http.post("/api/v1/session", json={"token": canary}, headers=bearer(canary)),
        bearer_http.get("/api/v1/agent-runtime/turns/turn_x", headers=bearer(LAUNCH_CODE)),
        bearer_http.post("/api/v1/agent-runtime/turns", json={"message": 1},
                         headers=bearer(LAUNCH_CODE)),
        bearer_http.get("/api/cordis/sessions", headers=bearer(USER_TOKEN)),
    ]
    assert [a.status_code for a in answers] == [401, 401, 400, 404, 422, 403]
    for secret in (canary, LAUNCH_CODE, USER_TOKEN):
        assert all(secret not in a.text for a in answers), secret
        assert secret not in caplog.text, secret
