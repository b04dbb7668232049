"""SV-13, RT-09, BR-05: stop means stop — a signal cancels every turn and ends every stream.

``serve`` used to wait for every open stream after SIGTERM: a runtime turn wrote its file
seconds after the signal, and a bridge turn waiting on an approval kept the server alive
for up to the approval timeout. Now the first signal cancels every turn (no effect after
it), ends every NDJSON stream with its interruption chunk and every OpenAI stream, releases
the host, and the process exits within ``--shutdown-grace``; a second signal exits at once.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider import Answer, Scenario
from qualification.conftest import ProviderFactory
from qualification.harness import ApiClient, ServeProcess, TurnReader, wait_until

WRITE = json.dumps({"type": "tool_call", "tool_id": "files.write",
                    "arguments": {"path": "after-signal.txt", "content": "too late"}})
FINAL = json.dumps({"type": "final", "text": "done " * 400})


def _serve(specimen: Path, tmp_path: Path, provider_url: str, *extra: str) -> ServeProcess:
    return ServeProcess("--workspace", str(specimen), "--bridge", "--agent-mode",
                        "local-model", "--agent-endpoint", provider_url, "--agent-model",
                        "fake-model", *extra, ready_file=tmp_path / "ready.json")


def _client(ready: dict[str, Any]) -> ApiClient:
    client = ApiClient(str(ready["url"]).rstrip("/"))
    assert client.login(str(ready["token"])).status_code == 200
    return client


def _stopped_after(server: ServeProcess, sig: int = signal.SIGTERM) -> float:
    """Send ``sig``; seconds until the process exited (it must, within 30 s)."""
    sent = time.monotonic()
    server.process.send_signal(sig)
    server.process.wait(timeout=30)
    took = time.monotonic() - sent
    server.stop()  # its output read, its pipes closed
    print(f"signal {signal.Signals(sig).name} to exit: {took:.2f} s")  # the closing note's
    return took


class _Sse:
    """One OpenAI streamed completion read in a thread: its lines, and how it ended."""

    def __init__(self, ready: dict[str, Any]) -> None:
        self.lines: list[str] = []
        self.error: Exception | None = None
        self._ready = ready
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        body = {"model": "engine:local:fake-model", "stream": True,
                "messages": [{"role": "user", "content": "a long one, please"}]}
        try:
            with httpx.Client(trust_env=False, timeout=30) as http, http.stream(
                    "POST", f"{self._ready['url']}api/cordis/v1/chat/completions", json=body,
                    headers={"Authorization": f"Bearer {self._ready['token']}"}) as reply:
                for line in reply.iter_lines():
                    self.lines.append(line)
        except httpx.HTTPError as exc:
            self.error = exc


@pytest.mark.req("SV-13", "RT-09", "RT-05")
def test_a_signal_cancels_a_runtime_turn_and_nothing_is_written_after_it(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario("slow-write", (
        Answer(content=WRITE), Answer(content=WRITE, delay=3), Answer(content=FINAL))))
    server = _serve(specimen, tmp_path, provider.base_url, "--permission-mode",
                    "workspace-write")
    ready = server.wait_ready()
    client = _client(ready)
    # a bridge stream is open, waiting for its human: the server used to wait for it ...
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    waiting = TurnReader(client, session_id, "write a file")
    waiting.wait_for("approval-request")
    # ... while a runtime turn went on and wrote its file after the signal
    turn = client.start_turn("write it")
    wait_until(lambda: len(provider.chat_requests()) == 2, timeout=15)  # the model is asked
    took = _stopped_after(server)
    waiting.join(timeout=10)
    client.close()
    assert server.process.returncode == 0
    assert took < 3, f"the server waited {took:.1f} s for a turn it should have cancelled"
    time.sleep(3.5)  # past the moment the model's reply (a write) would have come
    assert not (specimen / "files" / "after-signal.txt").exists(), "no effect after the signal"
    assert turn["id"]


@pytest.mark.req("SV-13", "BR-05", "BR-12")
def test_a_signal_ends_an_approval_wait_and_open_streams_within_the_grace(
        specimen: Path, tmp_path: Path, provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario("held", (
        Answer(content=WRITE), Answer(content=FINAL, chunk_chars=4, chunk_delay=0.05),
        Answer(content=FINAL, chunk_chars=4, chunk_delay=0.05)), when_exhausted="repeat_last"))
    server = _serve(specimen, tmp_path, provider.base_url, "--approval-timeout", "300",
                    "--shutdown-grace", "4")
    ready = server.wait_ready()
    client = _client(ready)
    session_id = client.post("/api/cordis/sessions", {}).json()["session"]["id"]
    waiting = TurnReader(client, session_id, "write a file")
    waiting.wait_for("approval-request")  # a bridge turn waiting for its human
    sse = _Sse(ready)
    wait_until(lambda: len(sse.lines) > 3, timeout=15)  # an OpenAI stream under way
    took = _stopped_after(server)
    assert server.process.returncode == 0
    assert took < 4, f"{took:.1f} s: the approval wait (300 s) or a stream held the server"
    chunks = waiting.join(timeout=10)
    assert chunks[-1]["type"] == "done" and chunks[-1]["interrupted"] is True, chunks[-3:]
    sse.thread.join(timeout=10)
    assert not sse.thread.is_alive()
    assert sse.error is None and [line for line in sse.lines if line][-1] == "data: [DONE]"
    assert not (specimen / "files" / "after-signal.txt").exists()
    client.close()


@pytest.mark.req("SV-13")
def test_a_second_signal_exits_at_once(specimen: Path, tmp_path: Path,
                                       provider_factory: ProviderFactory) -> None:
    provider = provider_factory(Scenario("slow", (Answer(content=FINAL),)))
    server = _serve(specimen, tmp_path, provider.base_url, "--shutdown-grace", "30")
    ready = server.wait_ready()
    # a connection that never finishes its request holds the graceful wait open
    held = httpx.Client(base_url=str(ready["url"]), trust_env=False, timeout=60)
    stalled = threading.Thread(target=lambda: _stall(held), daemon=True)
    stalled.start()
    time.sleep(0.5)
    server.process.send_signal(signal.SIGTERM)
    time.sleep(1)
    assert server.process.poll() is None, "the grace holds while a connection is open"
    # a second SIGTERM (uvicorn alone forces only on a second Ctrl-C)
    took = _stopped_after(server, signal.SIGTERM)
    held.close()
    assert took < 5, f"a second signal took {took:.1f} s"


def _stall(http: httpx.Client) -> None:
    def slow_body() -> Any:
        yield b'{"token": "'
        time.sleep(20)
        yield b'x"}'

    with contextlib.suppress(httpx.HTTPError):
        http.post("/api/v1/session", content=slow_body(),
                  headers={"Content-Type": "application/json"})
