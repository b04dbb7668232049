"""The engine in any chat client (BR-13): OpenAI's chat-completions wire format.

``POST /api/cordis/v1/chat/completions`` runs each request as one turn of a new
transient session (the engine contract's :meth:`~labfy_ref.bridge.contract.Engine.run_transient`)
seeded with the transcript the client sends; ``GET /api/cordis/v1/models``
lists the engine's qualified routes (BR-10) as OpenAI model objects. Like every
bridge route these know only the engine contract, and they are the admin's: a
client authenticates with ``Authorization: Bearer <login code>`` (SV-08).

What a chat client sees of a turn is its answer, nothing else:

* ``text`` chunks are the reply's ``content``; ``reasoning`` chunks, when the
  provider exposes any, are ``reasoning_content`` (llama-server's name for it);
* the engine's tool calls and results stay inside the engine. They are not sent
  as OpenAI ``tool_calls``: in that format a tool call is a request *to the
  client* to run a function and send its result back, and these calls have
  already run, server-side, through the gateway. A client that declares tools of
  its own (``tools``, ``tool_choice``) is refused rather than ignored;
* the caller is headless (BR-12): a write the session's read-only mode would ask
  about is refused, as the model is told in the tool's result;
* sampling fields (``temperature``, ``max_tokens``, ...) are accepted so that
  ordinary clients work, and not applied: the engine's decoding is set by the
  action contract (PR-06), whatever the client asks;
* ``usage`` is in the body when the provider reported it; a stream carries it on
  its finish chunk, or — when the client asks with ``stream_options.include_usage``,
  as OpenAI does — in one more chunk with no choices, just before ``[DONE]``.

Errors are OpenAI-shaped — ``{"error": {"message", "type", "code", "param"}}`` —
which also keeps the server's own ``code`` and ``message`` fields (SV-05); a
failure after a stream began is one ``data: {"error": ...}`` event, then
``data: [DONE]``. A client that disconnects cancels the turn (BR-05), streamed
or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any, Literal

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import Field
from starlette.types import Receive, Scope, Send

from labfy_ref.bridge.contract import PriorMessage, Transcript
from labfy_ref.bridge.ndjson import encode_line
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, LabfyError, RuntimeRefused
from labfy_ref.server.bridge_routes import EngineDep
from labfy_ref.server.errors import openai_error, status_of
from labfy_ref.server.routes import Strict

#: Most messages one transcript may hold (the body's byte bound applies as well).
MAX_MESSAGES = 1000
SSE = "text/event-stream"
_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


# -- errors ------------------------------------------------------------------------------


def error_answer(code: ErrorCode | str, message: str) -> JSONResponse:
    """A refused request, OpenAI-shaped, with the status its code maps to."""
    error = openai_error(code, message)
    return JSONResponse({"error": error}, status_code=status_of(error["code"]))


class OpenAIRoute(APIRoute):
    """A route whose refusals (its dependencies' and its body's too) are OpenAI-shaped."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The usual handler, with refusals answered in OpenAI's error shape."""
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except LabfyError as exc:
                return error_answer(exc.code, exc.message)
            except RequestValidationError as exc:
                first = exc.errors()[0] if exc.errors() else {}
                where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
                return error_answer(ErrorCode.VALIDATION_FAILED,
                                    f"{where or 'body'}: {first.get('type', 'invalid')}")

        return answer


router = APIRouter(prefix="/api/cordis/v1", route_class=OpenAIRoute)


# -- the request -------------------------------------------------------------------------


class TextPart(Strict):
    """A text part of a message's content (images and audio are not accepted)."""

    type: Literal["text"]
    text: str


class MessageBody(Strict):
    """One message of the transcript (``developer`` is OpenAI's newer name for ``system``)."""

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = Field(default=None, max_length=256)

    @property
    def text(self) -> str:
        """The content as one text (parts joined, as OpenAI reads them)."""
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class StreamOptions(Strict):
    """``stream_options``: ``include_usage`` asks for OpenAI's usage chunk before ``[DONE]``."""

    include_usage: bool = False


class ChatBody(Strict):
    """``POST /api/cordis/v1/chat/completions``: OpenAI's request, minus client-side tools."""

    model: str = Field(min_length=1, max_length=512)
    messages: list[MessageBody] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)  # an int, not a Literal: True == 1 in Python
    # Accepted for compatibility, not applied: the action contract sets the decoding.
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    user: str | None = Field(default=None, max_length=256)


def transcript_of(body: ChatBody) -> Transcript:
    """The transient session's seed: system messages as context, the rest as history.

    The last message must be the user's: it is the one this turn answers.
    """
    *earlier, last = body.messages
    if last.role != "user":
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                             "messages: the last message must have role user")
    context: list[str] = []
    history: list[PriorMessage] = []
    for message in earlier:
        if message.role in ("system", "developer"):
            context.append(message.text)
        else:
            history.append(PriorMessage("user" if message.role == "user" else "assistant",
                                        message.text))
    return Transcript(body.model, tuple(context), tuple(history), last.text)


# -- the answer --------------------------------------------------------------------------


class _Reply:
    """What every chunk (or the body) of one completion repeats: id, time, model."""

    def __init__(self, handle: StreamHandle, model: str) -> None:
        self.id = f"chatcmpl-{handle.session_id}"
        self.created = int(time.time())
        self.model = model
        self.handle = handle

    def usage(self) -> dict[str, Any] | None:
        """The turn's tokens as the provider reported them, OpenAI-shaped; None if unreported."""
        usage = self.handle.usage
        if usage is None:
            return None
        prompt, completion = usage.prompt_tokens, usage.completion_tokens
        shaped: dict[str, Any] = {
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": None if prompt is None or completion is None else prompt + completion}
        if usage.cached_tokens is not None:
            shaped["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
        return shaped

    def chunk(self, delta: dict[str, Any], finish: str | None = None, *,
              usage: bool = False) -> bytes:
        """One SSE event holding a ``chat.completion.chunk`` (``usage``: with the turn's)."""
        return event(self._chunk([{"index": 0, "delta": delta, "finish_reason": finish}],
                                 usage=usage))

    def usage_chunk(self) -> bytes | None:
        """OpenAI's ``include_usage`` chunk: no choices, the turn's usage (None: unreported)."""
        return None if self.usage() is None else event(self._chunk([], usage=True))

    def _chunk(self, choices: list[dict[str, Any]], *, usage: bool) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "choices": choices}
        if usage and (reported := self.usage()) is not None:
            document["usage"] = reported
        return document

    def completion(self, text: str, reasoning: str) -> dict[str, Any]:
        """The whole ``chat.completion`` body."""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
        document: dict[str, Any] = {
            "id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}
        if (usage := self.usage()) is not None:
            document["usage"] = usage
        return document


def event(document: dict[str, Any]) -> bytes:
    """``data: <json>`` and the blank line that ends an SSE event (JSON has no raw newline)."""
    return b"data: " + encode_line(document) + b"\n"


DONE = b"data: [DONE]\n\n"


def _failure(chunk: dict[str, Any]) -> tuple[str, str] | None:
    """The code and message a turn's ``error`` or unfinished ``done`` chunk stands for."""
    if chunk["type"] == "error":
        return str(chunk["code"]), str(chunk["message"])
    if chunk["type"] == "done" and chunk["reason"] == "cancelled":
        return ErrorCode.CANCELLED.value, "the turn was cancelled"
    return None


async def _events(reply: _Reply, include_usage: bool) -> AsyncIterator[bytes]:
    """The turn as SSE: a role chunk, content deltas, then the finish chunk (or an error)."""
    yield reply.chunk({"role": "assistant", "content": ""})
    failed = False
    async for chunk in reply.handle.iterate():
        kind = chunk["type"]
        if kind == "text":
            yield reply.chunk({"content": chunk["text"]})
        elif kind == "reasoning":
            yield reply.chunk({"reasoning_content": chunk["text"]})
        elif not failed and (failure := _failure(chunk)) is not None:
            failed = True
            yield event({"error": openai_error(*failure)})
        elif kind == "done" and not failed:
            yield reply.chunk({}, "stop", usage=not include_usage)
            if include_usage and (usage := reply.usage_chunk()) is not None:
                yield usage
    yield DONE


async def _answer(reply: _Reply) -> JSONResponse:
    """The whole turn as one body: a ``chat.completion``, or the turn's error."""
    text: list[str] = []
    reasoning: list[str] = []
    async for chunk in reply.handle.iterate():
        if chunk["type"] == "text":
            text.append(chunk["text"])
        elif chunk["type"] == "reasoning":
            reasoning.append(chunk["text"])
        elif (failure := _failure(chunk)) is not None:
            return error_answer(*failure)
    return JSONResponse(reply.completion("".join(text), "".join(reasoning)))


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the body was read already: nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class TurnStream(StreamingResponse):
    """The SSE answer; however it ends (done, disconnect, an error), the turn is cancelled."""

    def __init__(self, reply: _Reply, *, include_usage: bool) -> None:
        super().__init__(_events(reply, include_usage), media_type=SSE, headers=_STREAM_HEADERS)
        self._handle = reply.handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Stream (Starlette cancels the body when the client disconnects), then cancel."""
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._handle.cancel()  # a no-op once the turn is done


class TurnAnswer(Response):
    """The one-body answer, sent when the turn ends; a client that leaves first cancels it."""

    def __init__(self, reply: _Reply) -> None:
        super().__init__(media_type="application/json")
        self._reply = reply

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wait for the turn or the client's disconnect, whichever comes first."""
        answer = asyncio.ensure_future(_answer(self._reply))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
            if answer.done():
                await answer.result()(scope, receive, send)
        finally:
            self._reply.handle.cancel()  # a no-op once the turn is done
            for task in (answer, gone):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task


# -- routes ------------------------------------------------------------------------------


@router.post("/chat/completions")
async def chat_completions(body: ChatBody, engine: EngineDep) -> Response:
    """One turn of a new transient session: SSE when ``stream``, else one JSON body."""
    handle = await engine.run_transient(transcript_of(body))
    reply = _Reply(handle, body.model)
    if not body.stream:
        return TurnAnswer(reply)
    options = body.stream_options
    return TurnStream(reply, include_usage=options is not None and options.include_usage)


@router.get("/models")
async def models(engine: EngineDep) -> dict[str, Any]:
    """The engine's qualified routes as OpenAI model objects (``created`` unknown: 0)."""
    listed = await engine.list_models()
    return {"object": "list",
            "data": [{"id": model["id"], "object": "model", "created": 0,
                      "owned_by": model["provider"]} for model in listed["models"]]}
