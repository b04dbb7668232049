"""The reference engine's side of the one agent loop: a turn of one session, streamed.

The rounds are :class:`~labfy_ref.runtime.driver.TurnDriver`'s — the very loop
the runtime runs, so repeated failures (GW-05) and every budget (RT-03) hold
here too. This adapter only says how a bridge turn talks:

* the model's reply is streamed: provider-exposed reasoning becomes
  ``reasoning`` chunks and a final answer's text becomes ``text`` chunks while
  it decodes (provisional until ``done``); once text was shown the reply can no
  longer be repaired, and a refusal ends the turn with an ``error`` chunk;
* in ``read-only`` a write is an escalation that asks the human
  (``approval-request``) and runs once if allowed (BR-11, BR-12); a headless
  caller is refused;
* every call, result and decision is a chunk and a durable session record; a
  call whose arguments take more than half of the store's record limit is
  refused before it runs (RECORD_TOO_LARGE, a normal refusal: the turn goes on).
  With the shipped limits (4 MiB records, 256 KiB replies) no reply gets there;
  a store configured smaller does;
* a record is made at once (``record``: refused there if it cannot be stored)
  and is on disk (``flush``) before the model is asked again, before an approved
  tool runs, and before ``done``: the session's writer does the writing off the
  event loop.

Whatever happens — cancellation, a refused record, an unexpected exception —
the stream ends with ``done``; an unexpected exception is one incident line.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from labfy_ref.bridge.final_text import FinalTextExtractor
from labfy_ref.bridge.llm import ModelProvider, ModelRoute, Providers
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, LabfyError, ProtocolRefused, RuntimeRefused, ToolError
from labfy_ref.gateway import AgentGateway, CallContext, ToolOutcome
from labfy_ref.gateway.summary import approval_summary
from labfy_ref.ids import new_id
from labfy_ref.logs import incident
from labfy_ref.modes import DEFAULT_APPROVAL_SECONDS, Approval, PermissionMode
from labfy_ref.protocol import (
    Answer,
    ChatMessage,
    Decoding,
    MessageLog,
    RoundUsage,
    ToolCall,
    Usage,
    encode_json,
)
from labfy_ref.runtime.driver import Conversation, Ending, TurnDriver
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.states import TurnState

log = logging.getLogger("labfy_ref.bridge")
AGENT_ID = "assistant"


@dataclasses.dataclass(slots=True)
class PendingApproval:
    """One pending question to the human, answered once."""

    approval_id: str
    call_id: str
    future: asyncio.Future[Approval]
    state: str = "pending"


async def _written() -> None:
    """Nothing to wait for: the records were written when made."""


@dataclasses.dataclass(slots=True)
class TurnContext:
    """What one turn needs from its session."""

    session_id: str
    #: The qualified model the turn asks (its provider, BR-19: never another).
    route: ModelRoute
    permission_mode: PermissionMode
    history: Sequence[ChatMessage]
    handle: StreamHandle
    headless: bool
    #: Make a session record (refused at once if it cannot be stored).
    record: Callable[[dict[str, Any]], object]
    approvals: dict[str, PendingApproval]
    #: The session store's largest record, in bytes (its line, newline included).
    max_record_bytes: int = 4 * 1024 * 1024
    #: Returns once every record made so far is on disk (a ``record`` that writes at
    #: once needs none).
    flush: Callable[[], Awaitable[None]] = _written
    #: The caller's system messages (BR-13): told to the model after the engine's prompt.
    context: tuple[str, ...] = ()
    #: A transient session's turn (BR-13): its log is in memory and deleted at the end.
    transient: bool = False


#: How the caller's system messages are introduced after the engine's own prompt.
CONTEXT_HEADING = ("Context for this session, from its caller (it informs your answers; it "
                   "changes neither the reply format above nor what the tools may do):")


def with_context(prompt: str, context: Sequence[str]) -> str:
    """The engine's system prompt followed by the session's context, as one system message.

    One message, not several: many chat templates accept a system message only
    at the start of the conversation.
    """
    if not context:
        return prompt
    return "\n\n".join([prompt, CONTEXT_HEADING, *context])


def recent(history: Sequence[ChatMessage], max_bytes: int) -> MessageLog:
    """The newest messages of ``history`` that fit ``max_bytes``, starting at a user message."""
    log = history if isinstance(history, MessageLog) else MessageLog(history)
    return log.tail(max_bytes)


class AgentLoop:
    """Runs bridge turns with a provider, a gateway (the bridge's surface) and a prompt."""

    def __init__(self, providers: Providers | ModelProvider, gateway: AgentGateway,
                 system_prompt: str, *, approval_seconds: float = DEFAULT_APPROVAL_SECONDS,
                 limits: RuntimeLimits | None = None) -> None:
        self.providers = providers if isinstance(providers, Providers) else Providers([providers])
        self.gateway = gateway
        self.system_prompt = system_prompt
        self.approval_seconds = approval_seconds
        self.limits = limits or RuntimeLimits()
        self.driver = TurnDriver(gateway, self.limits)

    async def run(self, turn: TurnContext) -> None:
        """Run a turn to its ``done`` chunk, whatever happens (cancellation included)."""
        handle = turn.handle
        port = _StreamPort(self, turn)
        conversation = Conversation.start(self.messages(turn))
        try:
            await turn.flush()  # the user's message is on disk before anything is streamed
            ending = await self.driver.drive(conversation, port,
                                             CallContext(turn.permission_mode))
            await port.finish(ending)
        except asyncio.CancelledError:
            _cancel_pending(turn.approvals)
            await _settle(turn)
            handle.emit("done", reason="cancelled", interrupted=True)
        except LabfyError as exc:  # a refused record (RECORD_TOO_LARGE, SESSION_FULL, ...)
            await _settle(turn)
            _fail(handle, exc.code, exc.message)
        except Exception as exc:  # the stream must still end with error + done (AV-01)
            incident_id = incident(log, exc, f"bridge turn of {turn.session_id}")
            await _settle(turn)
            _fail(handle, ErrorCode.INTERNAL_ERROR, f"internal error (incident {incident_id})")
        finally:
            conversation.release()

    def messages(self, turn: TurnContext) -> MessageLog:
        """What the model is sent first: the system prompt with the turn's context, then the
        newest history that fits half the context budget (a long session never ends
        BUDGET_EXHAUSTED for its length alone)."""
        window = recent(turn.history, self.limits.max_context_bytes // 2)
        messages = MessageLog([{"role": "system",
                                "content": with_context(self.system_prompt, turn.context)}])
        messages.add(window)  # the window's pieces are reused, never encoded again
        return messages


def _cancel_pending(approvals: Mapping[str, PendingApproval]) -> None:
    """A cancelled turn's approvals that still wait are cancelled: a late decision is stale."""
    for approval in approvals.values():
        if approval.state == "pending":
            approval.state = "cancelled"


async def _settle(turn: TurnContext) -> None:
    """Put what the turn recorded on disk before its ending (a refusal is already said)."""
    with contextlib.suppress(LabfyError):
        await turn.flush()


def _fail(handle: StreamHandle, code: ErrorCode, message: str) -> None:
    handle.emit("error", code=code.value, message=message)
    handle.emit("done", reason="error", interrupted=False)


class _StreamPort:
    """The driver's view of a bridge turn: streamed replies, approvals, chunks, records."""

    def __init__(self, loop: AgentLoop, turn: TurnContext) -> None:
        self._loop = loop
        self._turn = turn
        self._shown = False  # did the last reply's final text reach the user?
        self._decisions: dict[str, str] = {}  # call_id -> the human's answer

    @property
    def human(self) -> bool:
        return not self._turn.headless  # "Allow once / Deny" needs someone to show it to

    @property
    def model(self) -> str:
        return str(self._turn.route)

    @property
    def caller(self) -> str:
        # The usage ledger names a session that lasts; a transient one (BR-13) is gone after
        # its turn, so its calls are counted as "transient" (BR-14).
        return "transient" if self._turn.transient else self._turn.session_id

    def live(self) -> bool:
        return True  # a bridge turn stops by cancellation of its task

    async def ask(self, messages: Sequence[ChatMessage], decoding: Decoding) -> Answer:
        await self._turn.flush()  # the last call's record is on disk before the next request
        handle = self._turn.handle
        extractor = FinalTextExtractor()
        usage = Usage()  # what the stream's usage chunk reports, if it has one
        try:
            route = self._turn.route
            async for delta in self._loop.providers.get(route.provider).stream(
                    route.model, messages, decoding):
                if delta.usage is not None:
                    usage = delta.usage
                if delta.reasoning:
                    handle.emit("reasoning", text=delta.reasoning)
                piece = extractor.feed(delta.content)
                if piece:
                    handle.emit("text", text=piece)
        except ProtocolRefused as exc:  # the provider's reply was not I-JSON
            if extractor.started:
                raise ProtocolRefused(exc.defect, exc.message, repairable=False) from None
            raise
        self._shown = extractor.started
        return Answer(extractor.content, streamed=extractor.started, usage=usage)

    async def approve(self, call_id: str, action: ToolCall) -> Approval | None:
        turn = self._turn
        if turn.headless:
            return Approval.REJECTED  # a caller that cannot show the question gets a refusal
        approval_id = new_id("appr")
        future: asyncio.Future[Approval] = asyncio.get_running_loop().create_future()
        approval = PendingApproval(approval_id, call_id, future)
        turn.approvals[approval_id] = approval
        turn.handle.emit("approval-request", approval_id=approval_id, call_id=call_id,
                         summary=approval_summary(self._loop.gateway.catalog[action.tool_id],
                                                  action.arguments))
        try:
            answer = await asyncio.wait_for(asyncio.shield(future), self._loop.approval_seconds)
            decision = answer.value
        except TimeoutError:  # nobody answered: recorded as expired, refused like a rejection
            approval.state, decision, answer = "expired", "expired", Approval.REJECTED
        turn.handle.emit("approval-decision", approval_id=approval_id, call_id=call_id,
                         decision=decision)
        turn.record({"kind": "approval", "approval_id": approval_id, "call_id": call_id,
                     "decision": decision})
        await turn.flush()  # the decision is on disk before the tool it allows runs
        self._decisions[call_id] = decision
        return answer

    def admit(self, action: ToolCall) -> ToolError | None:
        size = len(encode_json(action.arguments).encode("utf-8"))
        if size > self._turn.max_record_bytes // 2:  # the other half: the result, the fields
            return ToolError(f"the call's arguments ({size} bytes) are too large to record",
                             code=ErrorCode.RECORD_TOO_LARGE)
        return None

    def spent(self, round_number: int, usage: RoundUsage) -> None:
        self._turn.handle.add_usage(usage.usage)  # the turn's tokens, as far as reported

    def called(self, call_id: str, action: ToolCall) -> None:
        self._turn.handle.emit("tool-call", call_id=call_id, tool_id=action.tool_id,
                               arguments=action.arguments)

    def answered(self, call_id: str, outcome: ToolOutcome) -> None:
        turn = self._turn
        turn.handle.emit("tool-result", call_id=call_id, tool_id=outcome.tool_id,
                         status=outcome.status, result=outcome.result)
        decision = self._decisions.pop(call_id, None)
        record: dict[str, Any] = {
            "kind": "tool", "call_id": call_id, "tool_id": outcome.tool_id,
            "arguments": outcome.arguments, "status": outcome.status,
            "result": outcome.result,
            "approval": None if decision is None else {"decision": decision}}
        if outcome.error_code == ErrorCode.RECORD_TOO_LARGE:
            record["arguments"] = {}  # said, not hidden: the result names the refusal
        turn.record(record)

    async def finish(self, ending: Ending | None) -> None:
        """Turn the driver's ending into the stream's last chunks, every record on disk."""
        handle = self._turn.handle
        await self._turn.flush()
        if ending is None:
            handle.emit("done", reason="cancelled", interrupted=True)
            return
        if ending.state is TurnState.COMPLETED:
            text = ending.final_text or ""
            if not self._shown and text:
                handle.emit("text", text=text)
            self._turn.record({"kind": "message", "role": "assistant", "text": text})
            await self._turn.flush()
            # the answer's checked facts (PR-09), after its text and before done
            handle.emit("facts", facts=list(ending.facts))
            handle.emit("done", reason="completed", interrupted=False)
            return
        error = ending.error or RuntimeRefused(
            ErrorCode.INTERNAL_ERROR, f"the turn ended {ending.state.value}")
        _fail(handle, error.code, error.message)


def decide(approvals: Mapping[str, PendingApproval], approval_id: str, decision: Approval) -> None:
    """Answer a pending approval once; anything else is 409 APPROVAL_NOT_PENDING."""
    approval = approvals.get(approval_id)
    if approval is None or approval.state != "pending" or approval.future.done():
        state = "unknown" if approval is None else approval.state
        raise RuntimeRefused(ErrorCode.APPROVAL_NOT_PENDING, f"approval is {state}, not pending")
    approval.state = "decided"
    approval.future.set_result(decision)
