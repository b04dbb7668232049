"""The Work driver: one claimed run, driven by the one agent loop over an isolated engine (WK-01).

A run is driven by :class:`~labfy_ref.runtime.driver.TurnDriver` — the same loop as
runtime and bridge turns (strict parse, one repair, gateway, budgets, GW-05) —
through :class:`WorkPort`. Its model and prompt come from the run's own in-memory
composition (:mod:`labfy_ref.work.run.composition`), built for this run and stopped
when the drive ends, however it ends. Its tool calls go through
:class:`~labfy_ref.work.run.effects.WorkGateway`. Everything the run leaves is in the
Work store, fenced by its claim:

* provider replay (WK-04): before asking the model for step N the port looks up the
  stored reply of (run, N); a stored one is used and the model is not asked; a new
  one is stored before anything acts on it. A run resumed by another worker thus
  walks the same steps again without a model call until it reaches new ground;
* messages and events: each model reply and tool result is appended once (a replayed
  step finds its message stored already), with an event;
* approvals: in ``read-only`` a write asks a human: the approval is stored, the run
  parked ``WAITING_APPROVAL`` and released (the port answers
  :class:`~labfy_ref.runtime.driver.Pending`: the drive ends waiting on it); the
  store queues it again once answered, and the resumed run finds the answer;
* cancellation: a cancelled task fences the run out; the worker's heartbeat (or the
  next fenced write) notices, the drive stops, its engine is released.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from labfy_ref.errors import ErrorCode, LabfyError, RuntimeRefused, ToolError
from labfy_ref.gateway import CallContext, ToolOutcome
from labfy_ref.gateway.summary import approval_summary
from labfy_ref.gateway.usage import UsageService
from labfy_ref.modes import Approval, PermissionMode
from labfy_ref.protocol import Answer, ChatMessage, ChatModel, Decoding, RoundUsage, ToolCall, Usage
from labfy_ref.protocol.jsonfmt import canonical, encode_json
from labfy_ref.runtime.driver import Conversation, Ending, Pending, TurnDriver
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.states import TurnState
from labfy_ref.tools.catalog import ToolCatalog, default_catalog
from labfy_ref.work.run.composition import RunEngine, start_run_engine
from labfy_ref.work.run.crash import CrashPoints
from labfy_ref.work.run.effects import EffectLedger, WorkGateway
from labfy_ref.work.store.model import Claim, State
from labfy_ref.work.store.tasks import WorkStore
from labfy_ref.workspace.layout import Workspace
from labfy_ref.workspace.store import WorkspaceStore

#: How a drive ended, as the worker reports it.
COMPLETED, FAILED, WAITING, LOST, RELEASED = (
    "COMPLETED", "FAILED", "WAITING_APPROVAL", "LOST", "RELEASED")


@dataclasses.dataclass(slots=True)
class RunControl:
    """What the worker tells a running drive: the lease is lost, or the worker is stopping."""

    lost: bool = False
    stopping: bool = False

    @property
    def live(self) -> bool:
        """May the run still act?"""
        return not (self.lost or self.stopping)


@dataclasses.dataclass(frozen=True, slots=True)
class RunServices:
    """What a worker lends each run: its workspace, the model, the mode, the budgets."""

    workspace: Workspace
    workspace_store: WorkspaceStore
    model: ChatModel
    route: str
    permission_mode: PermissionMode
    limits: RuntimeLimits
    crash: CrashPoints = dataclasses.field(default_factory=CrashPoints)


@dataclasses.dataclass(frozen=True, slots=True)
class RunOutcome:
    """How one drive ended: ``COMPLETED``, ``FAILED``, ``WAITING_APPROVAL``, ``LOST``
    (cancelled or taken over: nothing more written) or ``RELEASED`` (given back)."""

    outcome: str
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """``{"outcome", "detail"}``."""
        return {"outcome": self.outcome, "detail": self.detail}


def request_digest(messages: Sequence[ChatMessage], decoding: Decoding) -> dict[str, Any]:
    """What a stored reply keeps of its request: enough to see a replay diverge, bounded."""
    encoded = encode_json([dict(m) for m in messages]).encode("utf-8", "surrogatepass")
    return {"messages": len(messages), "sha256": hashlib.sha256(encoded).hexdigest(),
            "max_tokens": decoding.max_tokens, "offered": sorted(decoding.offered)}


class WorkPort:
    """The :class:`~labfy_ref.runtime.driver.TurnPort` of a Work run."""

    human = True  # approvals are stored and answered later (CLI or HTTP)

    def __init__(self, store: WorkStore, claim: Claim, engine: RunEngine, *,
                 services: RunServices, control: RunControl,
                 stored_messages: int, catalog: ToolCatalog) -> None:
        self._store = store
        self._catalog = catalog
        self._claim = claim
        self._engine = engine
        self._services = services
        self._control = control
        self._stored_messages = stored_messages
        self._position = 1  # the task's message, stored by submit
        self.step = 0
        #: Was the last step answered from the store (no model call)?
        self.replayed = False

    @property
    def model(self) -> str:
        return self._services.route

    @property
    def caller(self) -> str:
        return self._claim.run_id

    def live(self) -> bool:
        return self._control.live

    def _message(self, role: str, content: str) -> bool:
        """Append the run's next message unless an earlier attempt stored it; True if new."""
        self._position += 1
        if self._position <= self._stored_messages:
            return False
        self._store.append_message(self._claim, role, content)
        return True

    async def ask(self, messages: Sequence[ChatMessage], decoding: Decoding) -> Answer:
        self.step += 1
        request = request_digest(messages, decoding)
        stored = self._store.get_reply(self._claim.run_id, self.step)
        self.replayed = stored is not None
        if stored is None:
            answer = await self._engine.ask(messages, decoding)
            response = {"content": answer.content, "usage": answer.usage.as_json()}
            # stored before anything acts on it: a crash from here on replays this reply
            stored = self._store.record_reply(self._claim, self.step, request, response)
            fresh = stored.response == response
        else:
            fresh = False
            if stored.request != request:
                self._store.append_event(self._claim.task_id, "replay.diverged",
                                         {"step": self.step}, self._claim.run_id)
        content = str(stored.response["content"])
        if self._message("assistant", content):
            self._store.append_event(self._claim.task_id, "model.answered",
                                     {"step": self.step, "replayed": not fresh},
                                     self._claim.run_id)
        if fresh:
            self._services.crash.reached("model.answered")
            return Answer(content, usage=Usage(**stored.response["usage"]))
        return Answer(content)  # a replayed step cost no tokens now

    async def approve(self, call_id: str, action: ToolCall) -> Approval | Pending | None:
        """The stored answer to this step's approval, else the request stored and pending
        (the request is keyed like the call's effect: the reply of this step, call 0)."""
        key = (self._claim.run_id, self.step, 0)
        for approval in self._store.list_approvals(self._claim.task_id):
            if (approval.run_id, approval.step, approval.call) == key:
                return Pending(approval.id) if approval.decision is None else approval.decision
        summary = approval_summary(self._catalog[action.tool_id], action.arguments)
        approval = self._store.request_approval(self._claim, self.step, 0, action.tool_id,
                                                summary)
        self._services.crash.reached("approval.requested")
        return Pending(approval.id)

    def admit(self, action: ToolCall) -> ToolError | None:
        return None

    def spent(self, round_number: int, usage: RoundUsage) -> None:
        return None

    def called(self, call_id: str, action: ToolCall) -> None:
        return None

    def answered(self, call_id: str, outcome: ToolOutcome) -> None:
        text = outcome.result_text or canonical(outcome.result)
        if self._message("tool", text):
            self._store.append_event(self._claim.task_id, "tool.answered", {
                "step": self.step, "tool_id": outcome.tool_id,
                "status": outcome.status, "error_code": outcome.error_code},
                self._claim.run_id)


class RunUsage(UsageService):
    """A run's view of the usage ledger (BR-14): a step replayed from the store made no
    model call, so it is not recorded as one."""

    def __init__(self, store: WorkspaceStore, port: WorkPort) -> None:
        super().__init__(store)
        self._port = port

    def record(self, model: str, usage: Usage, latency_ms: float, outcome: str,
               caller: str) -> None:
        """Record a model call, unless the port answered it from the store."""
        if not self._port.replayed:
            super().record(model, usage, latency_ms, outcome, caller)


def _error(ending: Ending) -> dict[str, str]:
    if ending.state is TurnState.AUTHORIZATION_REQUIRED:
        # Work has no grant flow: the campaign waits for a human grant in the workspace
        return {"code": ErrorCode.GRANT_REQUIRED.value,
                "message": f"research campaign {ending.campaign_id} was prepared; a human "
                           "must grant it in the workspace (runtime API) before it runs"}
    error = ending.error or LabfyError(ending.state.value, code=ErrorCode.INTERNAL_ERROR)
    return error.as_dict()


async def drive_run(store: WorkStore, claim: Claim, services: RunServices,
                    control: RunControl) -> RunOutcome:
    """Drive one claimed run until it finishes, parks, is lost or is released."""
    stored = store.list_messages(claim.run_id)
    ledger = EffectLedger(store, claim, services.crash)
    catalog = default_catalog()
    host, engine = await start_run_engine(catalog, services.model)
    port = WorkPort(store, claim, engine, services=services, control=control,
                    stored_messages=len(stored), catalog=catalog)
    gateway = WorkGateway(services.workspace, services.workspace_store, ledger,
                          max_result_bytes=services.limits.max_result_bytes, catalog=catalog,
                          usage=RunUsage(services.workspace_store, port),
                          ).surface(engine.tool_ids)  # the tools its composition offers
    conversation = Conversation.start([{"role": "system", "content": engine.system_prompt},
                                       {"role": "user", "content": stored[0].content}])
    try:
        ending = await TurnDriver(gateway, services.limits).drive(
            conversation, port, CallContext(services.permission_mode))
    except RuntimeRefused as exc:
        return _refused(store, claim, exc)
    finally:
        conversation.release()
        await host.stop()
    if ending is not None and ending.waiting_on is not None:
        return RunOutcome(WAITING, ending.waiting_on)  # parked: the claim has ended
    if ending is None or not control.live:
        return RunOutcome(LOST if control.lost or not control.stopping else RELEASED)
    return _finished(store, claim, ending)


def _finished(store: WorkStore, claim: Claim, ending: Ending) -> RunOutcome:
    """Store how the run ended: ``COMPLETED`` with its answer, or ``FAILED`` with its
    error's code — or, when the store refuses that, as :func:`_refused` says."""
    try:
        if ending.state is TurnState.COMPLETED:
            store.finish(claim, State.COMPLETED, final_text=ending.final_text)
            return RunOutcome(COMPLETED)
        error = _error(ending)
        store.finish(claim, State.FAILED, error=error)
        return RunOutcome(FAILED, error["code"])
    except RuntimeRefused as exc:
        return _refused(store, claim, exc)


def _refused(store: WorkStore, claim: Claim, refused: RuntimeRefused) -> RunOutcome:
    """The store refused a write of the run: fenced off (``LOST``), or it refused what the
    run produced (a NUL in the answer…) — then the run ends ``FAILED`` with that code,
    rather than every worker taking it over and meeting the same refusal forever."""
    if refused.code is ErrorCode.LEASE_NOT_HELD:
        return RunOutcome(LOST, refused.code.value)
    try:
        store.finish(claim, State.FAILED, error=refused.as_dict())
    except RuntimeRefused as again:
        return RunOutcome(LOST, again.code.value)
    return RunOutcome(FAILED, refused.code.value)

