"""The Work shapes SPEC §15 pins, and a task holding one of every record, for the interface
tests (``labfy-ref work ...`` and ``/api/v1/work/*``) on both engines."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from labfy_ref.ids import id_pattern
from labfy_ref.work import DatabaseUrl, WorkStore
from labfy_ref.workspace.layout import open_workspace

TASK_KEYS = {"id", "state", "message", "final_text", "created_at", "updated_at"}
RUN_KEYS = {"id", "state", "attempt", "worker", "lease_expires_at"}
EVENT_KEYS = {"seq", "type", "data", "at"}
EFFECT_KEYS = {"id", "run_id", "step", "tool_id", "arguments", "status", "result"}
APPROVAL_KEYS = {"id", "run_id", "tool_id", "summary", "decision"}
WORK_KEYS = {"task", "runs", "events", "effects", "approvals"}
ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
WORKER = "worker-a"
ARGUMENTS = {"path": "notes.md", "content": "first line\n"}
SUMMARY = "write notes.md (11 characters)"


#: The workspace of the store tests that need none on disk (WK-11: a store is one
#: workspace's); a manifest's id looks the same.
STORE_WORKSPACE = "ws_01JWS0RE7E575000000000000W"


def open_for(url: DatabaseUrl, workspace: Path, **options: Any) -> WorkStore:
    """The store of ``workspace``'s tasks on ``url`` (its manifest's ``workspace_id``)."""
    return WorkStore.open(url, workspace_id=open_workspace(workspace).workspace_id, **options)


def full_url(url: DatabaseUrl) -> str:
    """The URL as a user would type it (the password, if any, in clear)."""
    return url.url.render_as_string(hide_password=False)


@dataclasses.dataclass(frozen=True)
class Populated:
    """The ids of a task parked for an approval, with a stored reply and a completed effect."""

    task_id: str
    run_id: str
    effect_id: str
    approval_id: str


def populate(store: WorkStore, message: str = "write the notes") -> Populated:
    """A task whose run was claimed, got a model reply, wrote a file (effect completed) and
    then asked for an approval (the task is ``WAITING_APPROVAL``)."""
    submitted = store.submit(message)
    claim = store.claim(WORKER, 600)
    assert claim is not None and claim.run_id == submitted.run.id
    store.record_reply(claim, 1, {"messages": [{"role": "user", "content": message}]},
                       {"content": "writing"})
    effect = store.begin_effect(claim, 1, 0, "files.write", ARGUMENTS)
    store.complete_effect(claim, effect.id, {"ok": True, "data": {"bytes": 11}})
    approval = store.request_approval(claim, 2, 0, "files.write", SUMMARY)
    return Populated(submitted.task.id, submitted.run.id, effect.id, approval.id)


def check_work_shape(work: dict[str, Any], populated: Populated, message: str) -> None:
    """``work`` is exactly SPEC §15's Work shape, with the values :func:`populate` stored."""
    assert set(work) == WORK_KEYS
    task = work["task"]
    assert set(task) == TASK_KEYS
    assert (task["id"], task["state"], task["message"], task["final_text"]) == (
        populated.task_id, "WAITING_APPROVAL", message, None)
    assert ISO.fullmatch(task["created_at"]) and ISO.fullmatch(task["updated_at"])
    [run] = work["runs"]
    assert set(run) == RUN_KEYS
    # parked for the approval: released, so no worker and no lease
    assert run == {"id": populated.run_id, "state": "WAITING_APPROVAL", "attempt": 1,
                   "worker": None, "lease_expires_at": None}
    assert all(set(event) == EVENT_KEYS and ISO.fullmatch(event["at"])
               for event in work["events"])
    assert [event["seq"] for event in work["events"]] == list(range(1, len(work["events"]) + 1))
    assert [event["type"] for event in work["events"]] == [
        "task.submitted", "run.claimed", "approval.requested"]
    assert work["events"][2]["data"] == {"approval_id": populated.approval_id,
                                         "tool_id": "files.write", "summary": SUMMARY}
    assert work["effects"] == [{"id": populated.effect_id, "run_id": populated.run_id,
                                "step": 1, "tool_id": "files.write", "arguments": ARGUMENTS,
                                "status": "completed",
                                "result": {"ok": True, "data": {"bytes": 11}}}]
    # SPEC §15 pins these keys; ``arguments`` (what the call would run) may be added
    pinned = [{k: v for k, v in approval.items() if k != "arguments"}
              for approval in work["approvals"]]
    assert pinned == [{"id": populated.approval_id, "run_id": populated.run_id,
                       "tool_id": "files.write", "summary": SUMMARY, "decision": "pending"}]
    assert all(isinstance(approval.get("arguments"), dict | None)
               for approval in work["approvals"])
    assert id_pattern("task").fullmatch(task["id"]) and id_pattern("eff").fullmatch(
        populated.effect_id) and id_pattern("appr").fullmatch(populated.approval_id)


def run_worker_once(workspace: Path, url: DatabaseUrl, endpoint: str, *,
                    mode: str = "read-only") -> dict[str, Any]:
    """``labfy-ref work worker --once`` as a real process with a local-model agent at
    ``endpoint``; the one run line it printed."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABFY_")}
    done = subprocess.run(
        [sys.executable, "-m", "labfy_ref.cli.main", "work", "worker", "--workspace",
         str(workspace), "--work-db", full_url(url), "--once", "--permission-mode", mode,
         "--agent-mode", "local-model", "--agent-endpoint", endpoint, "--agent-model",
         "fake-model", "--lease-seconds", "10", "--heartbeat-seconds", "1"],
        capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    [line] = done.stdout.splitlines()
    ran: dict[str, Any] = json.loads(line)
    return ran


@dataclasses.dataclass(frozen=True)
class Done:
    """One command's exit code and output."""

    code: int
    out: str
    err: str

    def json(self) -> Any:
        """The one JSON line it printed."""
        assert self.code == 0, self.err
        assert self.err == "" and self.out.count("\n") == 1, (self.out, self.err)
        return json.loads(self.out)

    def refused(self, code: str, *, exit_code: int = 2) -> str:
        """Its one stderr line, checked to start with ``code``; nothing on stdout."""
        assert self.code == exit_code, (self.code, self.out, self.err)
        assert self.out == "" and self.err.count("\n") == 1, (self.out, self.err)
        assert self.err.startswith(f"{code}: ") and "Traceback" not in self.err, self.err
        return self.err.rstrip("\n")
