"""The engine bridge's HTTP API (BR-04, HO-06): admin only but health; turns as NDJSON.

These routes know only the engine contract (and the usage ledger, BR-14, which
the gateway keeps for the runtime and the engine alike: it answers whether the
bridge is on or not). A client that disconnects
cancels its turn (BR-05): the streaming body's ``finally`` cancels the handle,
which cancels the turn's task, its model request and any approval wait.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import Field

from labfy_ref.bridge.contract import PAGE_SIZE, Engine
from labfy_ref.bridge.service import Bridge
from labfy_ref.gateway.usage import USAGE_PAGE, UsageService
from labfy_ref.modes import Approval
from labfy_ref.server.routes import Strict
from labfy_ref.server.security import require_admin

NDJSON = "application/x-ndjson"


def bridge_of(request: Request) -> Bridge:
    """The server's bridge."""
    bridge: Bridge = request.app.state.server.bridge
    return bridge


def admin_engine(request: Request) -> Engine:
    """The engine, for an admin session only (403 for ``user``; 503 while it cannot serve)."""
    require_admin(request.state, "the engine")
    return bridge_of(request).engine()


def admin_usage(request: Request) -> UsageService:
    """The usage ledger, for an admin session only (403 for ``user``)."""
    require_admin(request.state, "the engine")
    ledger: UsageService = request.app.state.server.gateway.usage
    return ledger


def admin_bridge(request: Request) -> Bridge:
    """The bridge itself, for the admin's toggle only (BR-16; 403 for ``user``)."""
    require_admin(request.state, "the engine bridge's toggle")
    return bridge_of(request)


EngineDep = Annotated[Engine, Depends(admin_engine)]
BridgeDep = Annotated[Bridge, Depends(admin_bridge)]
UsageDep = Annotated[UsageService, Depends(admin_usage)]
router = APIRouter(prefix="/api/cordis")


class SessionBody(Strict):
    """``POST /api/cordis/sessions``."""

    model: str | None = Field(default=None, max_length=512)
    permission_mode: str | None = Field(default=None, max_length=32)


class SettingsBody(SessionBody):
    """``PATCH /api/cordis/sessions/<id>/settings``."""


class MessageBody(Strict):
    """``POST /api/cordis/sessions/<id>/messages``; ``headless`` callers cannot show approvals."""

    text: str  # its length is the engine's to check
    headless: bool = False


class ToggleBody(Strict):
    """``POST /api/cordis/admin/disable|enable|reload``: ``{}`` (or no body)."""


class DecisionBody(Strict):
    """``POST /api/cordis/sessions/<id>/approvals/<approval_id>``."""

    decision: Annotated[Approval, Field(strict=False)]  # a JSON string names the member


@router.get("/health")
async def health(request: Request) -> dict[str, Any]:
    """Bridge state, rows, services and missing requirements (no auth)."""
    return bridge_of(request).health()


@router.get("/sessions")
async def list_sessions(engine: EngineDep, limit: int = PAGE_SIZE,
                        cursor: str | None = None) -> JSONResponse:
    """A page of sessions, newest first, and ``next_cursor`` (null on the last page).

    The bounds of ``limit`` and the meaning of ``cursor`` are the engine's (422
    VALIDATION_FAILED when refused); the route only passes them on. The page is
    plain JSON already: it is encoded once, not walked value by value first.
    """
    return JSONResponse(engine.list_sessions(limit=limit, cursor=cursor))


@router.post("/sessions", status_code=201)
async def create_session(body: SessionBody, engine: EngineDep) -> dict[str, Any]:
    """Reserve a session (its header is written at once)."""
    return {"session": engine.create_session(body.model_dump(exclude_none=True))}


@router.get("/sessions/{session_id}")
async def get_session(session_id: str, engine: EngineDep) -> dict[str, Any]:
    """A session with its messages."""
    return {"session": engine.get_session(session_id)}


@router.get("/sessions/{session_id}/context")
async def session_context(session_id: str, engine: EngineDep) -> dict[str, Any]:
    """What the session's model is told besides its messages: the system prompt, the
    injected context (text, shown in the page's Session context)."""
    return {"context": engine.session_context(session_id)}


@router.delete("/sessions/{session_id}")
async def delete_session(session_id: str, engine: EngineDep) -> dict[str, Any]:
    """Cancel, release, then remove the log."""
    await engine.delete_session(session_id)
    return {"deleted": session_id}


@router.patch("/sessions/{session_id}/settings")
async def update_settings(session_id: str, body: SettingsBody,
                          engine: EngineDep) -> dict[str, Any]:
    """Model or permission mode of an idle session (409 SESSION_BUSY during a turn)."""
    return {"session": engine.update_session_settings(
        session_id, body.model_dump(exclude_none=True))}


@router.post("/sessions/{session_id}/messages")
async def send_message(session_id: str, body: MessageBody,
                       engine: EngineDep) -> StreamingResponse:
    """Start a turn and stream its chunks as NDJSON, one per line."""
    handle = engine.send_message(session_id, body.text, headless=body.headless)

    async def lines() -> AsyncIterator[bytes]:
        try:
            async for line in handle.lines():  # encoded once, when emitted
                yield line
        finally:
            handle.cancel()  # a client that went away cancels the turn; a no-op after done

    return StreamingResponse(lines(), media_type=NDJSON,
                             headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


@router.post("/sessions/{session_id}/cancel")
async def cancel(session_id: str, engine: EngineDep) -> dict[str, Any]:
    """Cancel the running turn."""
    return {"cancelled": await engine.cancel(session_id)}


@router.post("/sessions/{session_id}/approvals/{approval_id}")
async def decide_approval(session_id: str, approval_id: str, body: DecisionBody,
                          engine: EngineDep) -> JSONResponse:
    """Allow once or deny a pending approval (409 when not pending)."""
    return JSONResponse(engine.decide_approval(session_id, approval_id, body.decision))


@router.get("/agents")
async def agents(engine: EngineDep) -> dict[str, Any]:
    """Active agents."""
    return {"agents": engine.list_agents()}


@router.get("/tools")
async def tools(engine: EngineDep) -> dict[str, Any]:
    """Tools visible to the model (same shape as the runtime's catalog)."""
    return {"tools": engine.list_tools()}


@router.get("/models")
async def models(engine: EngineDep) -> dict[str, Any]:
    """The provider's real models and the current default."""
    return await engine.list_models()


@router.get("/usage")
async def usage(ledger: UsageDep, since: str | None = None, limit: int = USAGE_PAGE,
                cursor: str | None = None) -> JSONResponse:
    """Provider usage (BR-14): records newest first, totals per model and day, next cursor.

    ``since`` (ISO 8601; without an offset, UTC) bounds the records and the
    totals; ``limit`` and ``cursor`` page the records only (422 VALIDATION_FAILED
    when refused: the ledger's to check).
    """
    return JSONResponse(ledger.report(since, limit, cursor))


# -- the admin's toggle (BR-16): release and build again without a restart -----------------

@router.post("/admin/disable")
async def disable(bridge: BridgeDep, body: ToggleBody | None = None) -> dict[str, Any]:
    """Release the host (open streams end ``interrupted``); the engine routes answer
    ``CORDIS_DISABLED`` until it is enabled again."""
    return {"bridge": await bridge.disable()}


@router.post("/admin/enable")
async def enable(bridge: BridgeDep, body: ToggleBody | None = None) -> dict[str, Any]:
    """Build the host from its composition document (``starting`` while it settles); an
    enabled bridge is left as it is."""
    return {"bridge": await bridge.enable()}


@router.post("/admin/reload")
async def reload(bridge: BridgeDep, body: ToggleBody | None = None) -> dict[str, Any]:
    """Release the host and build it again from its document, read anew."""
    return {"bridge": await bridge.reload()}
