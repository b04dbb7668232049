"""``ReferenceEngine``: the engine contract over our runtime pieces (BR-01..BR-12).

Sessions live in the JSONL store; a :class:`~labfy_ref.bridge.store.catalog.SessionCatalog`
indexes them (listings are pages of the index, never a read of every log) and
caches the projections of the recently used ones (a turn never re-reads its
log). Besides that bounded cache, the engine keeps only what a running turn
needs (its task, its handle, its writer, its pending approvals) and forgets it
when the turn's task has ended and its records are on disk, so nothing keyed by
session outlives its turn. A turn's records are written off the event loop
(:mod:`labfy_ref.bridge.store.journal`). Settings are durable events; a change while a
turn runs is 409 ``SESSION_BUSY``. Deleting a session cancels and releases its
turn first, then removes the log. A transient session (BR-13) lives only as
long as its one turn: its log is in memory and deleted when the turn ends, and
it is never indexed, listed or counted among the sessions.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Coroutine, Mapping
from typing import Any

from labfy_ref.bridge.contract import MAX_PAGE_SIZE, PAGE_SIZE, DirectCall, Transcript
from labfy_ref.bridge.direct import DirectAsk, direct_id, parse_direct, run_direct
from labfy_ref.bridge.llm import ModelProvider, ModelRoute
from labfy_ref.bridge.loop import AGENT_ID, AgentLoop, PendingApproval, TurnContext, decide
from labfy_ref.bridge.shaped import Shaper, relay_shaped
from labfy_ref.bridge.store import SessionStore
from labfy_ref.bridge.store.catalog import SessionCatalog
from labfy_ref.bridge.store.history import SessionState
from labfy_ref.bridge.store.index import SessionIndex, Summary
from labfy_ref.bridge.store.journal import SessionWriter
from labfy_ref.bridge.store.transient import TransientLog, new_transient_id, seed
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.bridge.titles import ask_title
from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ErrorCode, LabfyError, ModelUnavailable, RuntimeRefused, SessionInvalid
from labfy_ref.host.scope import Scope
from labfy_ref.ids import new_id
from labfy_ref.modes import Approval, PermissionMode

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 32_000
_SETTINGS = {"model", "permission_mode"}


def _mode(settings: Mapping[str, Any]) -> PermissionMode:
    """The permission mode a session's stored settings give its next turn (BR-11)."""
    return PermissionMode(settings["permission_mode"])


@dataclasses.dataclass(slots=True)
class _Running:
    handle: StreamHandle
    task: asyncio.Task[None]
    approvals: dict[str, PendingApproval]
    writer: SessionWriter

    @property
    def busy(self) -> bool:
        """Is the turn running, or are its records still being written?"""
        return not self.task.done() or self.writer.busy


class ReferenceEngine:
    """The reference engine, published as service ``engine``.

    ``index`` is the store's summary index (:meth:`SessionIndex.beside` its logs);
    without one the engine indexes in memory, rebuilt from the logs at start.
    """

    def __init__(self, store: SessionStore, loop: AgentLoop, scope: Scope, *,
                 index: SessionIndex | None = None, titles: bool = False) -> None:
        self._store = store
        self._loop = loop
        self._scope = scope
        #: BR-18: ask a new session's model for its title once its first turn ends.
        self._titles = titles
        self._running: dict[str, _Running] = {}
        self._transient: dict[str, asyncio.Task[None]] = {}
        self.catalog = SessionCatalog(store, index or SessionIndex.in_memory())

    # -- reading ----------------------------------------------------------------------

    def _state(self, session_id: str) -> SessionState:
        return self.catalog.state(session_id)

    def _view(self, state: SessionState, *, messages: bool) -> dict[str, Any]:
        view = self._summary_view(state.summary)
        if messages:
            del view["title"]
            view["messages"] = list(state.messages)
        return view

    def _summary_view(self, summary: Summary) -> dict[str, Any]:
        if summary.error is not None:
            return {"id": summary.session_id, "error": dict(summary.error)}
        return {"id": summary.session_id, "created_at": summary.created_at,
                "updated_at": summary.updated_at, "settings": dict(summary.settings or {}),
                "active_turn": self._busy(summary.session_id), "title": summary.title or ""}

    def _busy(self, session_id: str) -> bool:
        running = self._running.get(session_id)
        return running is not None and running.busy

    @property
    def retained_turns(self) -> int:
        """How many turns the engine still holds (finished ones are forgotten: AV-07)."""
        return len(self._running) + len(self._transient)

    def status(self) -> dict[str, Any]:
        """Counts of sessions (from the index) and running turns."""
        return {"state": "ready", "sessions": self.catalog.count(),
                "active_turns": sum(self._busy(sid) for sid in list(self._running))}

    def model_configuration(self) -> dict[str, Any]:
        """The default provider, model and qualified route."""
        provider = self._loop.providers.default
        route = ModelRoute(provider.name, provider.default_model)
        return {"provider": route.provider, "model": route.model, "route": str(route)}

    def list_sessions(self, limit: int = PAGE_SIZE,
                      cursor: str | None = None) -> dict[str, Any]:
        """A page of summaries, newest first by (created_at, id), and the next page's cursor.

        An unreadable log is listed with its error. ids are monotonic, so sessions
        made in the same millisecond keep their order, and a session created while
        a client pages is never inserted into a page it has not reached yet.
        """
        if isinstance(limit, bool) or not isinstance(limit, int) \
                or not 1 <= limit <= MAX_PAGE_SIZE:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"limit must be 1-{MAX_PAGE_SIZE}")
        rows, next_cursor = self.catalog.page(limit, cursor)
        return {"sessions": [self._summary_view(row) for row in rows],
                "next_cursor": next_cursor}

    def get_session(self, session_id: str) -> dict[str, Any]:
        """A session with its messages."""
        return self._view(self._state(session_id), messages=True)

    def session_context(self, session_id: str) -> dict[str, Any]:
        """The engine's system prompt and what the session injects (a durable session injects
        nothing: only a transient one carries its client's system messages)."""
        self._state(session_id)  # SESSION_NOT_FOUND for an unknown one
        return {"system_prompt": self._loop.system_prompt, "injected": [],
                "guidance": self._loop.limits.guidance.as_json()}

    def list_agents(self) -> list[dict[str, Any]]:
        """The one root agent and the sessions it is running."""
        return [{"id": AGENT_ID, "role": "root",
                 "running_sessions": [sid for sid in self._running if self._busy(sid)]}]

    def list_tools(self) -> list[dict[str, Any]]:
        """The catalog the model sees."""
        return self._loop.gateway.describe_tools()

    async def list_models(self) -> dict[str, Any]:
        """Every provider's real models and the default (BR-19). A provider that cannot say
        is listed with the model it is configured for, ``available`` false and the reason:
        said to be down, never left out nor replaced."""
        listed: list[dict[str, Any]] = []
        for provider, models in await self._loop.providers.listing():
            if isinstance(models, str):
                listed.append(_model(provider.name, provider.default_model, models))
            else:
                listed += [_model(provider.name, model) for model in models]
        return {"default": self.model_configuration()["route"], "models": listed}

    # -- writing ----------------------------------------------------------------------

    def _settings(self, raw: dict[str, Any], *, partial: bool) -> dict[str, Any]:
        unknown = set(raw) - _SETTINGS
        if unknown:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"unknown settings: {', '.join(sorted(unknown))}")
        settings: dict[str, Any] = {} if partial else {
            "model": self.model_configuration()["route"],
            "permission_mode": PermissionMode.READ_ONLY.value}
        if raw.get("permission_mode") is not None:
            try:
                settings["permission_mode"] = PermissionMode(raw["permission_mode"]).value
            except ValueError:
                raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "permission_mode must be "
                                     "read-only or workspace-write") from None
        if raw.get("model") is not None:
            route = ModelRoute.parse(str(raw["model"]))
            self._loop.providers.get(route.provider)  # MODEL_NOT_FOUND: no such provider
            settings["model"] = str(route)
        return settings

    def create_session(self, options: dict[str, Any]) -> dict[str, Any]:
        """Reserve an id and write the header now (an empty session survives restart)."""
        session_id = new_id("ses")
        header = {"created_at": iso(utcnow()),
                  "settings": self._settings(options, partial=False)}
        with self.catalog.own_change():
            log = self._store.create(session_id, header)
        return self._view(self.catalog.created(session_id, log), messages=False)

    def update_session_settings(self, session_id: str,
                                settings: dict[str, Any]) -> dict[str, Any]:
        """A durable settings event; refused while a turn runs."""
        self._state(session_id)
        if self._busy(session_id):
            raise RuntimeRefused(ErrorCode.SESSION_BUSY, "a turn is running in this session")
        changes = self._settings(settings, partial=True)
        event = {"kind": "settings", "settings": changes, "at": iso(utcnow())}
        self.catalog.appended(session_id, [(event, self._store.append(session_id, event))])
        return self._view(self._state(session_id), messages=True)

    def decide_approval(self, session_id: str, approval_id: str,
                        decision: str) -> dict[str, Any]:
        """Answer a pending approval of this session's running turn."""
        answer = Approval.parse(decision)
        if answer is None:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 "decision must be allowed-once or rejected")
        self._state(session_id)
        running = self._running.get(session_id)
        decide(running.approvals if running else {}, approval_id, answer)
        return {"approval_id": approval_id, "decision": answer.value}

    def send_message(self, session_id: str, text: str, *, headless: bool = False) -> StreamHandle:
        """Start a turn and return its handle (it replays everything already emitted)."""
        if not 0 < len(text) <= MAX_MESSAGE_CHARS:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"text must be 1-{MAX_MESSAGE_CHARS} characters")
        state = self._state(session_id)
        if self._busy(session_id):
            raise RuntimeRefused(ErrorCode.SESSION_BUSY, "a turn is running in this session")
        route = ModelRoute.parse(state.settings["model"])
        try:
            provider = self._loop.providers.get(route.provider)
        except RuntimeRefused as exc:  # a provider taken out of the configuration since
            raise RuntimeRefused(exc.code, f"{exc.message}; change the session's model "
                                 "first") from None
        writer = SessionWriter(self._store, self.catalog, session_id)
        # Refused here, before any stream, as a direct append would be; written by the turn.
        line = writer.stage({"kind": "message", "role": "user", "text": text})
        self._store.check_room(session_id, state.summary.end, line)
        history = state.history()
        history.add([{"role": "user", "content": text}])
        turn = TurnContext(
            session_id=session_id, route=route, permission_mode=_mode(state.settings),
            history=history, handle=StreamHandle(session_id, AGENT_ID),
            headless=headless, record=writer.stage, flush=writer.flush, approvals={},
            max_record_bytes=self._store.max_record_bytes)
        first = state.summary.title is None  # no user message yet: this turn names it
        handle = self._start(turn, writer)
        if first and self._titles and provider.is_model:
            self._scope.spawn(self._title(self._running[session_id].task, session_id, route,
                                          provider, text), f"title {session_id}")
        return handle

    async def _title(self, turn: asyncio.Task[None], session_id: str, route: ModelRoute,
                     provider: ModelProvider, text: str) -> None:
        """Once the first turn ended, the title its model gives (BR-18), as a record."""
        await asyncio.wait([turn])  # however it ended
        title = await ask_title(provider, self._loop.gateway.usage, route, text, session_id)
        if title is None:
            return  # the preview stays
        running = self._running.get(session_id)
        try:
            self._state(session_id)  # deleted meanwhile: nothing to name
            if running is not None and running.busy:  # in order with that turn's records
                running.writer.stage({"kind": "title", "title": title})
                running.writer.drain()
                return
            event = {"kind": "title", "title": title, "at": iso(utcnow())}
            self.catalog.appended(session_id, [(event, self._store.append(session_id, event))])
        except LabfyError as exc:  # gone, full: the preview stays
            log.info("session %s: its title was not recorded (%s)", session_id, exc.code.value)

    def _start(self, turn: TurnContext, writer: SessionWriter) -> StreamHandle:
        """Run ``turn`` in the engine's scope: cancelling its handle cancels it (BR-05), and
        once it ended and what it recorded is written, the engine forgets it (AV-07)."""
        session_id, handle = turn.session_id, turn.handle
        task = self._scope.spawn(self._loop.run(turn), f"turn {session_id}")
        running = _Running(handle, task, turn.approvals, writer)

        def stop() -> None:
            task.cancel()

        def forget(_: object = None) -> None:
            if not task.done():
                return
            if not handle.finished:  # cancelled before its first step: it never ran
                handle.emit("done", reason="cancelled", interrupted=True)
            writer.drain()  # what it recorded is still written, in order
            if not writer.busy and self._running.get(session_id) is running:
                del self._running[session_id]

        handle.on_cancel(stop)
        task.add_done_callback(forget)
        writer.on_idle = forget
        self._running[session_id] = running
        return handle

    async def run_transient(self, transcript: Transcript) -> StreamHandle:
        """One headless, read-only turn in a new transient session seeded with ``transcript``.

        The model must be one the provider lists now (else UNKNOWN_MODEL). The
        transcript is recorded in the session's in-memory log first, so anything
        a stored log would refuse is refused here, before any stream. When the
        turn's task ends — completed, failed or cancelled — the log is deleted
        and the engine forgets the session.
        """
        route = await self._served(transcript.model)
        if not 0 < len(transcript.text) <= MAX_MESSAGE_CHARS:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"the last user message must be 1-{MAX_MESSAGE_CHARS} characters")
        provider = self._loop.providers.get(route.provider)
        wanted = transcript.response_format
        if wanted is not None and not provider.is_model:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "response_format: the demo agent "
                                 "answers in words only, never in a JSON format")
        session_id = new_transient_id()
        log = TransientLog(self._store.encode, session_id, self._store.max_log_bytes)
        history = seed(log, transcript)
        handle = StreamHandle(session_id, AGENT_ID)  # what the client reads
        # With a format, the turn runs on a handle of its own; its answer is shaped after.
        inner = handle if wanted is None else StreamHandle(session_id, AGENT_ID)
        handle.is_model = inner.is_model = provider.is_model
        turn = TurnContext(
            session_id=session_id, route=route, permission_mode=PermissionMode.READ_ONLY,
            history=history, handle=inner, headless=True, record=log.stage, approvals={},
            max_record_bytes=self._store.max_record_bytes,
            context=transcript.context, transient=True)
        task = self._scope.spawn(self._loop.run(turn), f"transient turn {session_id}")
        tasks = [task]
        if wanted is not None:
            shaper = Shaper(DirectAsk(provider, self._loop.gateway.usage, route, handle,
                                      "transient"), wanted)
            question = transcript.text

            def shape(text: str) -> Coroutine[Any, Any, str]:
                return shaper.shape(question, text)

            relay = self._scope.spawn(relay_shaped(inner, handle, shape),
                                      f"shaped answer {session_id}")
            relay.add_done_callback(lambda _: _end_cancelled(handle))
            tasks.append(relay)

        def stop() -> None:
            for running in tasks:
                running.cancel()

        def delete(_: object) -> None:
            _end_cancelled(inner)  # cancelled before its first step: it never ran
            log.delete()
            self._transient.pop(session_id, None)

        handle.on_cancel(stop)
        task.add_done_callback(delete)
        self._transient[session_id] = task
        return handle

    async def list_direct_models(self) -> list[dict[str, Any]]:
        """The direct route of each model of every provider that is a model (BR-17); those
        of a provider that cannot say now are left out (the engine list says why)."""
        return [{"id": direct_id(ModelRoute(provider.name, m)), "provider": provider.name,
                 "model": m}
                for provider, models in await self._loop.providers.listing()
                if provider.is_model and not isinstance(models, str) for m in models]

    async def run_direct(self, call: DirectCall) -> StreamHandle:
        """One direct call of a provider model (BR-17): no session, no tools, no workspace
        data; the handle streams its text. An unlisted route is UNKNOWN_MODEL."""
        route = parse_direct(call.model)
        listed = {m["id"] for m in await self.list_direct_models()}
        if route is None or call.model not in listed:
            raise RuntimeRefused(ErrorCode.UNKNOWN_MODEL, f"no model {call.model[:80]!r}; "
                                 "GET /api/cordis/v1/models lists them")
        handle = StreamHandle(new_id("dir"), AGENT_ID)
        task = self._scope.spawn(
            run_direct(self._loop.providers.get(route.provider), self._loop.gateway.usage,
                       route, call, handle),
            f"direct call {handle.session_id}")

        def stop() -> None:
            task.cancel()

        def ended(_: object) -> None:
            if not handle.finished:  # cancelled: the client went away
                handle.emit("done", reason="cancelled", interrupted=True)

        handle.on_cancel(stop)
        task.add_done_callback(ended)
        return handle

    async def _served(self, model: str) -> ModelRoute:
        """The route of ``model`` if its provider lists it now; UNKNOWN_MODEL otherwise (a
        provider that is down: MODEL_UNAVAILABLE, never another provider's model)."""
        try:
            route: ModelRoute | None = ModelRoute.parse(model)
            provider = self._loop.providers.get(route.provider) if route else None
        except RuntimeRefused:
            route = provider = None
        if route is None or provider is None or route.model not in await provider.models():
            raise RuntimeRefused(ErrorCode.UNKNOWN_MODEL,
                                 f"no model {model[:80]!r}; GET /api/cordis/v1/models lists them")
        return route

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn (it ends with ``done`` reason ``cancelled``)."""
        self._state(session_id)
        running = self._running.get(session_id)
        if running is None or running.task.done():
            return False
        running.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running.task
        return True

    async def delete_session(self, session_id: str) -> None:
        """Cancel and release the turn first, then tombstone and remove the log."""
        if not self._store.deletes:
            raise RuntimeRefused(ErrorCode.DELETE_UNSUPPORTED,
                                 "this session store cannot delete")
        with contextlib.suppress(SessionInvalid):
            await self.cancel(session_id)
        await self._settle(session_id)
        self._running.pop(session_id, None)
        with self.catalog.own_change():
            self._store.delete(session_id)
        self.catalog.deleted(session_id)

    async def close(self) -> None:
        """Cancel every running turn, transient ones too (the scope also owns the tasks)."""
        for task in list(self._transient.values()):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for session_id in list(self._running):
            with contextlib.suppress(LabfyError, ModelUnavailable):
                await self.cancel(session_id)
            await self._settle(session_id)
        self._running.clear()

    async def _settle(self, session_id: str) -> None:
        """Wait until a finished turn's records are on disk (a refusal was already said)."""
        running = self._running.get(session_id)
        if running is not None:
            with contextlib.suppress(LabfyError):
                await running.writer.flush()


def _model(provider: str, model: str, down: str | None = None) -> dict[str, Any]:
    """One entry of the model list: its route, provider and model, and whether it answers."""
    entry: dict[str, Any] = {"id": str(ModelRoute(provider, model)), "provider": provider,
                             "model": model, "available": down is None}
    if down is not None:
        entry["reason"] = down
    return entry


def _end_cancelled(handle: StreamHandle) -> None:
    """End ``handle`` as cancelled unless it ended already (its producer was cut off)."""
    if not handle.finished:
        handle.emit("done", reason="cancelled", interrupted=True)
