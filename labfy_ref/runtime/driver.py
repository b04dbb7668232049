"""The one agent loop: ask → strict parse → one repair → gateway → budgets → events.

Runtime turns and bridge turns run the same :class:`TurnDriver`; each talks to
it through a thin :class:`TurnPort` that says how to ask the model (a whole
reply, or a streamed one), how to ask a human (never, or "Allow once / Deny"),
and what to do with each call and result (runtime events, or NDJSON chunks and
JSONL records). Every rule of a turn lives here, once:

* a round asks at most twice (one format repair, PR-03) — no repair once the
  reply's text was streamed;
* every call passes the gateway (GW-01); a write that needs approval asks the
  port, and a port without a human channel gets the gateway's normal refusal;
* the identical call right after the same failure ends the turn
  ``REPEATED_TOOL_FAILURE`` (GW-05);
* rounds, tool calls and context bytes are budgets (RT-03), context bytes kept
  as a running total;
* a successful call of a tool whose trait is ``pauses_turn`` (research) pauses the
  turn (RT-08): no further model
  call until a human grant and a resume;
* every model call — a repair too, failed or cancelled ones too — is recorded
  in the gateway's usage ledger (BR-14) with the port's model and caller.

The driver holds no store, no path and no adapter: only the gateway.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
import time
from collections.abc import Sequence
from typing import Any, Protocol

from labfy_ref.errors import ErrorCode, LabfyError, ModelUnavailable, ProtocolRefused, ToolError
from labfy_ref.gateway import AgentGateway, CallContext, ToolOutcome
from labfy_ref.modes import Approval
from labfy_ref.protocol import (
    ActionParser,
    Answer,
    Ask,
    Budget,
    ChatMessage,
    Decoding,
    Final,
    MessageLog,
    Observations,
    Round,
    RoundUsage,
    ToolCall,
    Usage,
    call_key,
    narrow,
    present,
    request_action,
    tool_exchange,
)
from labfy_ref.protocol.narrowing import DEFAULT_PROFILE
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.sources import FactSources
from labfy_ref.runtime.states import TurnState
from labfy_ref.tools.catalog import ToolCatalog

#: What of the user's message orders reference menus (a bound, not a meaning).
MAX_QUERY_CHARS = 2000


#: The deadline of one final's facts check (bounded work: well under a second measured).
FACTS_SECONDS = 10.0
log = logging.getLogger("labfy_ref.runtime")


async def _facts(conversation: Conversation, text: str) -> tuple[dict[str, Any], ...]:
    """A final's facts (PR-09), checked off the event loop with a deadline: the check is
    bounded, but a long answer against many long results is still work a loop must not
    wait on. Past the deadline the turn completes with no facts, and the log says so."""
    try:
        facts = await asyncio.wait_for(asyncio.to_thread(
            conversation.sources.check, text, len(conversation.observations.read)),
            FACTS_SECONDS)
    except TimeoutError:
        log.warning("the final's facts check passed its %g s deadline: no facts recorded",
                    FACTS_SECONDS)
        return ()
    return tuple(fact.as_json() for fact in facts)


def new_call_id() -> str:
    """An opaque id for one tool call (unique within a session's life)."""
    return f"call_{secrets.token_hex(6)}"


@dataclasses.dataclass(slots=True)
class Conversation:
    """What the model has been told in one turn, and what the turn has spent."""

    messages: MessageLog
    rounds: int = 0
    #: Model calls made in this drive, repairs too: a call's step (its context's).
    asks: int = 0
    #: What this turn's results showed (PR-06's input), and how many calls it made.
    observations: Observations = dataclasses.field(default_factory=Observations)
    #: The canonical text of the last call if it failed (GW-05), else None.
    last_failure: str | None = None
    #: What the turn read and the user said: what a final's facts are checked against.
    sources: FactSources = dataclasses.field(default_factory=FactSources)

    @classmethod
    def start(cls, messages: Sequence[ChatMessage]) -> Conversation:
        """A conversation holding ``messages``, with its context size counted once.

        The newest user message is the turn's question: the query that orders
        reference menus by relevance (PR-07).
        """
        query = next((str(m.get("content", "")) for m in reversed(messages)
                      if m.get("role") == "user"), "")
        return cls(messages if isinstance(messages, MessageLog) else MessageLog(messages),
                   observations=Observations(query=query[:MAX_QUERY_CHARS]),
                   sources=FactSources.told(messages))

    @property
    def tool_calls(self) -> int:
        """Tool calls answered in this turn."""
        return self.observations.tool_calls

    @property
    def context_bytes(self) -> int:
        """What the model would be sent, in content bytes (the log keeps the running total)."""
        return self.messages.size

    def add(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages (the log counts their size as it encodes them)."""
        self.messages.add(messages)

    def answer(self, outcome: ToolOutcome, catalog: ToolCatalog, *, exempt: bool = False,
               rules: frozenset[str] = DEFAULT_PROFILE.names) -> None:
        """Give the model one call's wrapped result; ``exempt`` clears GW-05's memory.

        The model reads the result as :func:`present` orders it (the most
        relevant references first); the record keeps the gateway's own order.
        """
        seen = self.observations.observe(outcome.tool_id, outcome.arguments, outcome.result,
                                         catalog)
        text = present(catalog, outcome.tool_id, outcome.result, seen,
                       rules) if outcome.ok else None
        self.add(tool_exchange(outcome.tool_id, outcome.arguments, outcome.result,
                               text or outcome.result_text))
        self.observations = seen
        self.last_failure = None if outcome.ok or exempt else call_key(outcome.tool_id,
                                                                        outcome.arguments)

    def release(self) -> None:
        """Forget the messages (the turn ended: nothing unbounded stays in memory)."""
        self.messages = MessageLog()


@dataclasses.dataclass(frozen=True, slots=True)
class Ending:
    """How a drive ended: a turn state, with the final text, error, campaign or the
    approval request it waits on."""

    state: TurnState
    final_text: str | None = None
    error: LabfyError | None = None
    campaign_id: str | None = None
    #: The approval request a human has not answered yet (``AUTHORIZATION_REQUIRED``).
    waiting_on: str | None = None
    #: A completed turn's checked facts (PR-09), as JSON objects.
    facts: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Pending:
    """A human was asked about a write and has not answered yet: the drive ends waiting
    (a Work run parks ``WAITING_APPROVAL`` and its answer comes to a later drive)."""

    request_id: str


class TurnPort(Protocol):
    """What one surface (runtime or bridge) supplies to the driver."""

    def live(self) -> bool:
        """May the turn still have effects? (False once cancelled: answers are discarded.)"""
        ...

    @property
    def human(self) -> bool:
        """Can this surface ask a human to approve a write once? (Then writes are offered.)"""
        ...

    @property
    def model(self) -> str:
        """The qualified route (BR-10) that this turn's model calls go to."""
        ...

    @property
    def caller(self) -> str:
        """Whom the calls are for, in the usage ledger: a session id, ``transient``, a turn id."""
        ...

    async def ask(self, messages: Sequence[ChatMessage], decoding: Decoding) -> Answer:
        """Ask the model once (may raise ModelUnavailable or ProtocolRefused)."""
        ...

    async def approve(self, call_id: str, action: ToolCall) -> Approval | Pending | None:
        """Ask a human about a write; None when this surface has no one to ask,
        :class:`Pending` when the answer will come to a later drive."""
        ...

    def admit(self, action: ToolCall) -> ToolError | None:
        """A refusal this surface needs before any effect (e.g. a call too large to record)."""
        ...

    def spent(self, round_number: int, usage: RoundUsage) -> None:
        """A round was answered: its time and tokens (events, a usage ledger)."""
        ...

    def called(self, call_id: str, action: ToolCall) -> None:
        """A call is about to be decided (events, chunks)."""
        ...

    def answered(self, call_id: str, outcome: ToolOutcome) -> None:
        """A call was decided: its outcome is what the model will see."""
        ...


def _budget(message: str) -> Ending:
    return Ending(TurnState.BUDGET_EXHAUSTED,
                  error=LabfyError(message, code=ErrorCode.BUDGET_EXHAUSTED))


class TurnDriver:
    """Drives turns over one gateway within one set of budgets."""

    def __init__(self, gateway: AgentGateway, limits: RuntimeLimits) -> None:
        self.gateway = gateway
        self.limits = limits
        self.parser = ActionParser(gateway.catalog)

    def decoding(self, conversation: Conversation, port: TurnPort,
                 context: CallContext) -> Decoding:
        """This round's narrowed schema and completion limit (PR-06)."""
        limits = self.limits
        return narrow(self.gateway.catalog, self.gateway.offerable(context, approvals=port.human),
                      conversation.observations,
                      Budget(round=conversation.rounds, max_rounds=limits.max_rounds,
                             max_tool_calls=limits.max_tool_calls,
                             conclude_after=limits.conclude_after,
                             rules=limits.narrowing_rules))

    async def drive(self, conversation: Conversation, port: TurnPort,
                    context: CallContext) -> Ending | None:
        """Run rounds until an ending; None when the port stopped being live (cancelled).

        The loop holds the order and the cancellation checks (RT-05); each other
        ending is its own step: the budgets (RT-03), the model's failures (RT-02),
        a repeated failure (GW-05), a pausing tool (RT-08).
        """
        while port.live():
            ending = self._next_round(conversation)
            if ending is not None:
                return ending
            started = time.monotonic()
            accepted = await self._answer(conversation, port, context)
            if isinstance(accepted, Ending):
                return accepted
            port.spent(conversation.rounds, RoundUsage.since(started, accepted.usage))
            if not port.live():
                return None  # cancelled while the model answered: the answer is discarded
            action = accepted.action
            if isinstance(action, Final):
                return Ending(TurnState.COMPLETED, final_text=action.text,
                              facts=await _facts(conversation, action.text))
            ending = self._over_calls(conversation)
            if ending is None:
                ending = self._repeated(conversation, action)
            if ending is not None:
                return ending
            call_id = new_call_id()
            port.called(call_id, action)
            outcome = await self._decide(call_id, action, port,
                                         dataclasses.replace(context, step=conversation.asks))
            if not port.live():
                return None
            if isinstance(outcome, Ending):
                return outcome
            self.record(conversation, port, call_id, outcome)
            ending = self._over_context(conversation)
            if ending is None:
                ending = self._paused(action, outcome)
            if ending is not None:
                return ending
        return None

    def _next_round(self, conversation: Conversation) -> Ending | None:
        """Count a new round, or end BUDGET_EXHAUSTED when every round is used (RT-03)."""
        if conversation.rounds >= self.limits.max_rounds:
            return _budget(f"{self.limits.max_rounds} rounds used")
        conversation.rounds += 1
        return None

    def _over_calls(self, conversation: Conversation) -> Ending | None:
        """BUDGET_EXHAUSTED when the model asks for one call more than the budget (RT-03)."""
        if conversation.tool_calls >= self.limits.max_tool_calls:
            return _budget(f"{self.limits.max_tool_calls} tool calls used")
        return None

    def _over_context(self, conversation: Conversation) -> Ending | None:
        """BUDGET_EXHAUSTED once what the model would be sent passes its bound (RT-03)."""
        if conversation.context_bytes > self.limits.max_context_bytes:
            return _budget(f"context exceeds {self.limits.max_context_bytes} bytes")
        return None

    @staticmethod
    def _repeated(conversation: Conversation, action: ToolCall) -> Ending | None:
        """FAILED ``REPEATED_TOOL_FAILURE`` when the call that just failed comes again
        with the same arguments (GW-05): it is not executed a second time."""
        if conversation.last_failure != call_key(action.tool_id, action.arguments):
            return None
        return Ending(TurnState.FAILED, error=LabfyError(
            f"{action.tool_id} repeated with the same arguments after failing",
            code=ErrorCode.REPEATED_TOOL_FAILURE))

    async def _answer(self, conversation: Conversation, port: TurnPort,
                      context: CallContext) -> Round | Ending:
        """This round's accepted action (one format repair allowed), or the turn's ending
        when the model cannot answer (MODEL_UNAVAILABLE) or twice broke the action
        contract (MODEL_PROTOCOL_ERROR)."""
        decoding = self.decoding(conversation, port, context)
        try:
            return await request_action(self._numbered(port, conversation),
                                        self._asked(conversation, decoding),
                                        self.parser, decoding)
        except ModelUnavailable as exc:
            return Ending(TurnState.MODEL_UNAVAILABLE, error=exc)
        except ProtocolRefused as exc:
            return Ending(TurnState.MODEL_PROTOCOL_ERROR, error=exc)

    def _paused(self, action: ToolCall, outcome: ToolOutcome) -> Ending | None:
        """A tool whose traits pause the turn (a research preparation), called with success,
        ends it AUTHORIZATION_REQUIRED on the campaign it made (RT-08); None otherwise."""
        spec = self.gateway.catalog[action.tool_id]
        if not (spec.traits.pauses_turn and outcome.ok):
            return None
        return Ending(TurnState.AUTHORIZATION_REQUIRED,
                      campaign_id=spec.produced(outcome.result["data"])[0])

    def _asked(self, conversation: Conversation,
               decoding: Decoding) -> Sequence[ChatMessage]:
        """What the model is sent this round: the conversation, and in a concluding round
        the recap of what it read (PR-07), appended to the newest result message.

        Appended, not added as a message: some chat templates refuse two user
        messages in a row. Only the request carries it; the log is unchanged,
        so the next round's cached prefix still holds.
        """
        messages = conversation.messages
        text = decoding.note
        if not text or not messages or messages[-1].get("role") != "user":
            return messages
        last = messages[-1]
        return [*messages[:-1], {**last, "content": f"{last.get('content', '')}{text}"}]

    def record(self, conversation: Conversation, port: TurnPort, call_id: str,
               outcome: ToolOutcome, *, exempt: bool = False) -> None:
        """Give the model an outcome and tell the port (also used by a granted resume)."""
        conversation.answer(outcome, self.gateway.catalog, exempt=exempt,
                            rules=self.limits.narrowing_rules)
        conversation.sources.remember(call_id, outcome.result)
        port.answered(call_id, outcome)

    def _numbered(self, port: TurnPort, conversation: Conversation) -> Ask:
        """:meth:`_recorded`'s ask, each call numbered in ``conversation.asks``: the step a
        tool call of that answer is stored and keyed by (a Work effect's or approval's)."""
        recorded = self._recorded(port)

        async def ask(messages: Sequence[ChatMessage], decoding: Decoding) -> Answer:
            conversation.asks += 1
            return await recorded(messages, decoding)

        return ask

    def _recorded(self, port: TurnPort) -> Ask:
        """``port.ask`` with each call recorded in the usage ledger, however it ends (BR-14).

        The outcome is the call's own: ``ok`` when the provider answered (its reply
        may still fail the action contract: that is the turn's business, not the
        call's), else the error code it raised, ``CANCELLED`` when cut off.
        """
        ledger = self.gateway.usage

        async def ask(messages: Sequence[ChatMessage], decoding: Decoding) -> Answer:
            started = time.monotonic()
            outcome, reported = ErrorCode.INTERNAL_ERROR.value, Usage()
            try:
                answer = await port.ask(messages, decoding)
            except LabfyError as exc:
                outcome = exc.code.value
                raise
            except asyncio.CancelledError:
                outcome = ErrorCode.CANCELLED.value
                raise
            else:
                outcome, reported = "ok", answer.usage
                return answer
            finally:
                ledger.record(port.model, reported, (time.monotonic() - started) * 1000.0,
                              outcome, port.caller)

        return ask

    async def _decide(self, call_id: str, action: ToolCall, port: TurnPort,
                      context: CallContext) -> ToolOutcome | Ending:
        gateway = self.gateway
        refused = port.admit(action)
        if refused is not None:
            return gateway.refuse(action.tool_id, action.arguments, refused)
        if gateway.needs_approval(action.tool_id, context):
            shown, refusal = gateway.screen(action.tool_id, action.arguments)
            if refusal is not None:  # refused whatever a human says: nobody is asked
                return gateway.refuse(action.tool_id, action.arguments, refusal)
            decision = await port.approve(call_id, dataclasses.replace(action, arguments=shown))
            if isinstance(decision, Pending):
                return Ending(TurnState.AUTHORIZATION_REQUIRED, waiting_on=decision.request_id)
            if decision is Approval.ALLOWED_ONCE:
                return gateway.call(action.tool_id, action.arguments,
                                    dataclasses.replace(context, approved_once=True))
            if decision is not None:
                return gateway.refuse(action.tool_id, action.arguments, ToolError(
                    "the user did not approve this operation", code=ErrorCode.PERMISSION_DENIED))
        return gateway.call(action.tool_id, action.arguments, context)
