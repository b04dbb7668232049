"""PR-07: ``--conclude-after`` and the narrowing rules are one value for every surface.

`serve --bridge --conclude-after 2` gave runtime turns 2 and bridge turns the
bridge's own default (4); the smoke had its own 3. Now the server hands its
limits to the bridge's agent loop, the smoke and the eval take the one
default, and the eval's own option refusals come before any model is looked
at (one line, exit 2).
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.config import RawOptions, resolve
from labfy_ref.protocol.narrowing import DEFAULT_CONCLUDE_AFTER
from labfy_ref.server.serve import build_state
from labfy_ref.smoke import SmokeOptions
from labfy_ref.smoke.record import SmokeRecord
from labfy_ref.smoke.run import SmokeFailed, _read_and_prepared
from labfy_ref.workspace import open_workspace
from qualification.eval_cli import eval_refusal


@pytest.mark.req("PR-07", "PR-06")
def test_the_bridge_concludes_after_what_serve_was_told(specimen: Path) -> None:
    config = resolve(RawOptions(workspace=str(specimen), bridge=True, conclude_after="2"), {})
    state = build_state(config, open_workspace(specimen), 0, "code")

    async def loop_limits() -> Any:
        await state.bridge.start()
        try:
            assert state.bridge.host is not None
            return state.bridge.host.service("agent_loop").limits
        finally:
            await state.bridge.stop()

    try:
        limits = asyncio.run(loop_limits())
    finally:
        state.store.close()
        state.work.close()
    assert limits.conclude_after == 2 == state.runtime.limits.conclude_after
    assert limits.narrowing_rules == state.runtime.limits.narrowing_rules


@pytest.mark.req("PR-07", "SM-03")
def test_the_smoke_takes_the_one_default() -> None:
    field = next(f for f in dataclasses.fields(SmokeOptions) if f.name == "conclude_after")
    assert field.default == DEFAULT_CONCLUDE_AFTER


@pytest.mark.req("EV-01")
@pytest.mark.parametrize(("extra", "said"), [
    (["--ablate", "everything"], "--ablate takes a rule of the guided profile"),
    (["--guidance", "everything"], "--guidance takes one of auto, none, guided, quoting"),
    (["--runs", "0"], "--runs takes"), (["--runs", "²"], "--runs takes"),
    (["--task", "no-such-task"], "--task: no task no-such-task"),
    (["--conclude-after", "-1"], "--conclude-after"),
])
def test_eval_refuses_its_own_options_first(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            extra: list[str], said: str) -> None:
    code, err = eval_refusal(tmp_path, capsys, extra)
    assert code == 2
    assert err.startswith("CONFIG_INVALID: ") and said in err and "Traceback" not in err


def _turn(topic: str, read_body: str) -> dict[str, Any]:
    return {"state": "AUTHORIZATION_REQUIRED", "tool_calls": [
        {"tool_id": "workspace.list_objects", "status": "ok", "arguments": {},
         "result": {"ok": True, "data": {"objects": []}}},
        {"tool_id": "workspace.read_object", "status": "ok", "arguments": {"object_id": "o"},
         "result": {"ok": True, "data": {"title": "Open question: early ivy bees",
                                         "body": read_body}}},
        {"tool_id": "research.prepare", "status": "ok",
         "arguments": {"topic": topic, "questions": ["Is it real?"]},
         "result": {"ok": True, "data": {"campaign_id": "c"}}}]}


@pytest.mark.req("SM-03", "PR-07")
@pytest.mark.parametrize(("topic", "passes"), [
    ("Early ivy bee record", True), ("Colletes hederae phenology", True),
    ("1234567890ABCDEFGHIJ", False), ("][", False), ("gardening-1048732695", False),
    ("Bitcoin prices", False),
])
def test_the_smoke_passes_only_a_grounded_research_topic(topic: str, passes: bool) -> None:
    record = SmokeRecord(model={}, llama_server={}, settings={}, conclude_after=4)
    for stage in ("governor", "verify", "start", "turn"):
        record.passed(stage)
    turn = _turn(topic, "Is the early Colletes hederae record a local shift in phenology?")
    if passes:
        _read_and_prepared(record, turn)
        assert record.reached == "prepare" and record.turn["topic"] == topic
    else:
        with pytest.raises(SmokeFailed, match="not grounded"):
            _read_and_prepared(record, turn)


@pytest.mark.req("EV-01")
@pytest.mark.parametrize(("extra", "said"), [
    (["--with", "relevance"], "--with takes a guidance rule the guided profile lacks"),
    (["--with", "quoted", "--with", "quoted"], "--with takes a guidance rule"),
    (["--with", "recap", "--ablate", "relevance"], "one change at a time"),
])
def test_eval_measures_one_change_at_a_time(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            extra: list[str], said: str) -> None:
    code, err = eval_refusal(tmp_path, capsys, extra)
    assert code == 2 and said in err


@pytest.mark.req("SM-03", "PR-07")
def test_a_tool_id_copied_as_a_topic_is_no_grounding() -> None:
    """Gemma's "research. prepare": its words are the system prompt's, not the workspace's."""
    record = SmokeRecord(model={}, llama_server={}, settings={}, conclude_after=4)
    for stage in ("governor", "verify", "start", "turn"):
        record.passed(stage)
    turn = _turn("research. prepare", "Is the early Colletes hederae record a local shift?")
    turn["tool_calls"][-1]["arguments"]["questions"] = ["early ivy bee records"]
    with pytest.raises(SmokeFailed, match="not grounded"):
        _read_and_prepared(record, turn)
