"""``AgentRuntime``: one worker, a bounded queue, bounded turns (RT-01..RT-09).

The runtime holds a model (anything that answers chat messages), a parser and
a gateway: no store, no path, no adapter. Each turn runs rounds of
ask → parse (one repair) → gateway, until a final answer, a budget, an error,
a cancellation, or ``research.prepare`` — which pauses the turn in
``AUTHORIZATION_REQUIRED`` with no further model call until a human grant and
an explicit resume continue the *same* turn. The rounds themselves are the one
agent loop of :mod:`labfy_ref.runtime.driver`, shared with the bridge; this
module adapts it to turns, the queue and the event log.

The worker cannot die: an unexpected exception ends *that* turn ``FAILED``
with ``INTERNAL_ERROR`` and an incident id (one log line), and the worker goes
on to the next. Every task is owned by the runtime's scope.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

from labfy_ref.errors import ErrorCode, LabfyError, RuntimeRefused, ToolError
from labfy_ref.gateway import AgentGateway, CallContext, ToolOutcome
from labfy_ref.host.scope import Scope
from labfy_ref.ids import new_id
from labfy_ref.logs import incident
from labfy_ref.model.route import model_route
from labfy_ref.modes import Approval, PermissionMode
from labfy_ref.protocol import (
    Answer,
    ChatMessage,
    ChatModel,
    Decoding,
    RoundUsage,
    ToolCall,
    chat_asker,
    system_prompt,
)
from labfy_ref.runtime.driver import Conversation, Ending, TurnDriver, new_call_id
from labfy_ref.runtime.events import EventLog
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.states import TRANSITIONS, TurnState
from labfy_ref.runtime.turn import Turn

log = logging.getLogger("labfy_ref.runtime")
_MAX_CLIENT_REQUEST_ID = 128


class AgentRuntime:
    """Runs turns of one agent over one gateway; owned by the workspace server.

    ``route`` names the model in the usage ledger (BR-14); by default
    :func:`model_route` of ``model``.
    """

    def __init__(self, model: ChatModel, gateway: AgentGateway, *, label: str,
                 permission_mode: PermissionMode = PermissionMode.READ_ONLY,
                 limits: RuntimeLimits | None = None, route: str | None = None) -> None:
        self.model = model
        self.route = route or str(model_route(model))
        self.gateway = gateway
        self.label = label
        self.permission_mode = permission_mode
        self.limits = limits or RuntimeLimits()
        self.events = EventLog(self.limits.max_events)
        self._driver = TurnDriver(gateway, self.limits)
        self._system = {"role": "system", "content": system_prompt(gateway.catalog)}
        self._turns: dict[str, Turn] = {}
        self._by_request: dict[str, str] = {}
        self._queue: asyncio.Queue[str] | None = None
        self._scope: Scope | None = None
        self._worker: asyncio.Task[None] | None = None
        self._current: tuple[str, asyncio.Task[None]] | None = None
        self._closed = False

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the single worker (inside the running event loop); idempotent."""
        if self._worker is None:
            # Admission is bounded by counting QUEUED turns (see _check_capacity), so a
            # cancelled turn frees its place at once instead of when the worker skips it.
            self._queue = asyncio.Queue()
            self._scope = Scope("runtime")
            self._worker = self._scope.spawn(self._work(), "agent-runtime-worker")

    async def close(self) -> None:
        """Stop the worker, cancel in-flight work; every live turn ends CANCELLED (RT-09)."""
        self._closed = True
        for turn in self._turns.values():
            if not turn.state.terminal:
                self._end(turn, TurnState.CANCELLED)
        if self._scope is not None:
            await self._scope.aclose()  # cancels and awaits the worker and the turn's task
        self._worker = self._current = None

    @property
    def running(self) -> bool:
        """Is the worker alive?"""
        return self._worker is not None and not self._worker.done()

    @property
    def busy(self) -> bool:
        """Is a turn being driven right now? (False: no model call can be in flight.)"""
        return self._current is not None

    @property
    def scope(self) -> Scope | None:
        """The scope owning the worker and the running turn's task (None before start)."""
        return self._scope

    # -- requests -------------------------------------------------------------------

    def start_turn(self, message: str, client_request_id: str | None = None) -> tuple[Turn, bool]:
        """Queue a new turn, or return the turn already started with ``client_request_id``."""
        self._refuse_if_closed()
        if client_request_id is not None:
            existing = self._by_request.get(client_request_id)
            if existing is not None and existing in self._turns:
                return self._turns[existing], False
        if not 0 < len(message) <= self.limits.max_message_chars:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"message must be 1-{self.limits.max_message_chars} characters")
        if client_request_id is not None and not (
                0 < len(client_request_id) <= _MAX_CLIENT_REQUEST_ID
                and client_request_id.isprintable()):
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 "client_request_id must be 1-128 printable characters")
        self._check_capacity()
        turn = Turn(new_id("turn"), message, client_request_id)
        turn.conversation = Conversation.start([self._system,
                                                {"role": "user", "content": message}])
        self._retain(turn)
        self._enqueue(turn)
        self.events.append(turn.id, "turn.state", {"state": turn.state.value})
        return turn, True

    def get(self, turn_id: str) -> Turn:
        """A retained turn, or 404 TURN_NOT_FOUND."""
        turn = self._turns.get(turn_id)
        if turn is None:
            raise RuntimeRefused(ErrorCode.TURN_NOT_FOUND, "no such turn")
        return turn

    def list_turns(self) -> list[Turn]:
        """Retained turns, newest first (by creation sequence, never by clock ties)."""
        return sorted(self._turns.values(), key=lambda t: t.sequence, reverse=True)

    def cancel(self, turn_id: str) -> Turn:
        """Cancel a turn; cancelling a finished turn changes nothing (RT-05)."""
        turn = self.get(turn_id)
        if turn.state.terminal:
            return turn
        self._end(turn, TurnState.CANCELLED)
        if self._current is not None and self._current[0] == turn_id:
            self._current[1].cancel()
        return turn

    def resume(self, turn_id: str) -> Turn:
        """Continue a paused turn once a human grant is active (RT-08)."""
        self._refuse_if_closed()
        turn = self.get(turn_id)
        if turn.state is not TurnState.AUTHORIZATION_REQUIRED or turn.authorization is None:
            raise RuntimeRefused(ErrorCode.TURN_NOT_RESUMABLE,
                                 f"turn is {turn.state.value}, not AUTHORIZATION_REQUIRED")
        campaign_id = turn.authorization["campaign_id"]
        if not self.gateway.grants.has_active(campaign_id):
            raise RuntimeRefused(ErrorCode.GRANT_REQUIRED,
                                 f"campaign {campaign_id} has no active grant in this workspace")
        self._check_capacity(resuming=True)
        turn.resume_campaign = campaign_id
        turn.move(TurnState.QUEUED)
        self._enqueue(turn)
        self.events.append(turn.id, "turn.state", {"state": turn.state.value, "resumed": True})
        return turn

    def status(self) -> dict[str, Any]:
        """Counts and limits for ``GET /api/v1/agent-runtime/status``."""
        states = [t.state for t in self._turns.values()]
        return {
            "label": self.label,
            "permission_mode": self.permission_mode.value,
            "running": self.running,
            "turns": {"queued": states.count(TurnState.QUEUED),
                      "live": sum(not s.terminal for s in states), "retained": len(states)},
            "limits": self.limits.as_json(),
        }

    # -- internals ------------------------------------------------------------------

    def _refuse_if_closed(self) -> None:
        if self._closed or self._queue is None:
            raise RuntimeRefused(ErrorCode.RUNTIME_CLOSED, "the runtime is not running")

    def _check_capacity(self, *, resuming: bool = False) -> None:
        states = [t.state for t in self._turns.values()]
        live = sum(not s.terminal for s in states) - resuming  # a resumed turn is live already
        if states.count(TurnState.QUEUED) >= self.limits.max_queued_turns:
            raise RuntimeRefused(ErrorCode.QUEUE_FULL, "too many queued turns")
        if live >= self.limits.max_live_turns and not resuming \
                and self._supersede_oldest_paused():
            live -= 1
        if live >= self.limits.max_live_turns:
            raise RuntimeRefused(ErrorCode.QUEUE_FULL, "too many live turns")

    def _supersede_oldest_paused(self) -> bool:
        """Turns waiting for a grant never block a new turn: the oldest one makes room.

        Otherwise a model that prepares research in every turn would, once the
        live cap is full of paused turns, refuse every new turn until a human
        cancels them one by one.
        """
        paused = [t for t in self._turns.values()
                  if t.state is TurnState.AUTHORIZATION_REQUIRED and t.resume_campaign is None]
        if not paused:
            return False
        oldest = min(paused, key=lambda t: t.sequence)
        self._end(oldest, TurnState.CANCELLED, LabfyError(
            f"superseded: {self.limits.max_live_turns} turns were live, this one waited "
            "longest for authorization", code=ErrorCode.TURN_SUPERSEDED))
        return True

    def _retain(self, turn: Turn) -> None:
        self._turns[turn.id] = turn
        if turn.client_request_id is not None:
            self._by_request[turn.client_request_id] = turn.id
        while len(self._turns) > self.limits.max_retained_turns:
            oldest = next((t for t in self._turns.values() if t.state.terminal), None)
            if oldest is None:
                break
            del self._turns[oldest.id]
            if oldest.client_request_id is not None:
                self._by_request.pop(oldest.client_request_id, None)

    def _enqueue(self, turn: Turn) -> None:
        assert self._queue is not None
        self._queue.put_nowait(turn.id)

    def _end(self, turn: Turn, state: TurnState, error: LabfyError | None = None) -> None:
        if error is not None:
            turn.fail(state, error)
        else:
            turn.move(state)
        turn.conversation.release()
        data: dict[str, Any] = {"state": state.value}
        if turn.error:
            data["error"] = turn.error
        self.events.append(turn.id, "turn.state", data)

    async def _work(self) -> None:
        assert self._queue is not None
        assert self._scope is not None
        while True:
            turn_id = await self._queue.get()
            turn = self._turns.get(turn_id)
            if turn is None or turn.state is not TurnState.QUEUED:
                continue
            task = self._scope.spawn(self._guarded(turn), f"turn-{turn_id}")
            self._current = (turn_id, task)
            try:
                await task
            except asyncio.CancelledError:
                worker = asyncio.current_task()
                if worker is not None and worker.cancelling():
                    raise  # the worker itself is being stopped
                # else only that turn was cancelled; the worker goes on
            except Exception as exc:  # _guarded lets nothing through; this is the last net
                incident(log, exc, "runtime worker")
            finally:
                self._current = None

    async def _guarded(self, turn: Turn) -> None:
        """Drive one turn; whatever escapes ends that turn, never the worker (AV-01)."""
        try:
            await self._drive(turn)
        except Exception as exc:
            incident_id = incident(log, exc, f"turn {turn.id}")
            if TurnState.FAILED in TRANSITIONS[turn.state]:
                self._end(turn, TurnState.FAILED, LabfyError(
                    f"internal error (incident {incident_id})", code=ErrorCode.INTERNAL_ERROR))

    async def _drive(self, turn: Turn) -> None:
        turn.move(TurnState.RUNNING)
        self.events.append(turn.id, "turn.state", {"state": turn.state.value})
        port = _RuntimePort(self, turn)
        context = CallContext(self.permission_mode)
        if turn.resume_campaign is not None and not self._run_granted_research(
                turn, port, context):
            return
        ending = await self._driver.drive(turn.conversation, port, context)
        if ending is not None and port.live():
            self._finish(turn, ending)

    def _finish(self, turn: Turn, ending: Ending) -> None:
        if ending.state is TurnState.AUTHORIZATION_REQUIRED:
            assert ending.campaign_id is not None
            turn.authorization = {"campaign_id": ending.campaign_id, "status": "REQUIRED"}
            turn.move(TurnState.AUTHORIZATION_REQUIRED)
            self.events.append(turn.id, "turn.state", {
                "state": turn.state.value, "campaign_id": ending.campaign_id})
            return
        if ending.state is TurnState.COMPLETED:
            turn.final_text = ending.final_text
            turn.facts = list(ending.facts)
        self._end(turn, ending.state, ending.error)

    def _run_granted_research(self, turn: Turn, port: _RuntimePort,
                              context: CallContext) -> bool:
        """Run the granted campaign and give the model its state; False if the turn ended."""
        campaign_id, turn.resume_campaign = turn.resume_campaign, None
        assert campaign_id is not None
        try:
            self.gateway.run_research(campaign_id)
        except (RuntimeRefused, ToolError) as exc:
            self._end(turn, TurnState.FAILED, exc)
            return False
        turn.authorization = {"campaign_id": campaign_id, "status": "GRANTED"}
        try:
            resume = self.gateway.catalog.resume_call(campaign_id)
        except ToolError as exc:  # a catalog without the reader: the turn fails, said so
            self._end(turn, TurnState.FAILED, exc)
            return False
        outcome = self.gateway.call(*resume, context)
        # a resume after authorization is exempt from the repeated-failure rule (GW-05)
        self._driver.record(turn.conversation, port, new_call_id(), outcome, exempt=True)
        return True


class _RuntimePort:
    """The driver's view of a runtime turn: whole replies, no human channel, events."""

    def __init__(self, runtime: AgentRuntime, turn: Turn) -> None:
        self._runtime = runtime
        self._turn = turn
        self._ask = chat_asker(runtime.model)

    human = False  # runtime turns run with the server's mode: a write is refused (GW-07)

    @property
    def model(self) -> str:
        return self._runtime.route

    @property
    def caller(self) -> str:
        return self._turn.id

    def live(self) -> bool:
        return self._turn.state is TurnState.RUNNING

    async def ask(self, messages: Sequence[ChatMessage], decoding: Decoding) -> Answer:
        return await self._ask(messages, decoding)

    async def approve(self, call_id: str, action: ToolCall) -> Approval | None:
        return None

    def admit(self, action: ToolCall) -> ToolError | None:
        return None

    def spent(self, round_number: int, usage: RoundUsage) -> None:
        self._runtime.events.append(self._turn.id, "turn.round",
                                    {"round": round_number, **usage.as_json()})

    def called(self, call_id: str, action: ToolCall) -> None:
        return None

    def answered(self, call_id: str, outcome: ToolOutcome) -> None:
        record = self._turn.add_call(call_id, outcome)
        self._runtime.events.append(self._turn.id, "turn.tool_call", {
            "call_id": record.call_id, "tool_id": record.tool_id, "status": record.status,
            "error_code": outcome.error_code})
