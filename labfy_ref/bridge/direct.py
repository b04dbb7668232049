"""Direct provider routes (BR-17): a chat client's background tasks asked of the model itself.

Beside each engine route ``engine:<provider>:<model>`` the engine offers
``direct:<provider>:<model>`` (same percent-encoding): a chat request to it is sent
to that provider model as the client wrote it, through the same loopback-only client —
no engine prompt, no tools, no session, no workspace data — with the client's
``response_format`` (llama-server's ``json_object`` / ``json_schema``) and
``max_tokens``. It is what a client's titles, tags and follow-up suggestions use
(Open WebUI's *Task Model*), so they cost one model call each, never an agent turn.
Every call is in the usage ledger (BR-14) under its direct route, caller ``direct``.
The demo agent is no model: it has no direct route.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from labfy_ref.bridge.contract import DIRECT_PREFIX, DirectCall
from labfy_ref.bridge.llm import ModelProvider, ModelRoute
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.gateway.usage import UsageService
from labfy_ref.model import StreamDelta
from labfy_ref.model.route import ROUTE_PREFIX
from labfy_ref.protocol import Usage

#: The usage ledger's caller of a direct call (BR-14).
DIRECT_CALLER = "direct"


def direct_id(route: ModelRoute) -> str:
    """``direct:<provider>:<model>`` of an engine route (the same encoding)."""
    return DIRECT_PREFIX + str(route).removeprefix(ROUTE_PREFIX)


def parse_direct(text: str) -> ModelRoute | None:
    """The route a ``direct:`` id names, or None when ``text`` is not one."""
    if not text.startswith(DIRECT_PREFIX + ":"):
        return None
    try:
        return ModelRoute.parse(ROUTE_PREFIX + text.removeprefix(DIRECT_PREFIX))
    except LabfyError:
        return None


@dataclasses.dataclass(frozen=True, slots=True)
class DirectAsk:
    """One direct call of ``route``'s model, counted on ``handle`` and recorded in ``ledger``
    as ``caller``'s however it ends (BR-14): the one way a direct call is made."""

    provider: ModelProvider
    ledger: UsageService
    route: ModelRoute
    handle: StreamHandle
    caller: str = DIRECT_CALLER

    async def stream(self, messages: Sequence[Mapping[str, Any]],
                     response_format: Mapping[str, Any] | None, max_tokens: int | None, *,
                     background: bool = True) -> AsyncIterator[StreamDelta]:
        """The model's reply to ``messages``, piece by piece."""
        started = time.monotonic()
        usage, outcome = Usage(), ErrorCode.INTERNAL_ERROR.value
        try:
            async for delta in self.provider.direct(self.route.model, messages,
                                                    response_format, max_tokens,
                                                    background=background):
                if delta.usage is not None:
                    usage = delta.usage
                yield delta
            outcome = "ok"
        except LabfyError as exc:
            outcome = exc.code.value
            raise
        except (asyncio.CancelledError, GeneratorExit):
            outcome = ErrorCode.CANCELLED.value
            raise
        finally:
            self.handle.add_usage(usage)
            self.ledger.record(direct_id(self.route), usage,
                               (time.monotonic() - started) * 1000.0, outcome, self.caller)


async def run_direct(provider: ModelProvider, ledger: UsageService, route: ModelRoute,
                     call: DirectCall, handle: StreamHandle) -> None:
    """Stream ``call`` from ``route``'s model into ``handle``; a failure is one ``error``
    chunk, then ``done``."""
    ask = DirectAsk(provider, ledger, route, handle)
    messages = [{"role": m.role, "content": m.text} for m in call.messages]
    try:
        async for delta in ask.stream(messages, call.response_format, call.max_tokens):
            if delta.reasoning:
                handle.emit("reasoning", text=delta.reasoning)
            if delta.content:
                handle.emit("text", text=delta.content)
    except LabfyError as exc:
        handle.emit("error", code=exc.code.value, message=exc.message)
        handle.emit("done", reason="error", interrupted=False)
    else:
        handle.emit("done", reason="completed", interrupted=False)
