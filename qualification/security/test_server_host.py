"""ATTACKS.md §B Host (SV-02): DNS rebinding. Any Host but ours is 403 before anything else."""

from __future__ import annotations

from typing import Any

import pytest

from qualification.harness import ApiClient, LiveServer
from qualification.security.server_routes import PROTECTED

BAD_HOSTS = ["evil.example:{p}", "192.168.1.10:{p}", "0.0.0.0:{p}", "x.internal:{p}",
             "localhost.localdomain:{p}", "127.0.0.1:{q}", "localhost:{q}", "127.0.0.1",
             "localhost", "127.0.0.1.:{p}", "127.1:{p}", "[::ffff:127.0.0.1]:{p}",
             "LOCALHOST:{p}", "127.0.0.1:{p}.evil.example", "", "evil.example:{p}@127.0.0.1"]


@pytest.mark.req("SV-02")
@pytest.mark.parametrize("template", BAD_HOSTS)
@pytest.mark.parametrize(("method", "path", "body"),
                         [("GET", "/", None), ("GET", "/api/health", None),
                          ("POST", "/api/v1/session", {"token": "t"}), *PROTECTED])
def test_a_foreign_host_is_refused_even_with_a_valid_session(
        demo_server: LiveServer, demo_client: ApiClient, template: str, method: str, path: str,
        body: Any) -> None:
    server, client = demo_server, demo_client
    host = template.format(p=server.port, q=server.port + 1)
    headers = client.headers(True) | {"Host": host, "Origin": f"http://{host}"}
    response = client.http.request(method, path, json=body, headers=headers)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "HOST_NOT_ALLOWED"


@pytest.mark.req("SV-02")
@pytest.mark.parametrize("host", ["127.0.0.1:{p}", "[::1]:{p}", "localhost:{p}"])
def test_the_three_own_hosts_are_served(demo_server: LiveServer, host: str) -> None:
    server = demo_server
    response = server.client(login=False).http.get(
        "/api/health", headers={"Host": host.format(p=server.port)})
    assert response.status_code == 200
