"""QR-03: the kit itself — its provider, its target handling, and a run against our own
``labfy-ref serve --bridge`` started as a separate process, as a stranger's server would be.

These tests need a local build (they start processes and read the kit's report), so
they are not marked ``conformance``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from openai._streaming import SSEDecoder  # the official client's own parser

from fake_provider import Scenario, ScenarioError
from qualification.conformance.__main__ import launch_own, run_against
from qualification.conformance.kit import (
    PROVIDERS_FILE,
    SCENARIO,
    agent_flags,
    kit_provider,
    launch_profile,
    marker,
)
from qualification.conformance.sse import completion_chunks, events
from qualification.target import TargetError, normalise_url

REPO = Path(__file__).resolve().parents[2]
PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rfE")


def _chat(url: str, *contents: str) -> str:
    messages = [{"role": "user", "content": c} for c in contents]
    answer = httpx.post(f"{url}/v1/chat/completions", json={"model": "kit-model",
                                                            "messages": messages},
                        trust_env=False, timeout=10)
    assert answer.status_code == 200, answer.text
    return str(answer.json()["choices"][0]["message"]["content"])


@pytest.mark.req("QR-03")
def test_the_kit_provider_gives_each_conversation_its_own_place_in_its_script() -> None:
    with kit_provider() as provider:
        first, second = marker("list-final", "aaa"), marker("list-final", "bbb")
        assert "workspace.list_objects" in _chat(provider.base_url, first)
        assert "workspace.list_objects" in _chat(provider.base_url, second)
        assert "KIT listed" in _chat(provider.base_url, first, "history an implementation kept")
        # the last marker of a request names its conversation; {nonce} is filled in
        written = _chat(provider.base_url, first, marker("write-two", "n1"))
        assert '"kit-n1-a.txt"' in written
        results: list[str] = []

        def ask(text: str) -> None:
            results.append(_chat(provider.base_url, text))

        threads = [threading.Thread(target=ask, args=(marker("final", f"t{i}"),))
                   for i in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=10)
        assert sorted(r.rsplit(" ", 1)[-1].rstrip('"}') for r in results) == [
            f"t{i}" for i in range(8)], "concurrent conversations do not share a cursor"
        exhausted = httpx.post(f"{provider.base_url}/v1/chat/completions", json={
            "model": "kit-model", "messages": [{"role": "user", "content": first}]},
            trust_env=False, timeout=10)
        assert exhausted.status_code == 500, "past its script a conversation gets an error"


@pytest.mark.req("QR-03")
@pytest.mark.parametrize("keyed", [{"Bad Key": []}, {"ok": "not a list"}, ["x"],
                                   {"k:x": []}, {"": []}])
def test_a_malformed_keyed_script_is_refused(keyed: Any) -> None:
    document = json.loads(SCENARIO.read_text("utf-8")) | {"keyed": keyed}
    with pytest.raises(ScenarioError):
        Scenario.from_json(document)


@pytest.mark.req("QR-03")
@pytest.mark.parametrize(("url", "normal"), [
    ("http://127.0.0.1:9000", "http://127.0.0.1:9000"),
    ("http://127.0.0.1:9000/", "http://127.0.0.1:9000"),
    ("http://[::1]:9000", "http://[::1]:9000"),
    ("https://example.test", "https://example.test:443"),
])
def test_a_target_url_names_a_server(url: str, normal: str) -> None:
    assert normalise_url(url) == normal


@pytest.mark.req("QR-03")
@pytest.mark.parametrize("url", ["ftp://127.0.0.1:21", "127.0.0.1:9000", "http://127.0.0.1:9000/api",
                                 "http://u:p@127.0.0.1:9000", "http://127.0.0.1:99999",
                                 "http://127.0.0.1:9000?x=1", "http://"])
def test_anything_else_is_refused_in_one_line(url: str) -> None:
    with pytest.raises(TargetError) as refused:
        normalise_url(url)
    assert "\n" not in str(refused.value)


@pytest.mark.req("QR-03")
def test_an_unreachable_target_is_a_usage_error_not_a_red_report(tmp_path: Path) -> None:
    with kit_provider() as provider:  # a port that answers, but is no implementation
        done = subprocess.run([*PYTEST, f"--target-url={provider.base_url}", "--target-token=x",
                               f"--report-dir={tmp_path / 'report'}",
                               "qualification/conformance/test_runtime_flows.py"],
                              cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "not a version document" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "report" / "results").exists(), "no report of a run that never ran"
    missing = subprocess.run([*PYTEST, "--target-url=http://127.0.0.1:9",
                              "qualification/conformance"], cwd=REPO, capture_output=True,
                             text=True, timeout=120, check=False)
    assert missing.returncode == 4 and "--target-token" in missing.stderr


@pytest.mark.req("QR-03")
def test_the_kit_passes_against_our_serve_process_and_its_report_names_the_target(
        tmp_path: Path) -> None:
    report = tmp_path / "report"
    with kit_provider() as provider:
        server, url, code, user_token = launch_own(tmp_path / "target", provider.base_url)
        try:
            passed = run_against(url, code, user_token, provider.base_url, [
                f"--report-dir={report}", "qualification/conformance/test_bridge_flows.py",
                "qualification/security/test_bridge_roles.py",
                "qualification/server/test_version.py"], command=PYTEST)
            without = run_against(url, code, None, None, [
                f"--report-dir={tmp_path / 'bare'}",
                "qualification/conformance/test_runtime_flows.py",
                "qualification/security/test_bridge_roles.py"], command=PYTEST)
        finally:
            server.stop()
    assert passed == 0
    status = json.loads((report / "status.json").read_text("utf-8"))
    assert status["conformance"]["target_url"] == normalise_url(url)
    assert status["conformance"]["version"]["name"] == "labfy-ref"
    lines = {line["id"]: line for line in status["requirements"]}
    assert lines["BR-12"]["status"] == "CURRENT" and lines["BR-04"]["status"] == "CURRENT"
    assert lines["API-02"]["status"] == "NOT_RUN"  # its tests read our own build
    assert "needs a local build" in lines["API-02"]["reason"]
    markdown = (report / "STATUS.md").read_text("utf-8")
    assert f"Conformance target: {normalise_url(url)}. Proven against it" in markdown
    assert f"<code>{normalise_url(url)}</code>" in (report / "status.html").read_text("utf-8")
    assert without == 0, "no provider, no user: those tests are NOT_RUN, not failed"
    bare = {line["id"]: line for line in json.loads(
        (tmp_path / "bare" / "status.json").read_text("utf-8"))["requirements"]}
    assert bare["RT-08"]["status"] == "NOT_RUN" and "kit's provider" in bare["RT-08"]["reason"]
    assert bare["SV-03"]["status"] == "NOT_RUN"
    assert "user-role login" in bare["SV-03"]["reason"]


@pytest.mark.req("QR-03", "QR-07")
def test_the_provider_command_prints_the_flags_a_target_is_launched_with(tmp_path: Path) -> None:
    """README step 1: ``tox -e conformance -- provider`` (its command, as tox runs it)."""
    process = subprocess.Popen([sys.executable, "-m", "qualification.conformance", "provider"],
                               cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        lines = [process.stdout.readline() for _ in range(7)]  # bounded: its seven lines
        flags = lines[1].split()
        assert flags[:2] == ["--agent-mode", "local-model"] and flags[4:10] == [
            "--agent-model", "kit-model", "--bridge", "--approval-timeout", "3", "--providers"]
        assert flags[11:] == ["--session-titles", "preview"]
        endpoint = flags[3]
        assert f"--target-provider {endpoint}" in lines[3]
        profile = json.loads(lines[4].removeprefix("launch profile (QR-07): "))
        assert profile == launch_profile(endpoint, flags[10]) and profile["flags"] == flags
        assert Path(flags[10]).read_text("utf-8") == profile["providers"], "the file is there"
        assert lines[6].split() == ["labfy-ref", "work", "worker", "--workspace", "WORKSPACE",
                                    *profile["worker"]]
        assert "workspace.list_objects" in _chat(endpoint, marker("list-final"))
    finally:
        process.terminate()
        _, err = process.communicate(timeout=10)
    assert process.returncode == 0, err
    assert "Traceback" not in err


_STREAMS = [
    "data: {\"a\": 1}\n\ndata: [DONE]\n\n",
    ": keep-alive\n\ndata: {\"a\": 1}\n\n: ping\ndata: {\"b\": 2}\n\ndata: [DONE]\n\n",
    "data: {\"a\": 1}\r\n\r\ndata:{\"b\": 2}\r\rdata: [DONE]\r\n\r\n",
    "data: {\"a\": 1}\ndata: {\"b\": 2}\n\ndata: [DONE]\n\n",  # two chunks merged in one event
    "event: error\ndata: {\"e\": 1}\nid: 7\n\ndata: x\nretry: 10\n\ndata: cut",  # unended
    "data: first\n\ndata\n\nfield-only\ndata:  two spaces\n\n",
]


@pytest.mark.req("QR-03", "BR-13")
@pytest.mark.parametrize("body", _STREAMS)
def test_the_kits_sse_reader_reads_a_stream_as_the_openai_client_does(body: str) -> None:
    theirs = [(e.event or "message", e.data) for e in SSEDecoder().iter_bytes(
        iter([body.encode("utf-8")])) if e.data]
    ours = [(e.event, e.data) for e in events(body) if e.data]
    if body.endswith("cut"):  # the client hands on an event the stream never ended
        theirs = theirs[:len(ours)]
    assert ours == theirs


@pytest.mark.req("QR-03", "BR-13")
def test_merged_or_unended_chunks_fail_the_kits_reading() -> None:
    chunks, done = completion_chunks('data: {"choices": []}\n\ndata: [DONE]\n\n')
    assert chunks == [{"choices": []}] and done
    with pytest.raises(json.JSONDecodeError):
        completion_chunks('data: {"choices": []}\ndata: {"choices": []}\n\ndata: [DONE]\n\n')
    assert completion_chunks('data: {"choices": []}\n\ndata: [DONE]\n') == ([{"choices": []}],
                                                                         False)


def _kit_at_a_target_launched_with(tmp_path: Path, flags: Callable[[str], list[str]],
                                   tests: str) -> tuple[int, str]:
    """The kit's ``tests`` against our own serve launched with ``flags(provider_url)`` only:
    its exit code and output."""
    with kit_provider() as provider:
        server, url, code, user = launch_own(tmp_path / "target", provider.base_url,
                                             flags=flags(provider.base_url))
        try:
            log = tmp_path / "kit.log"
            returncode = run_against(url, code, user, provider.base_url, [
                f"--report-dir={tmp_path / 'report'}", tests], command=PYTEST, log=log)
        finally:
            server.stop()
    return returncode, log.read_text("utf-8")


@pytest.mark.req("QR-07")
def test_a_target_that_ignores_its_launch_profile_fails_the_run_loudly(tmp_path: Path) -> None:
    returncode, output = _kit_at_a_target_launched_with(
        tmp_path, lambda url: [*agent_flags(url), "--bridge"],
        "qualification/conformance/test_wire_contracts.py")
    assert returncode == pytest.ExitCode.USAGE_ERROR, output
    assert ("the target does not run with the kit's launch profile (QR-07; print it with "
            "`tox -e conformance -- provider`): bridge.providers: reported [\"local\"], the "
            "profile says [\"local\", \"kit-b\", \"kit-down\"]; bridge.session_titles: "
            "reported \"model\", the profile says \"preview\"; "
            "bridge.approval_timeout_seconds: reported 300.0, the profile says 3.0") in output, \
        output
    assert " passed" not in output


@pytest.mark.req("QR-07", "WK-05")
def test_a_target_without_the_profiles_worker_fails_the_work_tests_loudly(
        tmp_path: Path) -> None:
    """Launched with the profile's serve flags but no worker beside it: every Work test of
    the kit fails, naming the profile's worker; none passes, none is skipped."""
    returncode, output = _kit_at_a_target_launched_with(
        tmp_path, lambda url: list(launch_profile(
            url, str(tmp_path / "target" / PROVIDERS_FILE))["flags"]),
        "qualification/conformance/test_work_flows.py")
    assert returncode == pytest.ExitCode.TESTS_FAILED, output
    assert "no worker ran the kit's probe task within 30 s" in output, output
    assert "4 errors" in output and " passed" not in output and "skipped" not in output, output
