"""Real servers for the suite: the workspace server in a thread or a subprocess, and a client.

Everything listens on free loopback ports and is stopped by its owner; every
wait is bounded in iterations and time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Coroutine
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any, Self, TypeVar

import httpx
import uvicorn

from labfy_ref.bridge import ReferenceEngine
from labfy_ref.bridge.ndjson import NdjsonDecoder
from labfy_ref.config import RawOptions, resolve
from labfy_ref.runtime import RuntimeLimits
from labfy_ref.server.app import create_app
from labfy_ref.server.auth import cookie_name
from labfy_ref.server.connections import DEFAULT_LIMITS, ConnectionLimits
from labfy_ref.server.serve import bind_socket, build_state, uvicorn_config
from labfy_ref.server.state import ServerState
from labfy_ref.workspace import open_workspace

T = TypeVar("T")

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "MODEL_UNAVAILABLE", "MODEL_PROTOCOL_ERROR",
            "BUDGET_EXHAUSTED"}
LAUNCH_CODE = "testlaunchcode0123456789"  # letters and digits, as SV-10 draws them


def wait_until(predicate: Callable[[], bool], *, timeout: float = 10.0,
               interval: float = 0.02) -> None:
    """Poll ``predicate`` until true; fail after ``timeout`` seconds (bounded loop)."""
    for _ in range(int(timeout / interval) + 1):
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError("condition not met in time")


class LiveServer:
    """The real workspace server (uvicorn + the real app) in a background thread."""

    def __init__(self, workspace: Path, *, limits: RuntimeLimits | None = None,
                 connections: ConnectionLimits = DEFAULT_LIMITS, **options: Any) -> None:
        # scripted providers answer in order: a title call (BR-18) would take a turn's
        # answer, so titles are the preview unless a test asks for the model's
        options.setdefault("session_titles", "preview")
        self.config = resolve(RawOptions(workspace=str(workspace), **options), {})
        self.sock = bind_socket(self.config.host.value, None)
        self.port = int(self.sock.getsockname()[1])
        try:
            self.state: ServerState = build_state(self.config, open_workspace(workspace),
                                                  self.port, LAUNCH_CODE, limits=limits)
        except BaseException:
            self.sock.close()
            raise
        self.server = uvicorn.Server(uvicorn_config(create_app(self.state),
                                                    limits=connections))
        #: The server's event loop, once it runs (what :meth:`on_loop` runs on).
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)
        self._clients: list[ApiClient] = []
        #: The codes the suite logs in with (a conformance target's are given on the command line).
        self.admin_token = LAUNCH_CODE
        self.user_token: str | None = None
        #: The conformance kit's provider, when this server's agent answers with it.
        self.provider_url: str | None = None

    async def _serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        await self.server.serve(sockets=[self.sock])

    def on_loop(self, make: Callable[[], Coroutine[Any, Any, T]], timeout: float = 30) -> T:
        """Run a coroutine on the server's own event loop; its result."""
        assert self.loop is not None, "the server is not running"
        return asyncio.run_coroutine_threadsafe(make(), self.loop).result(timeout)

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://{self.config.host.url_form}:{self.port}"

    def start(self, *, settled: bool = True) -> Self:
        """Start and wait until it accepts requests — and, ``settled``, until its bridge
        has settled (it settles in the background: HO-07)."""
        self._thread.start()
        wait_until(lambda: self.server.started)
        if settled:
            wait_until(lambda: self.state.bridge.state.value != "starting", timeout=30)
        return self

    def stop(self) -> None:
        """Shut down (lifespan closes the runtime); idempotent."""
        for client in self._clients:
            client.close()
        self.server.should_exit = True
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        self.sock.close()

    def client(self, *, login: bool = True, token: str | None = None) -> ApiClient:
        """An API client, logged in as admin by default."""
        client = ApiClient(self.url)
        self._clients.append(client)
        if login:
            client.login(token or self.admin_token)
        return client


def reference_engine(server: LiveServer) -> ReferenceEngine:
    """The engine a bridge server runs (the reference engine, to read its counts)."""
    engine = server.state.bridge.engine()
    assert isinstance(engine, ReferenceEngine)
    return engine


def object_id(workspace: Path, title: str) -> str:
    """The id of the object of ``workspace`` titled ``title`` (ids are drawn per workspace)."""
    store = open_workspace(workspace).open_store()
    try:
        return next(obj.object_id for obj in store.list_objects() if obj.title == title)
    finally:
        store.close()


def bearer_client(server: LiveServer, token: str = LAUNCH_CODE) -> httpx.Client:
    """An API client that authenticates with ``Authorization: Bearer`` only (SV-08)."""
    return httpx.Client(base_url=server.url, trust_env=False, timeout=30,
                        headers={"Authorization": f"Bearer {token}"})


def session_files(workspace: Path) -> list[str]:
    """Everything under ``sessions/`` but the summary index (a cache of the listed logs)."""
    root = workspace / "sessions"
    return sorted(str(path.relative_to(root)) for path in root.rglob("*")
                  if not path.name.startswith(".index.sqlite"))


class ApiClient:
    """A small client of the workspace API that does what a browser does: cookie, CSRF, Origin.

    The cookie's name is read from the login answer's ``Set-Cookie`` (a conformance
    target may name it otherwise); until then it is ours (:func:`cookie_name`).
    A client made with ``logout_on_close`` ends its session when closed, so a shared
    target's session caps are never filled by the suite (AV-03).
    """

    def __init__(self, base_url: str, *, logout_on_close: bool = False) -> None:
        self.base_url = base_url
        port = urllib.parse.urlsplit(base_url).port
        self.cookie_name = cookie_name(port if port is not None else 80)
        self.http = httpx.Client(base_url=base_url, trust_env=False, timeout=10)
        self.cookie: str | None = None
        self.csrf: str | None = None
        self.logout_on_close = logout_on_close

    def close(self) -> None:
        """End the session when asked to, then close the connection pool."""
        if self.logout_on_close and self.cookie is not None and not self.http.is_closed:
            with contextlib.suppress(httpx.HTTPError):
                self.delete("/api/v1/session")
        self.http.close()

    def login(self, token: str) -> httpx.Response:
        """Exchange ``token`` for a session; keeps the cookie and the CSRF token."""
        response = self.http.post("/api/v1/session", json={"token": token})
        if response.status_code == 200:
            jar: SimpleCookie = SimpleCookie()
            jar.load(response.headers["set-cookie"])
            self.cookie_name = next(iter(jar))
            self.cookie = jar[self.cookie_name].value
            self.csrf = response.json()["csrf_token"]
        return response

    def headers(self, mutation: bool) -> dict[str, str]:
        """Cookie always; CSRF and Origin on mutations, as the UI sends them."""
        headers = {"Cookie": f"{self.cookie_name}={self.cookie}"} if self.cookie else {}
        if mutation and self.csrf:
            headers["X-CSRF-Token"] = self.csrf
            headers["Origin"] = self.base_url
        return headers

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET with the session."""
        return self.http.get(path, headers=self.headers(False) | kwargs.pop("headers", {}),
                             **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        """POST JSON with session, CSRF and Origin."""
        extra = kwargs.pop("headers", {})
        if body is None:
            return self.http.post(path, headers=self.headers(True) | extra, **kwargs)
        return self.http.post(path, json=body, headers=self.headers(True) | extra, **kwargs)

    def patch(self, path: str, body: Any, **kwargs: Any) -> httpx.Response:
        """PATCH JSON with session, CSRF and Origin."""
        return self.http.patch(path, json=body, headers=self.headers(True)
                               | kwargs.pop("headers", {}), **kwargs)

    def delete(self, path: str, **kwargs: Any) -> httpx.Response:
        """DELETE with session, CSRF and Origin."""
        return self.http.delete(path, headers=self.headers(True) | kwargs.pop("headers", {}),
                                **kwargs)

    # -- the runtime flow --------------------------------------------------------------

    def start_turn(self, message: str, client_request_id: str | None = None) -> dict[str, Any]:
        """POST a turn and return it."""
        body: dict[str, Any] = {"message": message}
        if client_request_id is not None:
            body["client_request_id"] = client_request_id
        response = self.post("/api/v1/agent-runtime/turns", body)
        assert response.status_code in (200, 202), response.text
        turn: dict[str, Any] = response.json()["turn"]
        return turn

    def turn(self, turn_id: str) -> dict[str, Any]:
        """GET one turn."""
        response = self.get(f"/api/v1/agent-runtime/turns/{turn_id}")
        assert response.status_code == 200, response.text
        turn: dict[str, Any] = response.json()["turn"]
        return turn

    def wait_state(self, turn_id: str, states: set[str], timeout: float = 15,
                   interval: float = 0.01) -> dict[str, Any]:
        """Poll a turn until its state is one of ``states`` (bounded)."""
        seen: dict[str, Any] = {}

        def reached() -> bool:
            seen.update(self.turn(turn_id))
            if seen["state"] in TERMINAL - states:  # it will never move again: say so now
                raise AssertionError(f"turn ended {seen['state']}, not {sorted(states)}: {seen}")
            return seen["state"] in states

        wait_until(reached, timeout=timeout, interval=interval)
        return seen

    def grant(self, campaign_id: str, **extra: Any) -> httpx.Response:
        """POST a grant."""
        return self.post("/api/v1/grants", {"campaign_id": campaign_id, **extra})


def bridge_settled(url: str) -> bool:
    """Has the bridge at ``url`` (``http://host:port/``) left ``starting``? (HO-07: it settles
    in the background; ``GET /api/cordis/health`` is public.)"""
    try:
        answer = httpx.get(f"{url.rstrip('/')}/api/cordis/health", trust_env=False, timeout=5)
    except httpx.HTTPError:
        return False
    return answer.status_code != 200 or answer.json().get("state") != "starting"


class ServeProcess:
    """``labfy-ref serve`` as a real subprocess, with its ready file and output."""

    def __init__(self, *args: str, ready_file: Path, env: dict[str, str] | None = None,
                 preexec_fn: Callable[[], None] | None = None,
                 default_port: bool = False) -> None:
        self.ready_file = ready_file
        self.args = args
        # --port 0 unless the test names one or wants the default: parallel tests never
        # race for the default port (SV-12)
        port = () if "--port" in args or default_port else ("--port", "0")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "labfy_ref.cli.main", "serve", "--ready-file",
             str(ready_file), *port, *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, **(env or {})}, preexec_fn=preexec_fn)  # noqa: PLW1509
        self.ready: dict[str, Any] = {}

    def wait_ready(self, timeout: float = 30) -> dict[str, Any]:
        """Wait for the ready file (or an early exit, which fails with the output); with
        ``--bridge``, also until the bridge has settled, as the README flows do (HO-07)."""
        def ready() -> bool:
            return self.ready_file.exists() or self.process.poll() is not None
        wait_until(ready, timeout=timeout, interval=0.05)
        if self.process.poll() is not None:
            out, err = self.process.communicate(timeout=5)
            raise AssertionError(f"serve exited {self.process.returncode}: {out}{err}")
        self.ready = json.loads(self.ready_file.read_text())
        if "--bridge" in self.args:
            wait_until(lambda: bridge_settled(str(self.ready["url"])), timeout=timeout,
                       interval=0.05)
        return self.ready

    def stop(self) -> tuple[int, str, str]:
        """SIGTERM, then wait (kill after 10 s); return (code, stdout, stderr)."""
        if self.process.poll() is None:
            self.process.terminate()
        try:
            out, err = self.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            out, err = self.process.communicate(timeout=5)
        return self.process.returncode, out, err


class TurnReader:
    """Reads one NDJSON turn in a background thread, chunk by chunk, as a browser would."""

    def __init__(self, client: ApiClient, session_id: str, text: str, *,
                 headless: bool = False) -> None:
        self.chunks: list[dict[str, Any]] = []
        self.status: int | None = None
        self.headers: dict[str, str] = {}
        self.error_body: bytes = b""
        self.transport_error: httpx.HTTPError | None = None
        self._client = client
        self._body = {"text": text, "headless": headless} if headless else {"text": text}
        self._path = f"/api/cordis/sessions/{session_id}/messages"
        self._stop = threading.Event()
        self._socket: socket.socket | None = None  # the stream's connection, once it answered
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            self._read_stream()
        except httpx.HTTPError as exc:  # the server or the test closed the connection
            self.transport_error = exc

    def _read_stream(self) -> None:
        decoder = NdjsonDecoder()
        with self._client.http.stream("POST", self._path, json=self._body,
                                      headers=self._client.headers(True), timeout=30) as reply:
            self.status = reply.status_code
            self.headers = dict(reply.headers)
            stream = reply.extensions.get("network_stream")
            self._socket = stream.get_extra_info("socket") if stream is not None else None
            if reply.status_code != 200:
                self.error_body = reply.read()
                return
            for data in reply.iter_raw():
                for start in range(0, len(data), 7):  # small, odd reads: lines arrive split
                    self.chunks.extend(decoder.feed(data[start : start + 7]))
                if self._stop.is_set():
                    return  # closing the response = the client disconnects
            decoder.close()

    def types(self) -> list[str]:
        """Chunk types so far."""
        return [chunk["type"] for chunk in list(self.chunks)]

    def wait_for(self, chunk_type: str, timeout: float = 15) -> dict[str, Any]:
        """The first chunk of ``chunk_type`` (bounded wait)."""
        wait_until(lambda: chunk_type in self.types() or not self._thread.is_alive(),
                   timeout=timeout)
        return next(c for c in list(self.chunks) if c["type"] == chunk_type)

    def disconnect(self) -> None:
        """Close the connection now, as a browser tab closed mid-turn does.

        The socket is shut down under the reader, so a quiet stream (a model request
        held) is left at once, not when its next chunk arrives.
        """
        self._stop.set()
        wait_until(lambda: self._socket is not None or not self._thread.is_alive(), timeout=10)
        if self._socket is not None:
            with contextlib.suppress(OSError):
                self._socket.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=15)

    def join(self, timeout: float = 30) -> list[dict[str, Any]]:
        """Wait for the end of the stream; return every chunk."""
        self._thread.join(timeout=timeout)
        assert not self._thread.is_alive(), "the turn did not finish"
        return list(self.chunks)


class LogLines(logging.Handler):
    """A log handler that keeps each record's message (what a handler behind it writes)."""

    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())
