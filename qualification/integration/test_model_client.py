"""MC-02, MC-03, AV-02, AV-04: LocalModelClient against the real fake provider."""

from __future__ import annotations

import asyncio
import http.server
import json
import socket
import threading
import time
from collections.abc import Awaitable, Callable

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.errors import ErrorCode, ModelUnavailable, ProtocolRefused
from labfy_ref.model import (
    ClientLimits,
    LocalModelClient,
    Sampling,
    StreamDelta,
    Usage,
    parse_endpoint,
)
from labfy_ref.protocol import bound_action_schema
from labfy_ref.protocol.strict_json import Defect
from labfy_ref.tools import default_catalog
from qualification.conftest import ProviderFactory, client_for, scenario

HELLO = [{"role": "user", "content": "hello"}]


@pytest.mark.req("MC-02")
def test_plain_and_streamed_completions_reach_only_the_chat_path(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))

    async def run() -> tuple[str, str, str]:
        async with client_for(provider) as client:
            plain = await client.chat(HELLO)
            pieces = [d async for d in client.stream_chat(HELLO)]
        return (plain.content, "".join(p.content for p in pieces),
                "".join(p.reasoning for p in pieces))

    plain, streamed, reasoning = asyncio.run(run())
    assert json.loads(plain)["tool_id"] == "workspace.list_objects"
    assert json.loads(streamed)["text"].endswith("Ünïcödé ✓ 𝄞")
    assert reasoning == "Exposed reasoning from the provider."
    assert [(r.method, r.path) for r in provider.requests] == [
        ("POST", "/v1/chat/completions"), ("POST", "/v1/chat/completions")]


@pytest.mark.req("MC-02", "PR-05")
def test_the_action_schema_is_sent_as_response_format(provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies('{"type":"final","text":"x"}'))
    schema = bound_action_schema(default_catalog())
    response_format = {"type": "json_schema",
                       "json_schema": {"name": "action", "strict": True, "schema": schema}}

    async def run() -> None:
        async with client_for(provider) as client:
            await client.chat(HELLO, response_format=response_format)

    asyncio.run(run())
    sent = provider.chat_requests()[0].json()
    assert sent["response_format"]["json_schema"]["schema"] == schema


@pytest.mark.req("MC-02")
def test_probe_reports_loading_then_ready_using_health_and_models(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("loading-then-ready"))

    async def run() -> list[tuple[bool, str]]:
        async with client_for(provider) as client:
            return [((a := await client.probe()).available, a.diagnostic) for _ in range(3)]

    results = asyncio.run(run())
    assert results[0][0] is False and "503" in results[0][1]
    assert results[1][0] is False
    assert results[2] == (True, "ready")
    assert {r.path for r in provider.requests} == {"/health", "/v1/models"}


@pytest.mark.req("MC-02")
def test_probe_says_when_the_configured_model_is_not_served(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("read-then-final"))

    async def run() -> str:
        async with client_for(provider, model="other") as client:
            availability = await client.probe()
            assert not availability.available
            return availability.diagnostic

    assert asyncio.run(run()) == "model 'other' is not served (served: fake-model)"


def _failures(provider_scenario: Scenario, count: int, *, stream: bool,
              provider_factory: ProviderFactory,
              limits: ClientLimits | None = None) -> list[str]:
    provider = provider_factory(provider_scenario)

    async def run() -> list[str]:
        messages = []
        async with client_for(provider, limits=limits) as client:
            for _ in range(count):
                with pytest.raises(ModelUnavailable) as caught:
                    if stream:
                        _ = [d async for d in client.stream_chat(HELLO)]
                    else:
                        await client.chat(HELLO)
                assert len(caught.value.message) <= 300
                messages.append(caught.value.message)
        return messages

    return asyncio.run(run())


@pytest.mark.req("MC-03")
def test_an_oversized_body_and_an_oversized_stream_are_unavailable(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(scenario("oversized"))

    async def run() -> list[str]:
        out = []
        async with client_for(provider) as client:
            with pytest.raises(ModelUnavailable) as body:
                await client.chat(HELLO)
            out.append(body.value.message)
            with pytest.raises(ModelUnavailable) as stream:
                _ = [d async for d in client.stream_chat(HELLO)]
            out.append(stream.value.message)
        return out

    assert asyncio.run(run()) == ["reply exceeds 1048576 bytes", "stream exceeds 4194304 bytes"]


@pytest.mark.req("MC-03")
def test_a_stream_without_done_or_cut_mid_way_is_unavailable(
        provider_factory: ProviderFactory) -> None:
    messages = _failures(scenario("broken-streams"), 2, stream=True,
                         provider_factory=provider_factory)
    assert messages[0] == "stream ended before [DONE]"
    assert messages[1].startswith("transport error")


@pytest.mark.req("MC-03")
def test_a_reply_slower_than_the_read_timeout_is_unavailable(
        provider_factory: ProviderFactory) -> None:
    messages = _failures(scenario("slow"), 1, stream=False, provider_factory=provider_factory,
                         limits=ClientLimits(read_timeout=0.5, total_timeout=30))
    assert messages == ["timed out (ReadTimeout)"]


@pytest.mark.req("MC-03", "AV-04")
def test_a_stream_past_its_total_deadline_is_unavailable(
        provider_factory: ProviderFactory) -> None:
    slow_drip = Scenario.replies('{"type":"final","text":"' + "z" * 40 + '"}',
                                 chunk_chars=1, chunk_delay=0.05)
    limits = ClientLimits(read_timeout=5, total_timeout=0.5)
    messages = _failures(slow_drip, 1, stream=True, provider_factory=provider_factory,
                         limits=limits)
    assert messages == ["no complete reply within 0.5 s"]


#: The operator's ``--agent-timeout`` in the deadline tests below.
AGENT_TIMEOUT = 2.0
#: Slack over the deadline for closing the connection on a loaded machine: a
#: correctness bound (the call ends near the deadline), not a benchmark.
SLACK = 1.5

Call = Callable[[], Awaitable[object]]


async def _drain(client: LocalModelClient) -> list[StreamDelta]:
    return [delta async for delta in client.stream_chat(HELLO)]


async def _timed_failure(call: Call) -> tuple[ModelUnavailable, float]:
    started = time.monotonic()
    with pytest.raises(ModelUnavailable) as caught:
        await call()
    return caught.value, time.monotonic() - started


@pytest.mark.req("AV-04", "MC-03")
def test_agent_timeout_ends_a_trickling_reply_plain_or_streamed(
        provider_factory: ProviderFactory) -> None:
    """Each piece comes well within the read timeout; only the whole call is too slow."""
    provider = provider_factory(scenario("trickling"))

    async def run() -> list[tuple[ModelUnavailable, float]]:
        limits = ClientLimits.with_timeout(AGENT_TIMEOUT)  # what --agent-timeout 2 builds
        async with client_for(provider, limits=limits) as client:
            plain = await _timed_failure(lambda: client.chat(HELLO))
            streamed = await _timed_failure(lambda: _drain(client))
        return [plain, streamed]

    for error, elapsed in asyncio.run(run()):
        assert elapsed < AGENT_TIMEOUT + SLACK, elapsed
        assert error.code is ErrorCode.MODEL_UNAVAILABLE
        assert error.message == "no complete reply within 2 s"
    assert len(provider.chat_requests()) == 2


@pytest.mark.req("AV-04", "MC-03")
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_the_deadline_covers_waiting_for_the_headers(
        provider_factory: ProviderFactory, stream: bool) -> None:
    """The slow scenario answers after 3 s: within the read timeout, past the deadline."""
    provider = provider_factory(scenario("slow"))
    limits = ClientLimits(read_timeout=10, total_timeout=1)

    async def run() -> tuple[ModelUnavailable, float]:
        async with client_for(provider, limits=limits) as client:
            if stream:
                return await _timed_failure(lambda: _drain(client))
            return await _timed_failure(lambda: client.chat(HELLO))

    error, elapsed = asyncio.run(run())
    assert elapsed < 1 + SLACK, elapsed
    assert error.message == "no complete reply within 1 s"


class _SlowProbe(http.server.BaseHTTPRequestHandler):
    """``/health`` and ``/v1/models``, each answered after ``PROBE_DELAY`` seconds."""

    def do_GET(self) -> None:
        time.sleep(PROBE_DELAY)
        body = (b'{"status":"ok"}' if self.path == "/health"
                else b'{"object":"list","data":[{"id":"fake-model"}]}')
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


#: Each of the probe's two requests alone fits its deadline below; both together do not.
PROBE_DELAY = 0.4


@pytest.mark.req("AV-04")
def test_the_probes_two_requests_share_one_deadline_and_it_says_so_never_raising() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowProbe)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    async def probe(total: float) -> tuple[bool, str]:
        limits = ClientLimits(read_timeout=10, total_timeout=total)
        async with LocalModelClient(parse_endpoint(url), "fake-model", limits=limits) as client:
            availability = await client.probe()
            return availability.available, availability.diagnostic

    try:
        assert asyncio.run(probe(3 * PROBE_DELAY / 2)) == (False, "no complete reply within 0.6 s")
        assert asyncio.run(probe(10)) == (True, "ready")
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.req("AV-04")
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_failure_before_the_deadline_is_the_transports_not_the_deadlines(
        stream: bool) -> None:
    with socket.socket() as closed:  # a loopback port nobody listens on once closed
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]

    async def run() -> ModelUnavailable:
        limits = ClientLimits(read_timeout=10, total_timeout=10)
        endpoint = parse_endpoint(f"http://127.0.0.1:{port}")
        async with LocalModelClient(endpoint, "fake-model", limits=limits) as client:
            if stream:
                return (await _timed_failure(lambda: _drain(client)))[0]
            return (await _timed_failure(lambda: client.chat(HELLO)))[0]

    assert asyncio.run(run()).message == "connection refused or failed"


_SURROGATE_ENVELOPE = ('{"choices":[{"index":0,"message":{"role":"assistant",'
                       '"content":"x\\ud800"},"finish_reason":"stop"}]}')


@pytest.mark.req("AV-02", "PR-02", "MC-03")
def test_a_lone_surrogate_in_a_reply_is_a_refused_output_not_unavailable(
        provider_factory: ProviderFactory) -> None:
    """The escape is valid JSON but not Unicode text: the model's output is refused."""
    provider = provider_factory(Scenario(name="surrogates", answers=(
        Answer(raw_body=_SURROGATE_ENVELOPE), Answer(content="x\ud800"))))

    async def run() -> list[ProtocolRefused]:
        refusals = []
        async with client_for(provider) as client:
            with pytest.raises(ProtocolRefused) as plain:
                await client.chat(HELLO)
            refusals.append(plain.value)
            with pytest.raises(ProtocolRefused) as streamed:
                await _drain(client)
            refusals.append(streamed.value)
        return refusals

    for refusal in asyncio.run(run()):
        assert refusal.defect == Defect.LONE_SURROGATE
        assert refusal.code is ErrorCode.MODEL_PROTOCOL_ERROR
        assert "\ud800" not in refusal.message


@pytest.mark.req("AV-02", "MC-03")
def test_other_envelope_defects_stay_unavailable(provider_factory: ProviderFactory) -> None:
    """A duplicate key in the envelope is the provider's fault, not the model's output."""
    provider = provider_factory(Scenario(name="duplicate", answers=(
        Answer(raw_body='{"choices":[],"choices":[]}'),)))

    async def run() -> str:
        async with client_for(provider) as client:
            with pytest.raises(ModelUnavailable) as caught:
                await client.chat(HELLO)
            return caught.value.message

    assert asyncio.run(run()) == "provider reply is not valid JSON"


@pytest.mark.req("MC-03")
def test_a_closed_port_is_unavailable_not_a_crash(provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.replies())
    provider.stop()

    async def run() -> str:
        async with client_for(provider) as client:
            availability = await client.probe()
            with pytest.raises(ModelUnavailable) as caught:
                await client.chat(HELLO)
            assert not availability.available
            return caught.value.message

    assert asyncio.run(run()) == "connection refused or failed"


@pytest.mark.req("MC-03")
def test_the_connection_pool_is_capped_as_configured(provider_factory: ProviderFactory) -> None:
    """Beside an explicit transport httpx ignores the client's ``limits=``: the cap is on it."""
    final = '{"type":"final","text":"ok"}'
    provider = provider_factory(Scenario.always(final, delay=0.3))
    limits = ClientLimits(max_connections=3)

    async def run() -> None:
        async with client_for(provider, limits=limits) as client:
            await asyncio.gather(*(client.chat([{"role": "user", "content": "hi"}])
                                   for _ in range(9)))

    asyncio.run(run())
    peers = {request.peer for request in provider.chat_requests()}
    assert len(provider.chat_requests()) == 9
    assert len(peers) <= 3, f"{len(peers)} connections for a cap of 3"


@pytest.mark.req("MC-03")
def test_a_finished_stream_gives_its_connection_back(provider_factory: ProviderFactory) -> None:
    """At ``[DONE]`` the rest of the response is read, so the next call reuses the socket."""
    provider = provider_factory(Scenario.always("done"))

    async def run() -> None:
        async with client_for(provider) as client:
            for _ in range(3):
                async for _delta in client.stream_chat([{"role": "user", "content": "hi"}]):
                    pass

    asyncio.run(run())
    assert len({request.peer for request in provider.chat_requests()}) == 1


@pytest.mark.req("PR-06", "SM-03", "MC-02")
def test_sampling_settings_and_the_completion_limit_travel_and_cached_tokens_come_back(
        provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario.always('{"type":"final","text":"ok"}'))
    client = LocalModelClient(parse_endpoint(provider.base_url), "m",
                              sampling=Sampling(temperature=0.0, seed=7, repeat_penalty=1.1))
    messages = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "q"}]

    async def run() -> tuple[Usage, Usage]:
        async with client:
            first = await client.chat(messages, max_tokens=321)
            second = await client.chat([*messages, {"role": "user", "content": "again"}])
            return first.usage, second.usage

    first, second = asyncio.run(run())
    bodies = [r.json() for r in provider.chat_requests()]
    assert (bodies[0]["temperature"], bodies[0]["seed"], bodies[0]["repeat_penalty"]) == (
        0.0, 7, 1.1)
    assert bodies[0]["max_tokens"] == 321 and "max_tokens" not in bodies[1]
    assert first.cached_tokens == 0
    assert second.cached_tokens is not None and second.cached_tokens >= 100, \
        "the unchanged prefix is reported cached"

    async def plain() -> None:
        async with LocalModelClient(parse_endpoint(provider.base_url), "m") as unset:
            await unset.chat(messages)

    asyncio.run(plain())
    last = provider.chat_requests()[-1].json()
    assert not {"temperature", "seed", "repeat_penalty", "max_tokens"} & set(last), \
        "nothing is sent that the operator did not set"


@pytest.mark.req("MC-03", "AV-04")
def test_the_deadline_never_fires_in_the_consumer_of_a_stream(
        provider_factory: ProviderFactory) -> None:
    """The stream's deadline bounds its reads: a consumer that holds a piece past it is
    never interrupted there; its next read ends the call at once, past the deadline. A
    cancellation from elsewhere during a read stays a cancellation."""
    reply = '{"type":"final","text":"' + "z" * 40 + '"}'
    provider = provider_factory(Scenario.replies(reply, reply, chunk_chars=4, chunk_delay=0.05))
    limits = ClientLimits(read_timeout=5, total_timeout=0.5)

    async def hold_past_the_deadline() -> tuple[bool, str]:
        async with client_for(provider, limits=limits) as client:
            pieces = client.stream_chat(HELLO)
            await anext(pieces)
            await asyncio.sleep(0.8)  # past the deadline, holding the first piece
            held = True  # reached: nothing was cancelled in here
            with pytest.raises(ModelUnavailable) as caught:
                await anext(pieces)
            return held, caught.value.message

    assert asyncio.run(hold_past_the_deadline()) == (True, "no complete reply within 0.5 s")

    async def cancelled_while_reading() -> BaseException | None:
        async with client_for(provider, limits=ClientLimits(read_timeout=5,
                                                           total_timeout=30)) as client:
            task = asyncio.create_task(_drain(client))
            await asyncio.sleep(0.3)  # it is waiting for the next piece
            task.cancel()
            try:
                await task
            except BaseException as exc:  # what the consumer saw
                return exc
            return None

    assert isinstance(asyncio.run(cancelled_while_reading()), asyncio.CancelledError)
