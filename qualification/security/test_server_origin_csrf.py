"""ATTACKS.md §B Origin, CSRF and CORS (SV-04, SV-05): every mutation, every bypass input.

The mutations are every state-changing route of the table (the bridge's too),
sent by the admin with a valid session, so only the attacked check can refuse.
The bearer variants (SV-08) send them with the admin's bearer token and no cookie:
a bearer needs no CSRF token, but a present foreign ``Origin`` or cross-site fetch
metadata is still refused (a browser that sent them is not an API client).
"""

from __future__ import annotations

import httpx
import pytest

from qualification.harness import ApiClient
from qualification.security.conftest import bearer
from qualification.security.server_routes import BEARER, MUTATIONS, SERVED, Route, params
from qualification.target import Served

pytestmark = pytest.mark.conformance

PROTECTED_MUTATIONS = tuple(route for route in MUTATIONS if route.role != "public")
BEARER_MUTATIONS = tuple(route for route in BEARER if route.mutation)

BAD_ORIGINS = ["https://evil.example", "http://127.0.0.1:{p}.evil.example", "http://127.0.0.1:9999",
               "https://127.0.0.1:{p}", "http://127.0.0.1:{p}/", "null", "http://localhost:{p}",
               "http://127.0.0.1", "HTTP://127.0.0.1:{p}", "http://[::1]:{p}"]


@pytest.mark.req("SV-04", "API-01")
@pytest.mark.parametrize("origin", BAD_ORIGINS)
@pytest.mark.parametrize("route", params(MUTATIONS))
def test_a_foreign_origin_is_refused_on_every_mutation(
        route_server: Served, admin_client: ApiClient, origin: str, route: Route) -> None:
    headers = admin_client.headers(True) | {"Origin": origin.format(p=route_server.port)}
    response = admin_client.http.request(route.method, route.url, json=route.body,
                                         headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-08", "SV-04", "API-01")
@pytest.mark.parametrize("origin", BAD_ORIGINS)
@pytest.mark.parametrize("route", params(BEARER_MUTATIONS))
def test_a_foreign_origin_is_refused_on_every_bearer_mutation(
        route_server: Served, bearer_http: httpx.Client, origin: str, route: Route) -> None:
    headers = bearer(route_server.admin_token) | {"Origin": origin.format(p=route_server.port)}
    response = bearer_http.request(route.method, route.url, json=route.body, headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-08", "SV-04", "API-01")
@pytest.mark.parametrize("site", ["cross-site", "same-site"])
@pytest.mark.parametrize("route", params(BEARER_MUTATIONS))
def test_cross_site_fetch_metadata_is_refused_with_a_bearer(
        route_server: Served, bearer_http: httpx.Client, site: str, route: Route) -> None:
    headers = bearer(route_server.admin_token) | {"Sec-Fetch-Site": site}
    response = bearer_http.request(route.method, route.url, json=route.body, headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-08", "SV-04", "API-01")
@pytest.mark.parametrize("extra", [{}, {"Origin": "{own}"}, {"Sec-Fetch-Site": "same-origin"},
                                   {"X-CSRF-Token": "x" * 43}], ids=["bare", "own-origin",
                                                                    "same-origin", "junk-csrf"])
@pytest.mark.parametrize("route", params(BEARER_MUTATIONS))
def test_a_bearer_mutation_needs_no_csrf_token(route_server: Served,
                                              bearer_http: httpx.Client,
                                              extra: dict[str, str], route: Route) -> None:
    headers = bearer(route_server.admin_token) | {k: v.format(own=route_server.url)
                                                  for k, v in extra.items()}
    response = bearer_http.request(route.method, route.url, json=route.body, headers=headers)
    assert response.status_code not in (401, 403), response.text


@pytest.mark.req("SV-04", "API-01")
@pytest.mark.parametrize("site", ["cross-site", "same-site"])
@pytest.mark.parametrize("route", params(MUTATIONS))
def test_cross_site_fetch_metadata_is_refused(admin_client: ApiClient, site: str,
                                              route: Route) -> None:
    headers = admin_client.headers(True) | {"Sec-Fetch-Site": site}
    response = admin_client.http.request(route.method, route.url, json=route.body,
                                         headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-04", "API-01")
@pytest.mark.parametrize("csrf", ["missing", "wrong", "other-session", "query-only", "empty"])
@pytest.mark.parametrize("route", params(PROTECTED_MUTATIONS))
def test_a_missing_or_wrong_csrf_token_is_refused(
        admin_client: ApiClient, user_client: ApiClient, csrf: str, route: Route) -> None:
    headers = admin_client.headers(True)
    url = route.url
    if csrf == "missing":
        headers.pop("X-CSRF-Token")
    elif csrf == "wrong":
        headers["X-CSRF-Token"] = "x" * 43
    elif csrf == "other-session":  # a valid token, of another live session
        headers["X-CSRF-Token"] = str(user_client.csrf)
    elif csrf == "query-only":
        separator = "&" if "?" in url else "?"
        url = f"{url}{separator}csrf_token={headers.pop('X-CSRF-Token')}"
    elif csrf == "empty":
        headers["X-CSRF-Token"] = ""
    response = admin_client.http.request(route.method, url, json=route.body, headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "CSRF_FAILED"


@pytest.mark.req("SV-04", "SV-05")
@pytest.mark.parametrize(("content_type", "body"), [
    ("application/x-www-form-urlencoded", b"message=hi"),
    ("text/plain", b'{"message":"hi"}'),
    ("multipart/form-data; boundary=x", b"--x\r\n\r\nhi\r\n--x--"),
    (None, b'{"message":"hi"}'),
    ("application/json; charset=latin-1", b'{"message":"hi"}'),
])
def test_classic_csrf_carriers_are_refused_415(admin_client: ApiClient,
                                               content_type: str | None, body: bytes) -> None:
    headers = admin_client.headers(True)
    if content_type:
        headers["Content-Type"] = content_type
    response = admin_client.http.post("/api/v1/agent-runtime/turns", content=body,
                                      headers=headers)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"


@pytest.mark.req("SV-04", "API-01")
@pytest.mark.parametrize("route", params(SERVED))
def test_cors_is_never_enabled(admin_client: ApiClient, route: Route) -> None:
    preflight = admin_client.http.options(route.url, headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": route.method,
        "Access-Control-Request-Headers": "x-csrf-token, content-type"})
    assert not any(h.lower().startswith("access-control-") for h in preflight.headers)
    simple = admin_client.http.request(route.method, route.url, headers=admin_client.headers(
        False) | {"Origin": "https://evil.example"})
    assert not any(h.lower().startswith("access-control-") for h in simple.headers)


@pytest.mark.req("SV-08", "SV-04", "API-01")
@pytest.mark.parametrize("route", params(BEARER))
def test_cors_is_never_enabled_for_bearer_clients(route_server: Served,
                                                  bearer_http: httpx.Client,
                                                  route: Route) -> None:
    """A page can send ``Authorization`` cross-site only after a preflight: none is granted."""
    preflight = bearer_http.options(route.url, headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": route.method,
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert not any(h.lower().startswith("access-control-") for h in preflight.headers)
    assert preflight.status_code in (401, 403, 405), "a preflight is answered as before"
    simple = bearer_http.request(route.method, route.url, json=route.body, headers=bearer(
        route_server.admin_token) | {"Origin": "https://evil.example"})
    assert not any(h.lower().startswith("access-control-") for h in simple.headers)
