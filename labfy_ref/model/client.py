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

Time (MC-03, AV-04): every call (:meth:`LocalModelClient.chat`,
:meth:`~LocalModelClient.stream_chat`, :meth:`~LocalModelClient.list_models`,
:meth:`~LocalModelClient.probe`) has one overall deadline,
``ClientLimits.total_timeout`` after it starts. Connecting, sending, the
response headers and every body read fall under it, so a server that trickles
a byte at a time cannot hold a call longer: past the deadline the call ends
``MODEL_UNAVAILABLE`` "no complete reply within N s". A plain request runs
whole inside ``asyncio.timeout_at(deadline)``; a stream bounds each read of
the raw body with the same deadline (one timer per stream), never a ``yield``
(a timeout spanning a yield would fire in the consumer's code). ``connect_timeout`` and
``read_timeout`` remain finer bounds inside that budget. The operator's
``--agent-timeout SECONDS`` is that deadline (:meth:`ClientLimits.with_timeout`).

Slots (BR-20): a model serves as many calls at once as it has slots
(llama-server's ``--parallel``); more calls wait in the client's
:class:`SlotQueue`, a chat turn's before a background call's (a client's title
or tag request, BR-17), and the deadline of a call starts only once it has its
slot: waiting behind others never times a call out. At most ``max_waiting``
calls wait; one more is ``MODEL_BUSY``, at once. A connection that drops before
the first byte of its response (a keep-alive connection the server had closed)
is opened again, once, to the same endpoint; never after a byte arrived.

Text (AV-02, PR-02): the provider's envelope is read with the strict JSON
reader. A lone surrogate in it (``"x\\ud800"``, which no UTF-8 writer can
encode later) is the model's output refused, not a transport failure: the
client raises the reader's :class:`~labfy_ref.errors.ProtocolRefused`
(``Defect.LONE_SURROGATE``) itself, from ``chat`` and from each streamed
event, so the agent loop answers it like any refused output (one repair, then
``MODEL_PROTOCOL_ERROR``). Wherever the surrogate sits in a chat envelope, it
is refused this way: only generated text carries such escapes in practice.
Every other envelope defect (not UTF-8, duplicate keys, not JSON...), and a
lone surrogate in ``/health`` or ``/v1/models``, stays ``MODEL_UNAVAILABLE``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import heapq
import itertools
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from http.cookiejar import CookieJar, DefaultCookiePolicy
from types import TracebackType
from typing import Any, Self, cast

import httpx

from labfy_ref import __version__
from labfy_ref.errors import ErrorCode, ModelUnavailable, ProtocolRefused, RuntimeRefused
from labfy_ref.model.endpoint import ModelEndpoint, ModelPath
from labfy_ref.model.sse import SSEDecoder, SSEError
from labfy_ref.protocol import MessageLog, Usage, encode_json
from labfy_ref.protocol.strict_json import Defect, loads_strict

_DONE = "[DONE]"


@dataclasses.dataclass(frozen=True, slots=True)
class ClientLimits:
    """Every bound the client applies; the defaults suit a local 1-10 B model.

    ``total_timeout`` is the overall deadline of one call (connect, headers and
    every body read together); ``connect_timeout`` and ``read_timeout`` bound a
    single connect and a single read inside it. ``max_connections`` caps the
    pool: a local llama-server serves a few slots at a time, so more concurrent
    calls (many bridge sessions) wait for a connection within their deadline
    rather than open sockets the server would only queue.
    """

    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    total_timeout: float = 300.0
    max_body_bytes: int = 1024 * 1024
    max_stream_bytes: int = 4 * 1024 * 1024
    max_stream_events: int = 100_000
    max_connections: int = 8

    @classmethod
    def with_timeout(cls, seconds: float) -> ClientLimits:
        """Limits for ``--agent-timeout SECONDS``: every model call ends within ``seconds``.

        The operator's number is the whole call's budget (``total_timeout``),
        streamed or not, however slowly the server trickles; a single read may
        take all of it, a connect at most 5 s of it.
        """
        return cls(connect_timeout=min(5.0, seconds), read_timeout=seconds,
                   total_timeout=seconds)


@dataclasses.dataclass(frozen=True, slots=True)
class Sampling:
    """Sampling settings sent with every request (None: the server's own default).

    A supervised llama-server runs deterministic (temperature 0, a fixed
    seed): the same turn on the same model gives the same calls.
    """

    temperature: float | None = None
    seed: int | None = None
    #: llama.cpp's penalty on repeating recent tokens (greedy decoding of a small model
    #: otherwise loops on a phrase until the completion limit).
    repeat_penalty: float | None = None

    def json_fields(self) -> str:
        """The settings as JSON object members, each with a leading ``, ``."""
        fields = {"temperature": self.temperature, "seed": self.seed,
                  "repeat_penalty": self.repeat_penalty}
        return "".join(f", {encode_json(key)}: {encode_json(value)}"
                       for key, value in fields.items() if value is not None)


@dataclasses.dataclass(frozen=True, slots=True)
class ChatReply:
    """A whole assistant reply."""

    content: str
    reasoning: str | None
    finish_reason: str | None
    usage: Usage


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDelta:
    """One piece of a streamed reply: text and/or provider-exposed reasoning.

    ``usage`` is set on the piece that carried the provider's token counts (its
    last chunk: streams ask for ``include_usage``), None on every other.
    """

    content: str = ""
    reasoning: str = ""
    finish_reason: str | None = None
    usage: Usage | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Availability:
    """The outcome of :meth:`LocalModelClient.probe`."""

    available: bool
    diagnostic: str
    models: tuple[str, ...] = ()


class Priority(enum.IntEnum):
    """A call's place in its model's queue: a chat turn's goes first."""

    CHAT = 0
    BACKGROUND = 1


#: Calls that may wait for a model's slot; one more is refused MODEL_BUSY.
DEFAULT_MAX_WAITING = 32
#: Transport failures that mean the connection dropped before the response began.
_DROPPED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


class SlotQueue:
    """The model's slots: a call holds one while it runs; the others wait, a chat turn's
    call before a background one, in arrival order within each."""

    def __init__(self, slots: int = 1, max_waiting: int = DEFAULT_MAX_WAITING) -> None:
        if slots < 1 or max_waiting < 0:
            raise ValueError("a model has at least one slot and a queue of 0 or more")
        self.slots = slots
        self.max_waiting = max_waiting
        self.busy = 0
        self._waiting: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    @property
    def waiting(self) -> int:
        """Calls waiting for a slot now."""
        return sum(not future.done() for _, _, future in self._waiting)

    @contextlib.asynccontextmanager
    async def slot(self, priority: Priority = Priority.CHAT) -> AsyncIterator[None]:
        """Hold a slot for the block (wait for one first; MODEL_BUSY if too many wait)."""
        await self._acquire(priority)
        try:
            yield
        finally:
            self._release()

    async def _acquire(self, priority: Priority) -> None:
        if self.busy < self.slots and not self.waiting:
            self.busy += 1
            return
        if self.waiting >= self.max_waiting:
            raise RuntimeRefused(ErrorCode.MODEL_BUSY, f"the model has {self.waiting} calls "
                                 "waiting for it already; try again shortly")
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (int(priority), next(self._order), future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release()  # the slot came as the waiter left: pass it on
            raise

    def _release(self) -> None:
        while self._waiting:
            _, _, future = heapq.heappop(self._waiting)
            if not future.done():
                future.set_result(None)  # the slot goes to the next waiter as it is
                return
        self.busy -= 1


class _NoCookies(CookieJar):
    """A jar whose policy admits no domain: Set-Cookie is dropped, nothing is sent."""

    def __init__(self) -> None:
        super().__init__(policy=DefaultCookiePolicy(allowed_domains=[]))


def _unavailable(message: str) -> ModelUnavailable:
    return ModelUnavailable(message)


def _is_refused_output(exc: ProtocolRefused) -> bool:
    """A lone surrogate is the model's output refused; any other defect is the transport's."""
    return exc.defect == Defect.LONE_SURROGATE.value


class LocalModelClient:
    """An async client for one OpenAI-compatible server on loopback."""

    def __init__(
        self,
        endpoint: ModelEndpoint,
        model: str,
        *,
        limits: ClientLimits | None = None,
        api_key: str | None = None,
        sampling: Sampling | None = None,
        slots: SlotQueue | None = None,
    ) -> None:
        self.endpoint = endpoint
        #: The model's slots (one by default): every chat call waits for one.
        self.slots = slots or SlotQueue()
        self.model = model
        self.sampling = sampling or Sampling()
        self._format_cache: tuple[Mapping[str, Any], str] | None = None
        self.limits = limits or ClientLimits()
        headers = {
            "User-Agent": f"labfy-ref/{__version__}",
            "Accept": "application/json",
            "Accept-Encoding": "identity",
        }
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key}"
        # The pool's bounds belong to the transport: given an explicit transport,
        # httpx ignores the client's ``limits=``. Waiting for a free connection has no
        # timeout of its own: the call's one deadline bounds it, like everything else.
        pool = httpx.Limits(max_connections=self.limits.max_connections,
                            max_keepalive_connections=self.limits.max_connections)
        self._http = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(retries=0, trust_env=False, limits=pool),
            trust_env=False,
            follow_redirects=False,
            cookies=_NoCookies(),
            headers=headers,
            timeout=httpx.Timeout(
                self.limits.read_timeout,
                connect=self.limits.connect_timeout,
                pool=None,
            ),
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
        *, stream: bool, model: str | None = None, max_tokens: int | None = None,
    ) -> bytes:
        # Built from pieces: a MessageLog brings its messages already encoded, and the
        # round's schema is encoded once per distinct object, not once per request.
        listed = (messages.json() if isinstance(messages, MessageLog)
                  else encode_json(list(messages)))
        parts = [f'{{"model": {encode_json(model or self.model)}, "messages": {listed}, '
                 f'"stream": {"true" if stream else "false"}']
        if stream:  # the token counts come in a last chunk only when asked for (BR-14)
            parts.append(', "stream_options": {"include_usage": true}')
        if response_format is not None:
            parts.append(f', "response_format": {self._format_json(response_format)}')
        if max_tokens is not None:
            parts.append(f', "max_tokens": {int(max_tokens)}')
        parts.append(self.sampling.json_fields())
        parts.append("}")
        return "".join(parts).encode("utf-8")

    def _format_json(self, response_format: Mapping[str, Any]) -> str:
        cached = self._format_cache
        if cached is None or cached[0] is not response_format:
            cached = self._format_cache = (response_format, encode_json(dict(response_format)))
        return cached[1]

    async def chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        response_format: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        priority: Priority = Priority.CHAT,
    ) -> ChatReply:
        """Send one chat completion and return the whole reply, within the deadline.

        ``max_tokens`` caps the completion (PR-06 sets it to fit the round's
        largest admitted action). Raises ``ModelUnavailable`` (unreachable,
        over a bound or the deadline, a malformed envelope) or
        ``ProtocolRefused`` (a lone surrogate).
        """
        body = self._chat_body(messages, response_format, stream=False, max_tokens=max_tokens)
        async with self.slots.slot(priority):
            document = await self._request_json("POST", ModelPath.CHAT, body, self._deadline(),
                                                model_output=True)
        return _chat_reply(document)

    async def stream_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        response_format: Mapping[str, Any] | None = None,
        max_tokens: int | None = None,
        model: str | None = None,
        priority: Priority = Priority.CHAT,
    ) -> AsyncIterator[StreamDelta]:
        """Stream one chat completion as :class:`StreamDelta` pieces, until ``[DONE]``.

        ``model`` names another model of the same server (default: the client's),
        so one client — one connection pool — serves every model of an endpoint.
        The whole stream, from connecting to ``[DONE]``, has one deadline;
        each read waits at most the time left. A lone surrogate in an event
        raises ``ProtocolRefused``; any other failure is ``ModelUnavailable``.
        """
        body = self._chat_body(messages, response_format, stream=True, model=model,
                               max_tokens=max_tokens)
        async with self.slots.slot(priority):
            async for delta in self._stream(body):
                yield delta

    async def _stream(self, body: bytes) -> AsyncIterator[StreamDelta]:
        """:meth:`stream_chat` once it holds its slot: its deadline starts here."""
        deadline = self._deadline()
        decoder = SSEDecoder()
        received = events = 0
        try:
            async with contextlib.AsyncExitStack() as stack:
                async with asyncio.timeout_at(deadline):
                    response = await self._opened(stack, "POST", ModelPath.CHAT, body,
                                                  {"Content-Type": "application/json",
                                                   "Accept": "text/event-stream"})
                _check_status(response)
                # aiter_raw is an async generator (typed as an iterator): close it
                # here, not whenever the garbage collector gets to it.
                chunks = await stack.enter_async_context(contextlib.aclosing(
                    cast(AsyncGenerator[bytes, None], response.aiter_raw())))
                # The deadline bounds the reads only: a yield below must never sit
                # inside it, or the timeout would fire in the consumer.
                reads = stack.enter_context(_ReadDeadline(deadline))
                while True:
                    chunk = await reads.read(chunks)
                    if chunk is None:
                        raise _unavailable("stream ended before [DONE]")
                    received += len(chunk)
                    if received > self.limits.max_stream_bytes:
                        raise _unavailable(
                            f"stream exceeds {self.limits.max_stream_bytes} bytes"
                        )
                    for data in decoder.feed(chunk):
                        if data == _DONE:
                            decoder.close()
                            # Read the stream's end (llama-server sends only its last
                            # chunk) so the connection goes back to the pool.
                            async with asyncio.timeout_at(deadline):
                                await _drain(chunks, self.limits.max_stream_bytes - received)
                            return
                        events += 1
                        if events > self.limits.max_stream_events:
                            raise _unavailable("stream has too many events")
                        delta = _stream_delta(data)
                        if delta is not None:
                            yield delta
        except (TimeoutError, httpx.HTTPError) as exc:
            raise self._time_or_transport(exc, deadline) from exc
        except SSEError as exc:
            raise _unavailable(str(exc)) from exc

    async def _opened(self, stack: contextlib.AsyncExitStack, method: str, path: ModelPath,
                      body: bytes | None, headers: Mapping[str, str]) -> httpx.Response:
        """The response (its head read) of one request; a connection that drops before
        any byte of it is opened again, once — never after a byte arrived."""
        url = self.endpoint.url(path)
        try:
            return await stack.enter_async_context(self._http.stream(
                method, url, content=body, headers=headers))
        except _DROPPED:
            return await stack.enter_async_context(self._http.stream(
                method, url, content=body, headers=headers))

    async def list_models(self) -> tuple[str, ...]:
        """The model ids the server lists at ``GET /v1/models``, within the deadline."""
        return await self._list_models(self._deadline())

    async def _list_models(self, deadline: float) -> tuple[str, ...]:
        document = await self._request_json("GET", ModelPath.MODELS, None, deadline)
        try:
            entries = document["data"]
            ids = tuple(str(entry["id"]) for entry in entries[:256])
        except (KeyError, TypeError) as exc:
            raise _unavailable("provider model list is malformed") from exc
        return ids

    async def probe(self) -> Availability:
        """Is the model server up and serving our model? Never raises.

        ``/health`` and ``/v1/models`` together share one deadline.
        """
        deadline = self._deadline()
        try:
            await self._request_json("GET", ModelPath.HEALTH, None, deadline)
            models = await self._list_models(deadline)
        except ModelUnavailable as exc:
            return Availability(False, exc.message)
        if models and self.model not in models:
            shown = ", ".join(models[:5])
            diagnostic = f"model '{self.model}' is not served (served: {shown})"
            return Availability(False, diagnostic, models)
        return Availability(True, "ready", models)

    def _deadline(self) -> float:
        """The event-loop time by which the call starting now must be complete."""
        return asyncio.get_running_loop().time() + self.limits.total_timeout

    def _time_or_transport(self, exc: Exception, deadline: float) -> ModelUnavailable:
        """Past the deadline any failure is the deadline's; before it, the transport's."""
        if asyncio.get_running_loop().time() >= deadline:
            return _unavailable(f"no complete reply within {self.limits.total_timeout:g} s")
        if isinstance(exc, httpx.HTTPError):
            return _transport_failure(exc)
        return _unavailable(f"timed out ({type(exc).__name__})")

    async def _request_json(self, method: str, path: ModelPath, body: bytes | None,
                            deadline: float, *, model_output: bool = False) -> Any:
        """One request's JSON body (:func:`_json_body`); the whole exchange runs inside
        ``deadline`` (AV-04)."""
        try:
            async with asyncio.timeout_at(deadline):
                raw = await self._read_body(method, path, body)
        except (TimeoutError, httpx.HTTPError) as exc:
            raise self._time_or_transport(exc, deadline) from exc
        return _json_body(raw, self.limits.max_body_bytes, model_output=model_output)

    async def _read_body(self, method: str, path: ModelPath, body: bytes | None) -> bytes:
        """The whole response body, at most ``max_body_bytes`` (no deadline of its own)."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        async with contextlib.AsyncExitStack() as stack:
            response = await self._opened(stack, method, path, body, headers)
            _check_status(response)
            raw = bytearray()
            async for chunk in response.aiter_raw():
                raw += chunk
                if len(raw) > self.limits.max_body_bytes:
                    raise _unavailable(f"reply exceeds {self.limits.max_body_bytes} bytes")
        return bytes(raw)


class _ReadDeadline:
    """One deadline for every read of a stream, armed once (not a timeout per read).

    When it passes during a read, the read is cancelled and raises ``TimeoutError``
    (as ``asyncio.timeout_at`` would); when it passes while the consumer holds a piece,
    nothing is cancelled there, and the next read raises ``TimeoutError`` at once. A
    cancellation from elsewhere stays a cancellation. One timer per stream: a burst of
    events costs no timer per event.
    """

    def __init__(self, deadline: float) -> None:
        task = asyncio.current_task()
        assert task is not None, "a stream is read inside a task"
        self._task = task
        self._reading = False
        self.passed = False
        self._timer = asyncio.get_running_loop().call_at(deadline, self._pass)

    def _pass(self) -> None:
        self.passed = True
        if self._reading:
            self._task.cancel()

    async def read(self, chunks: AsyncGenerator[bytes, None]) -> bytes | None:
        """The next chunk (None at the end), within the deadline."""
        if self.passed:
            raise TimeoutError
        self._reading = True
        try:
            return await anext(chunks, None)
        except asyncio.CancelledError:
            # ours only when the deadline cancelled, and no other cancellation is pending
            if self.passed and self._task.uncancel() == 0:
                raise TimeoutError from None
            raise
        finally:
            self._reading = False

    def __enter__(self) -> _ReadDeadline:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._timer.cancel()


async def _drain(chunks: AsyncGenerator[bytes, None], budget: int) -> None:
    """Read what is left of a response, at most ``budget`` bytes (then stop reading)."""
    while budget > 0 and (chunk := await anext(chunks, None)) is not None:
        budget -= len(chunk)


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


def _chat_reply(document: Any) -> ChatReply:
    """A non-streamed chat completion's first choice, or ``ModelUnavailable`` (MC-03)."""
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


def _json_body(raw: bytes, max_chars: int, *, model_output: bool) -> Any:
    """A reply body as strict JSON, or ``ModelUnavailable`` (MC-03).

    With ``model_output`` (a chat reply) a lone surrogate is the model's output refused
    (``ProtocolRefused``); a health or model list carrying one is a broken server like
    any other defect.
    """
    try:
        return loads_strict(raw.decode("utf-8"), max_chars=max_chars)
    except UnicodeDecodeError as exc:
        raise _unavailable("provider reply is not valid JSON") from exc
    except ProtocolRefused as exc:
        if model_output and _is_refused_output(exc):
            raise
        raise _unavailable("provider reply is not valid JSON") from exc


def _usage(raw: Any) -> Usage:
    """The envelope's ``usage``; counts that are not non-negative integers are not said."""
    if not isinstance(raw, dict):
        return Usage()
    details = raw.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(_count(raw.get("prompt_tokens")), _count(raw.get("completion_tokens")),
                 _count(cached))


# A provider's token count is untrusted data: one past this (2**40, a thousand times any
# context) is not a count the provider could mean, and summed over the ledger's bound it
# would overflow SQLite's 64-bit integers.
MAX_REPORTED_TOKENS = 2**40


def _count(value: Any) -> int | None:
    return value if type(value) is int and 0 <= value <= MAX_REPORTED_TOKENS else None


def _stream_delta(data: str) -> StreamDelta | None:
    try:
        document = loads_strict(data)
        choices = document["choices"]
        usage = _usage(document["usage"]) if isinstance(document.get("usage"), dict) else None
        if not choices:  # the usage chunk (``include_usage``), or an empty one
            return None if usage is None else StreamDelta(usage=usage)
        choice = choices[0]
        delta = choice.get("delta") or {}
        content = delta.get("content") or ""
        reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        finish = choice.get("finish_reason")
        if not isinstance(content, str) or not isinstance(reasoning, str):
            raise TypeError
    except ProtocolRefused as exc:
        if _is_refused_output(exc):
            raise
        raise _unavailable("provider sent a malformed stream chunk") from exc
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise _unavailable("provider sent a malformed stream chunk") from exc
    return StreamDelta(content=content, reasoning=reasoning, finish_reason=finish, usage=usage)
