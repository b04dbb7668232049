"""ATTACKS.md §B sessions and roles (SV-03, AV-03): no cookie, forged or expired → 401; caps.

The 401 matrix is every route of the table that needs a session (the bridge's
too). Sessions are bounded per account and per role, and no login ever ends
another account's session: many logins of a ``user`` account cannot log the
admin out. Its bearer variant (SV-08): every wrong or malformed ``Authorization``
header is answered by one and the same 401 on every API route a bearer may use,
the public ones too, so no answer tells which part was wrong.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from labfy_ref.server.auth import (
    MAX_SESSIONS_PER_ACCOUNT,
    MAX_SESSIONS_PER_ROLE,
    cookie_name,
    token_hash,
)
from qualification.conftest import ServerFactory
from qualification.harness import LAUNCH_CODE, ApiClient, LiveServer
from qualification.security.conftest import USER_TOKEN
from qualification.security.server_routes import BEARER, PROTECTED, SERVED, Route, params
from qualification.target import Served


def bad_authorizations(admin: str, user: str) -> list[list[bytes]]:
    """``Authorization`` headers that must all get the same 401, made from the server's own
    codes (a conformance target's too): wrong codes near the real ones, other schemes, an
    empty, split, padded, non-ASCII or oversized token, a valid token repeated or beside
    another header."""
    valid = ([f"Bearer {admin}".encode()], [f"Bearer {user}".encode()])
    return [values for values in [
        [b"Bearer wrong-token"], [f"Bearer {admin}x".encode()],
        [f"Bearer {admin[:-1]}".encode()], [f"Bearer {admin.swapcase()}".encode()],
        [f"Bearer {user}0".encode()], [f"Bearer {token_hash(admin)}".encode()],
        [f"Basic {admin}".encode()], [f"Token {admin}".encode()],
        [admin.encode()], [b"Bearer"], [b""], [b"Bearer a b"],
        [f"Bearer  {admin}".encode()], [f"Bearer {admin} x".encode()],
        [f"Bearer\t{admin}".encode()], [f"Bearer {admin},".encode()],
        [f"Bearer {admin}\u00e9".encode()], [b"Bearer \xff\xfe" + admin.encode()],
        [b"Bearer " + b"A" * 257], [b"Bearer " + b"A" * 8000],
        [f"Bearer {admin}".encode(), f"Bearer {admin}".encode()],
        [f"Bearer {admin}".encode(), b"Basic x"],
    ] if values not in valid]  # a code with no letters is its own swapcase


@pytest.mark.conformance
@pytest.mark.req("SV-03", "BR-04", "API-01")
@pytest.mark.parametrize("cookie", [None, "forged", "", f"{'A' * 43}", "a=b; c=d"])
@pytest.mark.parametrize("route", params(PROTECTED))
def test_without_a_valid_session_every_protected_route_answers_401(
        route_server: Served, cookie: str | None, route: Route) -> None:
    client = ApiClient(route_server.url)
    name = cookie_name(route_server.port)
    headers = {} if cookie is None else {"Cookie": f"{name}={cookie}"}
    response = client.http.request(route.method, route.url, json=route.body,
                                   headers=headers | {"Origin": route_server.url})
    client.close()
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "UNAUTHENTICATED"


@pytest.mark.conformance
@pytest.mark.req("SV-08", "API-01")
@pytest.mark.parametrize("route", params(BEARER))
def test_every_wrong_or_malformed_bearer_is_the_same_401_on_every_api_route(
        route_server: Served, route: Route) -> None:
    answers = set()
    with httpx.Client(base_url=route_server.url, trust_env=False, timeout=10) as http:
        bad = bad_authorizations(route_server.admin_token,
                                 route_server.user_token or USER_TOKEN)
        for values in bad:  # a fixed list: bounded
            response = http.request(route.method, route.url, json=route.body,
                                    headers=[(b"Authorization", value) for value in values])
            assert response.status_code == 401, (values, response.text)
            assert "set-cookie" not in response.headers
            answers.add((response.content, response.headers["www-authenticate"]))
    body = (b'{"error":{"message":"invalid bearer token","type":"authentication_error",'
            b'"param":null,"code":"UNAUTHENTICATED"}}'  # the chat-client API's shape (BR-13)
            if route.template.startswith("/api/cordis/v1/")
            else b'{"error":{"code":"UNAUTHENTICATED","message":"invalid bearer token"}}')
    assert answers == {(body, "Bearer")}, "one answer for every wrong part"


@pytest.mark.conformance
@pytest.mark.req("SV-03", "API-01")
@pytest.mark.parametrize("route", params(tuple(
    row for row in SERVED if row.role == "public" and row.method == "GET")))
def test_the_public_routes_need_no_session(route_server: Served, route: Route) -> None:
    client = ApiClient(route_server.url)
    response = client.http.get(route.url)
    client.close()
    assert response.status_code == 200


@pytest.mark.conformance
@pytest.mark.req("SV-03")
def test_login_sets_a_host_only_strict_httponly_cookie_with_bounded_lifetime(
        demo_server: Served) -> None:
    client = ApiClient(demo_server.url)
    response = client.http.post("/api/v1/session", json={"token": demo_server.admin_token},
                                headers={"Origin": demo_server.url})
    client.close()
    assert response.status_code == 200
    assert set(response.json()) == {"role", "name", "csrf_token"}
    assert response.json()["role"] == "admin" and response.json()["name"] == "admin"
    cookie = response.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "path", "max-age", "samesite"} <= attributes
    assert "domain" not in attributes
    assert "samesite=strict" in cookie.lower()
    assert "max-age=604800" in cookie.lower(), "the cookie lasts the absolute cap (SV-11)"
    assert "path=/" in cookie.lower()


@pytest.mark.conformance
@pytest.mark.req("SV-03")
@pytest.mark.parametrize("token", ["wrong", "", LAUNCH_CODE + "x", LAUNCH_CODE.upper(), "x" * 300])
def test_a_wrong_code_gets_no_session(demo_server: Served, token: str) -> None:
    client = ApiClient(demo_server.url)
    response = client.login(token)
    client.close()
    assert response.status_code in (401, 422)
    assert "set-cookie" not in response.headers


@pytest.mark.req("SV-03")
def test_an_expired_session_is_401_and_a_new_login_issues_fresh_secrets(
        demo_server: LiveServer) -> None:
    auth = demo_server.state.auth
    original, now = auth.clock, [auth.clock()]
    auth.clock = lambda: now[0]  # the server's own clock, moved by the test: no sleeping
    try:
        client = demo_server.client()
        old_cookie, old_csrf = client.cookie, client.csrf
        assert client.get("/api/v1/session").status_code == 200
        now[0] += auth.idle_seconds - 1
        assert client.get("/api/v1/session").status_code == 200
        now[0] += auth.idle_seconds  # unused for its whole idle timeout
        assert client.get("/api/v1/session").status_code == 401
        client.login(LAUNCH_CODE)
        assert (client.cookie, client.csrf) != (old_cookie, old_csrf)
        assert client.get("/api/v1/session").status_code == 200
        client.cookie = old_cookie
        assert client.get("/api/v1/session").status_code == 401, "the old cookie stays invalid"
    finally:
        auth.clock = original
@pytest.mark.req("SV-03")
def test_user_accounts_log_in_with_hashed_tokens(specimen: Path, tmp_path: Path,
                                                 server_factory: ServerFactory) -> None:
    accounts = tmp_path / "accounts.toml"
    digest = token_hash("alice-token")
    accounts.write_text(f'[[account]]\nname = "alice"\ntoken_sha256 = "{digest}"\n')
    server = server_factory(specimen, accounts=str(accounts))
    client = server.client(token="alice-token")
    assert client.get("/api/v1/session").json() == {"role": "user", "name": "alice",
                                                    "csrf_token": client.csrf}
    assert "alice-token" not in accounts.read_text()
    assert client.get("/api/v1/agent-runtime/status").status_code == 200


@pytest.mark.conformance
@pytest.mark.req("SV-03")
def test_logout_invalidates_the_session(demo_server: Served) -> None:
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


def _accounts(path: Path, count: int) -> list[str]:
    """Write ``count`` user accounts; return their tokens."""
    tokens = [f"user-{i:03d}-token" for i in range(count)]
    path.write_text("".join(f'[[account]]\nname = "u{i:03d}"\ntoken_sha256 = "{token_hash(t)}"\n'
                            for i, t in enumerate(tokens)))
    return tokens


def _login(http: httpx.Client, token: str) -> httpx.Response:
    """Log in; the cookie stays in the response only (each login is a separate client)."""
    response = http.post("/api/v1/session", json={"token": token})
    http.cookies.clear()
    return response


def _live(server: LiveServer, http: httpx.Client, response: httpx.Response) -> bool:
    """Is the session that ``response`` (a login) opened still valid?"""
    cookie = response.cookies[cookie_name(server.port)]
    answer = http.get("/api/v1/session", headers={"Cookie": f"{cookie_name(server.port)}={cookie}"})
    return answer.status_code == 200


def _http(server: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=server.url, trust_env=False, timeout=10)


@pytest.mark.req("AV-03", "SV-03")
def test_many_user_logins_never_log_the_admin_out(specimen: Path, tmp_path: Path,
                                                   server_factory: ServerFactory) -> None:
    [token] = _accounts(tmp_path / "accounts.toml", 1)
    server = server_factory(specimen, accounts=str(tmp_path / "accounts.toml"))
    admin = server.client()
    with _http(server) as http:
        logins = []
        for _ in range(1100):  # more than the whole role's cap
            response = _login(http, token)
            assert response.status_code == 200, response.text
            logins.append(response)
        assert admin.get("/api/v1/session").status_code == 200, "the admin is still logged in"
        assert admin.post("/api/v1/agent-runtime/turns", {"message": "here"}).status_code == 202
        kept = MAX_SESSIONS_PER_ACCOUNT
        assert all(_live(server, http, r) for r in logins[-kept:]), "the newest are kept"
        assert not any(_live(server, http, r) for r in (logins[0], logins[-kept - 1])), \
            "a new login ends the account's oldest session beyond its cap"


@pytest.mark.req("AV-03", "SV-03")
def test_a_full_role_refuses_logins_and_evicts_nobody_else(specimen: Path, tmp_path: Path,
                                                           server_factory: ServerFactory) -> None:
    per_account = MAX_SESSIONS_PER_ACCOUNT
    full = MAX_SESSIONS_PER_ROLE // per_account
    tokens = _accounts(tmp_path / "accounts.toml", full + 1)
    server = server_factory(specimen, accounts=str(tmp_path / "accounts.toml"))
    admin = server.client()
    with _http(server) as http:
        first: list[httpx.Response] = []
        for token in tokens[:full]:
            for n in range(per_account):
                response = _login(http, token)
                assert response.status_code == 200, response.text
                if n == 0:
                    first.append(response)
        refused = _login(http, tokens[full])
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "TOO_MANY_SESSIONS"
        assert "set-cookie" not in refused.headers
        assert all(_live(server, http, r) for r in first), "a refused login ends no session"
        assert _login(http, LAUNCH_CODE).status_code == 200, "the admin role has its own cap"
        assert admin.get("/api/v1/session").status_code == 200
        again = _login(http, tokens[0])  # an account at its cap makes room among its own
        assert again.status_code == 200 and _live(server, http, again)
        assert not _live(server, http, first[0])
        assert all(_live(server, http, r) for r in first[1:]), "no other account lost a session"

        auth = server.state.auth  # expired sessions are pruned before the cap is counted
        original, now = auth.clock, auth.clock()
        auth.clock = lambda: now + auth.max_seconds
        try:
            late = _login(http, tokens[full])
            assert late.status_code == 200, late.text
            assert not _live(server, http, first[1])
        finally:
            auth.clock = original


@pytest.mark.conformance
@pytest.mark.req("SV-03", "AV-02")
@pytest.mark.parametrize("neighbours", [
    'a="b; {ours}', '{ours}; a="b', 'junk; {ours}', '"; {ours}', 'x=\\"; {ours}; y=1',
    '{ours}; =; ;;', 'a=b\x7f; {ours}', 'a={{"json":1}}; {ours}'])
def test_a_malformed_neighbour_cookie_never_hides_the_session(
        demo_server: Served, demo_client: ApiClient, neighbours: str) -> None:
    """RFC 6265 §5.4: pairs split on ';' — a stray quote in another cookie hides nothing."""
    ours = f"{demo_client.cookie_name}={demo_client.cookie}"
    response = demo_client.http.get("/api/v1/session",
                                    headers={"Cookie": neighbours.format(ours=ours)})
    assert response.status_code == 200, response.text
    assert response.json()["role"] == "admin"


@pytest.mark.req("SV-11", "SV-03")
def test_the_session_says_what_it_has_left_and_the_status_its_settings(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, session_idle="600", session_max="7200")
    client = server.client()
    answer = client.get("/api/v1/session")
    assert set(answer.json()) == {"role", "name", "csrf_token"}, "the pinned body as it was"
    assert 590 <= float(answer.headers["X-Session-Idle-Seconds"]) <= 600
    assert 7100 <= float(answer.headers["X-Session-Ends-In"]) <= 7200
    status = client.get("/api/v1/agent-runtime/status").json()
    assert status["session"] == {"idle_seconds": 600.0, "max_seconds": 7200.0}


@pytest.mark.req("SV-11", "CLI-01")
@pytest.mark.parametrize(("idle", "most", "flag"), [
    ("0", None, "--session-idle"), ("soon", None, "--session-idle"),
    (None, "-5", "--session-max"), (None, str(400 * 86400), "--session-max"),
    ("7200", "3600", "--session-idle")])
def test_a_session_lifetime_out_of_bounds_is_refused(idle: str | None, most: str | None,
                                                     flag: str) -> None:
    from labfy_ref.config import RawOptions, resolve  # noqa: PLC0415
    from labfy_ref.errors import ConfigRefused  # noqa: PLC0415

    with pytest.raises(ConfigRefused, match=flag):
        resolve(RawOptions(session_idle=idle, session_max=most), {})
    config = resolve(RawOptions(), {})
    assert (config.session_idle_seconds, config.session_max_seconds) == (28800.0, 604800.0)
