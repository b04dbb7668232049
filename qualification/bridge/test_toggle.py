"""BR-16, HO-05: the admin releases and re-enables the bridge without a restart.

Every enable/disable or composition change used to mean restarting ``serve``: its
runtime turns dropped, a new login code printed. Now ``POST /api/cordis/admin/disable``
releases the host's root scope (services, listeners, timers, files, agent handles; open
streams end ``interrupted``), ``enable`` and ``reload`` build the host again from its
document, read anew — ``CORDIS_STARTING`` while it settles, ``failed`` with the reason
when it cannot — and the runtime with what it shares with the host (the model client)
is untouched throughout. ``serve --bridge-toggle locked`` refuses the three routes.
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.host import default_composition
from labfy_ref.server.auth import token_hash
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import ApiClient, LiveServer, TurnReader, wait_until

FINAL = json.dumps({"type": "final", "text": "all done"})
WRITE = json.dumps({"type": "tool_call", "tool_id": "files.write",
                    "arguments": {"path": "never-written.txt", "content": "no"}})
CYCLES = 50
USER = "anaslogincode0123456789"


def _toggle(client: ApiClient, action: str) -> dict[str, Any]:
    answer = client.post(f"/api/cordis/admin/{action}", {})
    assert answer.status_code == 200, answer.text
    bridge: dict[str, Any] = answer.json()["bridge"]
    return bridge


def _state(client: ApiClient) -> str:
    state: str = client.http.get("/api/cordis/health").json()["state"]
    return state


def _ready(client: ApiClient) -> None:
    wait_until(lambda: _state(client) != "starting", timeout=30)
    assert _state(client) == "ready", client.http.get("/api/cordis/health").json()


def _code(client: ApiClient, path: str = "/api/cordis/sessions") -> tuple[int, str]:
    answer = client.get(path)
    return answer.status_code, answer.json()["error"]["code"]


def _composition(path: Path, *extra: dict[str, Any]) -> Path:
    rows = [{"id": r.id, "plugin": r.plugin, "config": r.config}
            for r in default_composition().rows]
    path.write_text(json.dumps({"rows": [*rows, *extra]}))  # JSON is YAML
    return path


@pytest.mark.req("BR-16", "HO-05", "HO-06")
def test_disable_refuses_the_engine_and_enable_brings_the_sessions_back(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario.always(FINAL))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    assert TurnReader(client, session_id, "hello").join()[-1]["reason"] == "completed"

    assert _toggle(client, "disable") == {"state": "disabled"}
    assert _code(client) == (503, "CORDIS_DISABLED")
    assert _code(client, "/api/cordis/v1/models") == (503, "CORDIS_DISABLED")  # the OpenAI face too
    health = client.http.get("/api/cordis/health").json()
    assert (health["state"], health["host"]) == ("disabled", None)
    status = client.get("/api/v1/agent-runtime/status").json()["bridge"]
    assert (status["enabled"], status["state"]) == (False, "disabled")
    # the runtime, sharing the model client with the released host, still answers
    turn = client.start_turn("while the bridge is off")
    assert client.wait_state(turn["id"], {"COMPLETED"})["final_text"] == "all done"

    assert _toggle(client, "disable") == {"state": "disabled"}, "idempotent"
    assert _toggle(client, "enable")["state"] in ("starting", "ready")
    _ready(client)
    session = client.get(f"/api/cordis/sessions/{session_id}").json()["session"]
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"]
    assert TurnReader(client, session_id, "again").join()[-1]["reason"] == "completed"
    assert _toggle(client, "enable") == {"state": "ready"}, "an enabled bridge stays as it is"


@pytest.mark.req("BR-16", "HO-05", "BR-05")
def test_disable_ends_open_streams_interrupted_with_no_effect_after_it(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario("held", (Answer(content=WRITE), Answer(content=FINAL)),
                                         when_exhausted="repeat_last"))
    server = server_factory(specimen, bridge=True, approval_timeout="300",
                            **local_agent(provider.base_url))
    client = server.client()
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    waiting = TurnReader(client, session_id, "write a file")
    approval = waiting.wait_for("approval-request")
    _toggle(client, "disable")
    chunks = waiting.join(timeout=10)
    assert chunks[-1]["type"] == "done" and chunks[-1]["interrupted"] is True, chunks[-3:]
    _toggle(client, "enable")
    _ready(client)
    late = client.post(f"/api/cordis/sessions/{session_id}/approvals/{approval['approval_id']}",
                       {"decision": "allowed-once"})
    assert late.status_code == 409, late.text  # the released turn's approval is gone
    assert not (specimen / "files" / "never-written.txt").exists()


@pytest.mark.req("BR-16", "HO-05")
def test_reload_reads_the_document_again_and_a_bad_one_leaves_failed(
        specimen: Path, tmp_path: Path, server_factory: ServerFactory) -> None:
    document = _composition(tmp_path / "composition.yaml")
    server = server_factory(specimen, bridge=True, composition=str(document))
    client = server.client()

    def rows() -> list[str]:
        return [row["id"] for row in client.http.get("/api/cordis/health").json()["host"]["rows"]]

    assert "late" not in rows()
    _composition(document, {"id": "late", "plugin": "qualification.host.plugins_for_tests:Slow",
                            "config": {"seconds": 0}})
    _toggle(client, "reload")
    _ready(client)
    assert rows()[-1] == "late", "the change applied"

    document.write_text("rows: [{id: engine")  # no longer YAML
    failed = _toggle(client, "reload")
    assert failed["state"] == "failed" and "not YAML" in failed["reason"], failed
    status, code = _code(client)
    assert (status, code) == (503, "CORDIS_UNAVAILABLE"), "never the old host silently kept"
    assert client.get("/api/v1/agent-runtime/status").status_code == 200

    _composition(document)
    assert _toggle(client, "enable")["state"] in ("starting", "ready"), "failed: enable retries"
    _ready(client)
    assert "late" not in rows()


@pytest.mark.req("BR-16", "HO-06")
def test_an_admin_enables_a_bridge_serve_started_without_it(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen)
    client = server.client()
    assert _code(client) == (503, "CORDIS_DISABLED")
    _toggle(client, "enable")
    _ready(client)
    assert client.post("/api/cordis/sessions", {}).status_code == 201


@pytest.mark.req("BR-16")
def test_a_locked_toggle_refuses_all_three_and_changes_nothing(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True, bridge_toggle="locked")
    client = server.client()
    assert client.http.get("/api/cordis/health").json()["toggle"] == "locked"
    for action in ("disable", "enable", "reload"):
        answer = client.post(f"/api/cordis/admin/{action}", {})
        assert (answer.status_code, answer.json()["error"]["code"]) == (
            409, "BRIDGE_TOGGLE_LOCKED"), action
    assert _state(client) == "ready"
    assert client.get("/api/cordis/sessions").status_code == 200


@pytest.mark.req("BR-16")
def test_the_toggle_is_the_admins_and_takes_no_fields(specimen: Path, tmp_path: Path,
                                                       server_factory: ServerFactory) -> None:
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "ana"\ntoken_sha256 = "{token_hash(USER)}"\n')
    server = server_factory(specimen, bridge=True, accounts=str(accounts))
    user = server.client(token=USER)
    answer = user.post("/api/cordis/admin/disable", {})
    assert (answer.status_code, answer.json()["error"]["code"]) == (403, "FORBIDDEN")
    admin = server.client()
    answer = admin.post("/api/cordis/admin/disable", {"now": True})
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "VALIDATION_FAILED")
    assert _state(admin) == "ready", "neither request changed anything"


def _counts(server: LiveServer, workspace: Path) -> dict[str, int]:
    """What the server holds now: its event loop's tasks, its threads (the loop's own worker
    pool apart: bounded, reused), descriptors under the workspace and in all."""
    async def tasks() -> int:
        return len(asyncio.all_tasks()) - 1  # this one

    gc.collect()  # what is only garbage is not held
    root = str(workspace.resolve())
    descriptors = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            descriptors.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue  # the listing's own, closed meanwhile
    return {"tasks": server.on_loop(tasks),
            "threads": sum(1 for t in threading.enumerate()
                           if not t.name.startswith("asyncio_")),
            "workspace_fds": sum(1 for target in descriptors if target.startswith(root)),
            "fds": len(descriptors)}


@pytest.mark.req("BR-16", "HO-05")
def test_fifty_enable_disable_cycles_release_everything_they_took(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    provider = provider_factory(Scenario.always(FINAL))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    client = server.client()

    def cycle() -> None:
        _ready(client)
        session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
        assert TurnReader(client, session_id, "one turn").join()[-1]["reason"] == "completed"
        assert client.get("/api/cordis/sessions").status_code == 200  # the index, opened
        _toggle(client, "disable")
        _toggle(client, "enable")

    cycle()  # the first use opens what lives as long as the server (its worker pool)
    _ready(client)
    before = _counts(server, specimen)
    for _ in range(CYCLES):
        cycle()
    _ready(client)
    settled: list[dict[str, int]] = []

    def released(now: dict[str, int]) -> bool:
        # the process's descriptors in all may also fall: a socket an earlier test left to
        # the garbage collector closes meanwhile; none of the cycles' may stay
        return ({k: v for k, v in now.items() if k != "fds"}
                == {k: v for k, v in before.items() if k != "fds"}
                and now["fds"] <= before["fds"])

    def same() -> bool:
        settled.append(_counts(server, specimen))
        return released(settled[-1])

    try:
        wait_until(same, timeout=10)
    finally:
        print(f"{CYCLES} cycles: before {before}, after {settled[-1] if settled else None}")
    assert released(settled[-1])
