"""EV-01: how ``labfy-ref eval`` turns one task's turn into a table row and a record entry.

The real-model run is a benchmark of the real-model stage; here the parts
around the turn are held to docs/eval.md with the turn itself canned: what
the turn read is judged by title and path, a row says the task's wall time
in seconds, the entry names its variant (an ablation, a candidate rule, or
none) and the closing line its pass rate, and a driven turn is charged only
its own rounds' tokens. The API a driven turn talks to is answered by respx.
"""

from __future__ import annotations

import asyncio
import types
from pathlib import Path
from typing import Any

import httpx
import pytest
import respx

from labfy_ref.config import SupervisedModel
from labfy_ref.eval import run as eval_run
from labfy_ref.eval.record import read_record
from labfy_ref.eval.run import EvalOptions
from labfy_ref.eval.tasks import Task
from labfy_ref.protocol.narrowing import guidance_for
from labfy_ref.server.auth import cookie_name

TITLE = "Species list size"
NOTE = "notes/bees.txt"
TASK = Task(id="species-from-notes", kind="one object + file read",
            message="How many bee species, and what do my notes say?",
            expect={"read_objects": [[TITLE]], "read_files": [[NOTE]],
                    "final_any": [["forty-one", "41"]]},
            files={NOTE: "Ivy bees were seen on the wall."})


def _options(tmp_path: Path, **fields: Any) -> EvalOptions:
    model_file = tmp_path / "tiny.gguf"
    model_file.write_bytes(b"GGUF")
    model = SupervisedModel(llama_server=tmp_path / "no-llama-server", model_file=model_file,
                            model_sha256="a" * 64)
    return EvalOptions(model=model, record_dir=tmp_path / "record", tasks=[TASK], **fields)


def _canned(tool_ids: list[str]) -> Any:
    """A ``_turn`` whose model read the SPECIMEN object by its id and the note by its path."""
    async def turn(task: Task, run: int, model: Any, directory: Path, *,
                   options: EvalOptions, limits: Any) -> tuple[dict[str, Any], None]:
        object_id = next(i for i, title in eval_run._titles(directory).items() if title == TITLE)
        calls: dict[str, dict[str, Any]] = {
            "workspace.list_objects": {"arguments": {}, "result": {"ok": True, "data": {}}},
            "workspace.read_object": {"arguments": {"object_id": object_id}, "result": {
                "ok": True, "data": {"title": TITLE, "body": "Forty-one species."}}},
            "files.read": {"arguments": {"path": NOTE}, "result": {
                "ok": True, "data": {"content": task.files[NOTE]}}},
        }
        return {"state": "COMPLETED", "final_text": "Forty-one species; ivy bees.",
                "rounds": 4, "_tokens": 321,
                "_rounds": [{"ms": 812.5, "prompt_tokens": 300}, {"ms": 95.0,
                                                                  "prompt_tokens": None}],
                "facts": [{"text": "Forty-one", "status": "found"}],
                "tool_calls": [{"tool_id": tool_id, "status": "ok", **calls[tool_id]}
                               for tool_id in tool_ids]}, None
    return turn


def _clock(monkeypatch: pytest.MonkeyPatch, *readings: float) -> None:
    """The eval's monotonic clock reads ``readings`` in turn (the loop's own is untouched)."""
    ticks = iter(readings)
    monkeypatch.setattr(eval_run, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))


@pytest.mark.req("EV-01", "EV-02")
def test_a_task_is_judged_by_the_titles_and_paths_its_turn_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(eval_run, "_turn", _canned(
        ["workspace.list_objects", "workspace.read_object", "files.read"]))
    # the task took a minute, on a monotonic clock that started 20 s before it (its origin
    # is unspecified: boot, for one)
    _clock(monkeypatch, 20.0, 80.0)
    result = asyncio.run(eval_run._run_task(TASK, 1, None, tmp_path, options=_options(tmp_path)))
    assert result["passed"] and result["reasons"] == [], result["reasons"]
    assert [call.get("title") for call in result["tool_calls"]] == [None, TITLE, None]
    assert (result["rounds"], result["tokens"], result["state"]) == (4, 321, "COMPLETED")
    assert result["wall_ms"] == 60000.0, "the task's wall time, in milliseconds"
    assert (result["round_ms"], result["round_prompt_tokens"]) == ([812.5, 95.0], [300, None])
    assert result["facts"] == [{"text": "Forty-one", "status": "found"}]
    assert eval_run._row(result) == (
        "PASS species-from-notes     run 1 rounds  4 calls  3 tokens    321   60.0 s "
        f"[list_objects read_object({TITLE}) read]")


@pytest.mark.req("EV-01")
@pytest.mark.parametrize(("read", "calls", "missing"), [
    (["workspace.list_objects", "files.read"], "list_objects read", f"read none of ['{TITLE}']"),
    (["workspace.list_objects", "workspace.read_object"],
     f"list_objects read_object({TITLE})", f"read none of ['{NOTE}']"),
])
def test_a_task_whose_turn_skipped_a_read_fails_saying_which(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, read: list[str], calls: str,
        missing: str) -> None:
    monkeypatch.setattr(eval_run, "_turn", _canned(read))
    _clock(monkeypatch, 5.0, 6.5)
    result = asyncio.run(eval_run._run_task(TASK, 2, None, tmp_path, options=_options(tmp_path)))
    assert result["reasons"] == [missing] and not result["passed"]
    assert result["wall_ms"] == 1500.0
    assert eval_run._row(result).startswith("FAIL species-from-notes     run 2 ")
    assert eval_run._row(result).endswith(f"    1.5 s [{calls}] — {missing}")


@pytest.mark.req("EV-01")
@pytest.mark.parametrize(("change", "variant"), [
    ({}, None), ({"ablate": "relevance"}, "relevance"), ({"add": ("recap",)}, "+recap"),
    ({"add": ("recap", "quoted")}, "+quoted+recap"),
    ({"guidance": guidance_for("quoting")}, "guidance:quoting"),
    ({"guidance": guidance_for("quoting"), "ablate": "search"}, "guidance:quoting-search"),
    ({"guidance": guidance_for("none"), "add": ("recap",)}, "guidance:none+recap"),
])
def test_the_entry_names_its_variant_and_the_run_closes_with_the_pass_rate(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: dict[str, Any],
        variant: str | None) -> None:
    """No rule changed is the plain entry (null), one switched off is its name, candidates
    switched on are "+NAME"; nothing ran is 0 of 0 (0 %), never a pass."""
    async def nothing(*_: Any, **__: Any) -> None:
        return None

    monkeypatch.setattr(eval_run, "_run_all", nothing)
    said: list[str] = []
    entry = eval_run.run(_options(tmp_path, control=True, **change), said.append)
    assert entry.ablate == variant and entry.agent == "random-control"
    record = read_record(tmp_path / "record")
    assert record is not None and record["entries"][0]["ablate"] == variant
    assert said[-1].startswith("0 of 0 passed (0%) — record: "), said[-1]


@respx.mock
@pytest.mark.req("EV-01")
def test_a_driven_turn_is_charged_only_its_own_rounds_tokens() -> None:
    base = "http://127.0.0.1:43119"
    api = f"{base}/api/v1/agent-runtime"
    respx.post(f"{base}/api/v1/session").mock(return_value=httpx.Response(
        200, json={"csrf_token": "csrf"}, headers={"Set-Cookie": f"{cookie_name(43119)}=s"}))
    respx.post(f"{api}/turns").mock(return_value=httpx.Response(
        202, json={"turn": {"id": "turn_1", "state": "QUEUED"}}))
    respx.get(f"{api}/turns/turn_1").mock(return_value=httpx.Response(
        200, json={"turn": {"id": "turn_1", "state": "COMPLETED", "final_text": "Done."}}))

    def event(turn_id: str, kind: str, prompt: int, completion: int) -> dict[str, Any]:
        return {"turn_id": turn_id, "type": kind,
                "data": {"prompt_tokens": prompt, "completion_tokens": completion}}

    respx.get(f"{api}/events", params={"limit": "500"}).mock(return_value=httpx.Response(
        200, json={"events": [
            event("turn_1", "turn.round", 100, 20), event("turn_0", "turn.round", 1000, 1),
            event("turn_1", "turn.completed", 5000, 5), event("turn_1", "turn.round", 30, 4),
            {"turn_id": "turn_1", "type": "turn.round", "data": {"prompt_tokens": None}}]}))
    turn = asyncio.run(eval_run._drive(base, "code", "How many species?"))
    assert turn["state"] == "COMPLETED" and turn["_tokens"] == 154
