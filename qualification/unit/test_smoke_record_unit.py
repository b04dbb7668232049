"""SM-03: the smoke record as ``labfy-ref smoke`` fills it, stage by stage (SPEC §15).

Where the smoke stage's own tests read the record a real model left, these build one
by hand: stages pass in order only, PASS needs ``final`` and no reason, timings are
milliseconds of the monotonic clock, and tokens start at zero.
"""

from __future__ import annotations

import types
from collections.abc import Iterator

import pytest

from labfy_ref.smoke import record as smoke_record
from labfy_ref.smoke.record import FAILED, PASSED, STAGES, SmokeRecord


def _record() -> SmokeRecord:
    return SmokeRecord(model={"file": "m.gguf"}, llama_server={}, settings={}, conclude_after=4)


@pytest.mark.req("SM-03")
def test_a_new_record_is_a_fail_that_reached_nothing_with_zero_tokens() -> None:
    document = _record().as_json()
    assert (document["status"], document["reached"], document["reason"]) == (FAILED, None, None)
    assert document["tokens"] == {"prompt": 0, "completion": 0, "cached": 0}
    assert document["turn"] == {"conclude_after": 4}


@pytest.mark.req("SM-03")
def test_only_every_stage_in_order_and_no_reason_is_a_pass() -> None:
    record = _record()
    with pytest.raises(AssertionError, match="stage verify passed before governor"):
        record.passed("verify")
    for stage in STAGES:
        assert record.status == FAILED, f"{record.reached} is not the last stage"
        record.passed(stage)
        assert record.reached == stage
    assert record.status == PASSED
    record.reason = "the answer was not grounded"
    assert record.as_json()["status"] == FAILED


@pytest.mark.req("SM-03")
@pytest.mark.parametrize("reached", STAGES[:-1])
def test_a_record_that_stopped_short_of_final_fails(reached: str) -> None:
    record = _record()
    for stage in STAGES[:STAGES.index(reached) + 1]:
        record.passed(stage)
    assert record.as_json()["status"] == FAILED


@pytest.mark.req("SM-03")
def test_timings_are_milliseconds_of_the_monotonic_clock(
        monkeypatch: pytest.MonkeyPatch) -> None:
    ticks: Iterator[float] = iter([100.25, 102.00004, 103.50037])
    monkeypatch.setattr(smoke_record, "time", types.SimpleNamespace(monotonic=lambda: next(ticks)))
    record = SmokeRecord(model={}, llama_server={}, settings={}, conclude_after=4,
                         _clock=100.0)  # started at 100.0
    with record.timed("verify"):  # 100.25 to 102.00004
        pass
    document = record.as_json()  # now 103.50037
    assert document["timings_ms"] == {"rounds": [], "verify": 1750.0, "total": 3500.4}, \
        "to a tenth of a millisecond"
