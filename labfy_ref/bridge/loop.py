"""The agent loop of the reference engine: one turn of one session, streamed as chunks.

Each round streams the model's reply: provider-exposed reasoning becomes
``reasoning`` chunks and a final answer's text becomes ``text`` chunks while
it decodes (provisional until ``done``). The complete reply is then parsed
strictly (one repair if nothing was streamed yet). A tool call goes through
the gateway; in ``read-only`` a write is an escalation that asks the human
(``approval-request``) and runs once if allowed (BR-11, BR-12).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from labfy_ref.bridge.final_text import FinalTextExtractor
from labfy_ref.bridge.llm import ModelProvider
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.config import PermissionMode
from labfy_ref.errors import ErrorCode, ModelUnavailable, ProtocolRefused, RuntimeRefused, ToolError
from labfy_ref.gateway import AgentGateway, CallContext, ToolOutcome
from labfy_ref.protocol import (
    ActionParser,
    ChatMessage,
    Final,
    ToolCall,
    repair_message,
    response_format_for,
)
from labfy_ref.runtime.turn import tool_exchange

log = logging.getLogger("labfy_ref.bridge")
AGENT_ID = "assistant"
DEFAULT_APPROVAL_SECONDS = 300.0
DEFAULT_MAX_ROUNDS = 16


@dataclasses.dataclass(slots=True)
class Approval:
    """One pending question to the human, answered once."""

    approval_id: str
    call_id: str
    future: asyncio.Future[str]
    state: str = "pending"


@dataclasses.dataclass(slots=True)
class TurnContext:
    """What one turn needs from its session."""

    session_id: str
    model: str
    permission_mode: PermissionMode
    history: list[ChatMessage]
    handle: StreamHandle
    headless: bool
    record: Callable[[dict[str, Any]], None]
    approvals: dict[str, Approval]


class StreamedProtocolError(ProtocolRefused):
    """The reply turned out invalid after its text had started streaming: no repair."""


class AgentLoop:
    """Runs turns with a provider, a gateway and a system prompt."""

    def __init__(self, provider: ModelProvider, gateway: AgentGateway, system_prompt: str, *,
                 approval_seconds: float = DEFAULT_APPROVAL_SECONDS,
                 max_rounds: int = DEFAULT_MAX_ROUNDS) -> None:
        self.provider = provider
        self.gateway = gateway
        self.system_prompt = system_prompt
        self.approval_seconds = approval_seconds
        self.max_rounds = max_rounds
        self._parser = ActionParser(gateway.catalog)
        self._format = response_format_for(gateway.catalog)

    async def run(self, turn: TurnContext) -> None:
        """Run a turn to its ``done`` chunk, whatever happens (cancellation included)."""
        handle = turn.handle
        messages: list[ChatMessage] = [{"role": "system", "content": self.system_prompt},
                                       *turn.history]
        try:
            for _ in range(self.max_rounds):
                action = await self._ask(turn, messages)
                if isinstance(action, Final):
                    turn.record({"kind": "message", "role": "assistant", "text": action.text})
                    handle.emit("done", reason="completed", interrupted=False)
                    return
                outcome = await self._tool(turn, action)
                messages += tool_exchange(action.tool_id, action.arguments, outcome.result)
            self._fail(handle, ErrorCode.BUDGET_EXHAUSTED, f"{self.max_rounds} rounds used")
        except asyncio.CancelledError:
            for approval in turn.approvals.values():
                if approval.state == "pending":
                    approval.state = "cancelled"
            handle.emit("done", reason="cancelled", interrupted=True)
        except (ModelUnavailable, ProtocolRefused) as exc:
            self._fail(handle, exc.code, exc.message)
        except Exception as exc:  # the stream must still end with error + done
            log.exception("turn of %s failed", turn.session_id)
            self._fail(handle, ErrorCode.INTERNAL_ERROR, f"internal error ({type(exc).__name__})")

    @staticmethod
    def _fail(handle: StreamHandle, code: ErrorCode, message: str) -> None:
        handle.emit("error", code=code.value, message=message)
        handle.emit("done", reason="error", interrupted=False)

    async def _ask(self, turn: TurnContext, messages: Sequence[ChatMessage]) -> Final | ToolCall:
        attempt: list[ChatMessage] = list(messages)
        for repaired in (False, True):
            extractor = FinalTextExtractor()
            reasoning: list[str] = []
            async for delta in self.provider.stream(turn.model, attempt, self._format):
                if delta.reasoning:
                    reasoning.append(delta.reasoning)
                    turn.handle.emit("reasoning", text=delta.reasoning)
                piece = extractor.feed(delta.content)
                if piece:
                    turn.handle.emit("text", text=piece)
            try:
                action = self._parser.parse(extractor.content)
            except ProtocolRefused as exc:
                if extractor.started:
                    raise StreamedProtocolError(exc.defect, exc.message) from None
                if repaired:
                    raise
                attempt = [*messages, repair_message(exc)]
                continue
            if isinstance(action, Final) and not extractor.started and action.text:
                turn.handle.emit("text", text=action.text)
            return action
        raise AssertionError("unreachable")

    async def _tool(self, turn: TurnContext, action: ToolCall) -> ToolOutcome:
        call_id = f"call_{secrets.token_hex(6)}"
        turn.handle.emit("tool-call", call_id=call_id, tool_id=action.tool_id,
                         arguments=action.arguments)
        context = CallContext(turn.permission_mode)
        approval: dict[str, Any] | None = None
        if self.gateway.needs_approval(action.tool_id, context):
            decision = await self._approval(turn, call_id, action)
            approval = {"decision": decision}
            if decision == "allowed-once":
                outcome = self.gateway.call(action.tool_id, action.arguments,
                                            CallContext(turn.permission_mode, approved_once=True))
            else:
                outcome = self.gateway.refuse(action.tool_id, action.arguments, ToolError(
                    "the user did not approve this operation", code=ErrorCode.PERMISSION_DENIED))
        else:
            outcome = self.gateway.call(action.tool_id, action.arguments, context)
        turn.handle.emit("tool-result", call_id=call_id, tool_id=action.tool_id,
                         status=outcome.status, result=outcome.result)
        turn.record({"kind": "tool", "call_id": call_id, "tool_id": action.tool_id,
                     "arguments": action.arguments, "status": outcome.status,
                     "result": outcome.result, "approval": approval})
        return outcome

    async def _approval(self, turn: TurnContext, call_id: str, action: ToolCall) -> str:
        if turn.headless:
            return "rejected"  # a caller that cannot show the question gets a refusal
        approval_id = f"appr_{secrets.token_hex(8)}"
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        approval = Approval(approval_id, call_id, future)
        turn.approvals[approval_id] = approval
        turn.handle.emit("approval-request", approval_id=approval_id, call_id=call_id,
                         summary=_summary(action.tool_id, action.arguments))
        try:
            decision = await asyncio.wait_for(asyncio.shield(future), self.approval_seconds)
        except TimeoutError:
            approval.state, decision = "expired", "expired"
        turn.handle.emit("approval-decision", approval_id=approval_id, call_id=call_id,
                         decision=decision)
        turn.record({"kind": "approval", "approval_id": approval_id, "call_id": call_id,
                     "decision": decision})
        return decision


def decide(approvals: Mapping[str, Approval], approval_id: str, decision: str) -> None:
    """Answer a pending approval once; anything else is 409 APPROVAL_NOT_PENDING."""
    approval = approvals.get(approval_id)
    if approval is None or approval.state != "pending" or approval.future.done():
        state = "unknown" if approval is None else approval.state
        raise RuntimeRefused(ErrorCode.APPROVAL_NOT_PENDING, f"approval is {state}, not pending")
    approval.state = "decided"
    approval.future.set_result(decision)


def _summary(tool_id: str, arguments: Mapping[str, Any]) -> str:
    path = arguments.get("path")
    size = len(str(arguments.get("content", "")))
    return f"{tool_id} {path!s:.200} ({size} characters)" if path is not None else tool_id
