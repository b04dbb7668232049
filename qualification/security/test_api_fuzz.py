"""Inputs written nowhere (SV-05, BR-04): arbitrary bodies and ids never cause a 5xx or a trace.

Hypothesis sends arbitrary JSON values and arbitrary path ids to every route
of the table that takes them; every answer is below 500 and every error has the
JSON shape. Bodies go to a real engine session, so they reach the handlers.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.workspace import init_workspace
from qualification.harness import ApiClient, LiveServer, bridge_settled, wait_until
from qualification.security.server_routes import SERVED, Route, params, path_with

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.sampled_from(["message", "client_request_id", "campaign_id", "expires_in_seconds",
                         "text", "headless", "model", "permission_mode", "decision", "token",
                         "x"]), inner, max_size=4),
    max_leaves=10)
ids = st.text(alphabet=st.characters(blacklist_categories=["Cs", "Cc"],
                                     blacklist_characters="/?#%"), min_size=1, max_size=60)
BODY_ROUTES = tuple(route for route in SERVED if route.body is not None)
ID_ROUTES = tuple(route for route in SERVED if "{" in route.template)
FUZZ = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, str]]:
    root = tmp_path_factory.mktemp("fuzz") / "ws"
    init_workspace(root, specimen=True)
    server = LiveServer(root, bridge=True).start()
    sid = server.client().post("/api/cordis/sessions", {}).json()["session"]["id"]
    yield server, sid
    server.stop()


def _check(response: Any, *, openai: bool = False) -> None:
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        error = response.json()["error"]
        # The OpenAI-compatible routes' own refusals (BR-13) add OpenAI's "type" and "param";
        # the security checks before any route keep the server's shape there too.
        shapes = ({"code", "message"}, {"code", "message", "type", "param"})
        assert set(error) in shapes[:1 + openai] and "Traceback" not in error["message"]


@pytest.mark.req("SV-05", "BR-04", "API-01")
@pytest.mark.parametrize("route", params(BODY_ROUTES))
@FUZZ
@given(body=json_values)
def test_arbitrary_json_bodies_never_fail_the_server(
        fuzz_server: tuple[LiveServer, str], route: Route, body: Any) -> None:
    server, sid = fuzz_server
    client: ApiClient = server.client()
    response = client.http.request(route.method, path_with(route, session_id=sid), json=body,
                                   headers=client.headers(True))
    _check(response, openai=route.template.startswith("/api/cordis/v1/"))
    if "/admin/" in route.template:
        # disable or reload may have taken the bridge down: every other route (in any
        # order) is fuzzed with it up, where its handler is reached, not CORDIS_DISABLED
        assert client.post("/api/cordis/admin/enable", {}).status_code == 200
        wait_until(lambda: bridge_settled(server.url), timeout=30)
    client.close()


@pytest.mark.req("SV-05", "BR-04", "API-01")
@FUZZ
@given(identifier=ids)
def test_arbitrary_ids_never_fail_the_server(fuzz_server: tuple[LiveServer, str],
                                             identifier: str) -> None:
    server, _ = fuzz_server
    client: ApiClient = server.client()
    for route in ID_ROUTES:
        _check(client.http.request(route.method, path_with(route, every=identifier),
                                   json=route.body, headers=client.headers(route.mutation)),
               openai=route.template.startswith("/api/cordis/v1/"))
    client.close()
