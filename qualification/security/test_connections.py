"""ATTACKS.md §H "Connections, not requests" (SV-09): idle sockets, half-sent heads and
bodies, trickles and descriptor exhaustion never starve the server, and its log stays
one line per event while it happens.

The in-process servers run with short deadlines (``ConnectionLimits``) so each case
takes a second or two; every wait is a liveness bound, never a timing assertion. The
last case is the issue's: ``labfy-ref serve`` as a real process under a 1024-descriptor
limit, held by 1,100 idle sockets and half-sent heads, still answers a fresh request.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.logs import BURST, MAX_KEYS, WINDOW_SECONDS, FloodGuard
from labfy_ref.server.connections import ConnectionLimits
from labfy_ref.workspace import init_workspace
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LiveServer, LogLines, ServeProcess, TurnReader

#: Deadlines short enough for a test, a cap small enough to reach.
SHORT = ConnectionLimits(idle_seconds=0.5, head_seconds=1.0, body_seconds=1.0,
                         max_connections=8)
#: Long deadlines, for the cases about the cap alone.
PATIENT = ConnectionLimits(idle_seconds=60, head_seconds=60, body_seconds=60,
                           max_connections=4)
#: The liveness bound of every wait (SV-09: 30 s, not a benchmark).
BOUND = 30.0


def _health(port: int) -> bytes:
    return f"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode("ascii")


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=BOUND)


def _until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (within BOUND)."""
    sock.settimeout(BOUND)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def _still_open(sock: socket.socket) -> bool:
    """Has the server left ``sock`` open (nothing to read, no end of stream)?"""
    sock.settimeout(0.2)
    try:
        return sock.recv(1, socket.MSG_PEEK) != b""
    except TimeoutError:
        return True


def _answer(sock: socket.socket) -> bytes:
    """Ask for /api/health and read the whole response (headers and Content-Length body)."""
    sock.settimeout(BOUND)
    sock.sendall(_health(sock.getpeername()[1]))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                  if line.lower().startswith(b"content-length:"))
    while len(body) < length:
        body += sock.recv(65536)
    return head


@pytest.fixture
def short_server(server_factory: ServerFactory, specimen: Path) -> LiveServer:
    return server_factory(specimen, connections=SHORT)


@pytest.mark.req("SV-09")
def test_a_connection_that_never_sends_a_byte_is_closed(short_server: LiveServer) -> None:
    with _connect(short_server.port) as idle:
        assert _until_closed(idle) == b"", "closed silently: it never asked anything"


@pytest.mark.req("SV-09")
def test_an_idle_keep_alive_connection_is_closed_after_its_response(
        short_server: LiveServer) -> None:
    with _connect(short_server.port) as sock:
        assert _answer(sock).startswith(b"HTTP/1.1 200")
        assert _until_closed(sock) == b""


@pytest.mark.req("SV-09")
def test_a_trickled_request_head_is_answered_408_and_closed_however_it_trickles(
        short_server: LiveServer) -> None:
    """A byte every 0.1 s would keep a per-read timer alive for ever; the head's deadline
    runs from its first byte."""
    with _connect(short_server.port) as sock:
        sock.sendall(b"GET /api/health HTTP/1.1\r\n")
        received = b""
        started = time.monotonic()
        sock.settimeout(0.1)
        while time.monotonic() - started < BOUND:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(b"X")
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            received += chunk
        assert received.startswith(b"HTTP/1.1 408 "), received
        body = json.loads(received.partition(b"\r\n\r\n")[2])
        assert body["error"]["code"] == "REQUEST_TIMEOUT"


def _timed_out_head(sock: socket.socket) -> None:
    """Send half a head and read the 408 up to the server's half-close."""
    sock.sendall(b"GET /api/health HTTP/1.1\r\n")
    sock.settimeout(BOUND)
    received = b""
    while chunk := sock.recv(65536):  # the deadline passes while the client waits
        received += chunk
    assert received.startswith(b"HTTP/1.1 408 "), received
    assert json.loads(received.partition(b"\r\n\r\n")[2])["error"]["code"] == \
        "REQUEST_TIMEOUT"


@pytest.mark.req("SV-09")
def test_an_answered_connection_is_half_closed_so_its_answer_survives_what_follows(
        server_factory: ServerFactory, specimen: Path) -> None:
    """The 408 ends with a FIN, not a close: what the client sends after it is read and
    dropped. A full close would answer those bytes with a reset -- the reset that can
    destroy the response before the client reads it."""
    server = server_factory(specimen, connections=dataclasses.replace(
        SHORT, linger_seconds=BOUND))
    with _connect(server.port) as sock:
        _timed_out_head(sock)
        sock.sendall(b"X" * 1024)
        time.sleep(0.3)  # a reset, had there been one, has come back by now
        sock.sendall(b"X" * 1024)  # raises ConnectionResetError after a reset


@pytest.mark.req("SV-09")
def test_an_answered_connection_lingers_for_a_bounded_time(short_server: LiveServer) -> None:
    """However long the client goes on sending, the server closes within its linger."""
    with _connect(short_server.port) as sock:
        _timed_out_head(sock)
        started, closed = time.monotonic(), False
        while not closed and time.monotonic() - started < BOUND:
            try:
                sock.sendall(b"X" * 1024)
            except (BrokenPipeError, ConnectionResetError):
                closed = True
            time.sleep(0.05)
        assert closed, "the server went on reading a client it had answered"


@pytest.mark.req("SV-09")
def test_a_half_sent_body_is_closed(short_server: LiveServer) -> None:
    with _connect(short_server.port) as sock:
        sock.sendall(b"POST /api/v1/agent-runtime/turns HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                     b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"me")
        _until_closed(sock)  # whatever it answered first, it does not wait for the rest


@pytest.mark.req("SV-09")
def test_past_the_cap_the_oldest_idle_connection_makes_room(
        server_factory: ServerFactory, specimen: Path) -> None:
    server = server_factory(specimen, connections=PATIENT)
    held = []
    try:
        for _ in range(PATIENT.max_connections):
            sock = _connect(server.port)
            assert _answer(sock).startswith(b"HTTP/1.1 200")  # in, then idle in this order
            held.append(sock)
        with _connect(server.port) as fresh:
            assert _answer(fresh).startswith(b"HTTP/1.1 200"), "a fresh request is answered"
        assert _until_closed(held[0]) == b"", "the oldest idle connection made room"
        assert all(_still_open(sock) for sock in held[1:])
    finally:
        for sock in held:
            sock.close()


def _slow_bridge(server_factory: ServerFactory, provider_factory: ProviderFactory,
                 specimen: Path, limits: ConnectionLimits, delay: float) -> LiveServer:
    """A bridge server whose model answers each request after ``delay`` seconds."""
    final = Answer(content='{"type":"final","text":"late but whole"}', delay=delay)
    provider = provider_factory(Scenario(name="slow", answers=(final,),
                                         when_exhausted="repeat_last"))
    return server_factory(specimen, bridge=True, connections=limits,
                          **local_agent(provider.base_url))


def _session(client: Any) -> str:
    created = client.post("/api/cordis/sessions", {})
    assert created.status_code == 201, created.text
    session_id: str = created.json()["session"]["id"]
    return session_id


@pytest.mark.req("SV-09")
def test_a_stream_in_progress_outlives_every_deadline(
        server_factory: ServerFactory, provider_factory: ProviderFactory,
        specimen: Path) -> None:
    """The model takes three times the longest deadline: the response is in progress all
    along, so nothing cuts it."""
    server = _slow_bridge(server_factory, provider_factory, specimen, SHORT, delay=3.0)
    client = server.client()
    chunks = TurnReader(client, _session(client), "Hello?").join(timeout=BOUND)
    assert chunks[-1]["type"] == "done" and chunks[-1]["reason"] == "completed", chunks
    assert "late but whole" in "".join(c["text"] for c in chunks if c["type"] == "text")


@pytest.mark.req("SV-09")
def test_when_every_connection_is_busy_a_new_one_is_refused_503_never_left_hanging(
        server_factory: ServerFactory, provider_factory: ProviderFactory,
        specimen: Path) -> None:
    limits = ConnectionLimits(idle_seconds=60, head_seconds=60, body_seconds=60,
                              max_connections=2)
    server = _slow_bridge(server_factory, provider_factory, specimen, limits, delay=4.0)
    first, second = server.client(), server.client()  # logged in: their sockets are idle
    readers = [TurnReader(client, _session(client), "Hello?") for client in (first, second)]
    time.sleep(1.0)  # both streams have started (the model answers in 4 s)
    with _connect(server.port) as fresh:
        refused = _until_closed(fresh)
    assert refused.startswith(b"HTTP/1.1 503 "), refused
    assert json.loads(refused.partition(b"\r\n\r\n")[2])["error"]["code"] == \
        "TOO_MANY_CONNECTIONS"
    for reader in readers:
        assert reader.join(timeout=BOUND)[-1]["reason"] == "completed", "never cut"


# -- the one-line, rate-limited log --------------------------------------------------------



def _accept_failure() -> logging.LogRecord:
    """What asyncio logs for each accept() once descriptors run out: a traceback."""
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        return logging.getLogger("asyncio").makeRecord(
            "asyncio", logging.ERROR, __file__, 1, "socket.accept() out of system resource",
            (), sys.exc_info())


@pytest.mark.req("SV-09", "SV-05")
def test_a_flood_of_one_error_is_a_few_lines_and_one_count_that_is_never_lost() -> None:
    lines = LogLines()
    guard = FloodGuard(lines)
    for _ in range(45_807):
        guard.handle(_accept_failure())
    guard.handle(logging.getLogger("labfy_ref.server").makeRecord(
        "labfy_ref.server", logging.INFO, __file__, 1, "server stopped", (), None))
    guard.close()
    flood = [line for line in lines.lines if "accept()" in line]
    assert len(flood) == BURST + 1
    assert all(line.endswith("exception=OSError (the traceback only with --debug)")
               for line in flood[:BURST])
    assert flood[-1].startswith(f"{45_807 - BURST} similar lines suppressed")
    assert "server stopped" in lines.lines, "another line is never held back by the flood"


class _Clock:
    """The time FloodGuard reads: set by the test, never slept for. It starts at 1000s,
    as a monotonic clock never reads 0, so a time far later differs from its remainder."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _line(message: str) -> logging.LogRecord:
    return logging.LogRecord("labfy_ref.server", logging.WARNING, __file__, 1, message,
                             None, None)


def _held(count: int, message: str) -> str:
    return f"{count} similar lines suppressed in {WINDOW_SECONDS:g}s: {message}"


@pytest.mark.req("SV-09")
@pytest.mark.parametrize("later", [WINDOW_SECONDS, 1005.0], ids=["as-it-ends", "long-after"])
def test_a_window_that_ended_is_said_when_any_later_line_comes(later: float) -> None:
    """A flood that stops is summed up by the next line of any kind, not left until its
    own kind comes back or the log closes (the server may run quiet for hours)."""
    lines, clock = LogLines(), _Clock()
    guard = FloodGuard(lines, clock=clock)
    for _ in range(BURST + 5):
        guard.handle(_line("flood"))
    clock.now += WINDOW_SECONDS - 0.001
    guard.handle(_line("before"))
    assert lines.lines == ["flood"] * BURST + ["before"], "its window is not over yet"
    clock.now = 1000.0 + later
    guard.handle(_line("after"))
    assert lines.lines[BURST + 1:] == [_held(5, "flood"), "after"]
    guard.close()
    assert lines.lines[BURST + 1:] == [_held(5, "flood"), "after"], "said once, not twice"


def _fill(guard: FloodGuard, clock: _Clock, flooded: set[int]) -> None:
    """MAX_KEYS kinds, each a little later than the one before, all windows still open:
    those in ``flooded`` over their burst (one line held each), the others once."""
    for key in range(MAX_KEYS):
        clock.now += 0.001
        for _ in range(BURST + 1 if key in flooded else 1):
            guard.handle(_line(f"kind {key}"))


@pytest.mark.req("SV-09")
def test_past_max_keys_the_oldest_windows_are_forgotten_and_their_counts_said() -> None:
    lines, clock = LogLines(), _Clock()
    guard = FloodGuard(lines, clock=clock)
    quarter = MAX_KEYS // 4
    _fill(guard, clock, {0, quarter - 1, quarter})
    assert not any("suppressed" in line for line in lines.lines), \
        "up to MAX_KEYS kinds, every window is kept"
    assert len(lines.lines) == MAX_KEYS + 3 * (BURST - 1)
    guard.handle(_line("one kind too many"))
    assert lines.lines[-3:] == [_held(1, "kind 0"), _held(1, f"kind {quarter - 1}"),
                                "one kind too many"], \
        "the oldest quarter is forgotten, and what it held back said"
    guard.handle(_line("kind 0"))
    assert lines.lines[-1] == "kind 0", "a forgotten kind starts a fresh window"
    before = len(lines.lines)
    guard.handle(_line(f"kind {quarter}"))
    assert len(lines.lines) == before, "a younger window is kept: still over its burst"
    guard.close()
    assert lines.lines[before:] == [_held(2, f"kind {quarter}")]
    assert sum("suppressed" in line for line in lines.lines) == 3, "each said once"


@pytest.mark.req("SV-09")
def test_past_max_keys_the_kind_being_logged_keeps_its_window() -> None:
    lines, clock = LogLines(), _Clock()
    guard = FloodGuard(lines, clock=clock)
    _fill(guard, clock, {0})
    written = len(lines.lines)
    guard.handle(_line("kind 0"))
    assert len(lines.lines) == written, \
        "the oldest, but the kind being logged: still over its burst, held, nothing said"
    guard.close()
    assert lines.lines[written:] == [_held(2, "kind 0")], "both held lines said, once"


@pytest.mark.req("SV-09", "SV-05")
def test_every_logger_writes_through_the_one_handler(tmp_path: Path) -> None:
    """asyncio's, SQLAlchemy's or any other library's records reach the server log as one
    line each, never Python's last-resort handler (which prints tracebacks to stderr)."""
    script = f"""
import logging, sys
from pathlib import Path
from labfy_ref.logs import configure
configure("info", Path({str(tmp_path / "server.log")!r}))
try:
    raise OSError(24, "Too many open files")
except OSError:
    for _ in range(500):
        logging.getLogger("asyncio").error("socket.accept() out of system resource",
                                           exc_info=True)
logging.getLogger("sqlalchemy.pool").warning("pool exhausted")
logging.getLogger("labfy_ref.server").info("server stopped")
logging.shutdown()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    lines = (tmp_path / "server.log").read_text("utf-8").splitlines()
    assert "Traceback" not in "\n".join(lines)
    assert sum("accept()" in line for line in lines) == BURST + 1
    assert any(line.endswith("WARNING sqlalchemy.pool pool exhausted") for line in lines)
    assert lines[-1].endswith("INFO labfy_ref.server server stopped") or any(
        "server stopped" in line for line in lines)


# -- the case: a real serve process, 1,100 sockets, 1,024 descriptors --------------

DESCRIPTORS = 1024
SOCKETS = 1100


def _limited() -> None:  # in the child, before exec: the limit the issue measured
    resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))


@contextlib.contextmanager
def _many_sockets(port: int, count: int) -> Iterator[list[socket.socket]]:
    opened: list[socket.socket] = []
    try:
        for number in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.settimeout(5)
            try:
                sock.connect(("127.0.0.1", port))
                if number % 10 == 0:  # every tenth one half-sends its head and stops
                    sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.")
            except OSError:
                sock.close()  # the backlog is full for a moment: a refusal, not a hang
                continue
            opened.append(sock)
        yield opened
    finally:
        for sock in opened:
            sock.close()


@pytest.mark.req("SV-09")
def test_idle_and_half_open_sockets_past_the_descriptor_limit_never_starve_serve(
        tmp_path: Path) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < SOCKETS + 200:
        pytest.skip(f"this test needs {SOCKETS + 200} descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, SOCKETS + 200), hard))
    workspace = tmp_path / "ws"
    init_workspace(workspace, specimen=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABFY_")}
    serve = ServeProcess("--workspace", str(workspace), "--port", "0",
                         ready_file=tmp_path / "ready.json", env=env, preexec_fn=_limited)
    try:
        port = int(serve.wait_ready()["port"])
        with _many_sockets(port, SOCKETS) as held:
            assert len(held) >= 512, "the sockets reached the server"
            with _connect(port) as fresh:
                assert _answer(fresh).startswith(b"HTTP/1.1 200"), "a fresh request"
    finally:
        code, _, err = serve.stop()
    assert code == 0, err
    assert "Traceback" not in err, err[-2000:]
    assert err.count("\n") < 100, f"{err.count(chr(10))} lines on stderr"


_LIMITS_CHILD = """
import json, logging, resource, sys
soft, hard = (int(n) for n in sys.argv[1:3])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("labfy_ref.server").addHandler(Keep())
from labfy_ref.server.serve import DEFAULT_LIMITS, connection_limits
limits = connection_limits()
print(json.dumps({"cap": limits.max_connections, "same": limits is DEFAULT_LIMITS,
                  "soft": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "warnings": warnings}))
"""


@pytest.mark.req("SV-09")
@pytest.mark.parametrize(("soft", "hard", "cap", "warned"), [
    (600, 600, 472, True),     # too few descriptors: the cap leaves 128 free, and says so
    (640, 640, 512, False),    # exactly enough for the default cap and the reserve
    (4096, 4096, 512, False),  # plenty: the default cap, unchanged, nothing said
    (600, 4096, 512, False),   # a soft limit below the hard one is raised to it first
])
def test_the_connection_cap_keeps_descriptors_free_under_the_process_limit(
        soft: int, hard: int, cap: int, warned: bool) -> None:
    current_hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if current_hard != resource.RLIM_INFINITY and current_hard < hard:
        pytest.skip(f"this case needs a hard descriptor limit of {hard}; it is {current_hard}")
    child = subprocess.run([sys.executable, "-c", _LIMITS_CHILD, str(soft), str(hard)],
                           capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(child.stdout)
    assert seen["cap"] == cap, seen
    assert seen["soft"] == hard, "the soft limit is raised to the hard one"
    assert seen["same"] is not warned, "the default limits stand when they fit"
    assert bool(seen["warnings"]) is warned, seen
    if warned:
        assert seen["warnings"] == [f"descriptor limit {soft}: at most {cap} connections at once"]
