"""``AgentRuntime``: one worker, a bounded queue, bounded turns (RT-01..RT-09).

The runtime holds a model (anything that answers chat messages), a parser and
a gateway: no store, no path, no adapter. Each turn runs rounds of
ask → parse (one repair) → gateway, until a final answer, a budget, an error,
a cancellation, or ``research.prepare`` — which pauses the turn in
``AUTHORIZATION_REQUIRED`` with no further model call until a human grant and
an explicit resume continue the *same* turn.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from labfy_ref.config import PermissionMode
from labfy_ref.errors import (
    ErrorCode,
    LabfyError,
    ModelUnavailable,
    ProtocolRefused,
    RuntimeRefused,
    ToolError,
)
from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.ids import new_id
from labfy_ref.protocol import (
    ActionParser,
    ChatModel,
    Final,
    request_action,
    response_format_for,
    system_prompt,
)
from labfy_ref.runtime.events import EventLog
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.states import TurnState
from labfy_ref.runtime.turn import Turn, canonical

_MAX_CLIENT_REQUEST_ID = 128


class AgentRuntime:
    """Runs turns of one agent over one gateway; owned by the workspace server."""

    def __init__(self, model: ChatModel, gateway: AgentGateway, *, label: str,
                 permission_mode: PermissionMode = PermissionMode.READ_ONLY,
                 limits: RuntimeLimits | None = None) -> None:
        self.model = model
        self.gateway = gateway
        self.label = label
        self.permission_mode = permission_mode
        self.limits = limits or RuntimeLimits()
        self.events = EventLog(self.limits.max_events)
        self._parser = ActionParser(gateway.catalog)
        self._response_format = response_format_for(gateway.catalog)
        self._system = {"role": "system", "content": system_prompt(gateway.catalog)}
        self._turns: dict[str, Turn] = {}
        self._by_request: dict[str, str] = {}
        self._queue: asyncio.Queue[str] | None = None
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
            self._worker = asyncio.create_task(self._work(), name="agent-runtime-worker")

    async def close(self) -> None:
        """Stop the worker, cancel in-flight work; every live turn ends CANCELLED (RT-09)."""
        self._closed = True
        for turn in self._turns.values():
            if not turn.state.terminal:
                self._end(turn, TurnState.CANCELLED)
        tasks = [t for t in (self._worker, self._current[1] if self._current else None) if t]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._worker = self._current = None

    @property
    def running(self) -> bool:
        """Is the worker alive?"""
        return self._worker is not None and not self._worker.done()

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
        turn.messages = [self._system, {"role": "user", "content": message}]
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
        """Retained turns, newest first."""
        return sorted(self._turns.values(), key=lambda t: t.created_at, reverse=True)

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
        if (states.count(TurnState.QUEUED) >= self.limits.max_queued_turns
                or live >= self.limits.max_live_turns):
            raise RuntimeRefused(ErrorCode.QUEUE_FULL, "too many queued or live turns")

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

    def _end(self, turn: Turn, state: TurnState,
             error: tuple[ErrorCode, str] | LabfyError | None = None) -> None:
        if isinstance(error, tuple | LabfyError):
            turn.fail(state, error)
        else:
            turn.move(state)
        turn.messages = []
        data: dict[str, Any] = {"state": state.value}
        if turn.error:
            data["error"] = turn.error
        self.events.append(turn.id, "turn.state", data)

    async def _work(self) -> None:
        assert self._queue is not None
        while True:
            turn_id = await self._queue.get()
            turn = self._turns.get(turn_id)
            if turn is None or turn.state is not TurnState.QUEUED:
                continue
            task = asyncio.create_task(self._drive(turn), name=f"turn-{turn_id}")
            self._current = (turn_id, task)
            try:
                await task
            except asyncio.CancelledError:
                worker = asyncio.current_task()
                if worker is not None and worker.cancelling():
                    raise  # the worker itself is being stopped
                # else only that turn was cancelled; the worker goes on
            finally:
                self._current = None

    def _live(self, turn: Turn) -> bool:
        return turn.state is TurnState.RUNNING

    async def _drive(self, turn: Turn) -> None:
        turn.move(TurnState.RUNNING)
        self.events.append(turn.id, "turn.state", {"state": turn.state.value})
        context = CallContext(self.permission_mode)
        if turn.resume_campaign is not None and not self._run_granted_research(turn, context):
            return
        while self._live(turn):
            if turn.rounds >= self.limits.max_rounds:
                self._end(turn, TurnState.BUDGET_EXHAUSTED,
                          (ErrorCode.BUDGET_EXHAUSTED, f"{self.limits.max_rounds} rounds used"))
                return
            turn.rounds += 1
            try:
                answer = await request_action(self.model, turn.messages, self._parser,
                                              self._response_format)
            except ModelUnavailable as exc:
                if self._live(turn):
                    self._end(turn, TurnState.MODEL_UNAVAILABLE, exc)
                return
            except ProtocolRefused as exc:
                if self._live(turn):
                    self._end(turn, TurnState.MODEL_PROTOCOL_ERROR, exc)
                return
            if not self._live(turn):
                return  # cancelled while the model answered: the answer is discarded
            action = answer.action
            if isinstance(action, Final):
                turn.final_text = action.text
                self._end(turn, TurnState.COMPLETED)
                return
            if len(turn.tool_calls) >= self.limits.max_tool_calls:
                self._end(turn, TurnState.BUDGET_EXHAUSTED, (
                    ErrorCode.BUDGET_EXHAUSTED, f"{self.limits.max_tool_calls} tool calls used"))
                return
            key = canonical([action.tool_id, action.arguments])
            if turn.last_failure == key:
                self._end(turn, TurnState.FAILED, (
                    ErrorCode.REPEATED_TOOL_FAILURE,
                    f"{action.tool_id} repeated with the same arguments after failing"))
                return
            outcome = self.gateway.call(action.tool_id, action.arguments, context)
            record = turn.add_call(outcome)
            turn.last_failure = None if outcome.ok else key
            self.events.append(turn.id, "turn.tool_call", {
                "call_id": record.call_id, "tool_id": record.tool_id, "status": record.status,
                "error_code": outcome.error_code})
            if turn.context_bytes() > self.limits.max_context_bytes:
                self._end(turn, TurnState.BUDGET_EXHAUSTED, (
                    ErrorCode.BUDGET_EXHAUSTED,
                    f"context exceeds {self.limits.max_context_bytes} bytes"))
                return
            if action.tool_id == "research.prepare" and outcome.ok:
                campaign_id = str(outcome.result["data"]["campaign_id"])
                turn.authorization = {"campaign_id": campaign_id, "status": "REQUIRED"}
                turn.move(TurnState.AUTHORIZATION_REQUIRED)
                self.events.append(turn.id, "turn.state", {
                    "state": turn.state.value, "campaign_id": campaign_id})
                return

    def _run_granted_research(self, turn: Turn, context: CallContext) -> bool:
        """Run the granted campaign and give the model its state; False if the turn ended."""
        campaign_id, turn.resume_campaign = turn.resume_campaign, None
        assert campaign_id is not None
        try:
            self.gateway.run_research(campaign_id)
        except (RuntimeRefused, ToolError) as exc:
            self._end(turn, TurnState.FAILED, exc)
            return False
        turn.authorization = {"campaign_id": campaign_id, "status": "GRANTED"}
        outcome = self.gateway.call("research.get_state", {"campaign_id": campaign_id}, context)
        record = turn.add_call(outcome)
        turn.last_failure = None  # a resume after authorization is exempt (GW-05)
        self.events.append(turn.id, "turn.tool_call", {
            "call_id": record.call_id, "tool_id": record.tool_id, "status": record.status,
            "error_code": outcome.error_code})
        return True
