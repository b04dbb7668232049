"""``ReferenceEngine``: the engine contract over our runtime pieces (BR-01..BR-12).

Sessions live in the JSONL store; the engine keeps only what a running turn
needs (its task, its handle, its pending approvals) and forgets it when the
turn's task ends, so nothing keyed by session outlives its turn. Settings are durable
events; a change while a turn runs is 409 ``SESSION_BUSY``. Deleting a session
cancels and releases its turn first, then removes the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from typing import Any, Protocol

from labfy_ref.bridge.contract import Decision
from labfy_ref.bridge.llm import ModelRoute
from labfy_ref.bridge.loop import AGENT_ID, AgentLoop, Approval, TurnContext, decide
from labfy_ref.bridge.projection import (
    chat_history,
    check_log,
    project_messages,
    project_settings,
)
from labfy_ref.bridge.sessions import MAX_RECORD_BYTES
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.clock import iso, utcnow
from labfy_ref.config import PermissionMode
from labfy_ref.errors import ErrorCode, LabfyError, ModelUnavailable, RuntimeRefused, SessionInvalid
from labfy_ref.host.scope import Scope
from labfy_ref.ids import new_id

MAX_MESSAGE_CHARS = 32_000
_SETTINGS = {"model", "permission_mode"}
_DECISIONS = ("allowed-once", "rejected")


class SessionStore(Protocol):
    """What the engine needs of a session store (``delete`` is optional: BR-08)."""

    def create(self, session_id: str, header: dict[str, Any]) -> None: ...
    def append(self, session_id: str, event: dict[str, Any]) -> None: ...
    def read(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]: ...
    def list_ids(self) -> list[str]: ...


@dataclasses.dataclass(slots=True)
class _Running:
    handle: StreamHandle
    task: asyncio.Task[None]
    approvals: dict[str, Approval]


class ReferenceEngine:
    """The reference engine, published as service ``engine``."""

    def __init__(self, store: SessionStore, loop: AgentLoop, scope: Scope) -> None:
        self._store = store
        self._loop = loop
        self._scope = scope
        self._running: dict[str, _Running] = {}

    # -- reading ----------------------------------------------------------------------

    def _read(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        header, events = self._store.read(session_id)
        check_log(session_id, header, events)
        return header, events

    def _view(self, session_id: str, *, messages: bool) -> dict[str, Any]:
        header, events = self._read(session_id)
        view: dict[str, Any] = {
            "id": session_id, "created_at": header.get("created_at"),
            "updated_at": events[-1].get("at") if events else header.get("created_at"),
            "settings": project_settings(header, events),
            "active_turn": self._busy(session_id)}
        projected = project_messages(events)
        if messages:
            view["messages"] = projected
        else:
            first = next((m["text"] for m in projected if m["role"] == "user"), "")
            view["title"] = first[:80]
        return view

    def _busy(self, session_id: str) -> bool:
        running = self._running.get(session_id)
        return running is not None and not running.task.done()

    @property
    def retained_turns(self) -> int:
        """How many turns the engine still holds (finished ones are forgotten: AV-07)."""
        return len(self._running)

    def status(self) -> dict[str, Any]:
        """Counts of sessions and running turns."""
        return {"state": "ready", "sessions": len(self._store.list_ids()),
                "active_turns": sum(self._busy(sid) for sid in self._running)}

    def model_configuration(self) -> dict[str, Any]:
        """The default provider, model and qualified route."""
        provider = self._loop.provider
        route = ModelRoute(provider.name, getattr(provider, "default_model", ""))
        return {"provider": route.provider, "model": route.model, "route": str(route)}

    def list_sessions(self) -> list[dict[str, Any]]:
        """Summaries, newest first; an unreadable log is listed with its error."""
        views = []
        for session_id in self._store.list_ids():
            try:
                views.append(self._view(session_id, messages=False))
            except SessionInvalid as exc:
                views.append({"id": session_id, "error": exc.as_dict()})
        # ids are monotonic: they order sessions made in the same millisecond
        return sorted(views, key=lambda v: (str(v.get("created_at") or ""), v["id"]),
                      reverse=True)

    def get_session(self, session_id: str) -> dict[str, Any]:
        """A session with its messages."""
        return self._view(session_id, messages=True)

    def list_agents(self) -> list[dict[str, Any]]:
        """The one root agent and the sessions it is running."""
        return [{"id": AGENT_ID, "role": "root",
                 "running_sessions": [sid for sid in self._running if self._busy(sid)]}]

    def list_tools(self) -> list[dict[str, Any]]:
        """The catalog the model sees."""
        return self._loop.gateway.describe_tools()

    async def list_models(self) -> dict[str, Any]:
        """The provider's real models (MODEL_UNAVAILABLE if it cannot say) and the default."""
        provider = self._loop.provider
        models = await provider.models()
        return {"default": self.model_configuration()["route"],
                "models": [{"id": str(ModelRoute(provider.name, m)), "provider": provider.name,
                            "model": m} for m in models]}

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
            if route.provider != self._loop.provider.name:
                raise RuntimeRefused(ErrorCode.MODEL_NOT_FOUND,
                                     f"no provider {route.provider[:40]}")
            settings["model"] = str(route)
        return settings

    def create_session(self, options: dict[str, Any]) -> dict[str, Any]:
        """Reserve an id and write the header now (an empty session survives restart)."""
        session_id = new_id("ses")
        self._store.create(session_id, {"created_at": iso(utcnow()),
                                        "settings": self._settings(options, partial=False)})
        return self._view(session_id, messages=False)

    def update_session_settings(self, session_id: str,
                                settings: dict[str, Any]) -> dict[str, Any]:
        """A durable settings event; refused while a turn runs."""
        self._read(session_id)
        if self._busy(session_id):
            raise RuntimeRefused(ErrorCode.SESSION_BUSY, "a turn is running in this session")
        changes = self._settings(settings, partial=True)
        self._store.append(session_id, {"kind": "settings", "settings": changes,
                                        "at": iso(utcnow())})
        return self._view(session_id, messages=True)

    def decide_approval(self, session_id: str, approval_id: str,
                        decision: Decision) -> dict[str, Any]:
        """Answer a pending approval of this session's running turn."""
        if decision not in _DECISIONS:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 "decision must be allowed-once or rejected")
        self._read(session_id)
        running = self._running.get(session_id)
        decide(running.approvals if running else {}, approval_id, decision)
        return {"approval_id": approval_id, "decision": decision}

    def send_message(self, session_id: str, text: str, *, headless: bool = False) -> StreamHandle:
        """Start a turn and return its handle (it replays everything already emitted)."""
        if not 0 < len(text) <= MAX_MESSAGE_CHARS:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"text must be 1-{MAX_MESSAGE_CHARS} characters")
        header, events = self._read(session_id)
        if self._busy(session_id):
            raise RuntimeRefused(ErrorCode.SESSION_BUSY, "a turn is running in this session")
        settings = project_settings(header, events)
        route = ModelRoute.parse(settings["model"])
        if route.provider != self._loop.provider.name:
            raise RuntimeRefused(ErrorCode.MODEL_NOT_FOUND,
                                 f"this engine serves no provider {route.provider[:40]}; "
                                 "change the session's model first")
        history = chat_history(project_messages(events))
        self._record(session_id, {"kind": "message", "role": "user", "text": text})
        handle = StreamHandle(session_id, AGENT_ID)
        approvals: dict[str, Approval] = {}
        turn = TurnContext(
            session_id=session_id, model=route.model,
            permission_mode=PermissionMode(settings["permission_mode"]),
            history=[*history, {"role": "user", "content": text}], handle=handle,
            headless=headless, record=lambda event: self._record(session_id, event),
            approvals=approvals,
            max_record_bytes=getattr(self._store, "max_record_bytes", MAX_RECORD_BYTES))
        task = self._scope.spawn(self._loop.run(turn), f"turn {session_id}")
        running = _Running(handle, task, approvals)

        def stop() -> None:
            task.cancel()

        def forget(_: asyncio.Task[None]) -> None:
            if self._running.get(session_id) is running:
                del self._running[session_id]

        handle.on_cancel(stop)
        task.add_done_callback(forget)
        self._running[session_id] = running
        return handle

    def _record(self, session_id: str, event: dict[str, Any]) -> None:
        self._store.append(session_id, {**event, "at": iso(utcnow())})

    async def cancel(self, session_id: str) -> bool:
        """Cancel the running turn (it ends with ``done`` reason ``cancelled``)."""
        self._read(session_id)
        running = self._running.get(session_id)
        if running is None or running.task.done():
            return False
        running.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running.task
        return True

    async def delete_session(self, session_id: str) -> None:
        """Cancel and release the turn first, then tombstone and remove the log."""
        delete = getattr(self._store, "delete", None)
        if delete is None:
            raise RuntimeRefused(ErrorCode.DELETE_UNSUPPORTED,
                                 "this session store cannot delete")
        with contextlib.suppress(SessionInvalid):
            await self.cancel(session_id)
        self._running.pop(session_id, None)
        delete(session_id)

    async def close(self) -> None:
        """Cancel every running turn (the scope also owns the tasks)."""
        for session_id in list(self._running):
            with contextlib.suppress(LabfyError, ModelUnavailable):
                await self.cancel(session_id)
        self._running.clear()
