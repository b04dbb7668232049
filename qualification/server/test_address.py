"""SV-12: a stable address — the default port, its fallback, the list of running servers, a
``WORKSPACE_LOCKED`` that names its holder, and the Host refusal a browser can read."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from labfy_ref.config import DEFAULT_PORT
from labfy_ref.errors import ConfigRefused
from labfy_ref.netutil import RESERVED_PORTS
from labfy_ref.server import registry
from labfy_ref.server import serve as serving
from labfy_ref.server.refusals import prefers_html
from labfy_ref.server.registry import (
    ENV_RUNTIME_DIR,
    RunningServer,
    register,
    registry_dir,
    running,
)
from qualification.harness import ServeProcess


@contextlib.contextmanager
def _held(ports: range) -> Iterator[list[int]]:
    """Listen on whichever of ``ports`` are free (the others are someone else's already)."""
    sockets, held = [], []
    try:
        for port in ports:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind(("127.0.0.1", port))
                sock.listen(1)
            except OSError:
                sock.close()
                continue
            sockets.append(sock)
            held.append(port)
        yield held
    finally:
        for sock in sockets:
            sock.close()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.req("SV-12", "SV-01")
def test_without_port_the_default_is_taken_or_the_next_free_one_said(
        specimen: Path, tmp_path: Path) -> None:
    with _held(range(DEFAULT_PORT, DEFAULT_PORT + 1)):
        server = ServeProcess("--workspace", str(specimen), ready_file=tmp_path / "r.json",
                              default_port=True)
        try:
            port = int(server.wait_ready()["port"])
        finally:
            code, out, _ = server.stop()
    assert code == 0
    assert DEFAULT_PORT < port <= DEFAULT_PORT + 20
    assert f"labfy-ref: port {DEFAULT_PORT} is in use (another program holds it); " \
           f"serving on {port}" in out


@pytest.mark.req("SV-12", "CLI-01")
def test_when_every_port_of_the_range_is_taken_serve_says_what_to_pass(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Every port of the range refused (never by holding them: other tests start servers on
    # the default port meanwhile).
    tried: list[int] = []

    def taken(host: str, port: int | None) -> socket.socket:
        tried.append(int(port or 0))
        raise ConfigRefused("taken")

    monkeypatch.setattr(serving, "bind_socket", taken)
    with pytest.raises(ConfigRefused) as refused:
        serving.bind_default("127.0.0.1")
    assert refused.value.code.value == "PORT_REFUSED"
    assert str(refused.value) == (f"PORT_REFUSED: ports {DEFAULT_PORT}-{DEFAULT_PORT + 20} are "
                                  "all in use: pass --port N, or --port 0 for any free port")
    assert tried == list(range(DEFAULT_PORT, DEFAULT_PORT + 21))


@pytest.mark.req("SV-12", "MC-04")
def test_the_fallback_never_takes_a_reserved_port(monkeypatch: pytest.MonkeyPatch) -> None:
    reserved = min(RESERVED_PORTS)
    monkeypatch.setattr(serving, "DEFAULT_PORT", reserved - 3)
    tried: list[int] = []

    def bind(host: str, port: int | None) -> socket.socket:
        tried.append(int(port or 0))
        if port is not None and port <= reserved:
            raise ConfigRefused("taken")
        return socket.socket()

    monkeypatch.setattr(serving, "bind_socket", bind)
    serving.bind_default("127.0.0.1").close()
    assert tried == [reserved - 3, reserved - 2, reserved - 1, reserved + 1], \
        "the reserved port is skipped, never bound nor probed"


@pytest.mark.req("SV-12", "SV-01")
def test_list_shows_running_servers_never_a_code_and_forgets_stale_ones(
        specimen: Path, tmp_path: Path) -> None:
    server = ServeProcess("--workspace", str(specimen), ready_file=tmp_path / "r.json")
    try:
        ready = server.wait_ready()
        listed = _cli("list", "--json")
        lines = _cli("list")
        files = list(Path(os.environ[ENV_RUNTIME_DIR]).glob("*.json"))
        kept = [(f.read_text(), f.stat().st_mode & 0o777) for f in files]
    finally:
        server.stop()
    entries = [e for e in json.loads(listed.stdout) if e["pid"] == ready["pid"]]
    assert len(entries) == 1 and set(entries[0]) == {"workspace", "url", "pid", "started_at"}
    assert (entries[0]["url"], entries[0]["workspace"]) == (ready["url"], str(specimen.resolve()))
    assert f"{ready['pid']}\t{ready['url']}\t" in lines.stdout
    for text in (listed.stdout, lines.stdout, *(text for text, _ in kept)):
        assert ready["token"] not in text, "never the login code"
    assert kept and all(mode == 0o600 for _, mode in kept)
    after = json.loads(_cli("list", "--json").stdout)
    assert ready["pid"] not in [e["pid"] for e in after], "removed at stop"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True, timeout=30)
    stale = register(RunningServer("/gone", "http://127.0.0.1:1/", int(dead.stdout), "t"),
                     os.environ)
    assert stale.exists() and all(s.pid != int(dead.stdout) for s in running(os.environ))
    assert not stale.exists(), "a server killed without stopping is forgotten"


@pytest.mark.req("SV-12")
def test_a_second_server_on_a_workspace_is_told_which_server_holds_it(
        specimen: Path, tmp_path: Path) -> None:
    first = ServeProcess("--workspace", str(specimen), ready_file=tmp_path / "r.json")
    try:
        ready = first.wait_ready()
        second = _cli("serve", "--workspace", str(specimen), "--port", "0")
    finally:
        first.stop()
    assert second.returncode == 2
    assert second.stderr.startswith("WORKSPACE_LOCKED: ")
    assert f"(PID {ready['pid']}) serves it at {ready['url']}" in second.stderr


@pytest.mark.req("SV-12", "SV-02", "SV-05")
def test_a_browser_at_a_foreign_host_gets_a_page_saying_which_are_served(
        specimen: Path, server_factory: object) -> None:
    from qualification.harness import LiveServer  # noqa: PLC0415

    assert callable(server_factory)
    server: LiveServer = server_factory(specimen)
    with httpx.Client(base_url=server.url, trust_env=False, timeout=30) as http:
        page = http.get("/", headers={"Host": f"127.0.0.1:{server.port + 1}",
                                      "Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
        api = http.get("/", headers={"Host": "evil.example", "Accept": "application/json"})
        plain = http.get("/", headers={"Host": "evil.example"})
    assert page.status_code == 403 and page.headers["content-type"].startswith("text/html")
    assert f"127.0.0.1:{server.port}" in page.text and "ssh -L" in page.text
    assert page.headers["content-security-policy"].startswith("default-src 'none'")
    for answer in (api, plain):
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "HOST_NOT_ALLOWED"
    admin = server.client()
    refusals = admin.get("/api/v1/agent-runtime/status").json()["refusals"]
    assert refusals["HOST_NOT_ALLOWED"] == 3, "the page counts as a refusal too"


@pytest.mark.req("SV-12")
@pytest.mark.parametrize(("accept", "html"), [
    (None, False), ("", False), ("text/html", True), ("TEXT/HTML", True),
    ("application/xhtml+xml", True), ("text/html;q=0.9, application/json", True),
    (" text/html ; charset=utf-8", True), ("application/json, text/html", False),
    ("*/*", False), ("*/*, text/html", False), ("image/png, text/plain", False),
    (",".join(["image/png"] * 31 + ["text/html"]), True),  # the 32nd kind is read
    (",".join(["image/png"] * 32 + ["text/html"]), False),  # the 33rd is not
])
def test_a_browser_is_an_accept_that_names_html_before_json(accept: str | None,
                                                            html: bool) -> None:
    """The first kind the header names decides, its parameters aside; a header's first
    32 kinds are read, no more (it is only a hint for which refusal to send)."""
    assert prefers_html(accept) is html


@pytest.mark.req("SV-12")
def test_the_list_lives_where_the_module_says_for_each_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LABFY_RUNTIME_DIR, else $XDG_RUNTIME_DIR/labfy-ref (when it is a directory), else
    ~/.local/state/labfy-ref/servers — each folder 0700, each file 0600."""
    server = RunningServer("/ws", "http://127.0.0.1:8421/", os.getpid(), "2026-12-06T00:00:00Z")
    explicit, xdg, home = tmp_path / "explicit", tmp_path / "xdg", tmp_path / "home"
    xdg.mkdir()
    monkeypatch.setenv("HOME", str(home))
    cases = [({ENV_RUNTIME_DIR: str(explicit), "XDG_RUNTIME_DIR": str(xdg)}, explicit),
             ({"XDG_RUNTIME_DIR": str(xdg)}, xdg / "labfy-ref"),
             ({"XDG_RUNTIME_DIR": str(tmp_path / "absent")},
              home / ".local" / "state" / "labfy-ref" / "servers"),
             ({}, home / ".local" / "state" / "labfy-ref" / "servers")]
    for environ, folder in cases:
        assert registry_dir(environ) == folder, environ
        path = register(server, environ)
        assert path == folder / f"{os.getpid()}-8421.json"
        assert json.loads(path.read_text("utf-8"))["url"] == server.url
        assert oct(path.stat().st_mode & 0o777) == "0o600"
        assert oct(folder.stat().st_mode & 0o777) == "0o700"
        assert [s.url for s in running(environ)] == [server.url]
        path.unlink()


@pytest.mark.req("SV-12")
def test_a_file_planted_in_the_list_is_never_written_through(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The temporary name is created new (O_EXCL) and never through a link (O_NOFOLLOW)."""
    folder = tmp_path / "servers"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    server = RunningServer("/ws", "http://127.0.0.1:8421/", os.getpid(), "2026-12-06T00:00:00Z")
    monkeypatch.setattr(registry.secrets, "token_hex", lambda _n: "fixed")  # type: ignore[attr-defined]
    temp = folder / f".{os.getpid()}-8421.json.fixed.tmp"
    for planted in ("link", "file"):
        if planted == "link":
            temp.symlink_to(victim)
        else:
            temp.write_text("someone else's")
        with pytest.raises(FileExistsError):
            register(server, {ENV_RUNTIME_DIR: str(folder)})
        assert victim.read_text() == "untouched"
        temp.unlink()


@pytest.mark.req("SV-12")
def test_on_the_default_port_serve_says_nothing_of_a_fallback(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from labfy_ref.config import RawOptions, resolve  # noqa: PLC0415

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    bound = sock.getsockname()[1]
    # the default port as its own int object: equal to the bound one, never the same object
    monkeypatch.setattr(serving, "DEFAULT_PORT", int(str(bound)))
    monkeypatch.setattr(serving, "bind_default", lambda host: sock)
    try:
        assert serving._bound(resolve(RawOptions(), {})) is sock
    finally:
        sock.close()
    assert capsys.readouterr().out == "", "the default port was free: nothing to say"
