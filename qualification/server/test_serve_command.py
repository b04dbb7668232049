"""SV-01, LOG-01: ``labfy-ref serve`` — loopback only, ready file, login code, one server per
workspace, a server log without secrets, and failures that are one line."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import httpx
import pytest

from labfy_ref.netutil import RESERVED_PORTS, free_port
from labfy_ref.server.serve import _write_ready_file
from qualification.docs.pages import block
from qualification.harness import ServeProcess, wait_until


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", "serve", *args],
                          capture_output=True, text=True, timeout=60, check=False)


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
    assert [line for line in lines if ready["token"] in line] == [
        f"labfy-ref: log in with one click: {ready['url']}#code={ready['token']}",
        ready["token"]], "the code only in the one-click link's fragment and on its own line"
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


@pytest.mark.req("SV-01", "CLI-02")
def test_a_ready_file_in_a_missing_directory_is_refused_before_anything_starts(
        specimen: Path, tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    done = _serve("--workspace", str(specimen), "--ready-file", str(missing / "r.json"))
    assert done.returncode == 2
    assert done.stderr == f"CONFIG_INVALID: --ready-file: directory {missing} does not exist\n"
    assert done.stdout == ""


@pytest.mark.req("SV-01", "CLI-01", "CLI-02")
def test_a_ready_file_that_cannot_be_written_is_one_line_and_exit_1(
        specimen: Path, tmp_path: Path) -> None:
    target = tmp_path / "ready"
    target.mkdir()  # its directory exists (accepted), but a directory cannot be replaced
    done = _serve("--workspace", str(specimen), "--ready-file", str(target))
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"SERVE_FAILED: --ready-file: cannot write {target}: Is a directory")
    assert "Traceback" not in done.stderr
    assert sorted(entry.name for entry in tmp_path.iterdir()) == ["ready", "specimen"]
    assert done.stdout == "", "no login code is announced when the ready file failed"
    after = ServeProcess("--workspace", str(specimen), ready_file=tmp_path / "r.json")
    try:
        after.wait_ready()  # the workspace lock was released
    finally:
        assert after.stop()[0] == 0


@pytest.mark.req("SV-01")
def test_the_ready_file_is_never_written_through_a_planted_temporary_name(
        tmp_path: Path) -> None:
    ready = tmp_path / "ready.json"
    victim = tmp_path / "victim"
    victim.write_text("precious")
    # The landed build's predictable temporary name, planted as a hard link to the victim:
    # opened without O_EXCL, it was truncated and written through.
    os.link(victim, tmp_path / f".ready.json.{os.getpid()}.tmp")
    _write_ready_file(ready, {"token": "t"})
    assert json.loads(ready.read_text()) == {"token": "t"}
    assert stat.S_IMODE(ready.stat().st_mode) == 0o600
    assert victim.read_text() == "precious"
    assert len(list(tmp_path.iterdir())) == 3, "no temporary file of ours is left"


@pytest.mark.req("SV-01")
def test_a_symbolic_link_planted_at_the_temporary_name_is_refused_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import secrets  # noqa: PLC0415

    from labfy_ref.errors import LabfyError  # noqa: PLC0415

    # Whoever could guess the random temporary name finds it created exclusively, and a
    # link there never followed: the victim is not written, the start fails SERVE_FAILED.
    monkeypatch.setattr(secrets, "token_hex", lambda _size: "guessed")
    ready, victim = tmp_path / "ready.json", tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / ".ready.json.guessed.tmp").symlink_to(victim)
    with pytest.raises(LabfyError) as failed:
        _write_ready_file(ready, {"token": "t"})
    assert failed.value.code.value == "SERVE_FAILED"
    assert f"--ready-file: cannot write {ready}" in failed.value.message
    assert victim.read_text() == "precious"
    assert not ready.exists()


@pytest.mark.req("SV-01", "MC-04")
def test_port_0_means_any_free_port(specimen: Path, tmp_path: Path) -> None:
    server = ServeProcess("--workspace", str(specimen), "--port", "0",
                          ready_file=tmp_path / "ready.json")
    try:
        port = server.wait_ready()["port"]
        assert port != 0 and port not in RESERVED_PORTS
        with httpx.Client(trust_env=False) as http:
            assert http.get(f"http://127.0.0.1:{port}/api/health").status_code == 200
    finally:
        assert server.stop()[0] == 0


@pytest.mark.req("LOG-01", "SV-05", "SV-01")
def test_the_server_log_has_a_startup_and_a_shutdown_line_and_never_the_code(
        specimen: Path, tmp_path: Path) -> None:
    log_file = tmp_path / "server.log"
    server = ServeProcess("--workspace", str(specimen), "--log-file", str(log_file),
                          ready_file=tmp_path / "ready.json")
    try:
        ready = server.wait_ready()
        with httpx.Client(trust_env=False) as http:  # a failed login is an event, not a leak
            http.post(ready["url"] + "api/v1/session", json={"token": ready["token"] + "x"})
    finally:
        code, out, err = server.stop()
    assert code == 0
    lines = log_file.read_text("utf-8").splitlines()
    started = [line for line in lines if " INFO labfy_ref.server server started " in line]
    assert len(started) == 1, lines
    for part in ('workspace="Urban pollinators (specimen)"', "kind=SPECIMEN",
                 'agent="Deterministic demo agent"', f"address={ready['url']}"):
        assert part in started[0], part
    assert " INFO labfy_ref.server server stopped " in lines[-1]
    assert ready["token"] not in log_file.read_text("utf-8")
    assert ready["token"] not in err
    assert [line for line in out.splitlines() if ready["token"] in line] == [
        f"labfy-ref: log in with one click: {ready['url']}#code={ready['token']}",
        ready["token"]], "the code on the terminal only: the link and its own line"
    assert err == "", "with --log-file, nothing of the log goes to stderr"


_RELAY = textwrap.dedent("""
    import logging, sys
    from pathlib import Path
    from labfy_ref.config import RawOptions, resolve
    from labfy_ref.server.serve import _configure_log
    debug = sys.argv[2] == "debug"
    _configure_log(resolve(RawOptions(log_file=sys.argv[1], debug=debug), {}))
    uvicorn_log = logging.getLogger("uvicorn.error")
    try:
        raise RuntimeError("boom")
    except RuntimeError as exc:
        uvicorn_log.error("Exception in ASGI application", exc_info=exc)
        import traceback
        uvicorn_log.error(traceback.format_exc())  # how uvicorn reports a failed startup
""")


@pytest.mark.req("LOG-01", "SV-05")
@pytest.mark.parametrize("mode", ["plain", "debug"])
def test_uvicorn_errors_reach_our_log_as_one_line_unless_debugging(
        tmp_path: Path, mode: str) -> None:
    log_file = tmp_path / "server.log"
    done = subprocess.run([sys.executable, "-c", _RELAY, str(log_file), mode],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "", "uvicorn prints nothing itself"
    text = log_file.read_text("utf-8")
    if mode == "debug":
        assert text.count("Traceback (most recent call last)") == 2
        return
    lines = text.splitlines()
    assert len(lines) == 2 and "Traceback" not in text and "boom" not in text
    assert lines[0].endswith("ERROR uvicorn.error Exception in ASGI application "
                             "exception=RuntimeError (the traceback only with --debug)")
    assert lines[1].endswith("ERROR uvicorn.error INTERNAL_ERROR in the application "
                             "exception=RuntimeError (the traceback only with --debug)")


_LEVELS = textwrap.dedent("""
    import json, sys
    from labfy_ref.config import RawOptions, resolve
    from labfy_ref.server.serve import _configure_log
    print(json.dumps({level: _configure_log(resolve(RawOptions(log_level=level), {}))
                      for level in sys.argv[1:]}))
""")


@pytest.mark.req("LOG-01")
def test_uvicorn_says_its_warnings_unless_the_log_asks_for_errors_only() -> None:
    # uvicorn's info lines repeat ours (started, stopped): below warning it says nothing;
    # at --log-level error it keeps to errors too.
    done = subprocess.run([sys.executable, "-c", _LEVELS, "debug", "info", "warning", "error"],
                          capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(done.stdout) == {"debug": "warning", "info": "warning",
                                       "warning": "warning", "error": "error"}


def _banner_patterns() -> list[re.Pattern[str]]:
    """The README's pinned banner lines as patterns (PORT, CODE, LABEL and the workspace
    stand for what a run prints)."""
    pinned = block("serve-banner").strip().splitlines()
    patterns = []
    for line in pinned:
        pattern = re.escape(line)
        for word, value in (("PORT", r"\d+"), ("CODE", "[a-z2-7]{32}"), ("LABEL", ".+"),
                            (re.escape("'SPECIMEN' (specimen)"), r"'[^']+' \(\w+\)")):
            pattern = pattern.replace(word, value)
        patterns.append(re.compile(pattern))
    return patterns


@pytest.mark.req("SV-10", "SV-01", "DOC-01")
@pytest.mark.parametrize("bridge", [False, True])
def test_the_banner_is_the_one_the_readme_pins_with_a_code_a_double_click_copies(
        specimen: Path, tmp_path: Path, bridge: bool) -> None:
    server = ServeProcess("--workspace", str(specimen), "--port", "0",
                          *(["--bridge"] if bridge else []), ready_file=tmp_path / "ready.json")
    try:
        ready = server.wait_ready()
        code, url = str(ready["token"]), str(ready["url"])
        with httpx.Client(trust_env=False) as http:
            padded = http.post(url + "api/v1/session", json={"token": f"  {code}\t\n"})
            assert padded.status_code == 200, "surrounding whitespace of a paste is trimmed"
            inner = http.post(url + "api/v1/session", json={"token": f"{code[:5]} {code[5:]}"})
            assert inner.status_code == 401, "only the surroundings are trimmed"
    finally:
        status, out, _ = server.stop()
    assert status == 0
    assert re.fullmatch("[a-z2-7]{32}", code), "letters and digits: a double-click copies it"
    lines = [line for line in out.splitlines() if line.startswith(("labfy-ref: ", "Open "))
             or line == code]
    extra = [f"labfy-ref: engine page: {url}cordis",
             f"labfy-ref: OpenAI base URL: {url}api/cordis/v1 (API key: the login code)"]
    expected = _banner_patterns()
    if bridge:
        assert lines[2:4] == extra
        lines = lines[:2] + lines[4:]
    assert len(lines) == len(expected), out
    for line, pattern in zip(lines, expected, strict=True):
        assert pattern.fullmatch(line), (line, pattern.pattern)


@pytest.mark.req("SV-10")
def test_open_hands_the_browser_a_private_redirect_file_never_the_code(
        specimen: Path, tmp_path: Path) -> None:
    """Like Jupyter: the browser's command line (which other users can read) holds a path;
    the 0600 file it names redirects to the one-click link, and is gone at stop."""
    seen = tmp_path / "browser.json"
    browser = tmp_path / "browser"
    browser.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, os, stat, sys
        from pathlib import Path
        from urllib.parse import urlparse
        page = Path(urlparse(sys.argv[1]).path)
        json.dump({{"argv": sys.argv[1:], "mode": stat.S_IMODE(os.stat(page).st_mode),
                   "text": page.read_text()}}, open({str(seen)!r}, "w"))
        """))
    browser.chmod(0o700)
    server = ServeProcess("--workspace", str(specimen), "--port", "0", "--open",
                          ready_file=tmp_path / "ready.json", env={"BROWSER": str(browser)})
    try:
        ready = server.wait_ready()
        wait_until(seen.exists, timeout=20)
        opened = json.loads(seen.read_text())
    finally:
        server.stop()
    code = str(ready["token"])
    assert not any(code in arg for arg in opened["argv"]), "never on a command line"
    assert opened["argv"][0].startswith("file://") and opened["mode"] == 0o600
    assert f'{ready["url"]}#code={code}' in opened["text"]
    page = Path(opened["argv"][0].removeprefix("file://"))
    assert not page.exists() and not page.parent.exists(), "removed with the server"
