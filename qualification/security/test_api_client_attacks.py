"""Outsider attacks on the API-client surface (BR-13, BR-14, SV-08) that the build withstands.

Each test is a regression found by attacking a real server over loopback: a
transient session's id, learned from the ``chatcmpl-`` id a stream hands out,
names nothing on any session route; and a client that goes away at the rawest
moments (a half-sent body, a close while the model is being asked) leaves no turn,
no file, and no ledger record but the one CANCELLED call that began.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from fake_provider import Answer, Scenario
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import (
    LAUNCH_CODE,
    bearer_client,
    reference_engine,
    session_files,
    wait_until,
)

MODEL = "engine:local:fake-model"
SLOW = Answer(content=json.dumps({"type": "final", "text": "x" * 200}), chunk_chars=2,
              chunk_delay=0.05)  # about five seconds of text: the turn is surely running


@pytest.mark.req("BR-13", "SV-08")
def test_a_transient_id_names_nothing_on_the_session_routes_while_its_turn_runs(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    """The ``tmp_`` id inside ``chatcmpl-<id>`` cannot be read, steered, cancelled or deleted."""
    provider = provider_factory(Scenario(name="slow", answers=(SLOW,),
                                         when_exhausted="repeat_last"))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    body = {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "q"}]}
    with bearer_client(server) as http, \
            http.stream("POST", "/api/cordis/v1/chat/completions", json=body) as stream:
        lines = stream.iter_lines()
        session_id = json.loads(next(lines).removeprefix("data: "))["id"].removeprefix(
            "chatcmpl-")
        assert session_id.startswith("tmp_") and reference_engine(server).retained_turns == 1
        base = f"/api/cordis/sessions/{session_id}"
        attempts = [("GET", base, None), ("DELETE", base, None),
                    ("POST", f"{base}/cancel", None),
                    ("POST", f"{base}/messages", {"text": "steer", "headless": True}),
                    ("PATCH", f"{base}/settings", {"permission_mode": "workspace-write"})]
        for method, path, payload in attempts:
            answer = http.request(method, path, json=payload)
            assert (answer.status_code, answer.json()["error"]["code"]) == (
                404, "SESSION_NOT_FOUND"), (method, path, answer.text)
        assert http.get("/api/cordis/sessions").json()["sessions"] == []
        rest = list(lines)
    assert "data: [DONE]" in rest and not any('"error"' in line for line in rest), rest
    assert "".join(json.loads(line.removeprefix("data: "))["choices"][0]["delta"].get(
        "content", "") for line in rest if line.startswith("data: {")) == "x" * 200
    wait_until(lambda: reference_engine(server).retained_turns == 0)
    assert session_files(specimen) == []


def _head(port: int, length: int) -> bytes:
    return (f"POST /api/cordis/v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {LAUNCH_CODE}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode()


@pytest.mark.req("BR-13", "BR-14")
@pytest.mark.parametrize("stream", [True, False])
def test_a_client_gone_at_the_rawest_moments_leaves_no_turn_file_or_phantom_record(
        specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
        stream: bool) -> None:
    """A half-sent body starts nothing; a close during the model call is one CANCELLED record."""
    provider = provider_factory(Scenario(name="slow", answers=(SLOW,),
                                         when_exhausted="repeat_last"))
    server = server_factory(specimen, bridge=True, **local_agent(provider.base_url))
    engine = reference_engine(server)
    body = json.dumps({"model": MODEL, "stream": stream,
                       "messages": [{"role": "user", "content": "q"}]}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as half:
        half.sendall(_head(server.port, len(body)) + body[:10])  # then gone mid-body
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as whole:
        whole.sendall(_head(server.port, len(body)) + body)
        wait_until(lambda: len(provider.chat_requests()) == 1)  # then gone during the call
    wait_until(lambda: engine.retained_turns == 0)
    with bearer_client(server) as http:
        wait_until(lambda: len(http.get("/api/cordis/usage").json()["usage"]) >= 1)
        records = http.get("/api/cordis/usage").json()["usage"]
    assert len(provider.chat_requests()) == 1, "the half-sent body reached no model"
    assert [(r["outcome"], r["caller"], r["prompt_tokens"]) for r in records] == [
        ("CANCELLED", "transient", None)], records
    assert engine.retained_turns == 0 and session_files(specimen) == []
