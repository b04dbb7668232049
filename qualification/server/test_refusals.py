"""BR-20, LOG-01: a refused request leaves a trace an operator can read.

A client that fails (Open WebUI's chats did, with ``extra_forbidden``) must be
explainable from the server: each refusal is one ``info`` line naming its code,
method, route and what the request came with (a cookie, a bearer or nothing —
never the token, never the body), and the admin's status counts refusals per
code; a ``user`` login's status does not show them.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest

from labfy_ref.logs import BURST, FloodGuard
from labfy_ref.server.auth import token_hash
from labfy_ref.server.refusals import RefusalMiddleware, Refusals, credential_of
from qualification.conftest import ServerFactory
from qualification.harness import LAUNCH_CODE, LogLines

SECRET_BEARER = "not-the-code-5d2c1e"
USER_TOKEN = "dana-token-8891"


@pytest.mark.req("BR-20", "LOG-01", "SV-06")
def test_each_refusal_is_one_info_line_and_a_count_for_the_admin(
        specimen: Path, server_factory: ServerFactory, tmp_path: Path,
        caplog: pytest.LogCaptureFixture) -> None:
    accounts = tmp_path / "accounts.toml"
    accounts.write_text(f'[[account]]\nname = "dana"\ntoken_sha256 = "{token_hash(USER_TOKEN)}"\n')
    server = server_factory(specimen, bridge=True, accounts=str(accounts))
    chat = "/api/cordis/v1/chat/completions"
    with caplog.at_level(logging.INFO, logger="labfy_ref.server.refused"), \
            httpx.Client(base_url=server.url, trust_env=False, timeout=30) as http:
        bad_body = http.post(chat, json={"model": "m", "messages": [], "secret_field": "zz9"},
                             headers={"Authorization": f"Bearer {LAUNCH_CODE}"})
        wrong_key = http.get("/api/cordis/v1/models",
                             headers={"Authorization": f"Bearer {SECRET_BEARER}"})
        nothing = http.get("/api/v1/objects")
        foreign = http.post("/api/v1/agent-runtime/turns", json={"message": "hi"},
                            headers={"Origin": "http://evil.example"})
        fine = http.get("/api/health")
    assert [r.status_code for r in (bad_body, wrong_key, nothing, foreign, fine)] == \
        [422, 401, 401, 403, 200]
    lines = [r.getMessage() for r in caplog.records if r.name == "labfy_ref.server.refused"]
    assert lines == [
        "refused VALIDATION_FAILED POST /api/cordis/v1/chat/completions credential=bearer",
        "refused UNAUTHENTICATED GET /api/cordis/v1/models credential=bearer",
        "refused UNAUTHENTICATED GET /api/v1/objects credential=none",
        "refused ORIGIN_NOT_ALLOWED POST /api/v1/agent-runtime/turns credential=none",
    ]
    assert all(r.levelno == logging.INFO for r in caplog.records
               if r.name == "labfy_ref.server.refused")
    logged = "\n".join(lines)
    assert SECRET_BEARER not in logged and LAUNCH_CODE not in logged and "zz9" not in logged
    admin = server.client()
    counts = admin.get("/api/v1/agent-runtime/status").json()["refusals"]
    assert counts == {"ORIGIN_NOT_ALLOWED": 1, "UNAUTHENTICATED": 2, "VALIDATION_FAILED": 1}
    user = server.client(token=USER_TOKEN)
    assert "refusals" not in user.get("/api/v1/agent-runtime/status").json()
    assert "refusals" not in str(httpx.get(f"{server.url}/api/health", trust_env=False).json())


@pytest.mark.req("BR-20", "LOG-01", "SV-09")
def test_a_flood_of_one_refusal_is_counted_whole_and_logged_bounded(
        specimen: Path, server_factory: ServerFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    server = server_factory(specimen)
    with caplog.at_level(logging.INFO, logger="labfy_ref.server.refused"), \
            httpx.Client(base_url=server.url, trust_env=False, timeout=30) as http:
        for _ in range(60):
            assert http.get("/api/v1/objects").status_code == 401
        assert http.post("/api/v1/session", json={}).status_code == 422
    admin = server.client()
    assert admin.get("/api/v1/agent-runtime/status").json()["refusals"] == {
        "UNAUTHENTICATED": 60, "VALIDATION_FAILED": 1}, "every refusal counted"
    written = LogLines()
    guard = FloodGuard(written)
    for record in caplog.records:
        guard.handle(record)
    guard.close()
    flood = [line for line in written.lines if "UNAUTHENTICATED" in line]
    assert len(flood) == BURST + 1 and flood[-1].startswith(f"{60 - BURST} similar lines")
    assert any("VALIDATION_FAILED" in line for line in written.lines), \
        "a flood of one code never hides another's line"


def _sized(code: str, size: int) -> bytes:
    """A refusal body of exactly ``size`` bytes whose code comes after its padding."""
    head = json.dumps({"pad": "", "error": {"code": code}}).encode()
    body = json.dumps({"pad": "x" * (size - len(head)), "error": {"code": code}}).encode()
    assert len(body) == size
    return body


def _counted(*chunks: bytes, status: int = 400, path: str = "/x",
             method: str = "GET") -> dict[str, int]:
    """The refusal counts after an app answers ``status`` with ``chunks`` (no code header)."""
    refusals = Refusals()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": status, "headers": []})
        for n, chunk in enumerate(chunks):
            await send({"type": "http.response.body", "body": chunk,
                        "more_body": n < len(chunks) - 1})

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        pass

    middleware = RefusalMiddleware(app, port=9123, cookie="c", refusals=refusals)
    asyncio.run(middleware({"type": "http", "method": method, "path": path,
                            "headers": [(b"host", b"127.0.0.1:9123")]}, receive, send))
    return refusals.counts()


@pytest.mark.req("BR-20")
@pytest.mark.parametrize(("chunks", "code"), [
    ((b'{"error": {"code": "NO_SUCH_CODE"}}',), "NO_SUCH_CODE"),
    ((b'{"error": ', b'{"code": "SPLIT"}}'), "SPLIT"),
    ((b"not json",), "UNKNOWN"), ((b"",), "UNKNOWN"), ((b"[]",), "UNKNOWN"),
    ((b'{"detail": "Not Found"}',), "UNKNOWN"), ((b'{"error": "x"}',), "UNKNOWN"),
    ((b'{"error": {"code": 7}}',), "UNKNOWN"),
    ((json.dumps({"error": {"code": "\u00e9"}}).encode(),), "UNKNOWN"),
    ((json.dumps({"error": {"code": "C" * 64}}).encode(),), "C" * 64),
    ((json.dumps({"error": {"code": "C" * 65}}).encode(),), "UNKNOWN"),
    # the body is read to 4,096 bytes at most, whatever its chunks
    ((_sized("AT_BOUND", 4096),), "AT_BOUND"),
    ((_sized("AT_BOUND", 4096)[:4000], _sized("AT_BOUND", 4096)[4000:]), "AT_BOUND"),
    ((_sized("PAST_BOUND", 4097),), "UNKNOWN"),
    ((_sized("AT_BOUND", 4096)[:4095], _sized("AT_BOUND", 4096)[4095:]), "AT_BOUND"),
    ((_sized("PAST_BOUND", 4100)[:4096], _sized("PAST_BOUND", 4100)[4096:]), "UNKNOWN"),
    ((_sized("PAST_BOUND", 4100)[:4095], _sized("PAST_BOUND", 4100)[4095:]), "UNKNOWN"),
])
def test_a_refusal_without_a_code_header_is_counted_by_its_bodys_code(
        chunks: tuple[bytes, ...], code: str) -> None:
    """Whoever answered a 4xx without the code header (a framework's own 404), its JSON
    ``error.code`` is counted — a short ASCII one — and anything else is ``UNKNOWN``,
    never an error of the middleware."""
    assert _counted(*chunks) == {code: 1}


@pytest.mark.req("BR-20")
@pytest.mark.parametrize(("headers", "credential"), [
    ([], "none"),
    ([(b"authorization", b"Bearer x")], "bearer"),
    ([(b"cookie", b"labfy_session=abc")], "cookie"),
    ([(b"cookie", b"theme=dark; labfy_session=abc")], "cookie"),
    ([(b"cookie", b"theme=dark")], "none"),  # someone else's cookie is no credential
    ([(b"cookie", b"theme=dark"), (b"cookie", b"labfy_session=abc")], "cookie"),
    ([(b"cookie", b"labfy_session=abc"), (b"authorization", b"Bearer x")], "bearer"),
])
def test_a_refusals_line_names_the_credential_it_came_with(
        headers: list[tuple[bytes, bytes]], credential: str) -> None:
    assert credential_of({"type": "http", "headers": headers}, "labfy_session") == credential


@pytest.mark.req("BR-20")
@pytest.mark.parametrize(("status", "refused"), [
    (200, False), (399, False), (400, True), (404, True), (499, True), (500, False),
    (503, False)])
def test_only_a_4xx_answer_is_a_refusal(status: int, refused: bool) -> None:
    """A refusal is the client's to fix (4xx); a server error is no refusal of it."""
    body = b'{"error": {"code": "SOME_CODE"}}'
    assert _counted(body, status=status) == ({"SOME_CODE": 1} if refused else {})


@pytest.mark.req("BR-20", "LOG-01")
def test_a_refusals_line_cuts_a_long_unrouted_path_and_method(
        caplog: pytest.LogCaptureFixture) -> None:
    """A request no route matched is logged by its path, cut to 120 characters, and its
    method to 16: a client cannot write a line of any length into the log."""
    path, method = "/" + "p" * 300, "M" * 40
    with caplog.at_level(logging.INFO, logger="labfy_ref.server.refused"):
        assert _counted(b"{}", path=path, method=method) == {"UNKNOWN": 1}
    [line] = [r.getMessage() for r in caplog.records if r.name == "labfy_ref.server.refused"]
    assert line == f"refused UNKNOWN {method[:16]} {path[:120]} credential=none"
