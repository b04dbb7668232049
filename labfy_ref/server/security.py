"""The request checklist of the workspace server (SV-02..SV-05, SV-07), in one fixed order.

1. Host allowlist — before anything else, so a rebinding name never reaches a route.
2. Origin (exact) and ``Sec-Fetch-Site`` on state-changing requests.
3. Credentials on every API route but the public ones: a session cookie, or an
   ``Authorization: Bearer`` token (SV-08) — never both (400 ``AUTH_AMBIGUOUS``),
   never a bearer on the cookie session's own routes (400 ``BEARER_NOT_ACCEPTED``).
   A bearer, when sent, is checked on every API route, public ones included, so
   a wrong one is never quietly treated as no credential at all.
4. CSRF token on state-changing requests made with a cookie. A bearer needs none:
   a browser attaches cookies to cross-site requests by itself, but a page can only
   send an ``Authorization`` header cross-site after a CORS preflight, which this
   server never grants. Step 2 still refuses a foreign ``Origin`` on a bearer mutation.
5. ``application/json`` bodies only, bounded in size, strict JSON.
Every response gets the security headers — an unexpected error's 500 too: this
middleware answers it itself (Starlette's ``ServerErrorMiddleware`` sits outside
every added middleware, so its answers would carry none of them). Each check is
a small pure function; the middleware only calls them in order and answers a
refusal itself.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labfy_ref.errors import HTTP_STATUS, ErrorCode, ProtocolRefused, RuntimeRefused
from labfy_ref.logs import incident
from labfy_ref.protocol.strict_json import loads_strict
from labfy_ref.server.auth import Authenticator, Role, Session, bearer_token
from labfy_ref.server.errors import OPENAI_PREFIX, error_response

log = logging.getLogger("labfy_ref.server")
MUTATIONS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
PUBLIC_API = frozenset({("GET", "/api/health"), ("GET", "/api/version"),
                        ("POST", "/api/v1/session"), ("GET", "/api/cordis/health")})
#: The cookie session's own routes: a bearer is refused there, whatever its value, since
#: exchanging a bearer for a cookie (or "ending" a bearer) would blur the two credentials.
SESSION_PATH = "/api/v1/session"
DEFAULT_MAX_BODY = 64 * 1024
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; font-src 'self'; form-action 'self'; frame-ancestors 'none'; "
       "base-uri 'none'")
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)


def allowed_hosts(port: int) -> frozenset[str]:
    """The exact Host values the server answers (SV-02)."""
    return frozenset({f"127.0.0.1:{port}", f"[::1]:{port}", f"localhost:{port}"})


def host_ok(host: str | None, allowed: frozenset[str]) -> bool:
    """Is the Host header one of the allowlisted values, exactly?"""
    return host is not None and host in allowed


def origin_ok(origin: str | None, host: str, fetch_site: str | None) -> bool:
    """No Origin, or exactly ours; and no cross-site ``Sec-Fetch-Site``."""
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return False
    return origin is None or origin == f"http://{host}"


def csrf_ok(header: str | None, session: Session) -> bool:
    """Does ``X-CSRF-Token`` equal the session's secret (constant time)?"""
    return header is not None and hmac.compare_digest(header.encode(), session.csrf_token.encode())


def json_content_type(value: str | None) -> bool:
    """Is the Content-Type ``application/json`` (optionally with a charset)?"""
    if value is None:
        return False
    media, _, params = value.partition(";")
    return media.strip().lower() == "application/json" and params.strip().lower() in (
        "", "charset=utf-8")


def _all_values(scope: Scope, name: bytes) -> list[str]:
    """Every value of header ``name`` (lower case), in order: repeated headers are visible."""
    return [value.decode("latin-1") for key, value in scope["headers"] if key.lower() == name]


def _headers(scope: Scope) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in scope["headers"]:
        name = key.decode("latin-1").lower()
        if name not in found:  # the first value wins; duplicates never override
            found[name] = value.decode("latin-1")
    return found


def cookie_value(header: str | None, name: str) -> str | None:
    """The value of cookie ``name`` in a ``Cookie`` header, read as RFC 6265 §5.4 says.

    Pairs are split on ``;`` and each on its first ``=``; a malformed neighbour
    (a stray quote, no ``=``) is skipped and never hides ours. The first pair
    with our name wins. A value wrapped in double quotes loses them.
    """
    if not header:
        return None
    for pair in header.split(";"):
        key, sep, value = pair.partition("=")
        if sep and key.strip(" \t") == name:
            value = value.strip(" \t")
            if len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            return value
    return None


class SecurityMiddleware:
    """Runs the checklist; puts the session in ``scope["state"]["session"]`` for routes."""

    def __init__(self, app: ASGIApp, *, port: int, auth: Authenticator,
                 max_body: int = DEFAULT_MAX_BODY,
                 extra_public: Iterable[tuple[str, str]] = ()) -> None:
        self.app = app
        self.hosts = allowed_hosts(port)
        self.auth = auth
        self.max_body = max_body
        self.public = PUBLIC_API | frozenset(extra_public)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._with_headers(send)
        headers = _headers(scope)
        method, path = scope["method"], scope["path"]
        host = headers.get("host")
        if not host_ok(host, self.hosts):
            await _refuse(scope, send, ErrorCode.HOST_NOT_ALLOWED, "this Host is not allowed")
            return
        assert host is not None
        mutation = method in MUTATIONS
        if mutation and not origin_ok(headers.get("origin"), host,
                                      headers.get("sec-fetch-site")):
            await _refuse(scope, send, ErrorCode.ORIGIN_NOT_ALLOWED, "cross-origin request refused")
            return
        api = path.startswith("/api/")
        authorization = _all_values(scope, b"authorization")
        if api and authorization:
            session = await self._bearer_session(scope, path, authorization, send)
            if session is None:
                return
        else:
            session = self.auth.session(cookie_value(headers.get("cookie"), self.auth.cookie))
            if api and (method, path) not in self.public:
                if session is None:
                    await _refuse(scope, send, ErrorCode.UNAUTHENTICATED, "log in first")
                    return
                if mutation and not csrf_ok(headers.get("x-csrf-token"), session):
                    await _refuse(scope, send, ErrorCode.CSRF_FAILED,
                                  "missing or wrong X-CSRF-Token")
                    return
        scope.setdefault("state", {})["session"] = session
        if mutation:
            checked = await self._checked_body(scope, headers, receive, send)
            if checked is None:
                return
            receive = checked
        await self._guarded(scope, receive, send)

    async def _bearer_session(self, scope: Scope, path: str, authorization: list[str],
                              send: Send) -> Session | None:
        """The bearer's request-scoped session, or None once the request is refused (SV-08).

        Every wrong or malformed ``Authorization`` gets the same 401, so the answer
        never says which part was wrong.
        """
        if any(cookie_value(value, self.auth.cookie) is not None
               for value in _all_values(scope, b"cookie")):
            await _refuse(scope, send, ErrorCode.AUTH_AMBIGUOUS,
                          "send a session cookie or a bearer token, not both")
            return None
        if path == SESSION_PATH:
            await _refuse(scope, send, ErrorCode.BEARER_NOT_ACCEPTED,
                          "a bearer token needs no session: send it with each request instead")
            return None
        token = bearer_token(authorization)
        session = None if token is None else self.auth.bearer(token)
        if session is None:
            await _refuse(scope, send, ErrorCode.UNAUTHENTICATED, "invalid bearer token",
                          ((b"www-authenticate", b"Bearer"),))
        return session

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the app; an unexpected error becomes a 500 incident with every header."""
        started = False

        async def tracking(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking)
        except Exception as exc:
            incident_id = incident(log, exc, f"{scope['method']} {scope['path']}")
            if started:
                raise  # the answer is under way: only closing the connection is left
            await _refuse(scope, send, ErrorCode.INTERNAL_ERROR,
                          f"internal error (incident {incident_id})")

    async def _checked_body(self, scope: Scope, headers: dict[str, str], receive: Receive,
                            send: Send) -> Receive | None:
        declared = headers.get("content-length")
        # ASCII digits only: "²" (latin-1 0xB2) is a digit to isdigit() but not to int()
        if declared is not None and (not (declared.isascii() and declared.isdigit())
                                     or int(declared) > self.max_body):
            await _refuse(scope, send, ErrorCode.BODY_TOO_LARGE,
                          f"bodies are limited to {self.max_body} bytes")
            return None
        body = bytearray()
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_body:
                await _refuse(scope, send, ErrorCode.BODY_TOO_LARGE,
                              f"bodies are limited to {self.max_body} bytes")
                return None
        if body:  # an empty body (resume, cancel, delete) carries nothing to check
            if not json_content_type(headers.get("content-type")):
                await _refuse(scope, send, ErrorCode.UNSUPPORTED_MEDIA_TYPE,
                              "requests that change state take application/json only")
                return None
            try:
                document = loads_strict(body.decode("utf-8"), max_chars=self.max_body)
            except (UnicodeDecodeError, ProtocolRefused) as exc:
                reason = exc.message if isinstance(exc, ProtocolRefused) else "not UTF-8"
                await _refuse(scope, send, ErrorCode.VALIDATION_FAILED, f"body: {reason}")
                return None
            if not isinstance(document, dict):
                await _refuse(scope, send, ErrorCode.VALIDATION_FAILED,
                              "body must be a JSON object")
                return None
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()

        return replay

    @staticmethod
    def _with_headers(send: Send) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                message = {**message, "headers": kept + list(SECURITY_HEADERS)}
            await send(message)
        return wrapped


async def _refuse(scope: Scope, send: Send, code: ErrorCode, message: str,
                  extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """Answer a refused request ourselves, in the error shape of its API (OpenAI's for the
    chat-client routes, so a client reads every refusal alike)."""
    status = HTTP_STATUS[code]
    openai = str(scope.get("path", "")).startswith(OPENAI_PREFIX)
    response = error_response(status, code, message, openai=openai)
    await send({"type": "http.response.start", "status": status,
                "headers": [*response.raw_headers, *extra]})
    await send({"type": "http.response.body", "body": response.body})


def session_of(state: Any) -> Session:
    """The session the middleware put on the request (routes behind auth only)."""
    session: Session | None = getattr(state, "session", None)
    assert session is not None
    return session


def require_admin(state: Any, what: str) -> None:
    """Refuse a session that is not the admin's: 403 ``FORBIDDEN``, "``what`` is for
    administrators only" (the bridge's engine, the usage ledger, Work approvals)."""
    if session_of(state).role is not Role.ADMIN:
        raise RuntimeRefused(ErrorCode.FORBIDDEN, f"{what} is for administrators only")
