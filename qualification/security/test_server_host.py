"""ATTACKS.md §B Host (SV-02): DNS rebinding. Any Host but ours is 403 before anything else.

The matrix is every bad Host against every route of the table (pages, public
and protected API, the bridge), sent with a valid admin session, CSRF token and
matching Origin, so that only the Host can be what refuses it; its bearer variant
sends every API route with the admin's valid bearer token instead (SV-08).
"""

from __future__ import annotations

import httpx
import pytest

from qualification.harness import ApiClient
from qualification.security.conftest import bearer
from qualification.security.server_routes import BEARER, SERVED, Route, params
from qualification.target import Served

pytestmark = pytest.mark.conformance

BAD_HOSTS = ["evil.example:{p}", "192.168.1.10:{p}", "0.0.0.0:{p}", "x.internal:{p}",
             "localhost.localdomain:{p}", "127.0.0.1:{q}", "localhost:{q}", "127.0.0.1",
             "localhost", "127.0.0.1.:{p}", "127.1:{p}", "[::ffff:127.0.0.1]:{p}",
             "LOCALHOST:{p}", "127.0.0.1:{p}.evil.example", "", "evil.example:{p}@127.0.0.1"]


@pytest.mark.req("SV-02", "API-01")
@pytest.mark.parametrize("template", BAD_HOSTS)
@pytest.mark.parametrize("route", params(SERVED))
def test_a_foreign_host_is_refused_even_with_a_valid_session(
        route_server: Served, admin_client: ApiClient, template: str, route: Route) -> None:
    host = template.format(p=route_server.port, q=route_server.port + 1)
    headers = admin_client.headers(True) | {"Host": host, "Origin": f"http://{host}"}
    response = admin_client.http.request(route.method, route.url, json=route.body,
                                         headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "HOST_NOT_ALLOWED"


@pytest.mark.req("SV-08", "SV-02", "API-01")
@pytest.mark.parametrize("template", BAD_HOSTS)
@pytest.mark.parametrize("route", params(BEARER))
def test_a_foreign_host_is_refused_even_with_a_valid_bearer(
        route_server: Served, bearer_http: httpx.Client, template: str, route: Route) -> None:
    host = template.format(p=route_server.port, q=route_server.port + 1)
    response = bearer_http.request(route.method, route.url, json=route.body,
                                   headers=bearer(route_server.admin_token) | {"Host": host})
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "HOST_NOT_ALLOWED"


@pytest.mark.req("SV-02")
@pytest.mark.parametrize("host", ["127.0.0.1:{p}", "[::1]:{p}", "localhost:{p}"])
def test_the_three_own_hosts_are_served(route_server: Served, host: str) -> None:
    response = route_server.client(login=False).http.get(
        "/api/health", headers={"Host": host.format(p=route_server.port)})
    assert response.status_code == 200
