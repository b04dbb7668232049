"""BR-20, BR-13: what Open WebUI 0.12.4 sent, replayed request by request.

``../shared/clients/openwebui-0.12.4.jsonl`` holds 28 distinct requests that Open
WebUI (PyPI ``open-webui`` 0.12.4, default settings) sent to ``serve --bridge``'s
``/api/cordis/v1`` while a person used it: the connection check, chats with its
36 built-in ``tools``, follow-ups, its background *task* requests, chat-control
fields (``top_k``, ``reasoning_effort``), an image, and the browser's CORS
preflight of its "direct connections" mode. Each is sent again, headers and body
as recorded (the bearer and port are this server's), to a server started the way
it was recorded: the bridge on, the demo agent. What must come back is what a
client can use: every chat 200 with a stream an SSE client parses to ``[DONE]``,
the model list 200; only the image part and "Continue Response" (a transcript
ending with the assistant's message) are refused, in words, naming the part; the
preflight stays refused (CORS is never enabled, SV-04).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from qualification.conformance.sse import completion_chunks, delta_text
from qualification.harness import LAUNCH_CODE, LiveServer

RECORDING = Path(__file__).resolve().parents[2].parent / "shared" / "clients" / \
    "openwebui-0.12.4.jsonl"
#: Headers a replay sets itself (the transport's, or this server's values).
_OWN = {"host", "content-length", "authorization", "connection", "accept-encoding"}


def _recorded() -> list[dict[str, Any]]:
    if not RECORDING.is_file():
        return []
    return [json.loads(line) for line in RECORDING.read_text("utf-8").splitlines() if line]


REQUESTS = _recorded()
pytestmark = pytest.mark.skipif(not REQUESTS, reason=f"the recording {RECORDING} is absent "
                                                     "(../shared/clients/ beside the checkout)")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The server as recorded: the bridge on, the demo agent, the specimen workspace."""
    from labfy_ref.workspace import init_workspace  # noqa: PLC0415

    root = tmp_path_factory.mktemp("owui") / "ws"
    init_workspace(root, specimen=True)
    live = LiveServer(root, bridge=True).start()
    yield live
    live.stop()


def _send(server: LiveServer, request: dict[str, Any]) -> httpx.Response:
    headers = {name: value for name, value in request["headers"].items()
               if name.lower() not in _OWN}
    if "authorization" in {name.lower() for name in request["headers"]}:
        headers["Authorization"] = f"Bearer {LAUNCH_CODE}"
    body = request["body"]
    with httpx.Client(base_url=server.url, trust_env=False, timeout=60) as http:
        return http.request(request["method"], request["path"], headers=headers,
                            content=None if body is None else json.dumps(body).encode())


def _continues(request: dict[str, Any]) -> bool:
    """Open WebUI's "Continue Response": the transcript ends with the assistant's message."""
    messages = (request["body"] or {}).get("messages", [])
    return bool(messages) and messages[-1]["role"] == "assistant"


def _is_image(request: dict[str, Any]) -> bool:
    return any(isinstance(m.get("content"), list) and any(
        part.get("type") != "text" for part in m["content"])
        for m in (request["body"] or {}).get("messages", []))


@pytest.mark.req("BR-20", "BR-13")
def test_the_recording_is_what_its_readme_says() -> None:
    methods = [r["method"] for r in REQUESTS]
    assert len(REQUESTS) == 28 and methods.count("OPTIONS") == 1 and methods.count("GET") == 1
    chats = [r["body"] for r in REQUESTS if r["method"] == "POST"]
    assert sum("tools" in body for body in chats) >= 3, "the default chats carry tools"
    assert sum(_is_image(r) for r in REQUESTS) == 1 and sum(_continues(r) for r in REQUESTS) == 1


@pytest.mark.req("BR-20", "BR-13")
@pytest.mark.parametrize("number", [n for n, r in enumerate(REQUESTS) if r["method"] == "POST"
                                    and not _is_image(r) and not _continues(r)])
def test_each_recorded_chat_is_answered_as_the_client_parses_it(server: LiveServer,
                                                                 number: int) -> None:
    request = REQUESTS[number]
    answer = _send(server, request)
    assert answer.status_code == 200, answer.text
    body = request["body"]
    if body.get("stream"):
        assert answer.headers["content-type"].startswith("text/event-stream")
        chunks, done = completion_chunks(answer.text)
        assert done, "the stream ends data: [DONE]"
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
        assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
        finished = [c for c in chunks if c.get("choices")
                    and c["choices"][0]["finish_reason"] == "stop"]
        assert len(finished) == 1 and delta_text(chunks).strip()
        with_usage = [c for c in chunks if "usage" in c]
        assert with_usage, "usage on the finish chunk or in its own chunk"
        if (body.get("stream_options") or {}).get("include_usage"):
            assert chunks[-1]["choices"] == [] and "usage" in chunks[-1]
    else:
        completion = answer.json()
        assert completion["object"] == "chat.completion"
        assert completion["choices"][0]["message"]["content"].strip()
        assert "usage" in completion


@pytest.mark.req("BR-20", "BR-13")
def test_the_image_attachment_is_refused_in_words_naming_the_part(server: LiveServer) -> None:
    [request] = [r for r in REQUESTS if _is_image(r)]
    answer = _send(server, request)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["param"] == "messages.0.content.1"
    assert "text only" in error["message"] and error["type"] == "invalid_request_error"


@pytest.mark.req("BR-20", "BR-13")
def test_continue_response_is_refused_in_words_naming_the_last_message(
        server: LiveServer) -> None:
    """The engine answers a user's message; it does not continue its own (say so)."""
    [request] = [r for r in REQUESTS if _continues(r)]
    answer = _send(server, request)
    assert answer.status_code == 422
    error = answer.json()["error"]
    assert error["param"] == f"messages.{len(request['body']['messages']) - 1}"
    assert "does not continue" in error["message"]


@pytest.mark.req("BR-20", "BR-10", "SV-04")
def test_the_connection_check_lists_the_models_and_the_preflight_stays_refused(
        server: LiveServer) -> None:
    [listing] = [r for r in REQUESTS if r["method"] == "GET"]
    models = _send(server, listing)
    assert models.status_code == 200
    assert [m["id"] for m in models.json()["data"]] == ["engine:demo:deterministic-demo"]
    [preflight] = [r for r in REQUESTS if r["method"] == "OPTIONS"]
    refused = _send(server, preflight)
    assert refused.status_code >= 400
    assert not any(name.lower().startswith("access-control-") for name in refused.headers), \
        "CORS is never enabled: Open WebUI's direct connections mode cannot work"
