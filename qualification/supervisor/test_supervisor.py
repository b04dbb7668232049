"""LocalModelSupervisor on fake llama-servers: start, proof of ownership, stop (SM-02, SM-05).

Each fake is a real executable serving real HTTP on the port the supervisor
picked (see ``fake_llama``); nothing in the supervisor is replaced.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider import FakeProvider, Scenario
from labfy_ref.errors import ErrorCode, IllegalTransition, LlamaServerFailed
from labfy_ref.model import LocalModelClient
from labfy_ref.model.child import BoundedLog
from labfy_ref.model.gguf import open_gguf
from labfy_ref.model.supervisor import (
    KEY_FILE,
    LaunchOptions,
    LocalModelSupervisor,
    SupervisorState,
)
from labfy_ref.netutil import RESERVED_PORTS
from qualification.harness import wait_until
from qualification.supervisor.fake_llama import (
    FakeLlama,
    group_exists,
    install_fake,
    running_members,
    until,
)

ALIAS = "fake-llama"
HELLO = [{"role": "user", "content": "hello"}]


def model_file(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"GGUF\x03\x00\x00\x00" + bytes(64))
    return path


def supervisor(fake: FakeLlama, tmp_path: Path, **options: Any) -> LocalModelSupervisor:
    settings = {"start_timeout": 30.0, "model_alias": ALIAS, "ctx_size": 512, "threads": 1,
                "seed": 7, **options}
    return LocalModelSupervisor(fake.binary, open_gguf(model_file(tmp_path)),
                                LaunchOptions(**settings), log_dir=tmp_path / "logs")


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.req("SM-02", "SM-05")
def test_start_waits_for_health_proves_ownership_serves_a_chat_and_stop_leaves_nothing(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", loading_checks=3)
    sup = supervisor(fake, tmp_path)

    async def run() -> tuple[str, dict[str, Any]]:
        try:
            await sup.start()
            assert sup.state is SupervisorState.READY
            facts = {"pid": sup.pid, "port": sup.endpoint.port, "key": sup.api_key,
                     "key_file_kept": (Path(fake.runs()[0]["argv"][
                         fake.runs()[0]["argv"].index("--api-key-file") + 1]).exists())}
            async with LocalModelClient(sup.endpoint, ALIAS, api_key=sup.api_key) as client:
                reply = await client.chat(HELLO)
        finally:
            await sup.stop()
        return reply.content, facts

    content, facts = asyncio.run(run())
    assert content == "fake reply"
    (run_record,) = fake.runs()
    argv = run_record["argv"]
    assert flag(argv, "--host") == "127.0.0.1"
    assert int(flag(argv, "--port")) == facts["port"]
    assert facts["port"] not in RESERVED_PORTS
    assert (flag(argv, "-c"), flag(argv, "-t"), flag(argv, "-np"), flag(argv, "--seed"),
            flag(argv, "--alias")) == ("512", "1", "1", "7", ALIAS)
    assert "--no-webui" in argv
    # The key travels in a 0600 file, read at start and deleted once proven; never in argv.
    assert facts["key"] not in " ".join(argv)
    assert Path(flag(argv, "--api-key-file")).name == KEY_FILE
    assert facts["key_file_kept"] is False
    assert run_record["pid"] == run_record["pgid"] == run_record["sid"] == facts["pid"]
    assert run_record["stdin"] == "/dev/null"
    assert sup.state is SupervisorState.STOPPED
    assert sup.exit_description == "exit code 0"
    assert not group_exists(facts["pid"])
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == ["llama-server.log"]
    assert "server is listening" in sup.log_tail()


@pytest.mark.req("SM-02")
def test_the_child_gets_a_minimal_environment(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # llama-server reads these; none of the user's may change what we launch.
    monkeypatch.setenv("LLAMA_ARG_HOST", "0.0.0.0")
    monkeypatch.setenv("LLAMA_API_KEY", "user-key")
    monkeypatch.setenv("LLAMA_ARG_PORT", str(min(RESERVED_PORTS)))
    fake = install_fake(tmp_path / "bin", loading_checks=0)
    sup = supervisor(fake, tmp_path)

    async def run() -> None:
        try:
            await sup.start()
        finally:
            await sup.stop()

    asyncio.run(run())
    env = fake.runs()[0]["env"]
    assert not [name for name in env if name.startswith("LLAMA")]
    assert set(env) <= {"PATH", "LC_ALL", "LC_CTYPE"}  # LC_CTYPE: Python's own coercion


@pytest.mark.req("SM-02", "SM-05")
def test_a_build_without_api_key_file_gets_a_fresh_key_per_start_and_no_ui_flag(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", help_style="minimal", loading_checks=0)

    async def start_and_stop(sup: LocalModelSupervisor) -> str:
        try:
            await sup.start()
            return sup.api_key
        finally:
            await sup.stop()

    keys = [asyncio.run(start_and_stop(supervisor(fake, tmp_path / str(n)))) for n in range(2)]
    first, second = (run["argv"] for run in fake.runs())
    assert [flag(first, "--api-key"), flag(second, "--api-key")] == keys
    assert keys[0] != keys[1]
    assert len(keys[0]) >= 40
    assert not {"--no-webui", "--no-ui", "--api-key-file"} & set(first)


@pytest.mark.req("SM-05")
def test_a_child_that_exits_before_ready_is_llama_server_exited_with_its_log(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="exit", exit_code=3)
    sup = supervisor(fake, tmp_path)
    with pytest.raises(LlamaServerFailed) as caught:
        asyncio.run(sup.start())
    assert caught.value.code is ErrorCode.LLAMA_SERVER_EXITED
    assert caught.value.message.startswith("llama-server exited before ready (exit code 3); log:")
    assert "failed to load model (fake)" in caught.value.message
    assert "\n" not in caught.value.message
    assert sup.state is SupervisorState.EXITED
    assert sup.exit_description == "exit code 3"
    assert not group_exists(fake.runs()[0]["pid"])


@pytest.mark.req("SM-05")
def test_a_server_answering_without_the_key_is_not_ours_and_is_stopped(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="ignore_key", loading_checks=0)
    sup = supervisor(fake, tmp_path)
    with pytest.raises(LlamaServerFailed) as caught:
        asyncio.run(sup.start())
    assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_OURS
    assert "answered /v1/models with 200 without the key" in caught.value.message
    assert not group_exists(fake.runs()[0]["pid"])


@pytest.mark.req("SM-05")
def test_a_port_served_by_another_process_is_not_ours_and_never_receives_the_key(
        tmp_path: Path) -> None:
    # The impostor holds our port and would accept our key: only the listener's
    # owner gives it away, and the key must not have been sent before that.
    fake = install_fake(tmp_path / "bin", mode="impostor")
    sup = supervisor(fake, tmp_path)
    try:
        with pytest.raises(LlamaServerFailed) as caught:
            asyncio.run(sup.start())
        assert caught.value.code is ErrorCode.LLAMA_SERVER_NOT_OURS
        assert "held by a process that is not our child" in caught.value.message
        port = sup.endpoint.port
        log = httpx.get(f"http://127.0.0.1:{port}/_fake/requests", trust_env=False).json()
        assert log["requests"], "the impostor answered /health"
        sent = [dict(map(tuple, r["headers"])) for r in log["requests"]]
        assert not [h for h in sent if "Authorization" in h]
    finally:
        impostor = fake.runs()[0]["impostor"]
        os.kill(impostor, signal.SIGTERM)
        wait_until(lambda: not running_members(impostor), timeout=10)
    assert not group_exists(fake.runs()[0]["pid"])


@pytest.mark.req("SM-05")
def test_a_server_never_healthy_is_a_start_timeout(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="never_healthy")
    sup = supervisor(fake, tmp_path, start_timeout=1.5)
    with pytest.raises(LlamaServerFailed) as caught:
        asyncio.run(sup.start())
    assert caught.value.code is ErrorCode.LLAMA_SERVER_START_TIMEOUT
    assert caught.value.message.startswith("llama-server not ready within 1.5 s")
    assert not group_exists(fake.runs()[0]["pid"])
    assert sup.exit_description == "signal SIGKILL"


@pytest.mark.req("SM-02")
def test_stop_escalates_to_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="stubborn", loading_checks=0)
    sup = supervisor(fake, tmp_path)

    async def run() -> None:
        await sup.start()
        await sup.stop(grace=0.5)

    asyncio.run(run())
    assert sup.exit_description == "signal SIGKILL"
    assert not group_exists(fake.runs()[0]["pid"])


@pytest.mark.req("SM-02")
def test_stop_leaves_no_process_of_the_group_even_a_grandchild_ignoring_sigterm(
        tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="grandchild", loading_checks=0)
    sup = supervisor(fake, tmp_path)

    async def run() -> None:
        await sup.start()
        assert running_members(fake.runs()[0]["pgid"]) != []
        await sup.stop(grace=2.0)

    asyncio.run(run())
    pgid = fake.runs()[0]["pgid"]
    assert running_members(pgid) == []
    wait_until(lambda: not group_exists(pgid), timeout=15)  # zombies left for init to reap


@pytest.mark.req("SM-02")
def test_a_child_dying_after_ready_is_reported_and_its_group_killed(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="grandchild", loading_checks=0)
    sup = supervisor(fake, tmp_path)

    async def run() -> str:
        try:
            await sup.start()
            assert sup.pid is not None
            os.kill(sup.pid, signal.SIGKILL)  # our own child, as a crash would end it
            async with asyncio.timeout(15):
                return await sup.wait_exited()
        finally:
            state = sup.state
            await sup.stop()
            assert state is SupervisorState.EXITED

    assert asyncio.run(run()) == "signal SIGKILL"
    pgid = fake.runs()[0]["pgid"]
    assert running_members(pgid) == []
    wait_until(lambda: not group_exists(pgid), timeout=15)


@pytest.mark.req("SM-02")
def test_stop_is_idempotent_and_a_supervisor_starts_once(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", loading_checks=0)
    sup = supervisor(fake, tmp_path)

    async def run() -> None:
        await sup.stop()  # before start: nothing to do
        await sup.start()
        await asyncio.gather(sup.stop(), sup.stop())
        await sup.stop()
        with pytest.raises(IllegalTransition):
            await sup.start()

    asyncio.run(run())
    assert len(fake.runs()) == 1
    assert sup.state is SupervisorState.STOPPED


@pytest.mark.req("SM-02")
def test_cancelling_a_start_leaves_no_process(tmp_path: Path) -> None:
    fake = install_fake(tmp_path / "bin", mode="never_healthy")
    sup = supervisor(fake, tmp_path, start_timeout=60.0)

    async def run() -> None:
        task = asyncio.create_task(sup.start())
        await until(lambda: bool(fake.runs()), timeout=20)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(run())
    assert not group_exists(fake.runs()[0]["pid"])
    assert list((tmp_path / "logs").glob("llama-run-*")) == []


_PARENT = """
import asyncio, json, sys
from pathlib import Path
from labfy_ref.model.gguf import open_gguf
from labfy_ref.model.supervisor import LaunchOptions, LocalModelSupervisor

async def main() -> None:
    sup = LocalModelSupervisor(Path(sys.argv[1]), open_gguf(Path(sys.argv[2])),
                               LaunchOptions(start_timeout=30), log_dir=Path(sys.argv[3]))
    await sup.start()
    Path(sys.argv[4]).write_text(json.dumps({"pid": sup.pid}))
    await asyncio.Event().wait()

asyncio.run(main())
"""


@pytest.mark.req("SM-02")
def test_the_server_dies_with_a_parent_killed_outright(tmp_path: Path) -> None:
    # SIGKILL gives the parent no chance to stop anything: PR_SET_PDEATHSIG must.
    fake = install_fake(tmp_path / "bin", loading_checks=0)
    ready = tmp_path / "ready.json"
    parent = subprocess.Popen([sys.executable, "-c", _PARENT, str(fake.binary),
                               str(model_file(tmp_path)), str(tmp_path / "logs"), str(ready)])
    try:
        wait_until(lambda: ready.exists() or parent.poll() is not None, timeout=30)
        child = json.loads(ready.read_text())["pid"]
        assert running_members(child) == [child]
    finally:
        parent.kill()
        parent.wait(timeout=10)
    try:
        wait_until(lambda: running_members(child) == [], timeout=10)
    finally:  # a failure here must not leave the orphan running
        if running_members(child):
            os.killpg(child, signal.SIGKILL)


@pytest.mark.req("SM-02")
def test_the_log_is_capped_and_keeps_the_newest_output(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "llama-server.log", 64 * 1024)
    for n in range(20_000):  # ~500 KiB of numbered lines
        log.write(f"line {n:06d} of the child's output\n".encode())
    tail = log.tail(4096).decode()
    log.close()
    files = sorted(tmp_path.iterdir())
    assert [p.name for p in files] == ["llama-server.log", "llama-server.log.1"]
    assert sum(p.stat().st_size for p in files) <= 64 * 1024
    assert tail.endswith("line 019999 of the child's output\n")
    assert "line 000000" not in "".join(p.read_text() for p in files)
    log.write(b"after close\n")  # dropped, never raises
    assert b"after close" not in files[0].read_bytes()
    (tmp_path / "gone").mkdir()
    gone = BoundedLog(tmp_path / "gone" / "x.log", 1024)
    shutil.rmtree(tmp_path / "gone")
    for _ in range(100):  # its folder removed: writes stop, the child's pipe never does
        gone.write(b"x" * 100)
    gone.close()


@pytest.mark.req("SM-05")
def test_the_fake_provider_with_a_key_guards_v1_like_llama_server() -> None:
    with FakeProvider(Scenario.always("hi"), api_key="k-123") as provider:
        url = provider.base_url
        with httpx.Client(trust_env=False) as http:
            assert http.get(f"{url}/health").status_code == 200
            assert http.get(f"{url}/v1/models").status_code == 401
            assert http.get(f"{url}/v1/models",
                            headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert http.get(f"{url}/v1/models",
                            headers={"Authorization": "Bearer k-123"}).status_code == 200
            assert http.post(f"{url}/v1/chat/completions", json={}).status_code == 401
