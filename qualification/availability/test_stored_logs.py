"""BR-07 against logs edited on disk: JSON of the wrong shape, FIFOs, unknown providers.

Found by attacking the build as an outsider: a session log that is valid JSON
but holds a settings event without settings, a message without a role, a
5,000-digit number or 10^5 nested brackets made every bridge read route answer
500 (and the whole session list with it); a FIFO named like a log froze the
event loop. A log is now checked before it is used: malformed → 409
``SESSION_INVALID`` for that session, and the list shows it with its error.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from qualification.conftest import ServerFactory
from qualification.harness import ApiClient, LiveServer

GOOD_SETTINGS = {"model": "engine:demo:deterministic-demo", "permission_mode": "read-only"}
CORRUPT: dict[str, list[Any]] = {
    "settings-number": [{"settings": 5}],
    "settings-null": [{"settings": None}],
    "permission-god": [{"settings": {**GOOD_SETTINGS, "permission_mode": "god"}}],
    "model-number": [{"settings": {**GOOD_SETTINGS, "model": 5}}],
    "settings-event-text": [{}, {"kind": "settings", "settings": "xx", "at": "z"}],
    "settings-event-bare": [{}, {"kind": "settings", "at": "z"}],
    "message-no-role": [{}, {"kind": "message", "text": "hi", "at": "z"}],
    "message-no-text": [{}, {"kind": "message", "role": "user", "at": "z"}],
    "message-text-number": [{}, {"kind": "message", "role": "user", "text": 5, "at": "z"}],
    "tool-arguments-list": [{}, {"kind": "tool", "call_id": "c", "tool_id": "t",
                                 "arguments": [], "status": "ok", "result": {}}],
    "kind-number": [{}, {"kind": 7}],
}
RAW_LINES = {
    "digits": '{"kind":"note","n":' + "9" * 5000 + "}",
    "nesting": '{"kind":"note","x":' + "[" * 100_000 + "]" * 100_000 + "}",
}


def _plant(server: LiveServer, client: ApiClient, lines: list[str]) -> str:
    sid: str = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    path = server.state.workspace.sessions_dir / f"{sid}.jsonl"
    path.write_text("".join(line.replace("SID", sid) + "\n" for line in lines))
    return sid


def _header(extra: dict[str, Any]) -> str:
    header = {"kind": "header", "version": 1, "session_id": "SID", "created_at": "t",
              "settings": GOOD_SETTINGS, **extra}
    return json.dumps(header)


def _all_answer_409(client: ApiClient, sid: str) -> None:
    listed = client.get("/api/cordis/sessions")
    assert listed.status_code == 200, listed.text
    entry = next(s for s in listed.json()["sessions"] if s["id"] == sid)
    assert entry["error"]["code"] == "SESSION_INVALID"
    for response in (client.get(f"/api/cordis/sessions/{sid}"),
                     client.post(f"/api/cordis/sessions/{sid}/messages", {"text": "hi"}),
                     client.patch(f"/api/cordis/sessions/{sid}/settings",
                                  {"permission_mode": "read-only"})):
        assert response.status_code == 409, response.text
        assert response.json()["error"]["code"] == "SESSION_INVALID"


@pytest.mark.req("BR-07", "AV-02", "AV-06")
@pytest.mark.parametrize("name", sorted(CORRUPT))
def test_a_log_of_the_wrong_shape_is_session_invalid_never_500(
        specimen: Path, server_factory: ServerFactory, name: str) -> None:
    server = server_factory(specimen, bridge=True)
    client = server.client()
    header, *events = CORRUPT[name]
    sid = _plant(server, client, [_header(header), *(json.dumps(e) for e in events)])
    _all_answer_409(client, sid)


@pytest.mark.req("BR-07", "AV-02")
@pytest.mark.parametrize("name", sorted(RAW_LINES))
def test_numbers_and_nesting_past_any_bound_are_session_invalid(
        specimen: Path, server_factory: ServerFactory, name: str) -> None:
    server = server_factory(specimen, bridge=True)
    client = server.client()
    sid = _plant(server, client, [_header({}), RAW_LINES[name]])
    _all_answer_409(client, sid)


@pytest.mark.req("BR-07", "AV-01")
def test_a_fifo_named_like_a_log_never_blocks_the_server(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    client = server.client()
    sid = "ses_01M8P7AAAAAAAAAAAAAAAAAAAA"
    os.mkfifo(server.state.workspace.sessions_dir / f"{sid}.jsonl")
    try:
        response = client.get(f"/api/cordis/sessions/{sid}", timeout=5)
    except httpx.TimeoutException:
        pytest.fail("the event loop blocked opening a FIFO")
    assert response.status_code == 409
    assert client.get("/api/health", timeout=5).status_code == 200


@pytest.mark.req("BR-10", "BR-07")
def test_a_log_naming_another_provider_is_refused_at_send_time(
        specimen: Path, server_factory: ServerFactory) -> None:
    server = server_factory(specimen, bridge=True)
    client = server.client()
    settings = {**GOOD_SETTINGS, "model": "engine:evil:x"}
    sid = _plant(server, client, [_header({"settings": settings})])
    assert client.get(f"/api/cordis/sessions/{sid}").status_code == 200
    sent = client.post(f"/api/cordis/sessions/{sid}/messages", {"text": "hi"})
    assert sent.status_code == 422
    assert sent.json()["error"]["code"] == "MODEL_NOT_FOUND"
