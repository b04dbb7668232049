"""ATTACKS.md §B Origin, CSRF and CORS (SV-04, SV-05): every mutation, every bypass input."""

from __future__ import annotations

from typing import Any

import pytest

from qualification.harness import ApiClient, LiveServer
from qualification.security.server_routes import MUTATIONS, PROTECTED

BAD_ORIGINS = ["https://evil.example", "http://127.0.0.1:{p}.evil.example", "http://127.0.0.1:9999",
               "https://127.0.0.1:{p}", "http://127.0.0.1:{p}/", "null", "http://localhost:{p}",
               "http://127.0.0.1", "HTTP://127.0.0.1:{p}", "http://[::1]:{p}"]


@pytest.mark.req("SV-04")
@pytest.mark.parametrize("origin", BAD_ORIGINS)
@pytest.mark.parametrize(("method", "path", "body"), MUTATIONS)
def test_a_foreign_origin_is_refused_on_every_mutation(
        demo_server: LiveServer, demo_client: ApiClient, origin: str, method: str, path: str,
        body: Any) -> None:
    headers = demo_client.headers(True) | {"Origin": origin.format(p=demo_server.port)}
    response = demo_client.http.request(method, path, json=body, headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-04")
@pytest.mark.parametrize("site", ["cross-site", "same-site"])
@pytest.mark.parametrize(("method", "path", "body"), MUTATIONS)
def test_cross_site_fetch_metadata_is_refused(demo_client: ApiClient, site: str, method: str,
                                              path: str, body: Any) -> None:
    headers = demo_client.headers(True) | {"Sec-Fetch-Site": site}
    response = demo_client.http.request(method, path, json=body, headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-04")
@pytest.mark.parametrize("csrf", ["missing", "wrong", "other-session", "query-only", "empty"])
@pytest.mark.parametrize(("method", "path", "body"), MUTATIONS)
def test_a_missing_or_wrong_csrf_token_is_refused(
        demo_server: LiveServer, demo_client: ApiClient, csrf: str, method: str, path: str,
        body: Any) -> None:
    headers = demo_client.headers(True)
    url = path
    if csrf == "missing":
        headers.pop("X-CSRF-Token")
    elif csrf == "wrong":
        headers["X-CSRF-Token"] = "x" * 43
    elif csrf == "other-session":
        other = demo_server.client()
        headers["X-CSRF-Token"] = str(other.csrf)
    elif csrf == "query-only":
        url = f"{path}?csrf_token={headers.pop('X-CSRF-Token')}"
    elif csrf == "empty":
        headers["X-CSRF-Token"] = ""
    response = demo_client.http.request(method, url, json=body, headers=headers)
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
def test_classic_csrf_carriers_are_refused_415(demo_client: ApiClient, content_type: str | None,
                                               body: bytes) -> None:
    headers = demo_client.headers(True)
    if content_type:
        headers["Content-Type"] = content_type
    response = demo_client.http.post("/api/v1/agent-runtime/turns", content=body,
                                     headers=headers)
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"


@pytest.mark.req("SV-04")
@pytest.mark.parametrize(("method", "path", "body"), PROTECTED)
def test_cors_is_never_enabled(demo_client: ApiClient, method: str, path: str,
                               body: Any) -> None:
    preflight = demo_client.http.options(path, headers={
        "Origin": "https://evil.example", "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "x-csrf-token, content-type"})
    assert not any(h.lower().startswith("access-control-") for h in preflight.headers)
    simple = demo_client.http.request(method, path, headers=demo_client.headers(False) | {
        "Origin": "https://evil.example"})
    assert not any(h.lower().startswith("access-control-") for h in simple.headers)
