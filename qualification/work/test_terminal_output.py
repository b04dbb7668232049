"""CLI-03: what the terminal says — tables for a person, JSON for a script, a warning
when the model endpoint does not answer."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from labfy_ref.netutil import free_port
from labfy_ref.work import ENV_VAR
from qualification.harness import ServeProcess, wait_until


def _on_a_terminal(*args: str, cwd: Path) -> str:
    """Run ``labfy-ref ARGS`` with its stdout on a pseudo-terminal; what it printed there."""
    leader, follower = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != ENV_VAR}
    try:
        done = subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", *args],
                              stdout=follower, stderr=subprocess.PIPE, cwd=cwd, env=env,
                              timeout=60, check=False)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal's other end is closed: all was read
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    assert done.returncode == 0, done.stderr
    return b"".join(chunks).decode("utf-8").replace("\r\n", "\n")


@pytest.mark.req("CLI-03", "WK-05")
def test_list_and_show_print_a_table_on_a_terminal_and_json_otherwise(
        run: Any, workspace: Path) -> None:
    db = ("--workspace", str(workspace))
    hostile = "line one\nline two \x1b[31mred\x1b[0m " + "long " * 40
    task = run("work", "submit", *db, "--message", hostile).json()["task"]
    table = _on_a_terminal("work", "list", *db, cwd=workspace)
    header, row = table.splitlines()
    assert header.split() == ["TASK", "STATE", "UPDATED", "MESSAGE"]
    assert row.startswith(task["id"]) and " QUEUED " in row
    assert "\x1b" not in table and "\\x1b[31mred" in row, "a control is spelled, never obeyed"
    assert row.endswith("…") and len(row) < 200, "a long message is cut to its column"
    shown = _on_a_terminal("work", "show", task["id"], *db, cwd=workspace)
    assert shown.splitlines()[0].split() == ["task", task["id"], "QUEUED"]
    assert "RUN" in shown and task["run_id"] in shown and "event(s)" in shown
    as_json = _on_a_terminal("work", "list", "--json", *db, cwd=workspace)
    assert json.loads(as_json)["tasks"][0]["message"] == hostile
    piped = run("work", "list", *db)  # not a terminal: JSON, as scripts read it
    assert piped.json()["tasks"][0]["id"] == task["id"]
    assert json.loads(_on_a_terminal("work", "show", "--json", task["id"], *db,
                                     cwd=workspace))["task"]["id"] == task["id"]


@pytest.mark.req("CLI-03")
def test_serve_warns_once_when_the_model_endpoint_does_not_answer(
        specimen: Path, tmp_path: Path) -> None:
    silent = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    server = ServeProcess("--workspace", str(specimen), "--port", "0", "--agent-mode",
                          "local-model", "--agent-endpoint", silent, "--agent-model", "m",
                          ready_file=tmp_path / "ready.json")
    try:
        ready = server.wait_ready()
        with httpx.Client(base_url=str(ready["url"]), trust_env=False) as http:
            http.post("api/v1/session", json={"token": ready["token"]}).raise_for_status()
            # the server has looked (its answer is cached a few seconds): it said so by now
            wait_until(lambda: http.get("api/v1/agent-runtime/status").json()["available"]
                       is False, timeout=30)
    finally:
        code, out, _ = server.stop()
    assert code == 0
    warnings = [line for line in out.splitlines() if "warning" in line]
    assert warnings == [f"labfy-ref: warning: the model endpoint at {silent} does not answer "
                        "(connection refused or failed); turns end MODEL_UNAVAILABLE until "
                        "it does"], out


@pytest.mark.req("CLI-03")
def test_serve_warns_of_nothing_with_the_demo_agent(
        specimen: Path, tmp_path: Path) -> None:
    server = ServeProcess("--workspace", str(specimen), "--port", "0",
                          ready_file=tmp_path / "ready.json")
    try:
        server.wait_ready()
    finally:
        code, out, _ = server.stop()
    assert code == 0 and "warning" not in out


def _shown(**sections: list[dict[str, Any]]) -> dict[str, Any]:
    """A ``work show`` answer (SPEC §15) with the given runs, approvals and effects."""
    task = {"id": "task_01M8PXTGGGR4JX4HWH1BF5EPDR", "state": "WAITING_APPROVAL",
            "message": "rewrite notes", "final_text": None,
            "created_at": "2026-12-06T10:00:00.000Z", "updated_at": "2026-12-06T10:00:01.000Z"}
    return {"task": task, "runs": sections.get("runs", []),
            "approvals": sections.get("approvals", []), "effects": sections.get("effects", []),
            "events": []}


@pytest.mark.req("CLI-03")
def test_show_prints_each_section_the_task_has_and_no_empty_one() -> None:
    """``work show`` on a terminal: the runs, approvals and effects tables appear exactly
    when the task has some; a worker's name (anyone's text, up to 500 characters) is cut
    to its 40-character column with an ellipsis."""
    from labfy_ref.cli.tables import task_detail  # noqa: PLC0415

    worker = "worker-on-a-host-with-a-very-long-name-" + "x" * 30
    run = {"id": "run_01M8PXTGGBW0ZYKK7MAVZJBRD2", "state": "WAITING_APPROVAL",
           "attempt": 1, "worker": worker}
    approval = {"id": "appr_01M8PXTGGEAB8JYPX9383FHFNY", "decision": None,
                "tool_id": "files.write", "summary": "files.write notes/a.md (3 bytes)"}
    effect = {"id": "eff_01M8PXTGGEAB8JYPX9383FHFNZ", "status": "started",
              "tool_id": "files.write", "arguments": {"path": "notes/a.md"}}
    bare = task_detail(_shown())
    assert not any(head in bare for head in ("RUN ", "APPROVAL ", "EFFECT ")), bare
    full = task_detail(_shown(runs=[run], approvals=[approval], effects=[effect]))
    lines = full.splitlines()
    assert [line.split()[0] for line in lines if line.split()[:1] in (
        ["RUN"], ["APPROVAL"], ["EFFECT"])] == ["RUN", "APPROVAL", "EFFECT"]
    assert f"  {worker[:39]}…" in full and worker[:40] not in full
    assert "files.write notes/a.md (3 bytes)" in full and "notes/a.md" in lines[-3]
