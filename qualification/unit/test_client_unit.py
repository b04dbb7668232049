"""MC-02, MC-03, AV-02 unit tests: the SSE decoder and the client's request shape (respx)."""

from __future__ import annotations

import asyncio
import gzip
import json

import httpx
import pytest
import respx
from hypothesis import given, settings
from hypothesis import strategies as st

from labfy_ref.errors import ModelUnavailable, ProtocolRefused
from labfy_ref.model import ClientLimits, LocalModelClient, parse_endpoint
from labfy_ref.model.sse import SSEDecoder, SSEError
from labfy_ref.protocol.strict_json import Defect
from labfy_ref.text import has_surrogate

ENDPOINT = parse_endpoint("http://127.0.0.1:43117")
HELLO = [{"role": "user", "content": "hello"}]


def _events(stream: bytes, cuts: list[int]) -> list[str]:
    decoder = SSEDecoder()
    out: list[str] = []
    last = 0
    for cut in [*sorted(set(cuts)), len(stream)]:
        out.extend(decoder.feed(stream[last:cut]))
        last = cut
    decoder.close()
    return out


@pytest.mark.req("MC-03")
@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"],
                                               blacklist_characters="\r\n"), max_size=20),
                max_size=6),
       st.sampled_from(["\n", "\r\n", "\r"]), st.lists(st.integers(0, 400), max_size=8))
def test_sse_events_survive_any_split_and_line_ending(
        payloads: list[str], newline: str, cuts: list[int]) -> None:
    stream = "".join(f"data: {p}{newline}{newline}" for p in payloads).encode()
    cuts = [c for c in cuts if c <= len(stream)]
    assert _events(stream, cuts) == payloads


@pytest.mark.req("MC-03")
def test_sse_crlf_split_between_its_two_bytes_at_every_place_loses_nothing() -> None:
    """A CR at the end of one read and its LF at the start of the next are one line end:
    the LF alone is dropped, never the character after it, wherever the cut falls."""
    stream = b"data: one\r\ndata: two\r\n\r\ndata: three\r\n\r\n"
    for cut in range(len(stream) + 1):
        assert _events(stream, [cut]) == ["one\ntwo", "three"], cut


@pytest.mark.req("MC-03")
def test_sse_comments_are_skipped_and_multi_line_data_joined() -> None:
    assert _events(b": keepalive\ndata: a\ndata: b\n\nevent: x\ndata: c\n\n", [3]) == [
        "a\nb", "c"]


@pytest.mark.req("MC-03")
@pytest.mark.parametrize("stream", [b"data: " + b"x" * 300_000, b"data: \xff\n\n",
                                    b"data: x\n" * 140_000])
def test_sse_refuses_unbounded_lines_events_and_bad_utf8(stream: bytes) -> None:
    with pytest.raises(SSEError):
        list(SSEDecoder().feed(stream))


@pytest.mark.req("MC-03")
def test_sse_refuses_a_stream_ending_inside_a_character() -> None:
    decoder = SSEDecoder()
    list(decoder.feed("data: é".encode()[:-1]))
    with pytest.raises(SSEError):
        decoder.close()


@respx.mock(assert_all_called=True)
@pytest.mark.req("MC-02")
def test_request_shape_has_no_ambient_auth_cookie_or_compression(
        respx_mock: respx.MockRouter) -> None:
    route = respx_mock.post("http://127.0.0.1:43117/v1/chat/completions").mock(
        return_value=httpx.Response(200, json={"choices": [{"message": {"content": "{}"},
                                                            "finish_reason": "stop"}]}))

    async def run() -> None:
        async with LocalModelClient(ENDPOINT, "m") as client:
            reply = await client.chat(HELLO, response_format={"type": "json_object"})
            assert reply.content == "{}"

    asyncio.run(run())
    request = route.calls.last.request
    assert "authorization" not in request.headers and "cookie" not in request.headers
    assert request.headers["accept-encoding"] == "identity"
    assert json.loads(request.content) == {"model": "m", "messages": HELLO, "stream": False,
                                           "response_format": {"type": "json_object"}}


@respx.mock
@pytest.mark.req("MC-03")
@pytest.mark.parametrize(
    ("response", "message"),
    [
        (httpx.Response(200, json={"nope": 1}), "provider reply is not a chat completion"),
        (httpx.Response(200, json={"choices": []}), "provider reply is not a chat completion"),
        (httpx.Response(200, content=b'{"a":1,"a":2}'), "provider reply is not valid JSON"),
        (httpx.Response(200, content=b"\xff\xfe"), "provider reply is not valid JSON"),
        (httpx.Response(200, content=b"x" * 2000), "reply exceeds 1024 bytes"),
        (httpx.Response(200, content=gzip.compress(b"{}"), headers={"Content-Encoding": "gzip"}),
         "provider used a content-encoding; only identity is accepted"),
        (httpx.Response(503), "provider answered HTTP 503 (model loading or overloaded)"),
    ],
)
def test_malformed_replies_are_unavailable_with_a_bounded_diagnostic(
        response: httpx.Response, message: str) -> None:
    respx.post("http://127.0.0.1:43117/v1/chat/completions").mock(return_value=response)

    async def run() -> str:
        async with LocalModelClient(ENDPOINT, "m",
                                    limits=ClientLimits(max_body_bytes=1024)) as client:
            with pytest.raises(ModelUnavailable) as caught:
                await client.chat(HELLO)
            return caught.value.message

    assert asyncio.run(run()) == message


@respx.mock
@pytest.mark.req("MC-03")
def test_a_connect_timeout_is_unavailable() -> None:
    respx.post("http://127.0.0.1:43117/v1/chat/completions").mock(
        side_effect=httpx.ConnectTimeout("slow"))

    async def run() -> str:
        async with LocalModelClient(ENDPOINT, "m") as client:
            with pytest.raises(ModelUnavailable) as caught:
                await client.chat(HELLO)
            return caught.value.message

    assert asyncio.run(run()) == "timed out (ConnectTimeout)"


#: Any text, lone surrogates (and, side by side, valid pairs) included. A list of
#: characters, not ``st.text(st.one_of(...))``: text() merges the two alphabets into
#: one and then almost never draws from the small surrogate range.
_ANY_TEXT = st.lists(st.one_of(st.characters(codec=None), st.characters(categories=["Cs"])),
                     max_size=12).map("".join)
CHAT_URL = "http://127.0.0.1:43117/v1/chat/completions"


async def _reply_content(response: httpx.Response, *, stream: bool) -> str:
    with respx.mock:
        respx.post(CHAT_URL).mock(return_value=response)
        async with LocalModelClient(ENDPOINT, "m") as client:
            if stream:
                return "".join([d.content async for d in client.stream_chat(HELLO)])
            return (await client.chat(HELLO)).content


@pytest.mark.req("AV-02", "PR-02", "MC-03")
@settings(deadline=None, max_examples=60)
@given(_ANY_TEXT, st.booleans())
def test_a_reply_is_its_text_or_a_lone_surrogate_refusal(text: str, stream: bool) -> None:
    """Providers escape what they send: a pair decodes to one character, a lone half is refused."""
    decoded = json.loads(json.dumps(text))  # json.dumps writes every surrogate as an escape
    if stream:
        chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": text},
                                         "finish_reason": None}]})
        response = httpx.Response(200, content=f"data: {chunk}\n\ndata: [DONE]\n\n".encode(),
                                  headers={"Content-Type": "text/event-stream"})
    else:
        envelope = json.dumps({"choices": [{"message": {"content": text},
                                            "finish_reason": "stop"}]})
        response = httpx.Response(200, content=envelope.encode())
    if not has_surrogate(decoded):
        assert asyncio.run(_reply_content(response, stream=stream)) == decoded
        return
    with pytest.raises(ProtocolRefused) as caught:
        asyncio.run(_reply_content(response, stream=stream))
    assert caught.value.defect == Defect.LONE_SURROGATE


@pytest.mark.req("MC-03")
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_reply_of_several_choices_is_its_first(stream: bool) -> None:
    """A server that answers more than the one choice asked for: the first is the reply."""
    if stream:
        chunk = json.dumps({"choices": [
            {"index": 0, "delta": {"content": "first"}, "finish_reason": None},
            {"index": 1, "delta": {"content": "second"}, "finish_reason": None}]})
        response = httpx.Response(200, content=f"data: {chunk}\n\ndata: [DONE]\n\n".encode(),
                                  headers={"Content-Type": "text/event-stream"})
    else:
        envelope = json.dumps({"choices": [
            {"message": {"content": "first"}, "finish_reason": "stop"},
            {"message": {"content": "second"}, "finish_reason": "stop"}]})
        response = httpx.Response(200, content=envelope.encode())
    assert asyncio.run(_reply_content(response, stream=stream)) == "first"


@respx.mock
@pytest.mark.req("AV-02", "MC-03")
def test_a_lone_surrogate_in_the_model_list_is_unavailable_not_a_refused_output() -> None:
    """Only a chat reply is model output; a broken ``/v1/models`` is the server's fault."""
    respx.get("http://127.0.0.1:43117/v1/models").mock(
        return_value=httpx.Response(200, content=b'{"data":[{"id":"m\\ud800"}]}'))

    async def run() -> str:
        async with LocalModelClient(ENDPOINT, "m") as client:
            with pytest.raises(ModelUnavailable) as caught:
                await client.list_models()
            return caught.value.message

    assert asyncio.run(run()) == "provider reply is not valid JSON"


@pytest.mark.req("AV-04", "MC-05")
def test_agent_timeout_is_the_whole_call_deadline() -> None:
    """``--agent-timeout 2``: two seconds for the whole call, a connect at most 5 s of it."""
    assert ClientLimits.with_timeout(2) == ClientLimits(connect_timeout=2, read_timeout=2,
                                                        total_timeout=2)
    assert ClientLimits.with_timeout(90).connect_timeout == 5
