"""Wire contracts a broken implementation could otherwise pass the kit with (QR-03).

Each test here was written against a mutant the kit let through
(``qualification/mutants/faults.py`` names it): JSON errors whatever the client
accepts (SV-05), one bounded line per error message (SV-05), the security
headers on the request checklist's own refusals and a CSP of ``'self'`` and
``'none'`` only (SV-07), each own Host with its own Origin (SV-02, SV-04),
``application/json`` on every mutation, not only POST (SV-05), fresh and distinct
secrets per login (SV-03), and a user login that says so (SV-03). HTTP only,
against the ``target`` or the route and demo servers (the target with
``--target-url``).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from qualification.harness import ApiClient
from qualification.security.server_routes import MUTATIONS, Route, params
from qualification.target import Served

pytestmark = pytest.mark.conformance

#: Where a CSP may load from: its own origin, or nowhere (SV-07: no inline, no remote).
CSP_SOURCES = {"'self'", "'none'"}
OPENAI = "/api/cordis/v1/"
OPENAI_FIELDS = {"code", "message", "type", "param"}
BROWSER_ACCEPT = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"
BODY_MUTATIONS = tuple(route for route in MUTATIONS if route.body is not None)


@pytest.fixture(scope="module")
def anonymous(target: Served) -> Iterator[httpx.Client]:
    """A client of the target that never logs in."""
    with httpx.Client(base_url=target.url, trust_env=False, timeout=10) as http:
        yield http


@pytest.fixture(scope="module")
def admin(target: Served) -> Iterator[ApiClient]:
    """The target's admin, logged in once for the module."""
    client = target.client()
    yield client
    client.close()


def _json_error(response: httpx.Response) -> dict[str, str]:
    """The ``{"error": {"code", "message"}}`` body of an error answer, checked whole (OpenAI's
    shape, with ``type`` and ``param`` too, on the chat-client API: BR-13)."""
    assert response.headers["content-type"].split(";")[0].strip() == "application/json", \
        response.headers["content-type"]
    body = response.json()
    fields = OPENAI_FIELDS if response.url.path.startswith(OPENAI) else {"code", "message"}
    assert set(body) == {"error"} and set(body["error"]) == fields, body
    error: dict[str, str] = body["error"]
    assert error["message"].isprintable(), "one line, no control character"
    assert 0 < len(error["message"]) <= 300
    return error


def _csp(value: str) -> dict[str, list[str]]:
    """The policy's directives: name -> sources (a name given twice fails: it is ambiguous)."""
    directives: dict[str, list[str]] = {}
    for part in value.split(";"):
        name, *sources = part.split()
        assert name.lower() not in directives, f"{name} twice in {value!r}"
        directives[name.lower()] = sources
    return directives


def _security_headers(headers: httpx.Headers) -> None:
    """SV-07's headers, the CSP read directive by directive."""
    policy = _csp(headers["content-security-policy"])
    assert policy.get("default-src") == ["'none'"]
    assert policy.get("frame-ancestors") == ["'none'"]
    assert "script-src" in policy
    for name, sources in policy.items():
        assert sources and set(sources) <= CSP_SOURCES, f"{name} {' '.join(sources)}"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-frame-options"] == "DENY"
    assert headers["cache-control"] == "no-store"


@pytest.mark.req("SV-07")
@pytest.mark.parametrize("path", ["/", "/cordis", "/ui/app.js", "/api/health", "/api/version",
                                  "/api/v1/session", "/api/v1/objects", "/api/openapi.json"])
def test_the_csp_admits_only_self_or_none(admin: ApiClient, path: str) -> None:
    response = admin.get(path)
    assert response.status_code == 200, path
    _security_headers(response.headers)


@pytest.mark.req("SV-05", "API-01")
@pytest.mark.parametrize("accept", [BROWSER_ACCEPT, "text/html", "*/*", None])
@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/api/v1/nope", 404, "NOT_FOUND"),
    ("GET", "/nope", 404, "NOT_FOUND"),
    ("GET", "/ui/nope.js", 404, "NOT_FOUND"),
    ("PUT", "/api/v1/objects", 405, "METHOD_NOT_ALLOWED"),
    ("DELETE", "/api/v1/agent-runtime/tools", 405, "METHOD_NOT_ALLOWED"),
])
def test_an_unknown_path_or_method_is_a_json_error_whatever_is_accepted(
        admin: ApiClient, accept: str | None, method: str, path: str, status: int,
        code: str) -> None:
    headers = admin.headers(method != "GET") | ({} if accept is None else {"Accept": accept})
    response = admin.http.request(method, path, headers=headers)
    assert response.status_code == status
    assert _json_error(response)["code"] == code
    _security_headers(response.headers)


@pytest.mark.req("SV-05")
@pytest.mark.parametrize("echoed", ["x" * 3000, "a%0Ab%0D%0Ac", "%1B%5B31m" + "y" * 500,
                                    "z" * 40 + "%0A" + "w" * 40])
@pytest.mark.parametrize(("method", "path"), [
    ("DELETE", "/api/v1/grants/grant_{}"), ("GET", "/api/v1/research/campaigns/camp_{}"),
    ("GET", "/api/v1/agent-runtime/turns/turn_{}"),
    ("POST", "/api/v1/agent-runtime/turns/turn_{}/resume"),
    ("GET", "/api/cordis/sessions/ses_{}"), ("DELETE", "/api/cordis/sessions/ses_{}")])
def test_an_error_message_is_one_bounded_line_whatever_the_request_echoes(
        admin: ApiClient, echoed: str, method: str, path: str) -> None:
    response = admin.http.request(method, path.format(echoed),
                                  headers=admin.headers(method != "GET"))
    assert 400 <= response.status_code < 500, response.text[:300]
    _json_error(response)


@pytest.mark.req("SV-05")
@pytest.mark.parametrize(("path", "body"), [
    ("/api/v1/grants", {"campaign_id": "camp_a\nb"}),
    ("/api/v1/grants", {"campaign_id": "camp_\r\n\x1b[2J" + "q" * 50}),
    ("/api/v1/grants", {"campaign_id": "camp_\u2028x"}),
    ("/api/v1/agent-runtime/turns", {"message": "hi", "x\n" * 400: 1}),
    ("/api/v1/agent-runtime/turns", {"message": "hi", "\u2028" + "k" * 2000: True}),
    ("/api/cordis/sessions", {"y\r\n" * 300: "read-only"}),
], ids=["newline-id", "escape-id", "separator-id", "long-field", "separator-field",
        "bridge-field"])
def test_a_refused_body_is_never_echoed_across_lines_or_at_length(
        admin: ApiClient, path: str, body: dict[str, Any]) -> None:
    """Refusals name what was wrong (an id, a field); the name is the client's text."""
    response = admin.post(path, body)
    assert response.status_code in (404, 422), response.text[:300]
    _json_error(response)


def _refusals(target: Served, admin: ApiClient) -> list[tuple[str, str, dict[str, str], bytes,
                                                              int]]:
    """Requests the checklist itself refuses: (method, path, headers, body, status)."""
    port, own = target.port, target.url
    session = admin.headers(True)
    json_type = {"Content-Type": "application/json"}
    turn = b'{"message":"hi"}'
    return [
        ("GET", "/api/health", {"Host": f"evil.example:{port}"}, b"", 403),
        ("GET", "/", {"Host": f"127.0.0.1:{port + 1}"}, b"", 403),
        ("POST", "/api/v1/agent-runtime/turns",
         session | json_type | {"Origin": "https://evil.example"}, turn, 403),
        ("POST", "/api/v1/agent-runtime/turns",
         session | json_type | {"Sec-Fetch-Site": "cross-site"}, turn, 403),
        ("GET", "/api/v1/objects", {}, b"", 401),
        ("GET", "/api/v1/objects", {"Authorization": "Bearer wrong-token"}, b"", 401),
        ("POST", "/api/v1/agent-runtime/turns",
         session | json_type | {"X-CSRF-Token": "x" * 43}, turn, 403),
        ("POST", "/api/v1/agent-runtime/turns",
         session | {"Content-Type": "text/plain", "Origin": own}, turn, 415),
        ("POST", "/api/v1/agent-runtime/turns", session | json_type,
         b'{"message":"' + b"x" * 70_000 + b'"}', 413),
        ("POST", "/api/v1/agent-runtime/turns", session | json_type,
         b'{"message":"a","message":"b"}', 422),
    ]


@pytest.mark.req("SV-07", "SV-02", "SV-04")
def test_the_checklists_own_refusals_carry_the_security_headers(target: Served,
                                                                admin: ApiClient) -> None:
    with httpx.Client(base_url=target.url, trust_env=False, timeout=10) as http:
        for method, path, headers, body, status in _refusals(target, admin):  # a fixed list
            response = http.request(method, path, headers=headers, content=body)
            assert response.status_code == status, (method, path, headers.keys())
            _json_error(response)
            _security_headers(response.headers)


@pytest.mark.req("SV-02", "SV-04")
@pytest.mark.parametrize("host", ["127.0.0.1:{p}", "[::1]:{p}", "localhost:{p}"])
def test_each_own_host_accepts_its_own_origin_and_no_other(target: Served,
                                                          anonymous: httpx.Client,
                                                          host: str) -> None:
    """A login with a wrong code passes the Origin check (401) or fails it (403): no session
    is made either way."""
    own = host.format(p=target.port)
    others = [h.format(p=target.port) for h in ("127.0.0.1:{p}", "[::1]:{p}", "localhost:{p}")
              if h != host]
    wrong = {"token": f"wrong-{secrets.token_hex(8)}"}
    accepted = anonymous.post("/api/v1/session", json=wrong,
                              headers={"Host": own, "Origin": f"http://{own}"})
    assert (accepted.status_code, _json_error(accepted)["code"]) == (401, "UNAUTHENTICATED")
    for other in others:  # two
        refused = anonymous.post("/api/v1/session", json=wrong,
                                 headers={"Host": own, "Origin": f"http://{other}"})
        assert (refused.status_code, _json_error(refused)["code"]) == (403,
                                                                       "ORIGIN_NOT_ALLOWED")


@pytest.mark.req("SV-05", "SV-04", "API-01")
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "application/jsonx", None])
@pytest.mark.parametrize("route", params(BODY_MUTATIONS))
def test_every_mutation_with_a_body_refuses_a_non_json_body_415(
        admin: ApiClient, content_type: str | None, route: Route) -> None:
    headers = admin.headers(True) | ({} if content_type is None
                                     else {"Content-Type": content_type})
    response = admin.http.request(route.method, route.url, headers=headers,
                                  content=json.dumps(route.body).encode())
    assert response.status_code == 415, response.text[:300]
    assert _json_error(response)["code"] == "UNSUPPORTED_MEDIA_TYPE"


def _login(target: Served, token: str) -> tuple[ApiClient, dict[str, Any]]:
    client = ApiClient(target.url, logout_on_close=True)
    response = client.login(token)
    assert response.status_code == 200, response.text[:300]
    return client, response.json()


@pytest.mark.req("SV-04")
def test_the_session_cookies_value_is_no_csrf_token(target: Served) -> None:
    """The CSRF token is its own secret: a page that can make the browser send the cookie
    cannot also pass it as ``X-CSRF-Token`` (403 CSRF_FAILED); the real token works."""
    client, said = _login(target, target.admin_token)
    try:
        assert client.cookie is not None
        forged = client.http.post("/api/cordis/sessions", json={}, headers={
            **client.headers(True), "X-CSRF-Token": client.cookie})
        assert (forged.status_code, forged.json()["error"]["code"]) == (403, "CSRF_FAILED")
        real = client.post("/api/cordis/sessions", {})
        assert real.status_code == 201, real.text
        assert said["csrf_token"] != client.cookie
    finally:
        client.close()


@pytest.mark.req("SV-03", "SV-10")
def test_each_login_issues_fresh_distinct_secrets(target: Served) -> None:
    first, said = _login(target, target.admin_token)
    second, again = _login(target, target.admin_token)
    try:
        secrets_seen = [first.cookie, second.cookie, said["csrf_token"], again["csrf_token"]]
        assert all(isinstance(s, str) and len(s) >= 16 for s in secrets_seen)
        assert len(set(secrets_seen)) == 4, "a login reuses a secret, or the CSRF token is " \
                                            "the HttpOnly cookie's value"
        for client, csrf in ((first, said["csrf_token"]), (second, again["csrf_token"])):
            assert client.cookie is not None and client.cookie not in csrf
            assert csrf not in client.cookie
            current = client.get("/api/v1/session")
            assert current.status_code == 200
            # SV-03 shows the CSRF token here, SPEC §15 only {role, name}: checked when shown
            assert current.json().get("csrf_token", csrf) == csrf
        assert second.delete("/api/v1/session").status_code == 200
        assert first.get("/api/v1/session").status_code == 200, "a logout ends its own session"
        assert second.get("/api/v1/session").status_code == 401
    finally:
        first.close()
        second.close()


@pytest.mark.req("SV-11")
def test_a_user_session_says_whose_it_is_and_the_seconds_it_has_left(
        target: Served, user_token: str) -> None:
    """The session answer the page reads to warn before a logout is the user's own, and its
    headers say the idle seconds left, never more than the seconds to the absolute cap."""
    client, said = _login(target, user_token)
    try:
        answer = client.get("/api/v1/session")
        assert (answer.json()["role"], answer.json()["name"]) == ("user", said["name"])
        idle = float(answer.headers["X-Session-Idle-Seconds"])
        ends = float(answer.headers["X-Session-Ends-In"])
        assert 0 < idle <= ends
    finally:
        client.close()


@pytest.mark.req("SV-03")
def test_a_user_login_says_user_and_its_own_name(target: Served, user_token: str) -> None:
    client, said = _login(target, user_token)
    try:
        assert said["role"] == "user"
        assert said["name"] and said["name"] != "admin"
        current = client.get("/api/v1/session").json()
        assert (current["role"], current["name"]) == ("user", said["name"])
    finally:
        client.close()
