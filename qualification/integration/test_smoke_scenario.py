"""SM-03: the smoke's scenario, driven through a real server by a scripted model.

The smoke stage proves a real model; these prove the smoke itself — what it asks of
the server and when it says PASS or FAIL — with the fake provider answering as a
model that reads the ivy bee note, prepares grounded research, is granted, and
answers. ``_scenario`` is the smoke's own code, run against a real workspace server.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from fake_provider import Answer, Scenario
from labfy_ref.smoke.record import FAILED, PASSED, SmokeRecord
from labfy_ref.smoke.run import SmokeFailed, _scenario
from qualification.conftest import ProviderFactory, ServerFactory, local_agent
from qualification.harness import LAUNCH_CODE

FINAL = "The early ivy bee record needs a second record and a photo."


def _call(tool_id: str, **arguments: Any) -> Answer:
    return Answer(content=json.dumps({"type": "tool_call", "tool_id": tool_id,
                                      "arguments": arguments}))


def _smoke(specimen: Path, provider_factory: ProviderFactory, server_factory: ServerFactory,
           final: Answer) -> tuple[SmokeRecord, list[str], Any]:
    """Run the smoke's scenario; a failure is the record's reason (as ``run_smoke`` keeps)."""
    provider = provider_factory(Scenario("idle", (Answer(content="{}"),)))
    server = server_factory(specimen, **local_agent(provider.base_url))
    objects = server.client().get("/api/v1/objects").json()["objects"]
    note = next(o["object_id"] for o in objects if o["title"] == "Open question: early ivy bees")
    provider.set_scenario(Scenario("smoke", (
        _call("workspace.list_objects", kind="note"),
        _call("workspace.read_object", object_id=note),
        _call("research.prepare", topic="Early ivy bees",
              questions=["Is the early Colletes hederae record a phenology shift?"]),
        final), when_exhausted="repeat_last"))
    record = SmokeRecord(model={}, llama_server={}, settings={}, conclude_after=4)
    for stage in ("governor", "verify", "start"):  # the model's stages, not this test's
        record.passed(stage)
    said: list[str] = []
    try:
        asyncio.run(_scenario(server.url, LAUNCH_CODE, record, said.append))
    except SmokeFailed as exc:
        record.reason = str(exc)
    return record, said, provider


@pytest.mark.req("SM-03")
def test_a_model_that_reads_prepares_is_granted_and_answers_grounded_passes(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    record, said, provider = _smoke(specimen, provider_factory, server_factory,
                                    Answer(content=json.dumps({"type": "final", "text": FINAL})))
    assert (record.status, record.reached, record.reason) == (PASSED, "final", None)
    assert record.turn["topic"] == "Early ivy bees"
    assert record.turn["final_text"] == FINAL
    assert [c["tool_id"] for c in record.turn["tool_calls"]][:3] == [
        "workspace.list_objects", "workspace.read_object", "research.prepare"]
    assert record.turn["states"][:2] == ["QUEUED", "RUNNING"]
    assert "AUTHORIZATION_REQUIRED" in record.turn["states"]
    assert record.turn["states"][-1] == "COMPLETED"
    rounds = record.turn["rounds"]
    assert len(record.timings_ms["rounds"]) == len(rounds) == len(provider.chat_requests())
    reported = provider.reported
    assert record.tokens["prompt"] == sum(r["prompt_tokens"] for r in reported)
    assert record.tokens["completion"] == sum(r["completion_tokens"] for r in reported)
    later_prompt = sum(r["prompt_tokens"] for r in reported[1:])
    later_cached = sum(r["prompt_tokens_details"]["cached_tokens"] for r in reported[1:])
    assert record.tokens["cached_share_after_round_1"] == round(later_cached / later_prompt, 3)
    assert any(line.startswith("grant: ") for line in said)
    assert said[-1] == f"final: {FINAL!r}"


@pytest.mark.req("SM-03")
def test_a_resumed_turn_that_does_not_complete_fails_at_the_campaign_it_reached(
        specimen: Path, provider_factory: ProviderFactory,
        server_factory: ServerFactory) -> None:
    record, _, _ = _smoke(specimen, provider_factory, server_factory,
                          Answer(content="not an action"))
    assert (record.as_json()["status"], record.reached) == (FAILED, "campaign")
    assert record.reason is not None
    ended = record.turn["states"][-1]
    assert ended != "COMPLETED"
    assert record.reason.startswith(f"the resumed turn ended {ended} "), record.reason
