"""The mutants: each replaces exactly one function of ``labfy-ref serve`` with a faulty one.

A replacement is a few lines; where the fault is "the same, minus one check",
it calls the original it wraps. ``killer`` names the test expected to kill it;
``tox -e mutants`` says which test did.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hmac
import json
import math
from typing import Any

from sqlalchemy import select
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.types import Message, Send

from labfy_ref.bridge import engine, loop, ndjson
from labfy_ref.bridge.llm import ModelRoute
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ErrorCode, ProtocolRefused, RuntimeRefused
from labfy_ref.gateway import services
from labfy_ref.modes import Approval
from labfy_ref.protocol.exchange import Round
from labfy_ref.protocol.exchange import request_action as _request_action
from labfy_ref.protocol.prompt import repair_message
from labfy_ref.runtime.runtime import AgentRuntime
from labfy_ref.runtime.states import TurnState
from labfy_ref.server import errors, openai_routes, security
from labfy_ref.server.auth import Authenticator, Role, Session
from labfy_ref.server.security import SecurityMiddleware
from labfy_ref.workspace.schema import grants
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

@fault("host-check-off", ids=("SV-02",), replaces="labfy_ref.server.security:host_ok",
       killer=f"{HOST}::test_a_foreign_host_is_refused_even_with_a_valid_session",
       breaks="any Host header is served (DNS rebinding)")
def _any_host(host: str | None, allowed: frozenset[str]) -> bool:
    return True


@fault("localhost-dropped", ids=("SV-02",), replaces="labfy_ref.server.security:allowed_hosts",
       killer=f"{HOST}::test_the_three_own_hosts_are_served",
       breaks="localhost:PORT is missing from the Host allowlist")
def _no_localhost(port: int) -> frozenset[str]:
    return frozenset({f"127.0.0.1:{port}", f"[::1]:{port}"})


@fault("origin-by-prefix", ids=("SV-04",), replaces="labfy_ref.server.security:origin_ok",
       killer=f"{ORIGIN}::test_a_foreign_origin_is_refused_on_every_mutation",
       breaks="Origin is compared by prefix (http://127.0.0.1:P.evil.example passes)")
def _origin_prefix(origin: str | None, host: str, fetch_site: str | None) -> bool:
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    return origin is None or origin.startswith(f"http://{host}")


@fault("fetch-metadata-ignored", ids=("SV-04",), replaces="labfy_ref.server.security:origin_ok",
       killer=f"{ORIGIN}::test_cross_site_fetch_metadata_is_refused_with_a_bearer",
       breaks="a cross-site Sec-Fetch-Site is not refused")
def _no_fetch_site(origin: str | None, host: str, fetch_site: str | None) -> bool:
    return origin is None or origin == f"http://{host}"


@fault("csrf-not-compared", ids=("SV-04",), replaces="labfy_ref.server.security:csrf_ok",
       killer=f"{ORIGIN}::test_a_missing_or_wrong_csrf_token_is_refused",
       breaks="the CSRF token is not compared at all")
def _any_csrf(header: str | None, session: Session) -> bool:
    return True


@fault("csrf-compared-by-length", ids=("SV-04",), replaces="labfy_ref.server.security:csrf_ok",
       killer=f"{ORIGIN}::test_a_missing_or_wrong_csrf_token_is_refused",
       breaks="any CSRF token of the right length passes")
def _csrf_length(header: str | None, session: Session) -> bool:
    return header is not None and len(header) == len(session.csrf_token)


@fault("form-body-500", ids=("SV-05",), replaces="labfy_ref.server.security:json_content_type",
       killer=f"{ORIGIN}::test_classic_csrf_carriers_are_refused_415",
       breaks="a form or text body crashes the check: 500 instead of 415")
def _crashing_content_type(value: str | None) -> bool:
    if value is not None and "form" in value:
        raise ValueError(f"cannot parse {value}")  # escapes the checklist: a bare 500
    return _json_content_type(value)


@fault("body-unbounded", ids=("SV-05",),
       replaces="labfy_ref.server.security:SecurityMiddleware.__init__",
       killer=f"{CONTRACT}::test_bodies_are_bounded_413",
       breaks="request bodies are not bounded (no 413)")
def _unbounded(self: SecurityMiddleware, app: Any, **options: Any) -> None:
    _init(self, app, **(options | {"max_body": 1 << 30}))


@fault("duplicate-keys-accepted", ids=("SV-05",), replaces="labfy_ref.server.security:loads_strict",
       killer=f"{CONTRACT}::test_non_json_or_ambiguous_json_is_422",
       breaks="bodies are read by json.loads: duplicate keys and NaN pass")
def _lax_json(text: str, *, max_chars: int = 0) -> Any:
    return json.loads(text)


@fault("route-without-session", ids=("SV-03",),
       replaces="labfy_ref.server.security:SecurityMiddleware.__init__",
       killer=f"{SESSIONS}::test_without_a_valid_session_every_protected_route_answers_401",
       breaks="GET /api/v1/objects is served without a session check")
def _objects_public(self: SecurityMiddleware, app: Any, **options: Any) -> None:
    _init(self, app, **options)
    self.public = self.public | {("GET", "/api/v1/objects")}


@fault("no-nosniff", ids=("SV-07",),
       replaces="labfy_ref.server.security:SecurityMiddleware._with_headers",
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


@fault("cors-enabled", ids=("SV-04",),
       replaces="labfy_ref.server.security:SecurityMiddleware._with_headers",
       killer=f"{ORIGIN}::test_cors_is_never_enabled",
       breaks="every answer allows any origin (Access-Control-Allow-Origin: *)")
def _with_cors(send: Send) -> Send:
    async def cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []),
                                              (b"access-control-allow-origin", b"*")]}
        await send(message)
    return _with_headers(cors)


@fault("traceback-in-error", ids=("SV-05",), replaces="labfy_ref.server.errors:error_response",
       killer=f"{CONTRACT}::test_exact_field_sets_or_422",
       breaks="an error's message carries a traceback, unbounded")
def _traceback_error(status: int, code: Any, message: str, *,
                     openai: bool = False) -> JSONResponse:
    trace = 'Traceback (most recent call last):\n  File "labfy_ref/server/routes.py", line 1'
    value = getattr(code, "value", code)
    return JSONResponse({"error": {"code": value, "message": f"{message}\n{trace}"}},
                        status_code=status)


# -- sessions and roles (SV-03, SV-08, BR-04) -----------------------------------------------

@fault("cookie-without-samesite", ids=("SV-03",),
       replaces="starlette.responses:Response.set_cookie",
       killer=f"{SESSIONS}::test_login_sets_a_host_only_strict_httponly_cookie_with_bounded_lifetime",
       breaks="the session cookie has no SameSite attribute")
def _cookie_lax(self: Response, key: str, value: str = "", **options: Any) -> None:
    _set_cookie(self, key, value, **(options | {"samesite": None}))


@fault("logout-keeps-session", ids=("SV-03",),
       replaces="labfy_ref.server.auth:Authenticator.logout",
       killer=f"{SESSIONS}::test_logout_invalidates_the_session",
       breaks="logging out leaves the session valid")
def _keep(self: Authenticator, session_id: str) -> None:
    return None


@fault("user-on-cordis", ids=("BR-04",), replaces="labfy_ref.server.bridge_routes:require_admin",
       killer=f"{ROLES}::test_a_user_account_is_refused_on_every_admin_route",
       breaks="a user-role session is served on /api/cordis/*")
def _anyone(state: Any, what: str) -> None:
    return None


@fault("user-bearer-is-admin", ids=("SV-08",),
       replaces="labfy_ref.server.auth:Authenticator.bearer",
       killer=f"{ROLES}::test_a_user_bearer_is_refused_on_every_admin_route",
       breaks="any valid bearer token gets the admin role")
def _bearer_admin(self: Authenticator, token: str) -> Session | None:
    identity = self._identify(token)
    return None if identity is None else Session("", Role.ADMIN, identity[1], "", math.inf,
                                                 bearer=True)


@fault("bearer-compared-loosely", ids=("SV-08",), replaces="labfy_ref.server.security:bearer_token",
       killer=f"{SESSIONS}::test_every_wrong_or_malformed_bearer_is_the_same_401_on_every_api_route",
       breaks="a malformed Authorization header gets its own answer (not the one 401)")
def _loose_bearer(values: list[str]) -> str | None:
    if len(values) != 1:
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "one Authorization header")
    scheme, _, token = values[0].partition(" ")
    return token.strip() if hmac.compare_digest(scheme.lower(), "bearer") else None


# -- the runtime's turns and grants (RT-05, RT-08, GW-07) -----------------------------------

@fault("resume-skips-grant", ids=("RT-08", "GW-07"),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.resume",
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


@fault("revoked-grant-counted", ids=("RT-08", "GW-07"),
       replaces="labfy_ref.workspace.store:Grant.active_for",
       killer=f"{RUNTIME}::test_a_revoked_grant_no_longer_authorizes_a_resume",
       breaks="a revoked grant still authorizes research")
def _revoked_counts(self: Grant, workspace_id: str, now: Any) -> bool:
    return self.workspace_id == workspace_id


@fault("cancel-ignored", ids=("RT-05",), replaces="labfy_ref.runtime.runtime:AgentRuntime.cancel",
       killer=f"{RUNTIME}::test_a_cancelled_turn_runs_no_tool_the_model_asked_for_afterwards",
       breaks="cancel answers but the turn runs on: its tool runs after the cancel")
def _no_cancel(self: AgentRuntime, turn_id: str) -> Any:
    return self.get(turn_id)


# -- the bridge (BR-02, BR-12, BR-13) --------------------------------------------------------

@fault("ndjson-two-per-line", ids=("BR-02",), replaces="labfy_ref.bridge.stream:encode_line",
       killer=f"{BRIDGE}::test_a_turn_streams_one_chunk_per_line_in_sequence_and_ends_with_done",
       breaks="every other NDJSON chunk shares its line with the next")
def _joined_lines(value: Any) -> bytes:
    line = _encode_line(value)
    return line[:-1] + b" " if value.get("seq", 0) % 2 == 1 and value["type"] != "done" \
        else line


@fault("allow-once-sticky", ids=("BR-12",), replaces="labfy_ref.bridge.loop:_StreamPort.approve",
       killer=f"{BRIDGE}::test_allow_once_runs_that_one_write_and_deny_refuses_the_next",
       breaks="after one 'Allow once' every later write of the turn runs without asking")
async def _sticky(self: Any, call_id: str, action: Any) -> Approval | None:
    earlier = [a.future for a in self._turn.approvals.values()]
    if any(f.done() and not f.cancelled() and f.result() is Approval.ALLOWED_ONCE
           for f in earlier):
        return Approval.ALLOWED_ONCE
    decision: Approval | None = await _approve(self, call_id, action)
    return decision


@fault("unknown-model-served", ids=("BR-13",),
       replaces="labfy_ref.bridge.engine:ReferenceEngine._served",
       killer=f"{BRIDGE}::test_the_openai_face_answers_a_chat_client_with_a_bearer",
       breaks="a chat request naming an unknown model is answered by the default one")
async def _any_model(self: Any, model: str) -> Any:
    try:
        return await _served(self, model)
    except RuntimeRefused:
        return ModelRoute.parse(self.model_configuration()["route"])


# -- found by attacking the kit as an outsider (issue 13) --------------------------------------
# Seventeen of these passed the kit as it was: their killers in test_wire_contracts.py,
# test_flow_contracts.py and test_bearer.py were written (or marked conformance) for them.
# The others the kit killed already; headless-asked only after a 30 s read timeout, so its
# killer is a test that stops at the first approval-request.

WIRE = "qualification/conformance/test_wire_contracts.py"
FLOWS = "qualification/conformance/test_flow_contracts.py"
BEARER = "qualification/security/test_bearer.py"

_call = SecurityMiddleware.__call__
_bearer_session = SecurityMiddleware._bearer_session
_checked_body = SecurityMiddleware._checked_body
_install_error_handlers = errors.install_error_handlers
_login = Authenticator.login
_start_turn = AgentRuntime.start_turn
_decide_approval = engine.ReferenceEngine.decide_approval
_delete_session = engine.ReferenceEngine.delete_session
_send_message = engine.ReferenceEngine.send_message
_events = openai_routes._events
_revoke = services.GrantService.revoke
_emit = StreamHandle.emit


@fault("html-404-for-browsers", ids=("SV-05",),
       replaces="labfy_ref.server.app:install_error_handlers",
       killer=f"{WIRE}::test_an_unknown_path_or_method_is_a_json_error_whatever_is_accepted",
       breaks="a client that accepts text/html gets an HTML 404/405 page, not the JSON error")
def _html_errors(app: Any) -> None:
    _install_error_handlers(app)

    async def page(request: Request, exc: StarletteHTTPException) -> Response:
        if "text/html" in request.headers.get("accept", ""):
            return HTMLResponse(f"<h1>{exc.status_code}</h1>", status_code=exc.status_code)
        return errors.error_response(exc.status_code, ErrorCode.NOT_FOUND if
                                     exc.status_code == 404 else ErrorCode.METHOD_NOT_ALLOWED,
                                     str(exc.detail))
    app.add_exception_handler(StarletteHTTPException, page)


@fault("error-message-unbounded", ids=("SV-05",), replaces="labfy_ref.server.errors:bounded",
       killer=f"{WIRE}::test_a_refused_body_is_never_echoed_across_lines_or_at_length",
       breaks="an error message echoes the client's text whole (a long or multi-line field name)")
def _whole_message(text: str, limit: int = 0) -> str:
    return text


@fault("host-refusal-bare", ids=("SV-07", "SV-02"),
       replaces="labfy_ref.server.security:SecurityMiddleware.__call__",
       killer=f"{WIRE}::test_the_checklists_own_refusals_carry_the_security_headers",
       breaks="the Host refusal is answered before the security headers are attached")
async def _bare_host_refusal(self: SecurityMiddleware, scope: Any, receive: Any,
                             send: Send) -> None:
    host = dict(scope.get("headers", [])).get(b"host", b"").decode("latin-1")
    if scope["type"] == "http" and not security.host_ok(host, self.hosts):
        await security._refuse(scope, send, ErrorCode.HOST_NOT_ALLOWED, "Host not allowed")
        return
    await _call(self, scope, receive, send)


@fault("csp-allows-eval", ids=("SV-07",),
       replaces="labfy_ref.server.security:SecurityMiddleware._with_headers",
       killer=f"{WIRE}::test_the_csp_admits_only_self_or_none",
       breaks="the Content-Security-Policy lets scripts eval and connect anywhere")
def _csp_eval(send: Send) -> Send:
    async def relaxed(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [(k, v.replace(b"script-src 'self'", b"script-src "
                                                              b"'self' 'unsafe-eval'").replace(
                b"connect-src 'self'", b"connect-src *")) for k, v in message["headers"]]}
        await send(message)
    return _with_headers(relaxed)


@fault("bearer-beats-cookie", ids=("SV-08",), replaces="labfy_ref.server.security:"
       "SecurityMiddleware._bearer_session",
       killer=f"{BEARER}::test_a_cookie_and_a_bearer_together_are_refused_400_on_every_api_route",
       breaks="a request with both a session cookie and a bearer is served on the bearer")
async def _bearer_wins(self: SecurityMiddleware, scope: Any, path: str,
                       authorization: list[str], send: Send) -> Session | None:
    scope = {**scope, "headers": [(k, v) for k, v in scope["headers"] if k.lower() != b"cookie"]}
    session: Session | None = await _bearer_session(self, scope, path, authorization, send)
    return session


@fault("bearer-on-session-route", ids=("SV-08",), replaces="labfy_ref.server.security:"
       "SecurityMiddleware._bearer_session",
       killer=f"{BEARER}::test_the_cookie_session_routes_refuse_any_bearer",
       breaks="a bearer is accepted on /api/v1/session (exchanged for, or ending, a cookie)")
async def _bearer_session_route(self: SecurityMiddleware, scope: Any, path: str,
                                authorization: list[str], send: Send) -> Session | None:
    session: Session | None = await _bearer_session(self, scope, "", authorization, send)
    return session


@fault("origin-fixed-to-ipv4", ids=("SV-04",), replaces="labfy_ref.server.security:origin_ok",
       killer=f"{WIRE}::test_each_own_host_accepts_its_own_origin_and_no_other",
       breaks="Origin is compared with http://127.0.0.1:PORT whatever the Host ([::1], localhost)")
def _origin_ipv4(origin: str | None, host: str, fetch_site: str | None) -> bool:
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    return origin is None or origin == f"http://127.0.0.1:{host.rsplit(':', 1)[-1]}"


@fault("json-only-on-post", ids=("SV-05",),
       replaces="labfy_ref.server.security:SecurityMiddleware._checked_body",
       killer=f"{WIRE}::test_every_mutation_with_a_body_refuses_a_non_json_body_415",
       breaks="PATCH/PUT/DELETE bodies are read whatever their Content-Type (forms only POST)")
async def _post_only(self: SecurityMiddleware, scope: Any, headers: dict[str, str],
                     receive: Any, send: Send) -> Any:
    if scope["method"] != "POST":
        headers = headers | {"content-type": "application/json"}
    return await _checked_body(self, scope, headers, receive, send)


@fault("cookie-not-httponly", ids=("SV-03",), replaces="starlette.responses:Response.set_cookie",
       killer=f"{SESSIONS}::test_login_sets_a_host_only_strict_httponly_cookie_with_bounded_lifetime",
       breaks="the session cookie is readable by scripts (no HttpOnly)")
def _cookie_scriptable(self: Response, key: str, value: str = "", **options: Any) -> None:
    _set_cookie(self, key, value, **(options | {"httponly": False}))


@fault("cookie-ten-years", ids=("SV-03",), replaces="starlette.responses:Response.set_cookie",
       killer=f"{SESSIONS}::test_login_sets_a_host_only_strict_httponly_cookie_with_bounded_lifetime",
       breaks="the session cookie lives ten years (Max-Age unbounded)")
def _cookie_forever(self: Response, key: str, value: str = "", **options: Any) -> None:
    _set_cookie(self, key, value, **(options | {"max_age": 10 * 365 * 24 * 3600}))


@fault("csrf-is-session-id", ids=("SV-03", "SV-04"),
       replaces="labfy_ref.server.auth:Authenticator.login",
       killer=f"{WIRE}::test_each_login_issues_fresh_distinct_secrets",
       breaks="the CSRF token a script can read is the HttpOnly cookie's session id")
def _one_secret(self: Authenticator, token: str) -> Session | None:
    session = _login(self, token)
    if session is None:
        return None
    same = dataclasses.replace(session, csrf_token=session.session_id)
    self._sessions[session.session_id] = same
    return same


@fault("login-reuses-session", ids=("SV-03",), replaces="labfy_ref.server.auth:Authenticator.login",
       killer=f"{WIRE}::test_each_login_issues_fresh_distinct_secrets",
       breaks="a login hands back the account's live session (no fresh secrets: fixation)")
def _reused(self: Authenticator, token: str) -> Session | None:
    identity = self._identify(token)
    live = [s for s in self._sessions.values() if identity is not None
            and (s.role, s.name) == identity and s.expires_at > self.clock()]
    return live[-1] if live else _login(self, token)


@fault("session-role-from-name", ids=("SV-03",), replaces="labfy_ref.server.routes:_session_json",
       killer=f"{WIRE}::test_a_user_login_says_user_and_its_own_name",
       breaks="the session document says admin for any named account")
def _role_from_name(session: Session, state: Any, response: Any) -> dict[str, str]:
    return {"role": "admin" if session.name else "user", "name": session.name,
            "csrf_token": session.csrf_token}


# -- turns and grants (RT-04, RT-08, PR-03) --------------------------------------------------

@fault("repeated-start-202", ids=("RT-04",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.start_turn",
       killer=f"{FLOWS}::test_a_repeated_start_answers_200_with_the_same_turn",
       breaks="a repeated client_request_id answers 202 as if it started a new turn")
def _always_new(self: AgentRuntime, message: str, client_request_id: str | None = None) -> Any:
    turn, _ = _start_turn(self, message, client_request_id)
    return turn, True


@fault("request-id-ignored", ids=("RT-04",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.start_turn",
       killer=f"{RUNTIME}::test_a_repeated_client_request_id_starts_no_second_turn",
       breaks="client_request_id is ignored: every start is a new turn")
def _no_idempotency(self: AgentRuntime, message: str, client_request_id: str | None = None) -> Any:
    return _start_turn(self, message, None)


@fault("grant-of-any-campaign", ids=("RT-08", "GW-07"),
       replaces="labfy_ref.workspace.store:WorkspaceStore.grants_for",
       killer=f"{FLOWS}::test_a_grant_for_another_campaign_does_not_resume_this_one",
       breaks="a campaign's grants are read without the campaign: any grant counts")
def _every_grant(self: Any, campaign_id: str) -> list[Grant]:
    with self._read() as db:
        rows = db.execute(select(grants).order_by(grants.c.created_at, grants.c.grant_id)).all()
    return [Grant(*row) for row in rows]


@fault("grant-expiry-ignored", ids=("RT-08", "GW-07"),
       replaces="labfy_ref.workspace.store:Grant.active_for",
       killer=f"{FLOWS}::test_an_expired_grant_no_longer_authorizes_a_resume",
       breaks="an expired grant still counts")
def _never_expires(self: Grant, workspace_id: str, now: Any) -> bool:
    return self.workspace_id == workspace_id and self.revoked_at is None


@fault("revoke-unknown-200", ids=("SV-05", "RT-08"),
       replaces="labfy_ref.gateway.services:GrantService.revoke",
       killer=f"{CONTRACT}::test_errors_have_stable_codes",
       breaks="revoking an unknown grant answers 200 with a made-up grant")
def _revoke_anything(self: Any, grant_id: str) -> Grant:
    if self._store.get_grant(grant_id) is None:
        return Grant(grant_id, "", self.workspace_id, iso(utcnow()), None, iso(utcnow()))
    revoked: Grant = _revoke(self, grant_id)
    return revoked


@fault("no-repair", ids=("PR-03",), replaces="labfy_ref.runtime.driver:request_action",
       killer=f"{RUNTIME}::test_one_malformed_reply_gets_one_repair_round",
       breaks="a malformed reply ends the round at once: no repair request")
async def _no_repair(ask: Any, messages: Any, parser: Any, decoding: Any) -> Any:
    answer = await ask(messages, decoding)
    return Round(parser.parse(answer.content), answer, False, answer.usage)


@fault("repair-twice", ids=("PR-03",), replaces="labfy_ref.runtime.driver:request_action",
       killer=f"{FLOWS}::test_a_second_malformed_reply_ends_the_turn_model_protocol_error",
       breaks="a round refused twice is repaired once more (three requests)")
async def _repair_again(ask: Any, messages: Any, parser: Any, decoding: Any) -> Any:
    try:
        return await _request_action(ask, messages, parser, decoding)
    except ProtocolRefused as exc:
        if not exc.repairable:
            raise
        answer = await ask([*messages, repair_message(exc)], decoding)
        return Round(parser.parse(answer.content), answer, True, answer.usage)


# -- the bridge (BR-02, BR-08, BR-12, BR-13) ---------------------------------------------------

@fault("error-chunk-twice", ids=("BR-02",), replaces="labfy_ref.bridge.stream:StreamHandle.emit",
       killer=f"{FLOWS}::test_a_failed_bridge_turn_streams_one_error_then_done",
       breaks="a failed bridge turn streams its error chunk twice before done")
def _error_twice(self: StreamHandle, type_: str, **fields: Any) -> bool:
    if type_ == "error" and not self.finished and not self._errored:
        _emit(self, type_, **fields)
        self._errored = False  # the one-error guard is what this mutant lacks
    emitted: bool = _emit(self, type_, **fields)
    return emitted


@fault("stale-approval-accepted", ids=("BR-12",), replaces="labfy_ref.bridge.engine:"
       "ReferenceEngine.decide_approval",
       killer=f"{FLOWS}::test_a_decision_after_the_turn_ended_is_409",
       breaks="a decision for an approval whose turn has ended is answered 200")
def _late_decision(self: Any, session_id: str, approval_id: str, decision: Approval) -> Any:
    if session_id in self._running:
        return _decide_approval(self, session_id, approval_id, decision)
    self._state(session_id)
    return {"approval_id": approval_id, "decision": decision}


@fault("headless-asked", ids=("BR-12",),
       replaces="labfy_ref.bridge.engine:ReferenceEngine.send_message",
       killer=f"{FLOWS}::test_a_headless_turn_is_refused_without_being_asked",
       breaks="the headless flag is dropped: a caller that cannot answer is asked to approve")
def _asks_everyone(self: Any, session_id: str, text: str, *, headless: bool = False) -> Any:
    return _send_message(self, session_id, text)


@fault("delete-unknown-200", ids=("BR-08",),
       replaces="labfy_ref.bridge.engine:ReferenceEngine.delete_session",
       killer=f"{FLOWS}::test_deleting_an_unknown_engine_session_is_404",
       breaks="deleting an engine session that does not exist answers 200")
async def _delete_anything(self: Any, session_id: str) -> None:
    with contextlib.suppress(RuntimeRefused):
        await _delete_session(self, session_id)


@fault("delete-leaves-log", ids=("BR-08",),
       replaces="labfy_ref.bridge.store.logs:JsonlSessionStore.delete",
       killer=f"{BRIDGE}::test_a_disconnect_cancels_the_turn_and_a_deleted_session_is_gone",
       breaks="deleting an engine session forgets it but leaves its log on disk")
def _delete_nothing(self: Any, session_id: str) -> None:
    return None


@fault("openai-no-usage", ids=("BR-13", "BR-14"),
       replaces="labfy_ref.server.openai_routes:_Reply.usage",
       killer=f"{FLOWS}::test_the_openai_face_reports_the_providers_usage",
       breaks="the OpenAI face never says the provider's token usage")
def _no_usage(self: Any) -> dict[str, Any] | None:
    return None


@fault("openai-stream-without-done", ids=("BR-13",),
       replaces="labfy_ref.server.openai_routes:_events",
       killer=f"{BRIDGE}::test_the_openai_face_answers_a_chat_client_with_a_bearer",
       breaks="the SSE stream ends without data: [DONE]")
async def _no_done(reply: Any, include_usage: bool, keepalive: float) -> Any:
    async for event in _events(reply, include_usage, keepalive):
        if event != openai_routes.DONE:
            yield event


@fault("openai-events-merged", ids=("BR-13",), replaces="labfy_ref.server.openai_routes:event",
       killer=f"{BRIDGE}::test_the_openai_face_answers_a_chat_client_with_a_bearer",
       breaks="SSE chunks are written without the blank line that ends an event (merged)")
def _merged_event(document: dict[str, Any]) -> bytes:
    return b"data: " + _encode_line(document)


# -- more of the kit's areas, each killed by a test it already had ----------------------------

_streaming_init = StreamingResponse.__init__


@fault("host-case-folded", ids=("SV-02",), replaces="labfy_ref.server.security:host_ok",
       killer=f"{HOST}::test_a_foreign_host_is_refused_even_with_a_valid_session",
       breaks="the Host is compared case-insensitively (LOCALHOST:PORT is served)")
def _host_folded(host: str | None, allowed: frozenset[str]) -> bool:
    return host is not None and host.lower() in allowed


@fault("no-store-dropped-on-errors", ids=("SV-07",),
       replaces="labfy_ref.server.security:SecurityMiddleware._with_headers",
       killer=f"{WIRE}::test_the_checklists_own_refusals_carry_the_security_headers",
       breaks="error answers may be cached: Cache-Control: no-store only on successes")
def _cacheable_errors(send: Send) -> Send:
    inner = _with_headers(send)

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start" and message["status"] >= 400:
            await send({**message, "headers": [*message.get("headers", []), *(
                h for h in security.SECURITY_HEADERS if h[0] != b"cache-control")]})
            return
        await inner(message)
    return wrapped


@fault("ndjson-seq-from-zero", ids=("BR-02",), replaces="labfy_ref.bridge.stream:encode_line",
       killer=f"{BRIDGE}::test_a_turn_streams_one_chunk_per_line_in_sequence_and_ends_with_done",
       breaks="NDJSON chunks are numbered from 0 on the wire")
def _seq_from_zero(value: Any) -> bytes:
    return _encode_line({**value, "seq": value["seq"] - 1} if "seq" in value else value)


@fault("ndjson-buffering-allowed", ids=("BR-04",),
       replaces="starlette.responses:StreamingResponse.__init__",
       killer=f"{BRIDGE}::test_a_turn_streams_one_chunk_per_line_in_sequence_and_ends_with_done",
       breaks="a stream omits X-Accel-Buffering: no (a proxy may hold the chunks back)")
def _bufferable(self: StreamingResponse, content: Any, status_code: int = 200,
                headers: Any = None, media_type: str | None = None,
                background: Any = None) -> None:
    kept = {k: v for k, v in (headers or {}).items() if k.lower() != "x-accel-buffering"}
    _streaming_init(self, content, status_code, kept, media_type, background)


from qualification.mutants import faults_teeth, faults_teeth2  # noqa: E402,F401  (registers)
