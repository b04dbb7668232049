"""The workspace server's API routes (SV-03, SV-06), with the wire shapes of SPEC §15."""

from __future__ import annotations

import datetime
import math
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from labfy_ref.buildinfo import build_info
from labfy_ref.clock import utcnow
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.server.auth import Role, Session
from labfy_ref.server.security import session_of
from labfy_ref.server.state import ServerState

MAX_GRANT_SECONDS = 366 * 24 * 3600


class Strict(BaseModel):
    """Request bodies take exactly their fields (unknown field → 422)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class LoginBody(Strict):
    """``POST /api/v1/session``."""

    token: str = Field(min_length=1, max_length=256)


class TurnBody(Strict):
    """``POST /api/v1/agent-runtime/turns`` (lengths are the runtime's to check: RT-03)."""

    message: str
    client_request_id: str | None = None


class GrantBody(Strict):
    """``POST /api/v1/grants``."""

    campaign_id: str = Field(min_length=1, max_length=64)
    expires_in_seconds: int | None = Field(default=None, ge=1, le=MAX_GRANT_SECONDS)


def server_state(request: Request) -> ServerState:
    """The server's state (set on the app at start-up)."""
    state: ServerState = request.app.state.server
    return state


State = Annotated[ServerState, Depends(server_state)]
router = APIRouter(prefix="/api")


@router.get("/health")
async def health() -> dict[str, str]:
    """Liveness (no session)."""
    return {"status": "ok"}


@router.get("/version")
async def version() -> dict[str, Any]:
    """What build this is (no session, API-02): name, version, git commit or null, SPEC revision."""
    return build_info()


def _session_json(session: Session, state: ServerState, response: Response) -> dict[str, str]:
    """The session body of SPEC §15; the seconds it has left (SV-11) ride in headers, so the
    page can warn before it ends, and the pinned body stays as it is."""
    if not session.bearer:
        left = state.auth.remaining(session)
        response.headers["X-Session-Idle-Seconds"] = f"{left['idle_seconds']:g}"
        response.headers["X-Session-Ends-In"] = f"{left['ends_in']:g}"
    return {"role": session.role.value, "name": session.name, "csrf_token": session.csrf_token}


@router.post("/v1/session")
async def login(body: LoginBody, state: State, response: Response) -> dict[str, str]:
    """Exchange a login code for a session cookie (SV-03; 429 when the role is full, AV-03)."""
    session = state.auth.login(body.token)
    if session is None:
        raise RuntimeRefused(ErrorCode.UNAUTHENTICATED, "invalid login code")
    response.set_cookie(state.auth.cookie, session.session_id,
                        max_age=math.ceil(state.auth.max_seconds), path="/", httponly=True,
                        samesite="strict", secure=False)
    return _session_json(session, state, response)


@router.get("/v1/session")
async def current_session(request: Request, state: State,
                          response: Response) -> dict[str, str]:
    """The session's role, name and CSRF token (and, in headers, the seconds it has left)."""
    return _session_json(session_of(request.state), state, response)


@router.delete("/v1/session")
async def logout(request: Request, state: State, response: Response) -> dict[str, bool]:
    """End the session."""
    state.auth.logout(session_of(request.state).session_id)
    response.delete_cookie(state.auth.cookie, path="/", httponly=True, samesite="strict")
    return {"ok": True}


@router.get("/v1/agent-runtime/status")
async def runtime_status(request: Request, state: State) -> dict[str, Any]:
    """Mode, availability, counts and limits (the admin also sees refusals per code)."""
    return await state.status(admin=session_of(request.state).role is Role.ADMIN)


@router.post("/v1/agent-runtime/turns")
async def start_turn(body: TurnBody, state: State) -> JSONResponse:
    """Start a turn: 202 when new, 200 for a repeated ``client_request_id`` (RT-04)."""
    turn, created = state.runtime.start_turn(body.message, body.client_request_id)
    return JSONResponse({"turn": turn.as_json()}, status_code=202 if created else 200)


@router.get("/v1/agent-runtime/turns")
async def list_turns(state: State) -> dict[str, Any]:
    """Retained turns, newest first."""
    return {"turns": [t.as_json() for t in state.runtime.list_turns()]}


@router.get("/v1/agent-runtime/turns/{turn_id}")
async def get_turn(turn_id: str, state: State) -> dict[str, Any]:
    """One turn."""
    return {"turn": state.runtime.get(turn_id).as_json()}


@router.post("/v1/agent-runtime/turns/{turn_id}/resume")
async def resume_turn(turn_id: str, state: State) -> JSONResponse:
    """Resume a paused turn once granted (409 GRANT_REQUIRED otherwise)."""
    return JSONResponse({"turn": state.runtime.resume(turn_id).as_json()}, status_code=202)


@router.post("/v1/agent-runtime/turns/{turn_id}/cancel")
async def cancel_turn(turn_id: str, state: State) -> dict[str, Any]:
    """Cancel a turn (harmless when already finished)."""
    return {"turn": state.runtime.cancel(turn_id).as_json()}


@router.get("/v1/agent-runtime/events")
async def events(state: State, cursor: Annotated[int, Query(ge=0)] = 0,
                 limit: Annotated[int, Query(ge=1, le=500)] = 100) -> dict[str, Any]:
    """The event log after ``cursor`` (RT-06)."""
    return state.runtime.events.page(cursor, limit)


@router.get("/v1/agent-runtime/tools")
async def tools(state: State) -> dict[str, Any]:
    """The catalog with its validation schemas (PR-05, GW-02)."""
    return {"tools": state.gateway.describe_tools()}


@router.get("/v1/objects")
async def objects(state: State) -> dict[str, Any]:
    """Workspace objects (id, kind, title)."""
    return {"objects": state.gateway.list_objects()}


@router.get("/v1/research/campaigns/{campaign_id}")
async def campaign(campaign_id: str, state: State) -> dict[str, Any]:
    """A campaign of this workspace with its grants (history included)."""
    found = state.gateway.campaign(campaign_id)
    now = utcnow()
    grants = [g.as_json(state.workspace.workspace_id, now)
              for g in state.gateway.grants.for_campaign(campaign_id)]
    return {"campaign": {"id": found.campaign_id, "topic": found.topic,
                         "questions": list(found.questions),
                         "object_refs": list(found.object_refs), "status": found.status,
                         "evidence": list(found.evidence), "created_at": found.created_at,
                         "grants": grants}}


@router.post("/v1/grants", status_code=201)
async def create_grant(body: GrantBody, state: State) -> dict[str, Any]:
    """A human grants one campaign of this workspace (RT-08)."""
    expires = (utcnow() + datetime.timedelta(seconds=body.expires_in_seconds)
               if body.expires_in_seconds else None)
    grant = state.gateway.grant(body.campaign_id, expires)
    return {"grant": grant.as_json(state.workspace.workspace_id, utcnow())}


@router.delete("/v1/grants/{grant_id}")
async def revoke_grant(grant_id: str, state: State) -> dict[str, Any]:
    """Revoke a grant (durable; history kept)."""
    grant = state.gateway.grants.revoke(grant_id)
    return {"grant": grant.as_json(state.workspace.workspace_id, utcnow())}

