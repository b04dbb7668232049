"""What the Work driver, worker and recovery tests share: scripts, workers, and the checks.

Each task's message carries a ``[[kit:KEY:NONCE]]`` marker, so the fake provider answers
it from script KEY with a cursor of its own (one per conversation, whichever worker asks)
and its request log tells which conversation asked what. Scripts:

* ``write2``: write ``notes/NONCE-1.md``, write ``notes/NONCE-2.md``, read the first,
  answer ``done NONCE`` (four model steps, three effects);
* ``write1``: write ``notes/NONCE-1.md``, answer ``done NONCE`` (two steps, one effect);
* ``rewrite``: write ``notes/NONCE-1.md`` twice, other content each time, then answer.

Workers are real ``labfy-ref work worker`` processes; the fake provider is on loopback.
"""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from fake_provider.scenario import Scenario
from fake_provider.server import FakeProvider
from labfy_ref.work import ENV_VAR as WORK_DB_ENV
from labfy_ref.work import DatabaseUrl, EffectStatus, WorkStore
from labfy_ref.work.run.crash import ENV_VAR as CRASH_ENV
from labfy_ref.work.run.effects import AUDIT_EVENT

REPO = Path(__file__).resolve().parents[2]
#: Short leases: a killed worker's run is taken over quickly.
LEASE, HEARTBEAT = 2.0, 0.4
SCRIPTS = {"write2": 2, "write1": 1}


def _call(tool_id: str, **arguments: str) -> dict[str, str]:
    return {"content": json.dumps({"type": "tool_call", "tool_id": tool_id,
                                   "arguments": arguments})}


def script(writes: int, *, delay_final: float = 0.0) -> list[dict[str, Any]]:
    """The keyed answers of a task that writes ``writes`` files (1 or 2)."""
    answers = [_call("files.write", path=f"notes/{{nonce}}-{i}.md", content=f"note {i} {{nonce}}")
               for i in range(1, writes + 1)]
    if writes > 1:
        answers.append(_call("files.read", path="notes/{nonce}-1.md"))
    final: dict[str, Any] = {"content": json.dumps({"type": "final", "text": "done {nonce}"})}
    if delay_final:
        final["delay"] = delay_final
    return [*answers, final]


def rewrite_script() -> list[dict[str, Any]]:
    """Write ``notes/NONCE-1.md``, then write it again with other content, then answer."""
    return [_call("files.write", path="notes/{nonce}-1.md", content="first {nonce}"),
            _call("files.write", path="notes/{nonce}-1.md", content="second {nonce}"),
            {"content": json.dumps({"type": "final", "text": "done {nonce}"})}]


def work_scenario(**extra: list[dict[str, Any]]) -> Scenario:
    """The scripts above (and ``rewrite``), plus any given by name."""
    return Scenario.from_json({"name": "work", "keyed": {
        "write2": script(2), "write1": script(1), "rewrite": rewrite_script(), **extra}})


def message(key: str, nonce: str) -> str:
    """A task message answered from script ``key`` for conversation ``nonce``."""
    return f"[[kit:{key}:{nonce}]] keep a note of this in the workspace"


def steps(key: str) -> int:
    """How many model steps a script's task takes to complete."""
    writes = SCRIPTS[key]
    return writes + (1 if writes > 1 else 0) + 1


def expected_files(key: str, nonce: str) -> dict[str, str]:
    """The files a script's task leaves, relative to ``files/``, with their content."""
    return {f"notes/{nonce}-{i}.md": f"note {i} {nonce}" for i in range(1, SCRIPTS[key] + 1)}


def url_text(url: DatabaseUrl) -> str:
    """The URL as a worker process is given it."""
    return url.url.render_as_string(hide_password=False)


def start_worker(workspace: Path, url: DatabaseUrl, provider: FakeProvider, out: Path, *,
                 mode: str = "workspace-write", crash: str | None = None, once: bool = False,
                 max_runs: int | None = None, lease: float = LEASE,
                 heartbeat: float = HEARTBEAT) -> subprocess.Popen[bytes]:
    """``labfy-ref work worker`` as a process; its stdout (one JSON line per run) goes to
    ``out``, its stderr beside it (``.err``). The database URL is given in
    ``LABFY_WORK_DB``, as a team would (no password on a command line)."""
    argv = [sys.executable, "-m", "labfy_ref.cli.main", "work", "worker",
            "--workspace", str(workspace), "--permission-mode", mode,
            "--agent-mode", "local-model", "--agent-endpoint", provider.base_url,
            "--agent-model", "fake-model", "--agent-timeout", "30",
            "--lease-seconds", str(lease), "--heartbeat-seconds", str(heartbeat)]
    if once:
        argv.append("--once")
    if max_runs is not None:
        argv += ["--max-runs", str(max_runs)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABFY_")}
    env[WORK_DB_ENV] = url_text(url)
    if crash is not None:
        env[CRASH_ENV] = crash
    with out.open("wb") as sink, out.with_suffix(".err").open("wb") as errors:
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=sink, stderr=errors)


def stop(process: subprocess.Popen[bytes], timeout: float = 30) -> int:
    """SIGTERM a worker and wait for it; its exit status."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    return process.wait(timeout=timeout)


def lines(out: Path) -> list[dict[str, Any]]:
    """The run lines a worker printed."""
    return [json.loads(line) for line in out.read_text("utf-8").splitlines() if line.strip()]


def conversation_requests(provider: FakeProvider, nonce: str) -> list[int]:
    """For each chat request of conversation ``nonce``: how many messages it sent.

    Each step of a run sends one more exchange than the step before, so two requests
    with the same count are one step asked twice.
    """
    marker = f":{nonce}]]"
    counts = []
    for request in provider.chat_requests():
        body = request.json()
        sent = body.get("messages", []) if isinstance(body, dict) else []
        if any(marker in str(m.get("content") or "") for m in sent if isinstance(m, dict)):
            counts.append(len(sent))
    return counts


def check_exactly_once(store: WorkStore, task_id: str, key: str, nonce: str,
                       files_dir: Path, provider: FakeProvider) -> None:
    """The task completed; each write happened once (effect row, audit entry, content);
    no model request was asked twice for a step already answered."""
    shown = store.show(task_id)
    assert shown["task"]["state"] == "COMPLETED", shown["task"]
    assert shown["task"]["final_text"] == f"done {nonce}"
    (run,) = shown["runs"]
    writes = [e for e in store.list_effects(run["id"]) if e.tool_id == "files.write"]
    expected = expected_files(key, nonce)
    assert sorted(e.arguments["path"] for e in writes) == sorted(expected)
    assert all(e.status is EffectStatus.COMPLETED for e in writes), writes
    audits = collections.Counter(e.data["effect_id"] for e in store.list_events(task_id)
                                 if e.type == AUDIT_EVENT)
    assert audits == {e.id: 1 for e in writes}, audits
    for path, content in expected.items():
        assert (files_dir / path).read_text("utf-8") == content
    asked = conversation_requests(provider, nonce)
    replies = [store.get_reply(run["id"], step) for step in range(1, steps(key) + 2)]
    assert [r is not None for r in replies] == [True] * steps(key) + [False]
    assert sorted(asked) == sorted(set(asked)), f"a step was asked twice: {asked}"
    assert len(asked) == steps(key), asked
