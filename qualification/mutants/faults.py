"""The mutants: each replaces exactly one function of ``labfy-ref serve`` with a faulty one.

A replacement is a few lines; where the fault is "the same, minus one check",
it calls the original it wraps. ``killer`` names the test expected to kill it;
``tox -e mutants`` says which test did.
"""

from __future__ import annotations

import hmac
import json
import math
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Message, Send

from labfy_ref.bridge import engine, loop, ndjson
from labfy_ref.bridge.llm import ModelRoute
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.runtime.runtime import AgentRuntime
from labfy_ref.runtime.states import TurnState
from labfy_ref.server import security
from labfy_ref.server.auth import Authenticator, Role, Session
from labfy_ref.server.security import SecurityMiddleware
from labfy_ref.workspace.store import Grant
from qualification.mutants.registry import FAULTS, fault

__all__ = ["FAULTS"]

HOST = "qualification/security/test_server_host.py"
ORIGIN = "qualification/security/test_server_origin_csrf.py"
ROLES = "qualification/security/test_bridge_roles.py"
SESSIONS = "qualification/security/test_server_sessions.py"
CONTRACT = "qualification/server/test_api_contract.py"
RUNTIME = "qualification/conformance/test_runtime_flows.py"
BRIDGE = "qualification/conformance/test_bridge_flows.py"

_init = SecurityMiddleware.__init__
_with_headers = SecurityMiddleware._with_headers
_approve = loop._StreamPort.approve
_served = engine.ReferenceEngine._served
_set_cookie = Response.set_cookie
_encode_line = ndjson.encode_line
_json_content_type = security.json_content_type


# -- the security checklist (SV-02, SV-04, SV-05, SV-07) -----------------------------------

@fault("host-check-off", replaces="labfy_ref.server.security:host_ok",
       killer=f"{HOST}::test_a_foreign_host_is_refused_even_with_a_valid_session",
       breaks="any Host header is served (DNS rebinding)")
def _any_host(host: str | None, allowed: frozenset[str]) -> bool:
    return True


@fault("localhost-dropped", replaces="labfy_ref.server.security:allowed_hosts",
       killer=f"{HOST}::test_the_three_own_hosts_are_served",
       breaks="localhost:PORT is missing from the Host allowlist")
def _no_localhost(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"[::1]:{port}"})


@fault("origin-by-prefix", replaces="labfy_ref.server.security:origin_ok",
       killer=f"{ORIGIN}::test_a_foreign_origin_is_refused_on_every_mutation",
       breaks="Origin is compared by prefix (http://127.0.0.1:P.evil.example passes)")
def _origin_prefix(origin: str | None, host: str, fetch_site: str | None) -> bool:
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    return origin is None or origin.startswith(f"http://{host}")


@fault("fetch-metadata-ignored", replaces="labfy_ref.server.security:origin_ok",
       killer=f"{ORIGIN}::test_cross_site_fetch_metadata_is_refused_with_a_bearer",
       breaks="a cross-site Sec-Fetch-Site is not refused")
def _no_fetch_site(origin: str | None, host: str, fetch_site: str | None) -> bool:
    return origin is None or origin == f"http://{host}"


@fault("csrf-not-compared", replaces="labfy_ref.server.security:csrf_ok",
       killer=f"{ORIGIN}::test_a_missing_or_wrong_csrf_token_is_refused",
       breaks="the CSRF token is not compared at all")
def _any_csrf(header: str | None, session: Session) -> bool:
    return True


@fault("csrf-compared-by-length", replaces="labfy_ref.server.security:csrf_ok",
       killer=f"{ORIGIN}::test_a_missing_or_wrong_csrf_token_is_refused",
       breaks="any CSRF token of the right length passes")
def _csrf_length(header: str | None, session: Session) -> bool:
    return header is not None and len(header) == len(session.csrf_token)


@fault("form-body-500", replaces="labfy_ref.server.security:json_content_type",
       killer=f"{ORIGIN}::test_classic_csrf_carriers_are_refused_415",
       breaks="a form or text body crashes the check: 500 instead of 415")
def _crashing_content_type(value: str | None) -> bool:
    if value is not None and "form" in value:
        raise ValueError(f"cannot parse {value}")  # escapes the checklist: a bare 500
    return _json_content_type(value)


@fault("body-unbounded", replaces="labfy_ref.server.security:SecurityMiddleware.__init__",
       killer=f"{CONTRACT}::test_bodies_are_bounded_413",
       breaks="request bodies are not bounded (no 413)")
def _unbounded(self: SecurityMiddleware, app: Any, **options: Any) -> None:
    _init(self, app, **(options | {"max_body": 1 << 30}))


@fault("duplicate-keys-accepted", replaces="labfy_ref.server.security:loads_strict",
       killer=f"{CONTRACT}::test_non_json_or_ambiguous_json_is_422",
       breaks="bodies are read by json.loads: duplicate keys and NaN pass")
def _lax_json(text: str, *, max_chars: int = 0) -> Any:
    return json.loads(text)


@fault("route-without-session", replaces="labfy_ref.server.security:SecurityMiddleware.__init__",
       killer=f"{SESSIONS}::test_without_a_valid_session_every_protected_route_answers_401",
       breaks="GET /api/v1/objects is served without a session check")
def _objects_public(self: SecurityMiddleware, app: Any, **options: Any) -> None:
    _init(self, app, **options)
    self.public = self.public | {("GET", "/api/v1/objects")}


@fault("no-nosniff", replaces="labfy_ref.server.security:SecurityMiddleware._with_headers",
       killer=f"{CONTRACT}::test_security_headers_on_every_response",
       breaks="X-Content-Type-Options: nosniff is missing")
def _without_nosniff(send: Send) -> Send:
    inner = _with_headers(send)

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            await send({**message, "headers": [
                (k, v) for k, v in message.get("headers", []) if k != b"x-content-type-options"]
                + [h for h in security.SECURITY_HEADERS if h[0] != b"x-content-type-options"]})
            return
        await inner(message)
    return wrapped


@fault("cors-enabled", replaces="labfy_ref.server.security:SecurityMiddleware._with_headers",
       killer=f"{ORIGIN}::test_cors_is_never_enabled",
       breaks="every answer allows any origin (Access-Control-Allow-Origin: *)")
def _with_cors(send: Send) -> Send:
    async def cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"access-control-allow-origin", b"*")]}
        await send(message)
    return _with_headers(cors)


@fault("traceback-in-error", replaces="labfy_ref.server.errors:error_response",
       killer=f"{CONTRACT}::test_exact_field_sets_or_422",
       breaks="an error's message carries a traceback, unbounded")
def _traceback_error(status: int, code: Any, message: str, *,
                     openai: bool = False) -> JSONResponse:
    trace = 'Traceback (most recent call last):\n  File "labfy_ref/server/routes.py", line 1'
    value = getattr(code, "value", code)
    return JSONResponse({"error": {"code": value, "message": f"{message}\n{trace}"}},
                        status_code=status)


# -- sessions and roles (SV-03, SV-08, BR-04) -----------------------------------------------

@fault("cookie-without-samesite", replaces="starlette.responses:Response.set_cookie",
       killer=f"{SESSIONS}::test_login_sets_a_host_only_strict_httponly_cookie_with_bounded_lifetime",
       breaks="the session cookie has no SameSite attribute")
def _cookie_lax(self: Response, key: str, value: str = "", **options: Any) -> None:
    _set_cookie(self, key, value, **(options | {"samesite": None}))


@fault("logout-keeps-session", replaces="labfy_ref.server.auth:Authenticator.logout",
       killer=f"{SESSIONS}::test_logout_invalidates_the_session",
       breaks="logging out leaves the session valid")
def _keep(self: Authenticator, session_id: str) -> None:
    return None


@fault("user-on-cordis", replaces="labfy_ref.server.bridge_routes:_admin",
       killer=f"{ROLES}::test_a_user_account_is_refused_on_every_admin_route",
       breaks="a user-role session is served on /api/cordis/*")
def _anyone(request: Any) -> None:
    return None


@fault("user-bearer-is-admin", replaces="labfy_ref.server.auth:Authenticator.bearer",
       killer=f"{ROLES}::test_a_user_bearer_is_refused_on_every_admin_route",
       breaks="any valid bearer token gets the admin role")
def _bearer_admin(self: Authenticator, token: str) -> Session | None:
    identity = self._identify(token)
    return None if identity is None else Session("", Role.ADMIN, identity[1], "", math.inf,
                                                 bearer=True)


@fault("bearer-compared-loosely", replaces="labfy_ref.server.security:bearer_token",
       killer=f"{SESSIONS}::test_every_wrong_or_malformed_bearer_is_the_same_401_on_every_api_route",
       breaks="a malformed Authorization header gets its own answer (not the one 401)")
def _loose_bearer(values: list[str]) -> str | None:
    if len(values) != 1:
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "one Authorization header")
    scheme, _, token = values[0].partition(" ")
    return token.strip() if hmac.compare_digest(scheme.lower(), "bearer") else None


# -- the runtime's turns and grants (RT-05, RT-08, GW-07) -----------------------------------

@fault("resume-skips-grant", replaces="labfy_ref.runtime.runtime:AgentRuntime.resume",
       killer=f"{RUNTIME}::test_research_pauses_for_a_grant_and_resumes_the_same_turn",
       breaks="a paused turn resumes without an active grant")
def _resume_ungranted(self: AgentRuntime, turn_id: str) -> Any:
    turn = self.get(turn_id)
    if turn.state is not TurnState.AUTHORIZATION_REQUIRED or turn.authorization is None:
        raise RuntimeRefused(ErrorCode.TURN_NOT_RESUMABLE, "not paused")
    self._check_capacity(resuming=True)  # ... and no look at the campaign's grants
    turn.resume_campaign = turn.authorization["campaign_id"]
    turn.move(TurnState.QUEUED)
    self._enqueue(turn)
    return turn


@fault("revoked-grant-counted", replaces="labfy_ref.workspace.store:Grant.active_for",
       killer=f"{RUNTIME}::test_a_revoked_grant_no_longer_authorizes_a_resume",
       breaks="a revoked grant still authorizes research")
def _revoked_counts(self: Grant, workspace_id: str, now: Any) -> bool:
    return self.workspace_id == workspace_id


@fault("cancel-ignored", replaces="labfy_ref.runtime.runtime:AgentRuntime.cancel",
       killer=f"{RUNTIME}::test_a_cancelled_turn_runs_no_tool_the_model_asked_for_afterwards",
       breaks="cancel answers but the turn runs on: its tool runs after the cancel")
def _no_cancel(self: AgentRuntime, turn_id: str) -> Any:
    return self.get(turn_id)


# -- the bridge (BR-02, BR-12, BR-13) --------------------------------------------------------

@fault("ndjson-two-per-line", replaces="labfy_ref.bridge.stream:encode_line",
       killer=f"{BRIDGE}::test_a_turn_streams_one_chunk_per_line_in_sequence_and_ends_with_done",
       breaks="every other NDJSON chunk shares its line with the next")
def _joined_lines(value: Any) -> bytes:
    line = _encode_line(value)
    return line[:-1] + b" " if value.get("seq", 0) % 2 == 1 and value["type"] != "done" \
        else line


@fault("allow-once-sticky", replaces="labfy_ref.bridge.loop:_StreamPort.approve",
       killer=f"{BRIDGE}::test_allow_once_runs_that_one_write_and_deny_refuses_the_next",
       breaks="after one 'Allow once' every later write of the turn runs without asking")
async def _sticky(self: Any, call_id: str, action: Any) -> str | None:
    earlier = [a.future for a in self._turn.approvals.values()]
    if any(f.done() and not f.cancelled() and f.result() == "allowed-once" for f in earlier):
        return "allowed-once"
    decision: str | None = await _approve(self, call_id, action)
    return decision


@fault("unknown-model-served", replaces="labfy_ref.bridge.engine:ReferenceEngine._served",
       killer=f"{BRIDGE}::test_the_openai_face_answers_a_chat_client_with_a_bearer",
       breaks="a chat request naming an unknown model is answered by the default one")
async def _any_model(self: Any, model: str) -> Any:
    try:
        return await _served(self, model)
    except RuntimeRefused:
        return ModelRoute.parse(self.model_configuration()["route"])
