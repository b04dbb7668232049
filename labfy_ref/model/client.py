"""``LocalModelClient``: the only code that talks to a model (MC-02, MC-03).

It reaches exactly one validated loopback endpoint and nothing else:

* the transport is given explicitly and ``trust_env`` is off, so no
  ``*_PROXY`` variable, ``.netrc`` or ``SSL_CERT_*`` is ever read;
* redirects are never followed: any 3xx is ``MODEL_UNAVAILABLE``;
* the cookie jar refuses every cookie, so nothing is stored or sent back;
* no ``Authorization`` is sent unless our own supervisor started the server
  and handed us its fresh key (SM-02);
* bodies, streams and time are bounded; over a bound is ``MODEL_UNAVAILABLE``
  with a bounded diagnostic, never a crash or an unbounded buffer.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from http.cookiejar import CookieJar, DefaultCookiePolicy
from types import TracebackType
from typing import Any, Self

import httpx

from labfy_ref import __version__
from labfy_ref.errors import ModelUnavailable, ProtocolRefused
from labfy_ref.model.endpoint import ModelEndpoint, ModelPath
from labfy_ref.model.sse import SSEDecoder, SSEError
from labfy_ref.protocol.strict_json import loads_strict

_DONE = "[DONE]"


@dataclasses.dataclass(frozen=True, slots=True)
class ClientLimits:
    """Every bound the client applies; the defaults suit a local 1-10 B model."""

    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    total_timeout: float = 300.0
    max_body_bytes: int = 1024 * 1024
    max_stream_bytes: int = 4 * 1024 * 1024
    max_stream_events: int = 100_000

    @classmethod
    def with_timeout(cls, seconds: float) -> ClientLimits:
        """Limits for ``--agent-timeout SECONDS``: the read timeout, connect capped at 5 s."""
        return cls(connect_timeout=min(5.0, seconds), read_timeout=seconds)


@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """Token counts the provider reported, when it did."""

    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class ChatReply:
    """A whole assistant reply."""

    content: str
    reasoning: str | None
    finish_reason: str | None
    usage: Usage


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDelta:
    """One piece of a streamed reply: text and/or provider-exposed reasoning."""

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Availability:
    """The outcome of :meth:`LocalModelClient.probe`."""

    available: bool
    diagnostic: str
    models: tuple[str, ...] = ()


class _NoCookies(CookieJar):
    """A jar whose policy admits no domain: Set-Cookie is dropped, nothing is sent."""

    def __init__(self) -> None:
        super().__init__(policy=DefaultCookiePolicy(allowed_domains=[]))


def _unavailable(message: str) -> ModelUnavailable:
    return ModelUnavailable(message)


class LocalModelClient:
    """An async client for one OpenAI-compatible server on loopback."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        model: str,
        *,
        limits: ClientLimits | None = None,
        api_key: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.model = model
        self.limits = limits or ClientLimits()
        headers = {
            "User-Agent": f"labfy-ref/{__version__}",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        }
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(retries=0, trust_env=False),
            trust_env=False,
            follow_redirects=False,
            cookies=_NoCookies(),
            headers=headers,
            timeout=httpx.Timeout(
                self.limits.read_timeout,
                connect=self.limits.connect_timeout,
                pool=self.limits.connect_timeout,
            ),
            limits=httpx.Limits(max_connections=4, max_keepalive_connections=2),
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool; idempotent."""
        await self._http.aclose()

    # -- requests -------------------------------------------------------------

    def _chat_body(
        self, messages: Sequence[Mapping[str, Any]], response_format: Mapping[str, Any] | None,
        *, stream: bool,
    ) -> bytes:
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "stream": stream}
        if response_format is not None:
            body["response_format"] = dict(response_format)
        return json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        response_format: Mapping[str, Any] | None = None,
    ) -> ChatReply:
        """Send one chat completion and return the whole reply."""
        body = self._chat_body(messages, response_format, stream=False)
        document = await self._request_json("POST", ModelPath.CHAT, body)
        try:
            choice = document["choices"][0]
            message = choice["message"]
            content = message.get("content") or ""
            reasoning = message.get("reasoning_content") or message.get("reasoning")
            if not isinstance(content, str) or not isinstance(reasoning, str | None):
                raise TypeError
            return ChatReply(
                content=content,
                reasoning=reasoning,
                finish_reason=choice.get("finish_reason"),
                usage=_usage(document.get("usage")),
            )
        except (KeyError, IndexError, TypeError, AttributeError) as exc:
            raise _unavailable("provider reply is not a chat completion") from exc

    async def stream_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        response_format: Mapping[str, Any] | None = None,
    ) -> AsyncIterator[StreamDelta]:
        """Stream one chat completion as :class:`StreamDelta` pieces, until ``[DONE]``."""
        body = self._chat_body(messages, response_format, stream=True)
        deadline = time.monotonic() + self.limits.total_timeout
        decoder = SSEDecoder()
        received = events = 0
        try:
            async with self._http.stream(
                "POST", self.endpoint.url(ModelPath.CHAT), content=body,
                headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
            ) as response:
                _check_status(response)
                async for chunk in response.aiter_raw():
                    received += len(chunk)
                    if received > self.limits.max_stream_bytes:
                        raise _unavailable(
                            f"stream exceeds {self.limits.max_stream_bytes} bytes"
                        )
                    if time.monotonic() > deadline:
                        raise _unavailable(f"stream exceeds {self.limits.total_timeout:g} s")
                    for data in decoder.feed(chunk):
                        if data == _DONE:
                            decoder.close()
                            return
                        events += 1
                        if events > self.limits.max_stream_events:
                            raise _unavailable("stream has too many events")
                        delta = _stream_delta(data)
                        if delta is not None:
                            yield delta
                raise _unavailable("stream ended before [DONE]")
        except httpx.HTTPError as exc:
            raise _transport_failure(exc) from exc
        except SSEError as exc:
            raise _unavailable(str(exc)) from exc

    async def list_models(self) -> tuple[str, ...]:
        """The model ids the server lists at ``GET /v1/models``."""
        document = await self._request_json("GET", ModelPath.MODELS, None)
        try:
            entries = document["data"]
            ids = tuple(str(entry["id"]) for entry in entries[:256])
        except (KeyError, TypeError) as exc:
            raise _unavailable("provider model list is malformed") from exc
        return ids

    async def probe(self) -> Availability:
        """Is the model server up and serving our model? Never raises."""
        try:
            await self._request_json("GET", ModelPath.HEALTH, None)
            models = await self.list_models()
        except ModelUnavailable as exc:
            return Availability(False, exc.message)
        if models and self.model not in models:
            shown = ", ".join(models[:5])
            diagnostic = f"model '{self.model}' is not served (served: {shown})"
            return Availability(False, diagnostic, models)
        return Availability(True, "ready", models)

    async def _request_json(self, method: str, path: ModelPath, body: bytes | None) -> Any:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        try:
            async with self._http.stream(
                method, self.endpoint.url(path), content=body, headers=headers
            ) as response:
                _check_status(response)
                raw = bytearray()
                async for chunk in response.aiter_raw():
                    raw += chunk
                    if len(raw) > self.limits.max_body_bytes:
                        raise _unavailable(f"reply exceeds {self.limits.max_body_bytes} bytes")
        except httpx.HTTPError as exc:
            raise _transport_failure(exc) from exc
        try:
            return loads_strict(raw.decode("utf-8"), max_chars=self.limits.max_body_bytes)
        except (UnicodeDecodeError, ProtocolRefused) as exc:
            raise _unavailable("provider reply is not valid JSON") from exc


def _check_status(response: httpx.Response) -> None:
    status = response.status_code
    if 300 <= status < 400:
        raise _unavailable(f"provider answered HTTP {status}; redirects are never followed")
    if status == 503:
        raise _unavailable("provider answered HTTP 503 (model loading or overloaded)")
    if status != 200:
        raise _unavailable(f"provider answered HTTP {status}")
    if response.headers.get("content-encoding", "identity") != "identity":
        raise _unavailable("provider used a content-encoding; only identity is accepted")


def _transport_failure(exc: httpx.HTTPError) -> ModelUnavailable:
    if isinstance(exc, httpx.TimeoutException):
        return _unavailable(f"timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.ConnectError):
        return _unavailable("connection refused or failed")
    return _unavailable(f"transport error ({type(exc).__name__})")


def _usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage()
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    return Usage(
        prompt_tokens=prompt if isinstance(prompt, int) else None,
        completion_tokens=completion if isinstance(completion, int) else None,
    )


def _stream_delta(data: str) -> StreamDelta | None:
    try:
        document = loads_strict(data)
        choices = document["choices"]
        if not choices:
            return None  # usage-only chunk
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content") or ""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        finish = choice.get("finish_reason")
        if not isinstance(content, str) or not isinstance(reasoning, str):
            raise TypeError
    except (ProtocolRefused, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise _unavailable("provider sent a malformed stream chunk") from exc
    return StreamDelta(content=content, reasoning=reasoning, finish_reason=finish)
