"""Refused requests leave a trace (BR-20), and a browser at a foreign Host gets a page (SV-12).

:class:`RefusalMiddleware` wraps the whole app, the security checklist included, so it
sees every answer: each 4xx, whoever answered it, is one ``info`` line in the server
log — its code, method, route and whether it came with a cookie, a bearer or nothing,
never a token or a body — and one more in :class:`Refusals`, which the admin's status
shows per code, so an operator sees why a client fails. The log's flood bound (SV-09)
holds per code. A request whose ``Host`` the checklist would refuse (SV-02), from a
browser (its ``Accept`` prefers HTML), gets a short page saying which addresses are
served instead of the API's JSON refusal — what a user who tunnelled ``ssh -L`` to
another local port sees.
"""

from __future__ import annotations

import collections
import html
import json
import logging
import threading

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from labfy_ref.errors import HTTP_STATUS, ErrorCode
from labfy_ref.server.security import (
    SECURITY_HEADERS,
    _all_values,
    _headers,
    allowed_hosts,
    cookie_value,
    host_ok,
)

log = logging.getLogger("labfy_ref.server.refused")
#: A refusal that is no JSON (the Host page) names its code in this header.
CODE_HEADER = b"x-error-code"
#: How much of a refusal's body is read for its code, whatever its chunks.
READ_BYTES = 4096


class Refusals:
    """How many requests were refused, per error code, since the server started."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def note(self, code: str, method: str, route: str, credential: str) -> None:
        """Count one refusal and log its line. The log's flood bound (SV-09) holds per
        code: a flood of one refusal is a few lines, and never hides another code's."""
        with self._lock:
            self._counts[code] += 1
        log.info(f"refused {code} %s %s credential=%s", method, route, credential)

    def counts(self) -> dict[str, int]:
        """``{code: refusals}``, codes in order."""
        with self._lock:
            return dict(sorted(self._counts.items()))


def credential_of(scope: Scope, cookie: str) -> str:
    """What a request came with: ``bearer``, ``cookie`` or ``none`` (never its value)."""
    if _all_values(scope, b"authorization"):
        return "bearer"
    if any(cookie_value(value, cookie) is not None for value in _all_values(scope, b"cookie")):
        return "cookie"
    return "none"


def refused_code(body: bytes) -> str:
    """The ``error.code`` of a refusal's JSON body (``UNKNOWN`` when it has none)."""
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return "UNKNOWN"
    return code if isinstance(code, str) and code.isascii() and len(code) <= 64 else "UNKNOWN"


def prefers_html(accept: str | None) -> bool:
    """Does an ``Accept`` header put ``text/html`` before JSON (a browser's does)?"""
    if not accept:
        return False
    for part in accept.split(",")[:32]:
        kind = part.split(";", 1)[0].strip().lower()
        if kind in ("application/json", "*/*"):
            return False
        if kind in ("text/html", "application/xhtml+xml"):
            return True
    return False


_HOST_PAGE = ("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
              "labfy-ref: this address is not served</title></head><body><h1>This address is "
              "not served</h1><p>labfy-ref answers only requests addressed to {hosts} "
              "(HOST_NOT_ALLOWED: a guard against DNS rebinding). Through a tunnel such as "
              "<code>ssh -L</code>, forward the same port number the server listens on, or "
              "start it with <code>--port</code> set to the port you forward.</p></body></html>")


async def host_page(send: Send, hosts: list[str]) -> None:
    """The Host refusal a browser gets: a short page saying which addresses are served."""
    named = ", ".join(html.escape(host) for host in hosts)
    body = _HOST_PAGE.format(hosts=named).encode("utf-8")
    await send({"type": "http.response.start",
                "status": HTTP_STATUS[ErrorCode.HOST_NOT_ALLOWED],
                "headers": [(b"content-type", b"text/html; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()),
                            (CODE_HEADER, ErrorCode.HOST_NOT_ALLOWED.value.encode()),
                            *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})


class RefusalMiddleware:
    """The outermost layer: notes every refused request; the Host page for a browser."""

    def __init__(self, app: ASGIApp, *, port: int, cookie: str, refusals: Refusals) -> None:
        self.app = app
        self.hosts = allowed_hosts(port)
        self.cookie = cookie
        self.refusals = refusals

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        send = self._noting(scope, send)
        headers = _headers(scope)
        if not host_ok(headers.get("host"), self.hosts) and prefers_html(headers.get("accept")):
            await host_page(send, sorted(self.hosts))
            return
        await self.app(scope, receive, send)

    def _noting(self, scope: Scope, send: Send) -> Send:
        """``send``, noting the request in :attr:`refusals` if its answer is a 4xx."""
        status = 0
        body = bytearray()
        said: str | None = None

        async def noted(message: Message) -> None:
            nonlocal status, said
            if message["type"] == "http.response.start":
                status = int(message["status"])
                said = next((value.decode("ascii", "replace") for name, value in
                             message.get("headers", []) if name.lower() == CODE_HEADER), None)
            elif 400 <= status < 500 and message["type"] == "http.response.body":
                body.extend(message.get("body", b"")[:READ_BYTES - len(body)])
                if not message.get("more_body", False):
                    route = getattr(scope.get("route"), "path", None)
                    self.refusals.note(said or refused_code(bytes(body)),
                                       str(scope["method"])[:16],
                                       route or str(scope["path"])[:120],
                                       credential_of(scope, self.cookie))
            await send(message)
        return noted
