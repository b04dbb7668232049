"""A real HTTP server speaking the OpenAI chat-completions wire format, scripted.

It listens on ``127.0.0.1`` or ``::1`` only, answers like llama-server
(``/health`` with a 503 loading phase, ``/v1/models``, plain and SSE chat
completions ending in ``data: [DONE]``; a stream asked for
``stream_options.include_usage`` sends the token counts in a last chunk with no
choices, as llama-server does) and records every request with its
headers, body, the peer address, the local address the peer reached and
whether the connection had ``TCP_NODELAY`` set.

Each response is written once -- status line, headers and body in one
``send`` (a stream: its headers with its first chunk) -- on a socket with
``TCP_NODELAY``: with two writes, Nagle's algorithm and the client's delayed
ACK hold the second for ~40 ms.

Control API (never recorded): ``GET /_fake/requests``, ``POST /_fake/scenario``
(body: a scenario document), ``POST /_fake/reset``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Self

from fake_provider.scenario import TRICKLE_BYTES, Answer, Scenario, ScenarioError, ToolCallReply

_LOOPBACK = ("127.0.0.1", "::1")
_MAX_REQUEST_BYTES = 8 * 1024 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the provider saw it."""

    method: str
    path: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    peer: tuple[str, int]
    local: tuple[str, int]
    at: float
    #: TCP_NODELAY as read back from the served connection's socket.
    nodelay: bool = False

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (case-insensitive), or None."""
        lowered = name.lower()
        return next((v for k, v in self.headers if k.lower() == lowered), None)

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)

    def as_json(self) -> dict[str, Any]:
        """A JSON-serialisable view (used by the control API)."""
        return {
            "method": self.method,
            "path": self.path,
            "headers": [list(pair) for pair in self.headers],
            "body": self.body.decode("utf-8", "replace"),
            "peer": list(self.peer),
            "local": list(self.local),
            "at": self.at,
            "nodelay": self.nodelay,
        }


class _State:
    """The scenario cursor and the request log, shared by handler threads."""

    def __init__(self, scenario: Scenario, api_key: str | None = None) -> None:
        self.lock = threading.Lock()
        self.scenario = scenario
        self.api_key = api_key
        self.cursor = 0
        self.direct_cursor = 0
        #: Per keyed conversation (KEY, NONCE): how many of its requests were answered.
        self.keyed_cursors: dict[tuple[str, str], int] = {}
        self.health_checks = 0
        self.requests: list[RecordedRequest] = []
        #: Chat answers fully written (or abandoned by the client): tests wait on this.
        self.answered = 0
        #: The last prompt's tokens: a prefix cache like llama-server's one slot.
        self.cached_prompt: list[str] = []
        #: The ``usage`` each chat answer reported, in the order answered (None: it sent none).
        self.reported: list[dict[str, Any] | None] = []
        #: The scenario's ``slots`` (None: any number of answers at once).
        self.slots = _slots(scenario)
        #: Chat answers being written now, and the most written at once since the last reset.
        self.answering = 0
        self.most_answering = 0

    def prompt_usage(self, request: Mapping[str, Any]) -> tuple[int, int]:
        """``(prompt_tokens, cached_tokens)`` of a request, as a one-slot prefix cache counts.

        Tokens are 4-character pieces of the messages as the server would
        template them; the cached ones are the leading tokens shared with the
        previous prompt (never all of them: the last token is always computed).
        """
        messages = request.get("messages")
        text = "".join(f"<|{m.get('role')}|>{m.get('content')}\n" for m in messages
                       if isinstance(m, dict)) if isinstance(messages, list) else ""
        tokens = [text[i:i + 4] for i in range(0, len(text), 4)]
        with self.lock:
            shared = 0
            for old, new in zip(self.cached_prompt, tokens, strict=False):
                if old != new:
                    break
                shared += 1
            self.cached_prompt = tokens
        return len(tokens), min(shared, max(len(tokens) - 1, 0))

    def next_answer(self, request: Mapping[str, Any]) -> Answer | None:
        conversation = self.scenario.conversation(request.get("messages"))
        if conversation is not None:
            with self.lock:
                index = self.keyed_cursors.get(conversation, 0)
                self.keyed_cursors[conversation] = index + 1
            return self.scenario.keyed_answer(*conversation, index)
        if self.scenario.is_direct(request):
            with self.lock:
                direct = self.scenario.direct
                if self.direct_cursor < len(direct):
                    self.direct_cursor += 1
                    return direct[self.direct_cursor - 1]
                return direct[-1] if self.scenario.when_exhausted == "repeat_last" else None
        with self.lock:
            answers = self.scenario.answers
            if self.cursor < len(answers):
                self.cursor += 1
                return answers[self.cursor - 1]
            if self.scenario.when_exhausted == "repeat_last" and answers:
                return answers[-1]
            return None

    def rewind(self, scenario: Scenario) -> None:
        """Serve ``scenario`` from its start: every cursor and the health count at 0."""
        with self.lock:
            self.scenario, self.cursor, self.direct_cursor = scenario, 0, 0
            self.health_checks = 0
            self.slots = _slots(scenario)

    def health_loading(self) -> bool:
        with self.lock:
            self.health_checks += 1
            return self.health_checks <= self.scenario.loading_health_checks


def _slots(scenario: Scenario) -> threading.Semaphore | None:
    return threading.Semaphore(scenario.slots) if scenario.slots else None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, host: str, port: int, state: _State) -> None:
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.state = state
        super().__init__((host, port), _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up (a cancelled or timed-out request) is expected here."""
        error = sys.exc_info()[1]
        if not isinstance(error, ConnectionError):
            super().handle_error(request, client_address)


def _completion_id() -> str:
    return f"chatcmpl-{time.monotonic_ns()}"


def _chunks(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), size):
        yield text[start : start + size]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "fake-llama-server/1"
    nodelay = False

    def log_message(self, format: str, *args: Any) -> None:
        """Keep test output quiet; everything is recorded instead."""

    def setup(self) -> None:
        """Send each write at once (a stream's chunks must not wait for an ACK); the option
        is read back and recorded with every request of this connection."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.nodelay = bool(self.connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    # -- plumbing ---------------------------------------------------------------

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(min(length, _MAX_REQUEST_BYTES)) if length > 0 else b""

    def _record(self, body: bytes) -> None:
        local = self.connection.getsockname()
        self.server.state.requests.append(
            RecordedRequest(
                method=self.command,
                path=self.path,
                headers=tuple((k, v) for k, v in self.headers.items()),
                body=body,
                peer=(str(self.client_address[0]), int(self.client_address[1])),
                local=(str(local[0]), int(local[1])),
                at=time.time(),
                nodelay=self.nodelay,
            )
        )

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytes:
        """The status line and headers, ready to go out with the first bytes of the body."""
        self.log_request(status)
        phrase = self.responses.get(status, ("",))[0]
        lines = [f"{self.protocol_version} {status} {phrase}",
                 f"Server: {self.version_string()}", f"Date: {self.date_time_string()}"]
        for name, value in headers:
            lines.append(f"{name}: {value}")
            if name.lower() == "connection" and value.lower() == "close":
                self.close_connection = True
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    def _send_json(self, status: int, document: Any, extra: tuple[tuple[str, str], ...] = (),
                   raw: bytes | None = None, trickle_delay: float = 0.0) -> None:
        payload = raw if raw is not None else json.dumps(document).encode("utf-8")
        head = self._head(status, [("Content-Type", "application/json; charset=utf-8"),
                                   ("Content-Length", str(len(payload))), *extra])
        if not trickle_delay:
            self.wfile.write(head + payload)  # one write: see the module docstring
            return
        # A server that never stalls long enough for a read timeout, yet never
        # finishes: only an overall deadline ends the client's wait (AV-04).
        self.wfile.write(head)
        for start in range(0, len(payload), TRICKLE_BYTES):
            if start:
                time.sleep(trickle_delay)
            self.wfile.write(payload[start : start + TRICKLE_BYTES])

    def _refused(self) -> bool:
        """Like llama-server with ``--api-key``: ``/v1/*`` needs the Bearer key (401 else)."""
        key = self.server.state.api_key
        if key is None or not self.path.startswith("/v1/"):
            return False
        if self.headers.get("Authorization") == f"Bearer {key}":
            return False
        self._send_json(401, {"error": {"code": 401, "message": "Invalid API Key",
                                        "type": "authentication_error"}})
        return True

    def _drop(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _write_chunk(self, data: bytes, head: bytes = b"") -> None:
        """One chunk of a chunked body, in one write (after ``head``, if not yet sent)."""
        self.wfile.write(head + f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")

    # -- routes -----------------------------------------------------------------

    def do_GET(self) -> None:
        if self.path == "/_fake/requests":
            with self.server.state.lock:
                log = [r.as_json() for r in self.server.state.requests]
                most = self.server.state.most_answering
            self._send_json(200, {"requests": log, "most_answering": most})
            return
        self._record(b"")
        if self._refused():
            return
        if self.path == "/health":
            if self.server.state.health_loading():
                self._send_json(503, {"error": {"code": 503, "message": "Loading model",
                                                "type": "unavailable_error"}})
            else:
                self._send_json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": "llamacpp"}
                    for m in self.server.state.scenario.models]
            self._send_json(200, {"object": "list", "data": data})
        else:
            self._send_json(404, {"error": {"code": 404, "message": "File Not Found"}})

    def do_POST(self) -> None:
        body = self._read_body()
        state = self.server.state
        if self.path == "/_fake/reset":
            with state.lock:
                state.requests.clear()
                state.most_answering = state.answering
            self._send_json(200, {"ok": True})
            return
        if self.path == "/_fake/scenario":
            try:
                scenario = Scenario.from_json(json.loads(body))
            except (ValueError, TypeError, ScenarioError) as exc:
                self._send_json(400, {"error": {"message": str(exc)}})
                return
            state.rewind(scenario)
            self._send_json(200, {"ok": True})
            return
        self._record(body)
        if self._refused():
            return
        if self.path != "/v1/chat/completions":
            self._send_json(404, {"error": {"code": 404, "message": "File Not Found"}})
            return
        try:
            request = json.loads(body)
            stream = bool(request.get("stream", False))
            model = str(request.get("model", ""))
            options = request.get("stream_options")
            with_usage = isinstance(options, dict) and options.get("include_usage") is True
        except (ValueError, AttributeError):
            self._send_json(400, {"error": {"code": 400, "message": "invalid JSON body"}})
            return
        answer = state.next_answer(request)
        if answer is None:
            self._send_json(500, {"error": {"code": 500, "message": "scenario exhausted"}})
            return
        slots = state.slots
        try:
            with slots if slots is not None else contextlib.nullcontext():
                with state.lock:
                    state.answering += 1
                    state.most_answering = max(state.most_answering, state.answering)
                try:
                    self._answer(answer, model=model, stream=stream,
                                 usage=state.prompt_usage(request), stream_usage=with_usage)
                finally:
                    with state.lock:
                        state.answering -= 1
        finally:
            with state.lock:
                state.answered += 1

    def _answer(self, answer: Answer, *, model: str, stream: bool,
                usage: tuple[int, int], stream_usage: bool = False) -> None:
        if answer.delay:
            time.sleep(answer.delay)
        if answer.drop:
            self._drop()
            return
        if answer.raw_body is not None or answer.status != 200:
            raw = (answer.raw_body or "").encode("utf-8")
            self._send_json(answer.status, None, answer.headers, raw=raw,
                            trickle_delay=answer.trickle_delay)
            return
        reported = _usage_json(answer, usage)
        if stream:
            self._stream(answer, model, reported if stream_usage else None)
            return
        ident = _completion_id()
        message: dict[str, Any] = {"role": "assistant", "content": answer.content}
        if answer.reasoning is not None:
            message["reasoning_content"] = answer.reasoning
        if answer.tool_calls:
            message["content"] = answer.content or None  # as OpenAI answers a pure call
            message["tool_calls"] = [_call_json(call, index, ident)
                                     for index, call in enumerate(answer.tool_calls)]
        document: dict[str, Any] = {
            "id": ident, "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": answer.finish_reason}],
        }
        if reported is not None:  # a provider that counts nothing sends no usage
            document["usage"] = reported
        self._report(reported)
        if answer.oversize_bytes:
            document["padding"] = "x" * answer.oversize_bytes
        self._send_json(200, document, answer.headers, trickle_delay=answer.trickle_delay)

    def _report(self, usage: dict[str, Any] | None) -> None:
        with self.server.state.lock:
            self.server.state.reported.append(usage)

    def _stream(self, answer: Answer, model: str, usage: dict[str, Any] | None) -> None:
        # The headers leave with the first chunk (or the drop / the end, if there is none).
        head = self._head(int(HTTPStatus.OK), [("Content-Type", "text/event-stream"),
                                          ("Cache-Control", "no-cache"),
                                          ("Transfer-Encoding", "chunked"), *answer.headers])
        ident, created = _completion_id(), int(time.time())

        def event(delta: dict[str, Any], finish: str | None = None) -> bytes:
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created,
                     "model": model,
                     "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            return f"data: {json.dumps(chunk)}\n\n".encode()

        pieces = [event({"role": "assistant", "content": ""})]
        pieces += [event({"reasoning_content": p})
                   for p in _chunks(answer.reasoning or "", answer.chunk_chars)]
        pieces += [event({"content": p}) for p in _chunks(answer.content, answer.chunk_chars)]
        for index, call in enumerate(answer.tool_calls):
            pieces.append(event({"tool_calls": [_call_json(call, index, ident, arguments="")]}))
            pieces += [event({"tool_calls": [{"index": index, "function": {"arguments": p}}]})
                       for p in _chunks(call.arguments, answer.chunk_chars)]
        pieces.append(event({}, answer.finish_reason))
        if usage is not None:  # llama-server's last chunk when asked: no choices, the usage
            chunk = {"id": ident, "object": "chat.completion.chunk", "created": created,
                     "model": model, "choices": [], "usage": usage}
            pieces.append(f"data: {json.dumps(chunk)}\n\n".encode())
        sent = 0
        for index, piece in enumerate(pieces):
            if answer.drop_after_chunks is not None and index >= answer.drop_after_chunks:
                if head:
                    self.wfile.write(head)
                self._drop()
                return
            if answer.truncate_after_chunks is not None and index >= answer.truncate_after_chunks:
                self._write_chunk(b"", head)
                return
            self._write_chunk(piece, head)
            head = b""
            sent += len(piece)
            if answer.chunk_delay:
                time.sleep(answer.chunk_delay)
        self._report(usage)  # every chunk went out: before [DONE], so a client sees it listed
        while answer.oversize_bytes and sent < answer.oversize_bytes:
            filler = b": " + b"x" * 16384 + b"\n"
            self._write_chunk(filler)
            sent += len(filler)
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")


def _usage_json(answer: Answer, usage: tuple[int, int]) -> dict[str, Any] | None:
    """A reply's ``usage``: the prompt as the prefix cache counted it, a token per word;
    only the counts the answer ``reports`` (None: it reports none)."""
    if not answer.reports:
        return None
    (prompt, cached), completion = usage, len(answer.content.split())
    said: dict[str, Any] = {}
    if "prompt_tokens" in answer.reports:
        said["prompt_tokens"] = prompt
    if "completion_tokens" in answer.reports:
        said["completion_tokens"] = completion
    if len(said) == 2:
        said["total_tokens"] = prompt + completion
    if "cached_tokens" in answer.reports:
        said["prompt_tokens_details"] = {"cached_tokens": cached}
    return said


def _call_json(call: ToolCallReply, index: int, completion: str,
               arguments: str | None = None) -> dict[str, Any]:
    """One OpenAI ``tool_calls`` entry (a stream's first delta of a call has ``index`` too)."""
    entry: dict[str, Any] = {
        "id": call.id or f"call_{index}_{completion}", "type": "function",
        "function": {"name": call.name,
                     "arguments": call.arguments if arguments is None else arguments}}
    if arguments is not None:
        entry["index"] = index
    return entry


class FakeProvider:
    """Run the fake provider in a background thread: ``with FakeProvider(s) as fp: ...``."""

    def __init__(self, scenario: Scenario, *, host: str = "127.0.0.1", port: int = 0,
                 api_key: str | None = None) -> None:
        if host not in _LOOPBACK:
            raise ValueError("the fake provider listens on 127.0.0.1 or ::1 only")
        self._state = _State(scenario, api_key)
        self._server = _Server(host, port, self._state)
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05}, daemon=True)
        self.host = host

    @property
    def port(self) -> int:
        """The port actually bound."""
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT`` or ``http://[::1]:PORT``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every recorded request, oldest first."""
        with self._state.lock:
            return list(self._state.requests)

    def chat_requests(self) -> list[RecordedRequest]:
        """The recorded ``POST /v1/chat/completions`` requests."""
        return [r for r in self.requests if r.path == "/v1/chat/completions"]

    @property
    def reported(self) -> list[dict[str, Any] | None]:
        """The ``usage`` of every completion sent, oldest first: what the provider reported.

        None for a stream that was not asked for usage; an error, a raw body, a
        dropped or truncated stream reports nothing and is not listed. A stream is
        listed once its last chunk was sent, before its ``[DONE]``.
        """
        with self._state.lock:
            return list(self._state.reported)

    @property
    def answered(self) -> int:
        """How many chat requests have been answered to the end (or dropped by the client)."""
        with self._state.lock:
            return self._state.answered

    def set_scenario(self, scenario: Scenario) -> None:
        """Replace the script and rewind it (the request log is kept)."""
        self._state.rewind(scenario)

    def start(self) -> Self:
        """Start serving in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket; idempotent."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
