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
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Coroutine, Sequence
from typing import Annotated, Any, Literal, TypeVar

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from pydantic import AfterValidator, Field
from starlette.types import Receive, Scope, Send

from labfy_ref.bridge.contract import (
    DIRECT_PREFIX,
    DirectCall,
    DirectMessage,
    PriorMessage,
    Transcript,
)
from labfy_ref.bridge.ndjson import encode_line
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, FieldRefused, LabfyError, RuntimeRefused
from labfy_ref.protocol import Usage, canonical
from labfy_ref.server.bridge_routes import EngineDep
from labfy_ref.server.errors import openai_error, status_of
from labfy_ref.server.routes import State, Strict

#: Most messages one transcript may hold (the body's byte bound applies as well).
MAX_MESSAGES = 1000
SSE = "text/event-stream"
T = TypeVar("T")
_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}


# -- errors ------------------------------------------------------------------------------


def error_answer(code: ErrorCode | str, message: str,
                 param: str | None = None) -> JSONResponse:
    """A refused request, OpenAI-shaped, with the status its code maps to (``param``: the
    field at fault, when one is)."""
    error = openai_error(code, message)
    error["param"] = param
    return JSONResponse({"error": error}, status_code=status_of(error["code"]))


def param_of(location: Sequence[Any]) -> str:
    """A validation error's place, as every refusal of the server names it:
    ``messages.0.content`` (the body itself is not named)."""
    return ".".join(str(part) for part in location if part != "body")


def validation_refusal(errors: Sequence[Any]) -> tuple[str, str | None]:
    """The message (in words, naming the field) and ``param`` of a refused body."""
    first = errors[0] if errors else {}
    param = param_of(first.get("loc", ())) or None
    where = param or "body"
    kind = first.get("type", "invalid")
    if kind == "extra_forbidden":
        return (f"{where}: this engine does not accept this field (docs/api.md lists the "
                "fields it accepts and ignores)"), param
    if kind == "missing":
        return f"{where}: this field is required", param
    said = str(first.get("msg", kind)).removeprefix("Value error, ")
    return f"{where}: {said}", param


class OpenAIRoute(APIRoute):
    """A route whose refusals (its dependencies' and its body's too) are OpenAI-shaped."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        """The usual handler, with refusals answered in OpenAI's error shape."""
        handler = super().get_route_handler()

        async def answer(request: Request) -> Response:
            try:
                return await handler(request)
            except FieldRefused as exc:
                return error_answer(exc.code, exc.message, exc.param)
            except LabfyError as exc:
                return error_answer(exc.code, exc.message)
            except RequestValidationError as exc:
                message, param = validation_refusal(exc.errors())
                return error_answer(ErrorCode.VALIDATION_FAILED, message, param)

        return answer


router = APIRouter(prefix="/api/cordis/v1", route_class=OpenAIRoute)


# -- the request -------------------------------------------------------------------------


#: Fields a mainstream chat client sends that do not change the engine's contract: accepted
#: and not applied (docs/api.md lists them). The engine's decoding is the action contract's
#: (PR-06), whatever a client asks; the engine runs its own tools, so a client's ``tools``
#: are never offered to the model (a ``tool_choice`` that *forces* one is refused).
IGNORED_FIELDS = ("temperature", "top_p", "top_k", "min_p", "typical_p", "repeat_penalty",
                  "max_tokens", "max_completion_tokens", "presence_penalty",
                  "frequency_penalty", "seed", "stop", "logit_bias", "user", "reasoning_effort",
                  "store", "metadata", "service_tier", "parallel_tool_calls", "tools",
                  "tool_choice", "logprobs", "top_logprobs", "modalities")
#: Most client tools one request may declare (Open WebUI sends 36 built-in ones).
MAX_CLIENT_TOOLS = 128
#: ``tool_choice`` values that let the engine answer without calling a client function.
_UNFORCED = ("auto", "none")
_TEXT_ONLY = ("this engine reads text only: {kind} parts cannot be sent to it; "
              "send the text alone")


def _content(value: Any) -> Any:
    """A message's content: a string, null, or a list of typed parts (checked later, each
    at its place, so that a refusal can name it)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, dict) and isinstance(
            part.get("type"), str) for part in value):
        return value
    raise ValueError("must be a string or a list of parts, each an object with a type")


def _tool_choice(value: Any) -> Any:
    if value is None or value in (*_UNFORCED, "required"):
        return value
    if isinstance(value, dict) and value.get("type") in ("function", "allowed_tools"):
        return value
    raise ValueError("must be 'none', 'auto', 'required' or a named function")


#: A client schema's bounds (BR-17, BR-20): what llama-server's grammar compiler is given.
MAX_SCHEMA_BYTES = 16 * 1024
MAX_SCHEMA_DEPTH = 24
#: The most ``max_tokens`` a direct call may ask for, and what one that names none gets (a
#: small model asked for follow-ups without a limit may write until its context is full).
MAX_DIRECT_TOKENS = 8192
DEFAULT_DIRECT_TOKENS = 1024
#: Regex features llama.cpp's json_schema grammar cannot express (lookaround, named or
#: flagged groups, back-references): a ``pattern`` with one is refused, not half-applied.
_UNSUPPORTED_PATTERN = re.compile(r"\(\?|\\[1-9]|\\[bBkp]")


def _schema_problem(node: Any, depth: int = 0) -> str | None:
    """Why a client's JSON schema cannot be used (None: it can)."""
    if depth > MAX_SCHEMA_DEPTH:
        return f"nested deeper than {MAX_SCHEMA_DEPTH} levels"
    if isinstance(node, list):
        return next((p for item in node if (p := _schema_problem(item, depth + 1))), None)
    if not isinstance(node, dict):
        return None
    ref = node.get("$ref")
    if ref is not None and not (isinstance(ref, str) and ref.startswith("#")):
        return "only local $ref (#/...) is followed; a remote schema is never fetched"
    pattern = node.get("pattern")
    if isinstance(pattern, str) and _UNSUPPORTED_PATTERN.search(pattern):
        return ("a pattern uses lookaround, a flagged or named group or a back-reference, "
                "which the model's grammar cannot express")
    return next((p for value in node.values() if (p := _schema_problem(value, depth + 1))),
                None)


def _response_format(value: Any) -> Any:
    """OpenAI's ``response_format``: text, json_object or json_schema (checked, bounded)."""
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text" and set(value) == {"type"}:
        return value
    if kind == "json_object" and set(value) <= {"type", "schema"}:
        return value
    if kind == "json_schema" and set(value) == {"type", "json_schema"}:
        spec = value["json_schema"]
        if isinstance(spec, dict) and isinstance(spec.get("schema"), dict) and set(spec) <= {
                "name", "schema", "strict", "description"}:
            if len(canonical(spec["schema"]).encode()) > MAX_SCHEMA_BYTES:
                raise ValueError(f"the schema is over {MAX_SCHEMA_BYTES} bytes")
            problem = _schema_problem(spec["schema"])
            if problem is not None:
                raise ValueError(f"the schema cannot be used: {problem}")
            return value
    raise ValueError("must be {\"type\": \"text\"}, {\"type\": \"json_object\"} or "
                     "{\"type\": \"json_schema\", \"json_schema\": {\"name\", \"schema\"}}")


class FunctionDef(Strict):
    """A client function (never offered to the engine's model)."""

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ClientTool(Strict):
    """One entry of ``tools``: OpenAI's function tool."""

    type: Literal["function"]
    function: FunctionDef


class MessageBody(Strict):
    """One message of the transcript (``developer`` is OpenAI's newer name for ``system``)."""

    role: Literal["system", "developer", "user", "assistant"]
    content: Annotated[Any, AfterValidator(_content)] = None
    name: str | None = Field(default=None, max_length=256)

    def text(self, index: int) -> str:
        """The content as one text (text parts joined, as OpenAI reads them); a part of any
        other kind is refused, naming it (``messages.INDEX.content.J``)."""
        if not isinstance(self.content, list):
            return self.content or ""
        texts = []
        for number, part in enumerate(self.content):
            where = f"messages.{index}.content.{number}"
            if part["type"] != "text":
                raise FieldRefused(where, _TEXT_ONLY.format(kind=repr(part["type"][:40])))
            if set(part) != {"type", "text"} or not isinstance(part["text"], str):
                raise FieldRefused(where, "a text part is {\"type\": \"text\", \"text\": "
                                          "a string}")
            texts.append(part["text"])
        return "".join(texts)


class StreamOptions(Strict):
    """``stream_options``: ``include_usage`` asks for OpenAI's usage chunk before ``[DONE]``."""

    include_usage: bool = False


class ChatBody(Strict):
    """``POST /api/cordis/v1/chat/completions``: OpenAI's request as chat clients send it."""

    model: str = Field(min_length=1, max_length=512)
    messages: list[MessageBody] = Field(min_length=1, max_length=MAX_MESSAGES)
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=1)  # an int, not a Literal: True == 1 in Python
    # Accepted for compatibility, not applied (IGNORED_FIELDS).
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    typical_p: float | None = None
    repeat_penalty: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    logit_bias: dict[str, float] | None = Field(default=None, max_length=1024)
    user: str | None = Field(default=None, max_length=256)
    reasoning_effort: str | None = Field(default=None, max_length=32)
    store: bool | None = None
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    service_tier: str | None = Field(default=None, max_length=32)
    parallel_tool_calls: bool | None = None
    tools: list[ClientTool] | None = Field(default=None, max_length=MAX_CLIENT_TOOLS)
    tool_choice: Annotated[Any, AfterValidator(_tool_choice)] = None
    logprobs: bool | None = None
    top_logprobs: int | None = None
    modalities: list[Literal["text"]] | None = None
    response_format: Annotated[Any, AfterValidator(_response_format)] = None

    def json_format(self) -> dict[str, Any] | None:
        """The client's ``response_format`` when it asks for JSON (None: plain text)."""
        wanted = self.response_format
        return None if wanted is None or wanted["type"] == "text" else dict(wanted)

    def check(self) -> None:
        """What the schema cannot say: refused in words, naming the field."""
        if self.tool_choice is not None and self.tool_choice not in _UNFORCED:
            raise FieldRefused("tool_choice", "this engine runs its own tools; it cannot call "
                                              "functions of the client (send 'auto' or "
                                              "'none', or leave it out)")
        if self.logprobs:
            raise FieldRefused("logprobs", "this engine does not report token log "
                                           "probabilities (send false or leave it out)")
        if self.top_logprobs:
            raise FieldRefused("top_logprobs", "this engine does not report token log "
                                               "probabilities (send 0 or leave it out)")


def transcript_of(body: ChatBody) -> Transcript:
    """The transient session's seed: system messages as context, the rest as history.

    The last message must be the user's: it is the one this turn answers.
    """
    body.check()
    *earlier, last = body.messages
    if last.role != "user":
        raise FieldRefused(f"messages.{len(earlier)}", "the last message must be the user's "
                           "(this engine answers a user message; it does not continue an "
                           "assistant's)")
    context: list[str] = []
    history: list[PriorMessage] = []
    for index, message in enumerate(earlier):
        if message.role in ("system", "developer"):
            context.append(message.text(index))
        else:
            history.append(PriorMessage("user" if message.role == "user" else "assistant",
                                        message.text(index)))
    text = last.text(len(earlier))
    if not text:
        raise FieldRefused(f"messages.{len(earlier)}.content", "the message to answer is empty")
    return Transcript(body.model, tuple(context), tuple(history), text, body.json_format())


def direct_call_of(body: ChatBody) -> DirectCall:
    """A request to a ``direct:`` route (BR-17): the messages as sent, the client's format
    and ``max_tokens`` (bounded); its tools are never sent to the model."""
    body.check()
    messages = tuple(DirectMessage("system" if m.role == "developer" else m.role, m.text(i))
                     for i, m in enumerate(body.messages))
    asked = body.max_completion_tokens or body.max_tokens or DEFAULT_DIRECT_TOKENS
    limit = max(1, min(asked, MAX_DIRECT_TOKENS))
    return DirectCall(body.model, messages, body.json_format(), limit)


# -- the answer --------------------------------------------------------------------------


class _Reply:
    """What every chunk (or the body) of one completion repeats: id, time, model."""

    def __init__(self, handle: StreamHandle, model: str) -> None:
        self.id = f"chatcmpl-{handle.session_id}"
        self.created = int(time.time())
        self.model = model
        self.handle = handle

    def usage(self) -> dict[str, Any]:
        """The turn's tokens as the provider reported them, OpenAI-shaped: zeros where no
        model ran (the demo policy, or no call made), null counts where one ran and did not
        say (BR-14: never a 0 nobody reported)."""
        usage = self.handle.usage
        if usage is None:
            ran = self.handle.is_model and self.handle.model_calls > 0
            usage = Usage() if ran else Usage(0, 0)
        prompt, completion = usage.prompt_tokens, usage.completion_tokens
        shaped: dict[str, Any] = {
            "prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": None if prompt is None or completion is None else prompt + completion}
        if usage.cached_tokens is not None:
            shaped["prompt_tokens_details"] = {"cached_tokens": usage.cached_tokens}
        return shaped

    def chunk(self, delta: dict[str, Any], finish: str | None = None, *,
              usage: bool = False, facts: list[Any] | None = None) -> bytes:
        """One SSE event holding a ``chat.completion.chunk`` (``usage``: with the turn's;
        ``facts``: the answer's checked facts, on the finish chunk)."""
        document = self._chunk([{"index": 0, "delta": delta, "finish_reason": finish}],
                               usage=usage)
        if facts is not None:
            document[FACTS_FIELD] = facts
        return event(document)

    def usage_chunk(self) -> bytes:
        """OpenAI's ``include_usage`` chunk: no choices, the turn's usage."""
        return event(self._chunk([], usage=True))

    def _chunk(self, choices: list[dict[str, Any]], *, usage: bool) -> dict[str, Any]:
        document: dict[str, Any] = {
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "choices": choices}
        if usage:
            document["usage"] = self.usage()
        return document

    def completion(self, text: str, reasoning: str,
                   facts: list[Any] | None = None) -> dict[str, Any]:
        """The whole ``chat.completion`` body (with the answer's checked facts, when the
        engine's agent answered: the extension field ``labfy_facts``, PR-09)."""
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if reasoning:
            message["reasoning_content"] = reasoning
        document: dict[str, Any] = {
            "id": self.id, "object": "chat.completion", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": self.usage()}
        if facts is not None:
            document[FACTS_FIELD] = facts
        return document


#: The extension field of a completion (and of a stream's finish chunk) holding the
#: answer's checked facts (PR-09): clients ignore a field they do not know.
FACTS_FIELD = "labfy_facts"


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


KEEPALIVE = b": keep-alive\n\n"


async def ticking(chunks: AsyncGenerator[T, None], seconds: float) -> AsyncIterator[T | None]:
    """``chunks``, and None whenever ``seconds`` pass without one (a keep-alive is due)."""
    waiting: asyncio.Future[T] | None = None
    try:
        while True:
            if waiting is None:
                waiting = asyncio.ensure_future(anext(chunks))
            done, _ = await asyncio.wait({waiting}, timeout=seconds)
            if not done:
                yield None
                continue
            finished, waiting = waiting, None
            try:
                item = finished.result()
            except StopAsyncIteration:
                return
            yield item
    finally:
        if waiting is not None:
            waiting.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await waiting
        await chunks.aclose()


async def _events(reply: _Reply, include_usage: bool,
                  keepalive: float) -> AsyncIterator[bytes]:
    """The turn as SSE: a role chunk, content deltas, then the finish chunk (or an error);
    a comment line whenever the engine works ``keepalive`` seconds without a chunk."""
    yield reply.chunk({"role": "assistant", "content": ""})
    failed = False
    facts: list[Any] | None = None
    async for chunk in ticking(reply.handle.iterate(), keepalive):
        if chunk is None:
            yield KEEPALIVE
            continue
        kind = chunk["type"]
        if kind == "text":
            yield reply.chunk({"content": chunk["text"]})
        elif kind == "reasoning":
            yield reply.chunk({"reasoning_content": chunk["text"]})
        elif kind == "facts":
            facts = list(chunk["facts"])
        elif not failed and (failure := _failure(chunk)) is not None:
            failed = True
            yield event({"error": openai_error(*failure)})
        elif kind == "done" and not failed:
            yield reply.chunk({}, "stop", usage=not include_usage, facts=facts)
            if include_usage:
                yield reply.usage_chunk()
    yield DONE


async def _answer(reply: _Reply) -> JSONResponse:
    """The whole turn as one body: a ``chat.completion``, or the turn's error."""
    text: list[str] = []
    reasoning: list[str] = []
    facts: list[Any] | None = None
    async for chunk in reply.handle.iterate():
        if chunk["type"] == "text":
            text.append(chunk["text"])
        elif chunk["type"] == "reasoning":
            reasoning.append(chunk["text"])
        elif chunk["type"] == "facts":
            facts = list(chunk["facts"])
        elif (failure := _failure(chunk)) is not None:
            return error_answer(*failure)
    return JSONResponse(reply.completion("".join(text), "".join(reasoning), facts))


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (the body was read already: nothing else arrives)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class TurnStream(StreamingResponse):
    """The SSE answer; however it ends (done, disconnect, an error), the turn is cancelled."""

    def __init__(self, reply: _Reply, *, include_usage: bool, keepalive: float) -> None:
        super().__init__(_events(reply, include_usage, keepalive), media_type=SSE,
                         headers=_STREAM_HEADERS)
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
async def chat_completions(body: ChatBody, engine: EngineDep, state: State) -> Response:
    """One turn of a new transient session (or, for a ``direct:`` route, one call of its
    model): SSE when ``stream``, else one JSON body."""
    if body.model.startswith(f"{DIRECT_PREFIX}:"):
        handle = await engine.run_direct(direct_call_of(body))
    else:
        handle = await engine.run_transient(transcript_of(body))
    reply = _Reply(handle, body.model)
    if not body.stream:
        return TurnAnswer(reply)
    options = body.stream_options
    return TurnStream(reply, include_usage=options is not None and options.include_usage,
                      keepalive=state.config.keepalive_seconds)


def _model_object(model: dict[str, Any]) -> dict[str, Any]:
    return {"id": model["id"], "object": "model", "created": 0, "owned_by": model["provider"]}


@router.get("/models")
async def models(engine: EngineDep) -> dict[str, Any]:
    """The engine's qualified routes as OpenAI model objects (``created`` unknown: 0)."""
    listed = [*(await engine.list_models())["models"], *await engine.list_direct_models()]
    return {"object": "list", "data": [_model_object(m) for m in listed]}


@router.get("/models/{model_id}")
async def model(model_id: str, engine: EngineDep) -> dict[str, Any]:
    """One model object of :func:`models` (OpenAI's ``models.retrieve``); 404 UNKNOWN_MODEL."""
    for listed in [*(await engine.list_models())["models"], *await engine.list_direct_models()]:
        if listed["id"] == model_id:
            return _model_object(listed)
    raise RuntimeRefused(ErrorCode.UNKNOWN_MODEL,
                         f"no model {model_id[:80]!r}; GET /api/cordis/v1/models lists them")
