"""ATTACKS.md §B roles (BR-04, SV-03): each route's role in the table holds over HTTP.

Engine sessions are a shared administrator console (system prompts included):
a ``user`` account gets 403 on every admin route of the table and is served on
every route any session may use; the admin is served everywhere. The bridge's
health is its only public route (its 401 matrix is in test_server_sessions).
The same holds with a bearer token for the session (SV-08): the launch code is the
admin, an account's token that account's ``user`` role; no cookie, no CSRF token.
"""

from __future__ import annotations

import httpx
import pytest

from qualification.harness import ApiClient, bridge_settled, wait_until
from qualification.security.conftest import bearer, user_token_of
from qualification.security.server_routes import ADMIN, BEARER, USER, Route, params
from qualification.target import Served

pytestmark = pytest.mark.conformance

LOGOUT = ("DELETE", "/api/v1/session")


def _send(client: ApiClient, route: Route) -> tuple[int, str]:
    response = client.http.request(route.method, route.url, json=route.body,
                                   headers=client.headers(route.mutation))
    code = response.json()["error"]["code"] if response.status_code >= 400 else ""
    response.close()
    return response.status_code, code


@pytest.mark.req("BR-04", "SV-03", "API-01")
@pytest.mark.parametrize("route", params(ADMIN))
def test_a_user_account_is_refused_on_every_admin_route(user_client: ApiClient,
                                                        route: Route) -> None:
    assert _send(user_client, route) == (403, "FORBIDDEN")


@pytest.mark.req("SV-03", "API-01")
@pytest.mark.parametrize("route", params(USER))
def test_a_user_account_is_served_on_every_user_route(
        route_server: Served, user_client: ApiClient, route: Route) -> None:
    client = route_server.client(token=user_token_of(route_server)) if route.key == LOGOUT \
        else user_client
    status, code = _send(client, route)
    assert status not in (401, 403), code


@pytest.mark.req("BR-04", "API-01")
@pytest.mark.parametrize("route", params(ADMIN))
def test_the_admin_is_served_on_every_admin_route(admin_client: ApiClient,
                                                  route: Route) -> None:
    status, code = _send(admin_client, route)
    assert status not in (401, 403), code


def _send_bearer(http: httpx.Client, token: str, route: Route) -> tuple[int, str]:
    response = http.request(route.method, route.url, json=route.body, headers=bearer(token))
    code = response.json()["error"]["code"] if response.status_code >= 400 else ""
    response.close()
    return response.status_code, code


@pytest.mark.req("SV-08", "BR-04", "API-01")
@pytest.mark.parametrize("route", params(tuple(row for row in BEARER if row.role == "admin")))
def test_a_user_bearer_is_refused_on_every_admin_route(route_server: Served,
                                                       bearer_http: httpx.Client,
                                                       route: Route) -> None:
    assert _send_bearer(bearer_http, user_token_of(route_server), route) == (403, "FORBIDDEN")


@pytest.mark.req("SV-08", "SV-03", "API-01")
@pytest.mark.parametrize("route", params(tuple(row for row in BEARER if row.role != "admin")))
def test_a_user_bearer_is_served_on_every_user_and_public_route(route_server: Served,
                                                                bearer_http: httpx.Client,
                                                                route: Route) -> None:
    status, code = _send_bearer(bearer_http, user_token_of(route_server), route)
    assert status not in (400, 401, 403), code


@pytest.mark.req("SV-08", "BR-04", "API-01")
@pytest.mark.parametrize("route", params(BEARER))
def test_the_launch_code_as_a_bearer_is_served_on_every_api_route(route_server: Served,
                                                                  bearer_http: httpx.Client,
                                                                  route: Route) -> None:
    status, code = _send_bearer(bearer_http, route_server.admin_token, route)
    assert status not in (400, 401, 403), code


@pytest.mark.req("BR-04", "HO-03")
def test_health_is_public_and_the_admin_is_served(route_server: Served,
                                                  admin_client: ApiClient) -> None:
    # the route sweep of this module (the launch code on every route) may have left the
    # bridge disabled or reloading: this test sets the state it reads
    assert admin_client.post("/api/cordis/admin/enable", {}).status_code == 200
    wait_until(lambda: bridge_settled(route_server.url), timeout=30)
    anonymous = ApiClient(route_server.url)
    health = anonymous.http.get("/api/cordis/health").json()
    anonymous.close()
    assert health["state"] == "ready"
    assert {s["state"] for s in health["host"]["services"]} == {"ready"}
    assert admin_client.get("/api/cordis/sessions").status_code == 200
    models = admin_client.get("/api/cordis/models").json()
    assert models["default"] in [model["id"] for model in models["models"]]
