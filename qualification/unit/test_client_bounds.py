"""MC-02, MC-03, AV-02, BR-14: the model client's statuses, bounds and envelope reading, exactly.

Each bound is pinned on both sides (reply bytes, stream bytes and events, token
counts), every status class is answered by its own diagnostic, and the
envelope's fields are read as documented (``reasoning_content`` before
``reasoning``, a missing content as ""). The provider is answered by respx, as
in test_client_unit.py, so the mutation run of QR-04 can run these per mutant.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import httpx
import pytest
import respx

from labfy_ref import __version__
from labfy_ref.errors import ModelUnavailable, ProtocolRefused, RuntimeRefused
from labfy_ref.model import ClientLimits, LocalModelClient, parse_endpoint
from labfy_ref.model.client import (
    MAX_REPORTED_TOKENS,
    Availability,
    ChatReply,
    Sampling,
    SlotQueue,
    StreamDelta,
)
from labfy_ref.protocol.exchange import Usage
from labfy_ref.protocol.strict_json import Defect

ENDPOINT = parse_endpoint("http://127.0.0.1:43117")
BASE = "http://127.0.0.1:43117"
CHAT = f"{BASE}/v1/chat/completions"
HELLO = [{"role": "user", "content": "hello"}]
T = TypeVar("T")


def _run(call: Callable[[LocalModelClient], Awaitable[T]], **options: Any) -> T:
    async def run() -> T:
        async with LocalModelClient(ENDPOINT, "m", **options) as client:
            return await call(client)
    return asyncio.run(run())


def _unavailable(call: Callable[[LocalModelClient], Awaitable[Any]], **options: Any) -> str:
    async def expect(client: LocalModelClient) -> str:
        with pytest.raises(ModelUnavailable) as caught:
            await call(client)
        return caught.value.message
    return _run(expect, **options)


async def _chat(client: LocalModelClient) -> ChatReply:
    return await client.chat(HELLO)


async def _stream(client: LocalModelClient) -> list[StreamDelta]:
    return [delta async for delta in client.stream_chat(HELLO)]


def _sse(*events: Any, done: bool = True) -> bytes:
    lines = [f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n" for e in events]
    return ("".join(lines) + ("data: [DONE]\n\n" if done else "")).encode()


def _chunk(content: str = "", **delta: Any) -> dict[str, Any]:
    return {"choices": [{"delta": {"content": content, **delta}, "finish_reason": None}]}


@pytest.mark.req("MC-03", "AV-04")
def test_the_default_limits_and_the_operators_timeout() -> None:
    limits = ClientLimits()
    assert (limits.connect_timeout, limits.read_timeout, limits.total_timeout,
            limits.max_body_bytes, limits.max_stream_bytes, limits.max_stream_events,
            limits.max_connections) == (5.0, 60.0, 300.0, 1024 * 1024, 4 * 1024 * 1024,
                                        100_000, 8)
    assert ClientLimits.with_timeout(3) == ClientLimits(3, 3, 3)
    assert ClientLimits.with_timeout(90) == ClientLimits(5.0, 90, 90)


@respx.mock
@pytest.mark.req("MC-02")
@pytest.mark.parametrize(("status", "message"), [
    (300, "provider answered HTTP 300; redirects are never followed"),
    (302, "provider answered HTTP 302; redirects are never followed"),
    (399, "provider answered HTTP 399; redirects are never followed"),
    (201, "provider answered HTTP 201"), (299, "provider answered HTTP 299"),
    (400, "provider answered HTTP 400"), (500, "provider answered HTTP 500"),
    (502, "provider answered HTTP 502"), (504, "provider answered HTTP 504"),
    (503, "provider answered HTTP 503 (model loading or overloaded)"),
])
def test_every_status_but_200_is_unavailable_with_its_reason(status: int, message: str) -> None:
    respx.post(CHAT).mock(return_value=httpx.Response(
        status, json={"choices": []}, headers={"Location": f"{BASE}/elsewhere"}))
    assert _unavailable(_chat) == message
    assert _unavailable(_stream) == message


@respx.mock
@pytest.mark.req("MC-02")
def test_identity_encoding_said_aloud_is_accepted_any_other_refused() -> None:
    body = {"choices": [{"message": {"content": "x"}}]}
    # names sorting before "identity" and after it: any name but identity is refused
    refused = ("br", "snappy", "x-gzip")
    respx.post(CHAT).mock(side_effect=[
        httpx.Response(200, json=body, headers={"Content-Encoding": "identity"}),
        *(httpx.Response(200, content=b"{}", headers={"Content-Encoding": name})
          for name in refused)])
    assert _run(_chat).content == "x"
    for _ in refused:
        assert _unavailable(_chat) == \
            "provider used a content-encoding; only identity is accepted"


@pytest.mark.req("MC-05")
def test_a_queue_of_no_waiting_places_is_a_queue_a_negative_one_is_refused() -> None:
    """``max_waiting=0``: every call beyond the slots is MODEL_BUSY at once (allowed);
    fewer than one slot or a negative queue is a mistake of the caller."""
    assert SlotQueue(1, max_waiting=0).max_waiting == 0
    for slots, waiting in ((1, -1), (0, 0), (0, 4)):
        with pytest.raises(ValueError, match="at least one slot"):
            SlotQueue(slots, max_waiting=waiting)

    async def busy_at_once() -> str:
        queue = SlotQueue(1, max_waiting=0)
        async with queue.slot():
            with pytest.raises(RuntimeRefused) as caught:
                async with queue.slot():
                    pass
            return caught.value.code.value

    assert asyncio.run(busy_at_once()) == "MODEL_BUSY"


@respx.mock
@pytest.mark.req("MC-02")
def test_only_our_own_key_is_ever_sent_and_no_cookie_is_kept() -> None:
    route = respx.post(CHAT).mock(return_value=httpx.Response(
        200, json={"choices": [{"message": {"content": "x"}}]},
        headers={"Set-Cookie": "s=1; Domain=127.0.0.1; Path=/"}))

    async def twice(client: LocalModelClient) -> None:
        await client.chat(HELLO)
        await client.chat(HELLO)

    _run(twice, api_key="fresh-key")
    for call in route.calls:
        assert call.request.headers["authorization"] == "Bearer fresh-key"
        assert "cookie" not in call.request.headers
        assert call.request.headers["user-agent"] == f"labfy-ref/{__version__}"
        assert call.request.headers["accept"] == "application/json"
        assert call.request.headers["content-type"] == "application/json"
    _run(_chat)
    assert "authorization" not in route.calls.last.request.headers


@respx.mock
@pytest.mark.req("MC-03")
def test_a_reply_of_exactly_the_body_bound_is_read_one_byte_more_is_not() -> None:
    body = b'{"choices":[{"message":{"content":"' + b"x" * 20 + b'"}}]}'
    respx.post(CHAT).mock(side_effect=[httpx.Response(200, content=body),
                                       httpx.Response(200, content=body + b" ")])
    limits = ClientLimits(max_body_bytes=len(body))
    assert _run(_chat, limits=limits).content == "x" * 20
    assert _unavailable(_chat, limits=limits) == f"reply exceeds {len(body)} bytes"


@respx.mock
@pytest.mark.req("MC-03", "AV-02", "BR-14")
def test_a_whole_reply_is_read_field_by_field() -> None:
    usage = {"prompt_tokens": 7, "completion_tokens": 3,
             "prompt_tokens_details": {"cached_tokens": 2}}
    respx.post(CHAT).mock(side_effect=[
        httpx.Response(200, json={"choices": [{"message": {
            "content": None, "reasoning_content": "r1", "reasoning": "r2"},
            "finish_reason": "length"}], "usage": usage}),
        httpx.Response(200, json={"choices": [{"message": {"content": "c", "reasoning": "r2"}}],
                                  "usage": {"prompt_tokens": -1, "completion_tokens": True,
                                            "prompt_tokens_details": 5}}),
        httpx.Response(200, json={"choices": [{"message": {"content": 5}}]}),
        httpx.Response(200, json={"choices": [{"message": {"content": "c",
                                                           "reasoning": ["r"]}}]}),
        httpx.Response(200, json={"choices": [{"message": "text"}]}),
        httpx.Response(200, content=b'{"choices":[{"message":{"content":"a\\ud800"}}]}'),
        httpx.Response(200, content=b'{"choices":[{"message":{"content":"a"}}]} x'),
    ])
    assert _run(_chat) == ChatReply("", "r1", "length", Usage(7, 3, 2))
    assert _run(_chat) == ChatReply("c", "r2", None, Usage())
    for _ in range(3):
        assert _unavailable(_chat) == "provider reply is not a chat completion"

    async def refused(client: LocalModelClient) -> str:
        with pytest.raises(ProtocolRefused) as caught:
            await client.chat(HELLO)
        return caught.value.defect

    assert _run(refused) == Defect.LONE_SURROGATE.value
    assert _unavailable(_chat) == "provider reply is not valid JSON"


@pytest.mark.req("BR-14")
@pytest.mark.parametrize(("count", "kept"), [
    (0, True), (1, True), (2**40, True), (2**40 + 1, False), (-1, False), (True, False),
    (1.0, False), ("1", False), (None, False),
])
def test_a_token_count_is_kept_only_when_plausible(count: Any, kept: bool) -> None:
    assert MAX_REPORTED_TOKENS == 2**40
    respx_body = {"choices": [{"message": {"content": "x"}}],
                  "usage": {"prompt_tokens": count, "completion_tokens": count,
                            "prompt_tokens_details": {"cached_tokens": count}}}
    with respx.mock:
        respx.post(CHAT).mock(return_value=httpx.Response(200, json=respx_body))
        usage = _run(_chat).usage
    expected = count if kept else None
    assert usage == Usage(expected, expected, expected)


@respx.mock
@pytest.mark.req("MC-03", "BR-14")
def test_a_stream_is_read_delta_by_delta_until_done() -> None:
    usage = {"choices": [], "usage": {"prompt_tokens": 4, "completion_tokens": 2}}
    stream = _sse(_chunk("he"), _chunk(reasoning_content="r1", reasoning="r2"),
                  _chunk(reasoning="r3"), {"choices": []},
                  {"choices": [{"delta": {}, "finish_reason": "stop"}]},
                  {"choices": [{"finish_reason": None}]}, usage)
    route = respx.post(CHAT).mock(return_value=httpx.Response(
        200, content=stream + b"data: ignored after done\n\n"))
    assert _run(_stream) == [StreamDelta("he"), StreamDelta(reasoning="r1"),
                             StreamDelta(reasoning="r3"), StreamDelta(finish_reason="stop"),
                             StreamDelta(), StreamDelta(usage=Usage(4, 2))]
    sent = json.loads(route.calls.last.request.content)
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert route.calls.last.request.headers["accept"] == "text/event-stream"


@respx.mock
@pytest.mark.req("MC-03")
def test_a_stream_of_exactly_its_byte_and_event_bounds_is_read_one_more_is_not() -> None:
    stream = _sse(_chunk("a"), _chunk("b"))
    respx.post(CHAT).mock(side_effect=[httpx.Response(200, content=stream)] * 2 + [
        httpx.Response(200, content=stream + b" ")] + [httpx.Response(200, content=stream)])
    exact = ClientLimits(max_stream_bytes=len(stream), max_stream_events=2)
    assert [d.content for d in _run(_stream, limits=exact)] == ["a", "b"]
    assert [d.content for d in _run(_stream, limits=exact)] == ["a", "b"]
    assert _unavailable(_stream, limits=exact) == f"stream exceeds {len(stream)} bytes"
    assert _unavailable(_stream, limits=ClientLimits(max_stream_events=1)) == (
        "stream has too many events")


@respx.mock
@pytest.mark.req("MC-03", "AV-02")
def test_a_broken_stream_is_unavailable_and_a_surrogate_is_the_models_fault() -> None:
    respx.post(CHAT).mock(side_effect=[
        httpx.Response(200, content=_sse(_chunk("a"), done=False)),
        httpx.Response(200, content=_sse('{"choices":[{"delta":{"content":5}}]}')),
        httpx.Response(200, content=_sse('{"choices":[{"delta":{"content":"a"}}]} x')),
        httpx.Response(200, content=_sse('{"nope":1}')),
        httpx.Response(200, content=_sse('{"choices":[{"delta":{"reasoning":7}}]}')),
        httpx.Response(200, content=_sse("")), httpx.Response(200, content=_sse("1")),
        httpx.Response(200, content=_sse("[DONE ]")),
        httpx.Response(200, content=_sse('{"choices":[{"delta":{"content":"a\\udc00"}}]}')),
        httpx.Response(200, content=b"data: \xff\n\n"),
    ])
    assert _unavailable(_stream) == "stream ended before [DONE]"
    for _ in range(7):  # only the exact "[DONE]" ends a stream
        assert _unavailable(_stream) == "provider sent a malformed stream chunk"

    async def refused(client: LocalModelClient) -> str:
        with pytest.raises(ProtocolRefused) as caught:
            await _stream(client)
        return caught.value.defect

    assert _run(refused) == Defect.LONE_SURROGATE.value
    assert _unavailable(_stream) == "event stream is not valid UTF-8"  # the SSE decoder's


@respx.mock
@pytest.mark.req("MC-03")
@pytest.mark.parametrize(("error", "message"), [
    (httpx.ConnectError("no"), "connection refused or failed"),
    (httpx.ConnectTimeout("slow"), "timed out (ConnectTimeout)"),
    (httpx.ReadTimeout("slow"), "timed out (ReadTimeout)"),
    (httpx.RemoteProtocolError("bad"), "transport error (RemoteProtocolError)"),
])
def test_transport_failures_are_named_by_kind(error: Exception, message: str) -> None:
    respx.post(CHAT).mock(side_effect=error)
    assert _unavailable(_chat) == message
    assert _unavailable(_stream) == message


@respx.mock
@pytest.mark.req("MC-02", "MC-05")
def test_probe_checks_health_then_that_our_model_is_served() -> None:
    served = [{"id": f"model-{i}"} for i in range(300)]
    respx.get(f"{BASE}/health").mock(side_effect=[
        httpx.Response(200, json={"status": "ok"}), httpx.Response(200, json={"status": "ok"}),
        httpx.Response(200, json={"status": "ok"}), httpx.Response(500, json={}),
        httpx.Response(200, json={"status": "ok"})])
    respx.get(f"{BASE}/v1/models").mock(side_effect=[
        httpx.Response(200, json={"data": [{"id": "x"}, {"id": "m"}]}),
        httpx.Response(200, json={"data": served}), httpx.Response(200, json={"data": []}),
        httpx.Response(200, json={"models": []})])

    async def probe(client: LocalModelClient) -> Availability:
        return await client.probe()

    assert _run(probe) == Availability(True, "ready", ("x", "m"))
    missing = _run(probe)
    assert missing.available is False and len(missing.models) == 256
    assert missing.diagnostic == ("model 'm' is not served (served: model-0, model-1, model-2, "
                                  "model-3, model-4)")
    assert _run(probe) == Availability(True, "ready", ())
    assert _run(probe) == Availability(False, "provider answered HTTP 500")
    assert _run(probe) == Availability(False, "provider model list is malformed")


@respx.mock
@pytest.mark.req("MC-02", "PR-06")
def test_the_request_body_carries_exactly_what_was_asked() -> None:
    route = respx.post(CHAT).mock(return_value=httpx.Response(
        200, json={"choices": [{"message": {"content": "x"}}]}))

    async def ask(client: LocalModelClient) -> None:
        await client.chat(HELLO, response_format={"type": "json_object"}, max_tokens=12)

    _run(ask, sampling=Sampling(temperature=0.0, seed=7, repeat_penalty=1.1))
    assert json.loads(route.calls.last.request.content) == {
        "model": "m", "messages": HELLO, "stream": False,
        "response_format": {"type": "json_object"}, "max_tokens": 12, "temperature": 0.0,
        "seed": 7, "repeat_penalty": 1.1}


@respx.mock
@pytest.mark.req("MC-03")
@pytest.mark.parametrize("room", [900, 950])
def test_after_done_the_rest_is_drained_up_to_the_stream_bound_only(room: int) -> None:
    # The connection goes back to the pool only once its reply is read; a server that keeps
    # sending after [DONE] is read no further than the stream's byte bound allows: with
    # ``room`` bytes left, ceil(room / 100) reads of 100 bytes, not one more.
    head = _sse(_chunk("a"))
    pulled: list[int] = []

    async def endless() -> AsyncIterator[bytes]:
        yield head
        while True:
            pulled.append(1)
            yield b"x" * 100

    respx.post(CHAT).mock(return_value=httpx.Response(200, content=endless()))
    limits = ClientLimits(max_stream_bytes=len(head) + room, total_timeout=10)
    assert [d.content for d in _run(_stream, limits=limits)] == ["a"]
    assert len(pulled) == -(-room // 100)
