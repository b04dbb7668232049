"""WK-04 in the bench: ``tox -e bench``'s work section, and its exactly-once check's teeth.

The section itself runs at a tiny size (real ``labfy-ref work worker`` processes: one on
SQLite, four on a private PostgreSQL cluster); the check is held against a real store in
which a run was taken over, a model asked twice and a run reported twice.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.work import State, WorkStore
from qualification.bench import work
from qualification.bench.table import render
from qualification.work.conftest import Clock
from qualification.work.postgres import absent_reason

LEASE = 30.0


@pytest.mark.req("WK-04")
def test_the_work_section_runs_every_task_exactly_once_and_rows_its_figures(
        tmp_path: Path) -> None:
    reason = absent_reason()
    if reason is not None:
        pytest.skip(reason)
    rows = work.run(tmp_path, quick=True, tasks=6)
    assert [row.figure for row in rows] == [
        "runs executed exactly once, PostgreSQL x4 / SQLite x1",
        "throughput, PostgreSQL x4 / SQLite x1, 6 runs",
        "claim p50, PostgreSQL x4 / SQLite x1, instant model",
        "claim p99, PostgreSQL x4 / SQLite x1, instant model",
        "runs executed exactly once, latency-bound (166 runs)",
        "throughput, sqlite x4 / x1, model 200 ms per call",
        "throughput, postgresql x4 / x1, model 200 ms per call",
        "throughput, postgresql x4 / x1, model 200 ms per call, one slot",
        "claim p50, PostgreSQL x4 / SQLite x1, model 200 ms per call",
        "claim p99, PostgreSQL x4 / SQLite x1, model 200 ms per call"]
    once, throughput, p50, p99, bound_once, *bound = rows
    assert (once.ours, once.baseline, once.goal) == (6, 6, None)
    # 15 runs per worker at 200 ms (3 s each): 1 + 4 workers per engine, 4 on one slot
    assert (bound_once.ours, bound_once.goal) == ((15 + 60) * 2 + 16, None)
    assert [row.unit for row in rows] == ["count", "runs/s", "ms", "ms", "count",
                                          "runs/s", "runs/s", "runs/s", "ms", "ms"]
    assert [str(row.goal) for row in rows] == [
        "None", "≥ 1", "None", "None", "None", "≥ 3.2", "≥ 3.2", "None", "≤ 3", "≤ 5"]
    for row in [throughput, p50, p99, *bound]:
        assert math.isfinite(row.ours) and row.ours > 0, row
        assert math.isfinite(row.baseline) and row.baseline > 0, row
    assert p50.ours <= p99.ours and p50.baseline <= p99.baseline
    detail = throughput.detail
    postgres, sqlite = detail["postgresql"], detail["sqlite"]
    # four real workers shared the six runs; the first claim of each is not a latency sample
    assert len(postgres["runs_per_worker"]) == 4 and sum(postgres["runs_per_worker"]) == 6
    assert sqlite["runs_per_worker"] == [6]
    assert (postgres["fsync"], postgres["synchronous_commit"]) == ("on", "on")
    assert (sqlite["journal_mode"], sqlite["synchronous"]) == ("wal", "FULL")
    assert postgres["start"] == "lock released" and sqlite["start"] == "first claim"
    assert "[work] throughput, PostgreSQL x4 / SQLite x1, 6 runs" in render(rows)
    scaled = bound[0].detail
    assert scaled["one"]["runs_per_worker"] == [15] and scaled["one"]["latency_s"] == 0.2
    assert sum(scaled["many"]["runs_per_worker"]) == 60
    assert 0 < scaled["many"]["runs_in_window"] <= 60 and scaled["many"]["window_s"] > 0
    assert bound[2].detail["many"]["slots"] == 1


def _run_once(store: WorkStore, nonce: str, worker: str = "w1") -> tuple[str, dict[str, Any]]:
    """A task run once to completion through the store, as a worker runs it; its line."""
    task = store.submit(work.message(nonce)).task
    claim = store.claim(worker, LEASE)
    assert claim is not None and claim.task_id == task.id
    store.finish(claim, State.COMPLETED, final_text=work.answer(nonce))
    return task.id, {"run_id": claim.run_id, "task_id": task.id, "attempt": claim.attempt,
                     "claim_ms": 1.0, "outcome": "COMPLETED", "detail": None}


@pytest.mark.req("WK-04")
def test_exactly_once_fails_on_a_take_over_a_second_request_or_a_run_reported_twice(
        store: WorkStore, clock: Clock) -> None:
    nonces, lines = {}, []
    for nonce in ("a1", "a2", "a3"):
        task_id, line = _run_once(store, nonce)
        nonces[task_id] = nonce
        lines.append(line)
    asked = Counter(nonces.values())
    work.check_exactly_once(store, nonces, lines, asked)  # the clean case passes

    def violation(nonces: dict[str, str], lines: list[dict[str, Any]],
                  asked: Counter[str]) -> str:
        with pytest.raises(work.ExactlyOnceViolated) as raised:
            work.check_exactly_once(store, nonces, lines, asked)
        return str(raised.value)

    # a model request asked twice for one task, or one no task of the run made
    assert "asked the model 2 times" in violation(nonces, lines, asked + Counter(["a2"]))
    assert "1 model requests of no task" in violation(nonces, lines, asked + Counter(["zz9"]))
    # a run reported by two workers, or not at all
    assert "reported 4 runs of 3, 1 more than once" in violation(nonces, [*lines, lines[0]],
                                                                 asked)
    assert "reported 2 runs of 3" in violation(nonces, lines[:2], asked)
    # a run whose lease lapsed and another worker took over: attempt 2, run.taken_over
    task = store.submit(work.message("b1")).task
    assert store.claim("w1", LEASE) is not None
    clock.advance(LEASE + 1)
    taken = store.claim("w2", LEASE)
    assert taken is not None and (taken.task_id, taken.attempt) == (task.id, 2)
    store.finish(taken, State.COMPLETED, final_text=work.answer("b1"))
    found = violation({**nonces, task.id: "b1"},
                      [*lines, {"run_id": taken.run_id, "task_id": task.id, "attempt": 2,
                                "claim_ms": 1.0, "outcome": "COMPLETED", "detail": None}],
                      asked + Counter(["b1"]))
    assert f"task {task.id} has runs [('COMPLETED', 2)]" in found
    assert "'run.taken_over': 1" in found and "not COMPLETED at attempt 1" in found
    # a task that never ran
    left = store.submit(work.message("c1")).task
    assert f"task {left.id} is QUEUED" in violation({**nonces, left.id: "c1"}, lines,
                                                    asked + Counter(["c1"]))


@pytest.mark.req("WK-04")
def test_without_postgresql_the_rows_say_why_and_hold_no_goal() -> None:
    baseline = work.Measured("sqlite", 1, 40, 2.0, [1.0, 2.0, 3.0], {"synchronous": "FULL"})
    rows = work.rows(baseline, None, "PostgreSQL not installed")
    assert [row.goal for row in rows] == [None] * 4
    assert all(row.note == "NOT RUN: PostgreSQL not installed" for row in rows)
    assert all(math.isnan(row.ours) for row in rows)
    assert [row.baseline for row in rows] == [40, 20.0, 2.0, 3.0]
    table = render(rows)
    assert "0 of 0 goals met" in table and "NOT RUN: PostgreSQL not installed" in table
