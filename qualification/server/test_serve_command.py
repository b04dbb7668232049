"""SV-01: ``labfy-ref serve`` — loopback only, ready file, login code, one server per workspace."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from labfy_ref.netutil import free_port
from qualification.harness import ServeProcess


@pytest.mark.req("SV-01")
def test_serve_prints_the_url_and_the_code_on_its_own_line_and_writes_the_ready_file(
        specimen: Path, tmp_path: Path) -> None:
    ready_file = tmp_path / "ready.json"
    server = ServeProcess("--workspace", str(specimen), ready_file=ready_file)
    try:
        ready = server.wait_ready()
        mode = stat.S_IMODE(os.stat(ready_file).st_mode)
        assert mode == 0o600
        assert set(ready) == {"url", "port", "token", "pid"}
        assert ready["url"] == f"http://127.0.0.1:{ready['port']}/"
        assert ready["pid"] == server.process.pid
        assert ready["token"] not in ready["url"]
        with httpx.Client(trust_env=False) as http:
            page = http.get(ready["url"])
            assert page.status_code == 200 and ready["token"] not in page.text
            login = http.post(ready["url"] + "api/v1/session", json={"token": ready["token"]})
            assert login.json()["role"] == "admin"
    finally:
        code, out, err = server.stop()
    assert code == 0
    lines = out.splitlines()
    assert ready["token"] in lines, "the code is alone on its own line"
    assert sum(ready["token"] in line for line in lines) == 1
    assert any(ready["url"] in line and ready["token"] not in line for line in lines)
    assert ready["token"] not in err
    assert not ready_file.exists(), "the ready file goes away with the server"


@pytest.mark.req("SV-01")
def test_a_second_server_on_the_same_workspace_is_refused(specimen: Path,
                                                          tmp_path: Path) -> None:
    first = ServeProcess("--workspace", str(specimen), ready_file=tmp_path / "r1.json")
    try:
        first.wait_ready()
        second = subprocess.run(
            [sys.executable, "-m", "labfy_ref.cli.main", "serve", "--workspace", str(specimen)],
            capture_output=True, text=True, timeout=60, check=False)
        assert second.returncode == 2
        assert second.stderr.startswith("WORKSPACE_LOCKED: ")
    finally:
        assert first.stop()[0] == 0
    third = ServeProcess("--workspace", str(specimen), ready_file=tmp_path / "r3.json")
    try:
        third.wait_ready()
    finally:
        assert third.stop()[0] == 0


@pytest.mark.req("SV-01", "MC-04")
def test_serve_uses_the_given_port_and_refuses_others(specimen: Path, tmp_path: Path) -> None:
    port = free_port()
    server = ServeProcess("--workspace", str(specimen), "--port", str(port),
                          ready_file=tmp_path / "ready.json")
    try:
        assert server.wait_ready()["port"] == port
    finally:
        server.stop()


@pytest.mark.req("SV-01")
def test_serve_on_ipv6_loopback(specimen: Path, tmp_path: Path) -> None:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("IPv6 loopback is not available on this machine")
    server = ServeProcess("--workspace", str(specimen), "--host", "::1",
                          ready_file=tmp_path / "ready.json")
    try:
        ready = server.wait_ready()
        assert ready["url"].startswith("http://[::1]:")
        with httpx.Client(trust_env=False) as http:
            assert http.get(ready["url"] + "api/health").status_code == 200
    finally:
        server.stop()
