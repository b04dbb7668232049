"""ATTACKS.md §B roles (BR-04): a ``user`` account gets 403 on every /api/cordis/* route.

Engine sessions are a shared administrator console (system prompts included);
ordinary accounts can neither read, create, change nor cancel them. Health is
the only public bridge route.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.server.auth import token_hash
from labfy_ref.workspace import init_workspace
from qualification.harness import ApiClient, LiveServer

SID = "ses_" + "0" * 26
CORDIS = [("GET", "/api/cordis/sessions", None), ("POST", "/api/cordis/sessions", {}),
          ("GET", f"/api/cordis/sessions/{SID}", None),
          ("DELETE", f"/api/cordis/sessions/{SID}", None),
          ("POST", f"/api/cordis/sessions/{SID}/messages", {"text": "hi"}),
          ("POST", f"/api/cordis/sessions/{SID}/cancel", None),
          ("GET", "/api/cordis/agents", None), ("GET", "/api/cordis/tools", None),
          ("GET", "/api/cordis/models", None),
          ("PATCH", f"/api/cordis/sessions/{SID}/settings", {"permission_mode": "read-only"}),
          ("POST", f"/api/cordis/sessions/{SID}/approvals/appr_x", {"decision": "rejected"})]


@pytest.fixture(scope="module")
def bridge_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("roles")
    init_workspace(root / "ws", specimen=True)
    accounts = root / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "bob"\ntoken_sha256 = "{token_hash("bob-token")}"\n')
    server = LiveServer(root / "ws", bridge=True, accounts=str(accounts)).start()
    yield server
    server.stop()


@pytest.mark.req("BR-04", "SV-03")
@pytest.mark.parametrize(("method", "path", "body"), CORDIS)
def test_a_user_account_is_refused_on_every_bridge_route(
        bridge_server: LiveServer, method: str, path: str, body: Any) -> None:
    user = bridge_server.client(token="bob-token")
    response = user.http.request(method, path, json=body, headers=user.headers(method != "GET"))
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "FORBIDDEN"


@pytest.mark.req("BR-04")
@pytest.mark.parametrize(("method", "path", "body"), CORDIS)
def test_without_a_session_every_bridge_route_is_401(bridge_server: LiveServer, method: str,
                                                     path: str, body: Any) -> None:
    anonymous = ApiClient(bridge_server.url)
    response = anonymous.http.request(method, path, json=body,
                                      headers={"Origin": bridge_server.url})
    anonymous.close()
    assert response.status_code == 401


@pytest.mark.req("BR-04", "HO-03")
def test_health_is_public_and_the_admin_is_served(bridge_server: LiveServer,
                                                  tmp_path: Path) -> None:
    anonymous = ApiClient(bridge_server.url)
    health = anonymous.http.get("/api/cordis/health").json()
    anonymous.close()
    assert health["state"] == "ready"
    assert {s["state"] for s in health["host"]["services"]} == {"ready"}
    admin = bridge_server.client()
    assert admin.get("/api/cordis/sessions").status_code == 200
    assert admin.get("/api/cordis/models").json()["default"] == "engine:demo:deterministic-demo"
