"""SV-02..SV-05, SV-07, SV-08: the request checklist driven in-process, one ASGI call each.

The server tests prove the checklist over HTTP; these call the real
:class:`SecurityMiddleware` with a real :class:`Authenticator` in front of a
small recording app, so every check is pinned (each bound on both sides, the
first-header-wins rule, the body replay, the 500 of an unexpected error) in
milliseconds: the mutation run of QR-04 runs them per mutant.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import pytest
from starlette.types import Message, Receive, Scope, Send

from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.server.auth import Account, Authenticator, Role, Session, token_hash
from labfy_ref.server.security import (
    CSP,
    DEFAULT_MAX_BODY,
    SECURITY_HEADERS,
    SecurityMiddleware,
    allowed_hosts,
    cookie_value,
    csrf_ok,
    host_ok,
    json_content_type,
    origin_ok,
    require_admin,
    session_of,
)

PORT = 43117
HOST = f"127.0.0.1:{PORT}"
LAUNCH = "launch-code-for-the-unit-test"
COOKIE = f"labfy_session_{PORT}"

Headers = list[tuple[bytes, bytes]]


class Recorder:
    """The app behind the checklist: what reached it, and a plain 200 (or a chosen failure)."""

    def __init__(self, fail: str = "") -> None:
        self.calls: list[dict[str, Any]] = []
        self.fail = fail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = b""
        if scope["type"] == "http" and scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            more = True
            while more:
                message = await receive()
                body += message.get("body", b"")
                more = message.get("more_body", False)
        after = await receive() if self.fail == "receive-twice" else None
        self.calls.append({"scope": scope, "body": body, "after": after})
        if self.fail == "before":
            raise RuntimeError("boom before the answer")
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"),
                                (b"cache-control", b"max-age=60"), (b"x-app", b"kept")]})
        if self.fail == "after":
            raise RuntimeError("boom during the answer")
        await send({"type": "http.response.body", "body": b'{"ok":true}'})


class Answer:
    """What the client got."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        start = next((m for m in messages if m["type"] == "http.response.start"), None)
        self.status = None if start is None else start["status"]
        self.headers: Headers = [] if start is None else list(start["headers"])
        self.body = b"".join(m.get("body", b"") for m in messages
                             if m["type"] == "http.response.body")

    @property
    def code(self) -> str | None:
        """The error code of a refusal, None for the app's own answer."""
        document = json.loads(self.body)
        return document["error"]["code"] if "error" in document else None

    def header(self, name: bytes) -> list[bytes]:
        """Every value of ``name``."""
        return [value for key, value in self.headers if key.lower() == name]


def _auth() -> Authenticator:
    return Authenticator(LAUNCH, (Account("ada", token_hash("ada-token")),), cookie=COOKIE)


def _call(middleware: SecurityMiddleware, method: str, path: str, headers: Headers,
          chunks: Iterable[dict[str, Any]] = (), scope_type: str = "http") -> Answer:
    messages: list[Message] = []
    incoming = [*chunks, {"type": "http.disconnect"}]

    async def receive() -> dict[str, Any]:
        return incoming.pop(0) if len(incoming) > 1 else incoming[0]

    async def send(message: Message) -> None:
        messages.append(message)

    scope = {"type": scope_type, "method": method, "path": path, "headers": headers}
    asyncio.run(middleware(scope, receive, send))
    return Answer(messages)


def _body(data: bytes) -> list[dict[str, Any]]:
    return [{"type": "http.request", "body": data, "more_body": False}]


class Harness:
    """One middleware, its recorder and a logged-in admin session."""

    def __init__(self, fail: str = "", **options: Any) -> None:
        self.auth = _auth()
        self.app = Recorder(fail)
        self.middleware = SecurityMiddleware(self.app, port=PORT, auth=self.auth, **options)
        session = self.auth.login(LAUNCH)
        assert session is not None
        self.session: Session = session

    def cookie(self) -> tuple[bytes, bytes]:
        """This session's cookie header."""
        return (b"cookie", f"{COOKIE}={self.session.session_id}".encode())

    def csrf(self) -> tuple[bytes, bytes]:
        """This session's CSRF header."""
        return (b"x-csrf-token", self.session.csrf_token.encode())

    def get(self, path: str, *extra: tuple[bytes, bytes], host: bytes = HOST.encode()) -> Answer:
        """A GET with the session."""
        return _call(self.middleware, "GET", path, [(b"host", host), self.cookie(), *extra])

    def post(self, path: str, data: bytes = b'{"a":1}', *extra: tuple[bytes, bytes],
             content_type: bytes = b"application/json", method: str = "POST",
             chunks: list[dict[str, Any]] | None = None, session: bool = True) -> Answer:
        """A mutation, with cookie, CSRF token and JSON body unless told otherwise."""
        headers = [(b"host", HOST.encode()), (b"content-type", content_type), *extra]
        if session:
            headers += [self.cookie(), self.csrf()]
        return _call(self.middleware, method, path, headers,
                     _body(data) if chunks is None else chunks)


@pytest.mark.req("SV-02")
def test_the_host_allowlist_is_exact() -> None:
    assert allowed_hosts(PORT) == {HOST, f"[::1]:{PORT}", f"localhost:{PORT}"}
    assert not host_ok(None, allowed_hosts(PORT)) and host_ok(HOST, allowed_hosts(PORT))
    harness = Harness()
    for host in (HOST, f"[::1]:{PORT}", f"localhost:{PORT}"):
        assert harness.get("/api/x", host=host.encode()).status == 200
    for host in (f"127.0.0.1:{PORT + 1}", "127.0.0.1", f"evil.test:{PORT}", f"LOCALHOST:{PORT}",
                 f"127.0.0.1:{PORT} ", ""):
        answer = harness.get("/api/x", host=host.encode())
        assert (answer.status, answer.code) == (403, "HOST_NOT_ALLOWED")
    no_host = _call(harness.middleware, "GET", "/", [])
    assert (no_host.status, no_host.code) == (403, "HOST_NOT_ALLOWED")
    assert len(harness.app.calls) == 3


@pytest.mark.req("SV-02")
def test_the_first_host_header_decides_a_repeated_one_never_overrides() -> None:
    harness = Harness()
    first_ok = _call(harness.middleware, "GET", "/", [(b"host", HOST.encode()),
                                                      (b"host", b"evil.test")])
    first_bad = _call(harness.middleware, "GET", "/", [(b"Host", b"evil.test"),
                                                       (b"host", HOST.encode())])
    assert (first_ok.status, first_bad.status) == (200, 403)


@pytest.mark.req("SV-02")
def test_a_scope_that_is_not_http_passes_through_untouched() -> None:
    harness = Harness()
    answer = _call(harness.middleware, "GET", "/", [(b"host", b"evil.test")],
                   scope_type="websocket")
    assert len(harness.app.calls) == 1 and answer.header(b"x-content-type-options") == []


@pytest.mark.req("SV-04")
def test_origin_and_fetch_metadata_decide_as_a_table() -> None:
    for origin, site, expected in [
        (None, None, True), (f"http://{HOST}", None, True), (None, "same-origin", True),
        (None, "none", True), (f"http://{HOST}", "same-origin", True),
        (None, "same-site", False), (None, "cross-site", False), (None, "", False),
        (f"https://{HOST}", None, False), (f"http://{HOST}/", None, False),
        (f"http://{HOST}.evil.test", None, False), ("null", None, False),
        (f"http://{HOST}", "cross-site", False),
    ]:
        assert origin_ok(origin, HOST, site) is expected, (origin, site)


@pytest.mark.req("SV-04")
@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
def test_every_mutation_needs_our_origin_and_the_csrf_token(method: str) -> None:
    harness = Harness()
    assert harness.post("/api/x", method=method).status == 200
    foreign = harness.post("/api/x", b'{"a":1}', (b"origin", b"http://evil.test"), method=method)
    assert (foreign.status, foreign.code) == (403, "ORIGIN_NOT_ALLOWED")
    cross = harness.post("/api/x", b'{"a":1}', (b"sec-fetch-site", b"cross-site"), method=method)
    assert cross.code == "ORIGIN_NOT_ALLOWED"
    for token in ([], [(b"x-csrf-token", b"wrong")],
                  [(b"x-csrf-token", harness.session.csrf_token[:-1].encode())]):
        headers = [(b"host", HOST.encode()), (b"content-type", b"application/json"),
                   harness.cookie(), *token]
        answer = _call(harness.middleware, method, "/api/x", headers, _body(b'{"a":1}'))
        assert (answer.status, answer.code) == (403, "CSRF_FAILED")
    assert len(harness.app.calls) == 1


@pytest.mark.req("SV-04")
def test_a_read_needs_no_csrf_token_and_ignores_the_origin() -> None:
    harness = Harness()
    assert harness.get("/api/x", (b"origin", b"http://evil.test")).status == 200
    assert harness.get("/api/x", (b"sec-fetch-site", b"cross-site")).status == 200


@pytest.mark.req("SV-04")
def test_csrf_ok_compares_the_whole_token() -> None:
    session = Harness().session
    assert csrf_ok(session.csrf_token, session)
    assert not csrf_ok(None, session) and not csrf_ok("", session)
    assert not csrf_ok(session.csrf_token + "x", session)


@pytest.mark.req("SV-03")
def test_every_api_route_but_the_public_ones_needs_a_session() -> None:
    harness = Harness()
    bare = [(b"host", HOST.encode())]
    for method, path in [("GET", "/api/health"), ("GET", "/api/version"),
                         ("GET", "/api/cordis/health"), ("GET", "/"), ("GET", "/cordis"),
                         ("GET", "/apix")]:
        answer = _call(harness.middleware, method, path, bare)
        assert answer.status == 200, (method, path)
        assert harness.app.calls[-1]["scope"]["state"]["session"] is None
    login = _call(harness.middleware, "POST", "/api/v1/session",
                  [*bare, (b"content-type", b"application/json")], _body(b'{"token":"x"}'))
    assert login.status == 200, "the login route needs neither session nor CSRF token"
    for method, path in [("GET", "/api/v1/session"), ("POST", "/api/health"),
                         ("GET", "/api/cordis/sessions"), ("GET", "/api/"),
                         ("DELETE", "/api/v1/session")]:
        answer = _call(harness.middleware, method, path, bare, _body(b""))
        assert (answer.status, answer.code) == (401, "UNAUTHENTICATED"), (method, path)
    wrong_cookie = _call(harness.middleware, "GET", "/api/x", [*bare, (b"cookie",
                                                                       f"{COOKIE}=nope".encode())])
    assert wrong_cookie.code == "UNAUTHENTICATED"
    extra = SecurityMiddleware(Recorder(), port=PORT, auth=harness.auth,
                               extra_public=[("GET", "/api/extra")])
    assert _call(extra, "GET", "/api/extra", bare).status == 200
    assert _call(extra, "GET", "/api/x", bare).code == "UNAUTHENTICATED"
    again = SecurityMiddleware(Recorder(), port=PORT, auth=harness.auth,
                               extra_public=[("GET", "/api/health")])
    assert _call(again, "GET", "/api/health", bare).status == 200, "naming a public route twice"


@pytest.mark.req("SV-03")
def test_the_session_reaches_the_route() -> None:
    harness = Harness()
    assert harness.get("/api/x").status == 200
    state = harness.app.calls[-1]["scope"]["state"]
    assert state["session"].session_id == harness.session.session_id
    assert state["session"].expires_at >= harness.session.expires_at, "use moves it on (SV-11)"

    class State:
        session = harness.session

    assert session_of(State()) == harness.session
    with pytest.raises(AssertionError):
        session_of(object())


@pytest.mark.req("SV-03")
@pytest.mark.parametrize(("header", "value"), [
    (None, None), ("", None), ("a=1", None), ("sid=v", "v"), (" sid = v ; a=1", "v"),
    ("a=1; sid=v", "v"), ('sid="v"', "v"), ('sid="', '"'), ('sid=""', ""), ('sid="v', '"v'),
    ("a; sid=v", "v"), ('a="; sid=v', "v"), ("sid=first; sid=second", "first"),
    ("xsid=v", None), ("sid", None), ("sid=a=b", "a=b"), ("\tsid\t=\tv\t", "v"),
    ('sid=!v"', '!v"'), ('sid=v"', 'v"'), ("sid=!v!", "!v!"), ("sid=vv", "vv"),
    ("sid=#v#", "#v#"),
])
def test_cookie_value_reads_rfc_6265_pairs(header: str | None, value: str | None) -> None:
    assert cookie_value(header, "sid") == value


@pytest.mark.req("SV-05")
@pytest.mark.parametrize(("value", "ok"), [
    (None, False), ("application/json", True), ("Application/JSON", True),
    (" application/json ; charset=UTF-8 ", True), ("application/json;charset=utf-8", True),
    ("application/json; charset=latin-1", False), ("application/json; x=y", False),
    ("text/plain", False), ("application/x-www-form-urlencoded", False),
    ("multipart/form-data", False), ("application/jsonx", False), ("", False),
])
def test_only_application_json_is_a_json_content_type(value: str | None, ok: bool) -> None:
    assert json_content_type(value) is ok


@pytest.mark.req("SV-05")
def test_a_body_of_exactly_the_bound_is_read_one_byte_more_is_413() -> None:
    assert DEFAULT_MAX_BODY == 64 * 1024
    harness = Harness()
    exact = b'{"a":"' + b"x" * (DEFAULT_MAX_BODY - 8) + b'"}'
    assert len(exact) == DEFAULT_MAX_BODY
    length = (b"content-length", str(len(exact)).encode())
    assert harness.post("/api/x", exact, length).status == 200
    assert harness.app.calls[-1]["body"] == exact
    over = exact[:-2] + b'x"}'
    declared = harness.post("/api/x", over, (b"content-length", str(len(over)).encode()))
    assert (declared.status, declared.code) == (413, "BODY_TOO_LARGE")
    streamed = harness.post("/api/x", over)  # no Content-Length: counted as it arrives
    assert (streamed.status, streamed.code) == (413, "BODY_TOO_LARGE")
    assert len(harness.app.calls) == 1
    small = Harness(max_body=10)
    assert small.post("/api/x", b'{"a":"12"}').status == 200
    assert small.post("/api/x", b'{"a":"123"}').code == "BODY_TOO_LARGE"


@pytest.mark.req("SV-05")
def test_a_declared_length_over_the_bound_is_refused_before_the_body_is_read() -> None:
    harness = Harness(max_body=100)
    answer = harness.post("/api/x", b'{"a":1}', (b"content-length", b"101"))
    assert (answer.status, answer.code) == (413, "BODY_TOO_LARGE")
    assert harness.post("/api/x", b'{"a":1}', (b"content-length", b"100")).status == 200
    assert len(harness.app.calls) == 1


@pytest.mark.req("SV-05")
def test_a_body_message_without_more_body_is_the_last() -> None:
    harness = Harness()
    answer = harness.post("/api/x", chunks=[{"type": "http.request", "body": b'{"a":1}'}])
    assert answer.status == 200 and harness.app.calls[-1]["body"] == b'{"a":1}'


@pytest.mark.req("SV-05")
@pytest.mark.parametrize("declared", [b"-1", b"+5", b"1e3", b" 7", b"", b"\xd9\xa1",
                                      b"\xb2", b"1\xb9"])  # latin-1 superscripts: isdigit()
def test_a_content_length_that_is_not_digits_is_refused(declared: bytes) -> None:
    answer = Harness().post("/api/x", b'{"a":1}', (b"content-length", declared))
    assert (answer.status, answer.code) == (413, "BODY_TOO_LARGE")


@pytest.mark.req("SV-05")
def test_a_body_in_several_chunks_is_bounded_and_replayed_whole() -> None:
    harness = Harness(max_body=20)
    parts = [b'{"a":', b'"0123', b'456"}']
    chunks = [{"type": "http.request", "body": part, "more_body": True} for part in parts]
    chunks[-1]["more_body"] = False
    assert harness.post("/api/x", chunks=chunks).status == 200
    assert harness.app.calls[-1]["body"] == b"".join(parts)
    too_much = [*chunks[:-1], {"type": "http.request", "body": b'4567890123"}',
                               "more_body": True},
                {"type": "http.request", "body": b"", "more_body": False}]
    assert harness.post("/api/x", chunks=too_much).code == "BODY_TOO_LARGE"
    assert len(harness.app.calls) == 1


@pytest.mark.req("SV-05")
def test_after_the_replayed_body_the_app_reads_the_real_channel() -> None:
    harness = Harness(fail="receive-twice")
    assert harness.post("/api/x").status == 200
    assert harness.app.calls[-1]["after"] == {"type": "http.disconnect"}


@pytest.mark.req("SV-05")
def test_a_client_gone_mid_body_gets_no_answer_and_reaches_no_route() -> None:
    harness = Harness()
    gone = harness.post("/api/x", chunks=[{"type": "http.request", "body": b'{"a"',
                                           "more_body": True}])
    assert gone.messages == [] and harness.app.calls == []


@pytest.mark.req("SV-05")
@pytest.mark.parametrize(("data", "content_type", "code", "message"), [
    (b"a=1", b"application/x-www-form-urlencoded", "UNSUPPORTED_MEDIA_TYPE",
     "requests that change state take application/json only"),
    (b'{"a":1}', b"text/plain", "UNSUPPORTED_MEDIA_TYPE",
     "requests that change state take application/json only"),
    (b'{"a":"\xff"}', b"application/json", "VALIDATION_FAILED", "body: not UTF-8"),
    (b'{"a":1,"a":2}', b"application/json", "VALIDATION_FAILED", "body: duplicate key"),
    (b"[1]", b"application/json", "VALIDATION_FAILED", "body must be a JSON object"),
    (b'"x"', b"application/json", "VALIDATION_FAILED", "body must be a JSON object"),
])
def test_a_body_is_a_strict_json_object_or_refused(data: bytes, content_type: bytes, code: str,
                                                    message: str) -> None:
    harness = Harness()
    answer = harness.post("/api/x", data, content_type=content_type)
    assert answer.code == code
    assert json.loads(answer.body)["error"]["message"] == message
    assert harness.app.calls == []


@pytest.mark.req("SV-05")
def test_an_empty_body_needs_no_content_type() -> None:
    harness = Harness()
    assert harness.post("/api/x", b"", content_type=b"text/plain").status == 200
    assert harness.app.calls[-1]["body"] == b""


@pytest.mark.req("SV-08")
def test_a_bearer_needs_no_cookie_and_no_csrf_token() -> None:
    harness = Harness()
    for token, role in ((LAUNCH, "admin"), ("ada-token", "user")):
        headers = [(b"host", HOST.encode()), (b"content-type", b"application/json"),
                   (b"authorization", f"Bearer {token}".encode())]
        answer = _call(harness.middleware, "POST", "/api/x", headers, _body(b'{"a":1}'))
        assert answer.status == 200
        session = harness.app.calls[-1]["scope"]["state"]["session"]
        assert session.bearer and session.role == role
        foreign = _call(harness.middleware, "POST", "/api/x",
                        [*headers, (b"origin", b"http://evil.test")], _body(b'{"a":1}'))
        assert foreign.code == "ORIGIN_NOT_ALLOWED"


@pytest.mark.req("SV-08")
def test_a_wrong_bearer_is_the_one_401_even_on_a_public_route() -> None:
    harness = Harness()
    for value in (b"Bearer wrong", b"Basic abc", b"Bearer", b"Bearer " + LAUNCH.encode() + b"x"):
        for path in ("/api/health", "/api/x"):
            answer = _call(harness.middleware, "GET", path, [(b"host", HOST.encode()),
                                                             (b"authorization", value)])
            assert (answer.status, answer.code) == (401, "UNAUTHENTICATED")
            assert answer.header(b"www-authenticate") == [b"Bearer"]
            assert json.loads(answer.body)["error"]["message"] == "invalid bearer token"
    twice = _call(harness.middleware, "GET", "/api/x", [
        (b"host", HOST.encode()), (b"authorization", f"Bearer {LAUNCH}".encode()),
        (b"authorization", f"Bearer {LAUNCH}".encode())])
    assert twice.code == "UNAUTHENTICATED"
    assert harness.app.calls == []


@pytest.mark.req("SV-08")
def test_a_bearer_with_our_cookie_or_on_the_session_route_is_400() -> None:
    harness = Harness()
    bearer = (b"authorization", f"Bearer {LAUNCH}".encode())
    both = _call(harness.middleware, "GET", "/api/x", [(b"host", HOST.encode()), bearer,
                                                       harness.cookie()])
    assert (both.status, both.code) == (400, "AUTH_AMBIGUOUS")
    second_cookie = _call(harness.middleware, "GET", "/api/x", [
        (b"host", HOST.encode()), bearer, (b"cookie", b"other=1"), harness.cookie()])
    assert second_cookie.code == "AUTH_AMBIGUOUS"
    foreign_cookie = _call(harness.middleware, "GET", "/api/x", [
        (b"host", HOST.encode()), bearer, (b"cookie", b"labfy_session_1=x")])
    assert foreign_cookie.status == 200
    for method in ("GET", "POST", "DELETE"):
        answer = _call(harness.middleware, method, "/api/v1/session",
                       [(b"host", HOST.encode()), bearer], _body(b""))
        assert (answer.status, answer.code) == (400, "BEARER_NOT_ACCEPTED")
    page = _call(harness.middleware, "GET", "/cordis", [(b"host", HOST.encode()),
                                                        (b"authorization", b"Bearer wrong")])
    assert page.status == 200, "pages ignore Authorization"
    assert len(harness.app.calls) == 2


@pytest.mark.req("SV-07")
def test_every_answer_carries_the_security_headers_once() -> None:
    harness = Harness()
    assert CSP.startswith("default-src 'none'") and "frame-ancestors 'none'" in CSP
    for answer in (harness.get("/api/x"), harness.get("/api/x", host=b"evil.test"),
                   harness.post("/api/x", b"a=1", content_type=b"text/plain")):
        for name, value in SECURITY_HEADERS:
            assert answer.header(name) == [value], name
    mine = harness.get("/api/x")
    assert mine.header(b"x-app") == [b"kept"] and mine.header(b"cache-control") == [b"no-store"]
    assert dict(SECURITY_HEADERS)[b"x-content-type-options"] == b"nosniff"


@pytest.mark.req("SV-05", "SV-07")
def test_an_unexpected_error_is_a_500_incident_with_every_header() -> None:
    harness = Harness(fail="before")
    answer = harness.get("/api/x")
    assert (answer.status, answer.code) == (500, "INTERNAL_ERROR")
    message = json.loads(answer.body)["error"]["message"]
    assert message.startswith("internal error (incident ") and "boom" not in message
    assert answer.header(b"x-content-type-options") == [b"nosniff"]


@pytest.mark.req("SV-05")
def test_an_error_once_the_answer_started_is_raised_not_answered_twice() -> None:
    harness = Harness(fail="after")
    with pytest.raises(RuntimeError, match="boom during the answer"):
        harness.get("/api/x")


@pytest.mark.req("SV-05", "BR-13")
def test_refusals_on_the_openai_routes_are_openai_shaped() -> None:
    harness = Harness()
    answer = _call(harness.middleware, "GET", "/api/cordis/v1/models",
                   [(b"host", HOST.encode()), (b"authorization", b"Bearer wrong")])
    error = json.loads(answer.body)["error"]
    assert (answer.status, error["code"], error["type"]) == (401, "UNAUTHENTICATED",
                                                             "authentication_error")
    plain = _call(harness.middleware, "GET", "/api/cordis/sessions",
                  [(b"host", HOST.encode()), (b"authorization", b"Bearer wrong")])
    assert set(json.loads(plain.body)["error"]) == {"code", "message"}


@pytest.mark.req("SV-03", "WK-12")
@pytest.mark.parametrize("role", list(Role))
def test_require_admin_serves_the_admin_and_refuses_every_other_role(role: Role) -> None:
    class State:
        session = Session("sid", role, role.value, "csrf", 1e18)

    if role is Role.ADMIN:
        require_admin(State(), "the engine")  # no refusal
        return
    with pytest.raises(RuntimeRefused) as refused:
        require_admin(State(), "the engine")
    assert refused.value.code is ErrorCode.FORBIDDEN
    assert "the engine is for administrators only" in str(refused.value)
