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
import time

from labfy_ref.bridge.contract import DIRECT_PREFIX, DirectCall
from labfy_ref.bridge.llm import ModelProvider, ModelRoute
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.gateway.usage import UsageService
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


async def run_direct(provider: ModelProvider, ledger: UsageService, route: ModelRoute,
                     call: DirectCall, handle: StreamHandle) -> None:
    """Stream ``call`` from ``route``'s model into ``handle``; record the call, however it
    ends (a failure is one ``error`` chunk, then ``done``)."""
    messages = [{"role": m.role, "content": m.text} for m in call.messages]
    started = time.monotonic()
    usage, outcome = Usage(), ErrorCode.INTERNAL_ERROR.value
    try:
        async for delta in provider.direct(route.model, messages, call.response_format,
                                           call.max_tokens):
            if delta.reasoning:
                handle.emit("reasoning", text=delta.reasoning)
            if delta.content:
                handle.emit("text", text=delta.content)
            if delta.usage is not None:
                usage = delta.usage
        outcome = "ok"
    except LabfyError as exc:
        outcome = exc.code.value
        handle.emit("error", code=exc.code.value, message=exc.message)
        handle.emit("done", reason="error", interrupted=False)
    except asyncio.CancelledError:
        outcome = ErrorCode.CANCELLED.value
        raise
    else:
        handle.emit("done", reason="completed", interrupted=False)
    finally:
        handle.add_usage(usage)
        ledger.record(direct_id(route), usage, (time.monotonic() - started) * 1000.0, outcome,
                      DIRECT_CALLER)
