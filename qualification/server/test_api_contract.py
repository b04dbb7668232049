"""SV-05..SV-07, API-01: error shapes, exact bodies, the route table, OpenAPI, security headers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.routing import iter_route_contexts

from labfy_ref.server.app import create_app
from labfy_ref.server.security import PUBLIC_API
from qualification.conftest import ServerFactory
from qualification.harness import ApiClient, LiveServer
from qualification.security.server_routes import ALL, SERVED, Route, params
from qualification.target import Served

NOT_FOUND = Route("GET", "/api/v1/nope", "user", None, "", "/api/v1/nope", None)


def _error(response: Any) -> dict[str, str]:
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert len(body["error"]["message"]) <= 300
    assert "Traceback" not in body["error"]["message"]
    error: dict[str, str] = body["error"]
    return error


@pytest.mark.conformance
@pytest.mark.req("SV-05")
@pytest.mark.parametrize(("body", "code"), [
    ({"message": "hi", "extra": 1}, "VALIDATION_FAILED"),
    ({}, "VALIDATION_FAILED"),
    ({"message": 5}, "VALIDATION_FAILED"),
    ({"message": ""}, "VALIDATION_FAILED"),
    ({"message": "x" * 9000}, "VALIDATION_FAILED"),
    ({"message": "hi", "client_request_id": ""}, "VALIDATION_FAILED"),
    ([1, 2], "VALIDATION_FAILED"),
])
def test_exact_field_sets_or_422(demo_client: ApiClient, body: Any, code: str) -> None:
    response = demo_client.post("/api/v1/agent-runtime/turns", body)
    assert response.status_code == 422
    assert _error(response)["code"] == code


@pytest.mark.req("SV-05")
def test_a_body_wrong_in_two_fields_names_the_first(demo_client: ApiClient) -> None:
    """The refusal names one field, and always the first the body schema declares."""
    for body in ({"message": 5, "client_request_id": 7},
                 {"client_request_id": 7, "message": 5}):
        response = demo_client.post("/api/v1/agent-runtime/turns", body)
        assert response.status_code == 422
        assert _error(response)["message"].startswith("message: "), response.text


@pytest.mark.conformance
@pytest.mark.req("SV-05")
@pytest.mark.parametrize("raw", [b'{"message":"a","message":"b"}', b'{"message":NaN}',
                                 b'{"message":"a"} x', b"\xff\xfe", b"[" * 5000])
def test_non_json_or_ambiguous_json_is_422(demo_client: ApiClient, raw: bytes) -> None:
    headers = demo_client.headers(True) | {"Content-Type": "application/json"}
    response = demo_client.http.post("/api/v1/agent-runtime/turns", content=raw,
                                     headers=headers)
    assert response.status_code == 422
    assert _error(response)["code"] == "VALIDATION_FAILED"


@pytest.mark.conformance
@pytest.mark.req("SV-05")
def test_bodies_are_bounded_413(demo_client: ApiClient) -> None:
    big = {"message": "x" * 70_000}
    response = demo_client.post("/api/v1/agent-runtime/turns", big)
    assert response.status_code == 413
    assert _error(response)["code"] == "BODY_TOO_LARGE"

    def chunks() -> Any:
        for _ in range(100):
            yield b"x" * 1024

    headers = demo_client.headers(True) | {"Content-Type": "application/json"}
    streamed = demo_client.http.post("/api/v1/agent-runtime/turns", content=chunks(),
                                     headers=headers)
    assert streamed.status_code == 413


@pytest.mark.conformance
@pytest.mark.req("SV-05")
@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/api/v1/nope", 404, "NOT_FOUND"),
    ("GET", "/api/v1/agent-runtime/turns/turn_nope", 404, "TURN_NOT_FOUND"),
    ("GET", "/api/v1/research/campaigns/camp_nope", 404, "CAMPAIGN_NOT_FOUND"),
    ("DELETE", "/api/v1/grants/grant_nope", 404, "GRANT_NOT_FOUND"),
    ("POST", "/api/v1/grants", 404, "CAMPAIGN_NOT_FOUND"),
    ("PUT", "/api/v1/objects", 405, "METHOD_NOT_ALLOWED"),
    ("POST", "/api/v1/agent-runtime/turns/turn_nope/resume", 404, "TURN_NOT_FOUND"),
])
def test_errors_have_stable_codes(demo_client: ApiClient, method: str, path: str, status: int,
                                  code: str) -> None:
    body = {"campaign_id": "camp_nope"} if path == "/api/v1/grants" else None
    headers = demo_client.headers(method != "GET")
    response = demo_client.http.request(method, path, json=body, headers=headers)
    assert response.status_code == status
    assert _error(response)["code"] == code


@pytest.mark.req("API-01", "SV-06")
def test_the_route_table_is_exactly_the_routes_the_app_serves(demo_server: LiveServer) -> None:
    served = set()
    for route in iter_route_contexts(create_app(demo_server.state).routes):
        methods = set(route.methods or ())
        if "GET" in methods:
            methods.discard("HEAD")  # implied by GET (Starlette adds it to plain routes)
        served |= {(method, str(route.path)) for method in methods}
    table = {row.key for row in SERVED}
    assert sorted(served - table) == [], "served but not in qualification/routes.toml"
    assert sorted(table - served) == [], "in qualification/routes.toml but not served"
    target = {row.key for row in ALL if row.target is not None}
    assert sorted(target & served) == [], \
        "served now: drop its target mark in qualification/routes.toml"


@pytest.mark.req("API-01", "SV-03")
def test_the_public_rows_of_the_table_are_the_public_api() -> None:
    public = {row.key for row in SERVED
              if row.role == "public" and row.template.startswith("/api/")}
    assert public == PUBLIC_API


@pytest.mark.conformance
@pytest.mark.req("SV-06", "API-01")
def test_every_api_route_of_the_table_is_in_the_openapi_document(demo_client: ApiClient) -> None:
    document = demo_client.get("/api/openapi.json").json()
    published = {(method.upper(), path) for path, item in document["paths"].items()
                 for method in item}
    wanted = {row.key for row in SERVED
              if row.template.startswith("/api/") and row.template != "/api/openapi.json"}
    assert published == wanted


@pytest.mark.conformance
@pytest.mark.req("SV-06", "WS-02")
def test_objects_route_wire_shape(demo_client: ApiClient) -> None:
    objects = demo_client.get("/api/v1/objects").json()["objects"]
    assert len(objects) == 12
    assert all(set(o) == {"object_id", "kind", "title"} for o in objects)


@pytest.mark.req("SV-06")
def test_turn_wire_shape(demo_client: ApiClient) -> None:
    turn = demo_client.start_turn("shape check")
    done = demo_client.wait_state(turn["id"], {"AUTHORIZATION_REQUIRED"})
    assert set(done) == {"id", "state", "client_request_id", "message", "rounds", "tool_calls",
                         "final_text", "facts", "error", "authorization", "created_at",
                         "updated_at"}
    call = done["tool_calls"][0]
    assert set(call) == {"call_id", "tool_id", "arguments", "status", "result"}
    assert set(call["result"]) == {"trust", "tool_id", "ok", "data"}
    grant = demo_client.grant(done["authorization"]["campaign_id"]).json()["grant"]
    assert {"id", "campaign_id", "workspace", "active", "created_at"} <= set(grant)


@pytest.mark.conformance
@pytest.mark.req("SV-07", "API-01")
@pytest.mark.parametrize("route", [*params(SERVED), NOT_FOUND.param()])
def test_security_headers_on_every_response(demo_server: Served, demo_client: ApiClient,
                                            route: Route) -> None:
    logout = route.key == ("DELETE", "/api/v1/session")
    client = demo_server.client() if logout else demo_client  # a logout ends its own session
    response = client.http.request(route.method, route.url, json=route.body,
                                   headers=client.headers(route.mutation))
    headers = response.headers
    csp = headers["content-security-policy"]
    assert "default-src 'none'" in csp and "script-src 'self'" in csp
    assert "frame-ancestors 'none'" in csp
    assert "unsafe-inline" not in csp and "http" not in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"
    assert headers["x-frame-options"] == "DENY"
    assert headers["cache-control"] == "no-store"
    assert "server" not in headers


@pytest.mark.req("SV-07")
def test_the_page_has_no_inline_script(demo_client: ApiClient) -> None:
    page = demo_client.get("/").text
    assert "<script>" not in page and "onclick" not in page and "javascript:" not in page
    for name in ("text.js", "app.js", "session.js", "render.js", "turns.js"):  # runtime page
        script = demo_client.get(f"/ui/{name}").text
        assert "innerHTML" not in script and "insertAdjacentHTML" not in script, name
        assert "textContent" in script, name


@pytest.mark.req("SV-06", "RT-06", "RT-08")
def test_a_fresh_event_log_missed_nothing_and_a_grant_may_expire(
        specimen: Path, server_factory: ServerFactory) -> None:
    """``GET /events`` without a cursor reads from the start: nothing missed on a log that
    dropped nothing. ``expires_in_seconds`` sets a grant's end that far from now."""
    import datetime  # noqa: PLC0415

    client = server_factory(specimen).client()
    first = client.get("/api/v1/agent-runtime/events").json()
    assert (first["events"], first["next_cursor"], first["oldest_cursor"], first["missed"]) \
        == ([], 0, 0, False)
    turn = client.wait_state(client.start_turn("Check the early ivy bee record.")["id"],
                             {"AUTHORIZATION_REQUIRED"})
    before = datetime.datetime.now(datetime.UTC)
    made = client.grant(turn["authorization"]["campaign_id"], expires_in_seconds=3600)
    assert made.status_code == 201, made.text
    expires = datetime.datetime.fromisoformat(made.json()["grant"]["expires_at"])
    after = datetime.datetime.now(datetime.UTC)
    assert before + datetime.timedelta(seconds=3599) <= expires \
        <= after + datetime.timedelta(seconds=3601)
    events = client.get("/api/v1/agent-runtime/events").json()
    assert events["missed"] is False and events["events"][0]["seq"] == 1
