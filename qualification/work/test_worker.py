"""WK-04, WK-05: worker processes on one database — shared runs, SIGTERM, cancel, options.

Workers are real ``labfy-ref work worker`` processes on SQLite and on PostgreSQL, with a
fake provider on loopback; the option checks call the command's body in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import functools
import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from fake_provider.server import FakeProvider
from labfy_ref.cli.work import run_worker_command
from labfy_ref.config import ENV_AGENT_ENDPOINT, ENV_AGENT_MODE, ENV_AGENT_MODEL
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.work import DatabaseUrl, State, WorkStore
from labfy_ref.work.run.crash import ENV_VAR as CRASH_ENV
from qualification.conftest import ProviderFactory
from qualification.harness import wait_until
from qualification.work.wire import open_for
from qualification.work.workers import (
    check_exactly_once,
    conversation_requests,
    lines,
    message,
    script,
    start_worker,
    stop,
    work_scenario,
)

RUNS = 10


@pytest.fixture
def store(work_url: DatabaseUrl, specimen: Path) -> Iterator[WorkStore]:
    """The test's view of the Work database (workers open their own)."""
    opened = open_for(work_url, specimen)
    yield opened
    opened.close()


@pytest.fixture
def provider(provider_factory: ProviderFactory) -> FakeProvider:
    """The Work scripts, and ``slow``: a write, then an answer that takes a minute, then
    the answer a second request for that step gets at once."""
    slow = script(1, delay_final=60)
    return provider_factory(work_scenario(slow=[*slow, slow[-1] | {"delay": 0}]))


def finished(store: WorkStore, task_ids: list[str]) -> bool:
    """Has every task finished?"""
    return all(store.get_task(task_id).state.finished for task_id in task_ids)


@pytest.mark.req("WK-04")
def test_two_worker_processes_share_the_runs_and_each_runs_once(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path) -> None:
    """Ten tasks, two workers: every run claimed once, completed once, its writes done once."""
    tasks = [store.submit(message("write2", f"s{i}")).task.id for i in range(RUNS)]
    outs = [tmp_path / f"worker-{i}.out" for i in range(2)]
    workers = [start_worker(specimen, work_url, provider, out, lease=30, heartbeat=5)
               for out in outs]
    try:
        wait_until(lambda: finished(store, tasks), timeout=120)
    finally:
        codes = [stop(worker) for worker in workers]
    assert codes == [0, 0], [out.with_suffix(".err").read_text() for out in outs]
    printed = [line for out in outs for line in lines(out)]
    assert collections.Counter(line["task_id"] for line in printed) == dict.fromkeys(tasks, 1)
    assert {(line["attempt"], line["outcome"]) for line in printed} == {(1, "COMPLETED")}
    for i, task_id in enumerate(tasks):
        check_exactly_once(store, task_id, "write2", f"s{i}", specimen / "files", provider)
        claims = [e for e in store.list_events(task_id) if e.type.startswith("run.")]
        assert [e.type for e in claims] == ["run.claimed", "run.finished"]


def waiting_for_model(store: WorkStore, task_id: str, provider: FakeProvider,
                      nonce: str) -> bool:
    """Is the slow task's worker waiting for step 2 (its write done, the request sent)?"""
    return any(e.type == "effect.completed" for e in store.list_events(task_id)) \
        and conversation_requests(provider, nonce) == [2, 4]


@pytest.mark.req("WK-04", "WK-05")
def test_sigterm_releases_the_run_in_hand_and_another_worker_finishes_it(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path) -> None:
    """SIGTERM while the model is asked: exit 0, the run QUEUED again (not lost), its
    answered step and completed write kept; the next worker goes on from there."""
    task_id = store.submit(message("slow", "t1")).task.id
    first = start_worker(specimen, work_url, provider, tmp_path / "first.out")
    wait_until(lambda: waiting_for_model(store, task_id, provider, "t1"), timeout=60)
    assert stop(first, timeout=15) == 0
    (line,) = lines(tmp_path / "first.out")
    assert (line["outcome"], line["attempt"]) == ("RELEASED", 1)
    (run,) = store.list_runs(task_id)
    assert (run.state, run.worker, run.lease_expires_at) == (State.QUEUED, None, None)
    assert [e.type for e in store.list_events(task_id)][-1] == "run.released"
    second = start_worker(specimen, work_url, provider, tmp_path / "second.out", once=True)
    assert second.wait(timeout=60) == 0
    (line,) = lines(tmp_path / "second.out")
    assert (line["outcome"], line["attempt"]) == ("COMPLETED", 2)
    assert store.get_task(task_id).final_text == "done t1"
    (write,) = store.list_effects(run.id)[:1]
    assert write.attempt == 1
    assert [e.type for e in store.list_events(task_id)].count("files.write.audit") == 1
    # step 1 was answered once; step 2, never answered before SIGTERM, was asked again
    assert sorted(conversation_requests(provider, "t1")) == [2, 4, 4]


@pytest.mark.req("WK-04", "WK-05")
def test_a_cancelled_task_stops_its_run_and_nothing_more_happens(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path) -> None:
    """Cancelled while its model is asked: the heartbeat finds the run fenced off, the
    drive stops at once (not after the minute the answer takes), nothing more is written."""
    task_id = store.submit(message("slow", "u1")).task.id
    worker = start_worker(specimen, work_url, provider, tmp_path / "w.out", once=True,
                          lease=5, heartbeat=0.3)
    try:
        wait_until(lambda: waiting_for_model(store, task_id, provider, "u1"), timeout=60)
        store.cancel(task_id)
        assert worker.wait(timeout=20) == 0
    finally:
        stop(worker)
    (line,) = lines(tmp_path / "w.out")
    assert line["outcome"] == "LOST"
    assert store.get_task(task_id).state is State.CANCELLED
    (run,) = store.list_runs(task_id)
    assert run.state is State.CANCELLED
    assert len(store.list_messages(run.id)) == 3  # the task, step 1's answer, its result
    assert store.get_reply(run.id, 2) is None
    assert [e.type for e in store.list_events(task_id)][-1] == "task.cancelled"


def options(workspace: Path, **values: Any) -> argparse.Namespace:
    """A worker's options with ``values`` changed."""
    base = {"workspace": str(workspace), "work_db": None, "once": True, "max_runs": None,
            "permission_mode": None, "agent_mode": None, "agent_endpoint": None,
            "agent_model": None, "agent_timeout": None, "lease_seconds": None,
            "heartbeat_seconds": None}
    return argparse.Namespace(**(base | values))


@pytest.mark.req("WK-05")
@pytest.mark.parametrize(("values", "environ", "code", "says"), [
    ({"heartbeat_seconds": "5", "lease_seconds": "5"}, {}, ErrorCode.CONFIG_INVALID,
     "--heartbeat-seconds must be shorter than --lease-seconds"),
    ({"lease_seconds": "0"}, {}, ErrorCode.CONFIG_INVALID, "--lease-seconds must be > 0"),
    ({"lease_seconds": "nan"}, {}, ErrorCode.CONFIG_INVALID, "--lease-seconds must be > 0"),
    ({"heartbeat_seconds": "soon"}, {}, ErrorCode.CONFIG_INVALID,
     "--heartbeat-seconds must be a number"),
    ({"max_runs": "0"}, {}, ErrorCode.CONFIG_INVALID, "--max-runs must be at least 1"),
    ({"max_runs": "two"}, {}, ErrorCode.CONFIG_INVALID, "--max-runs must be a whole number"),
    ({"permission_mode": "write"}, {}, ErrorCode.CONFIG_INVALID,
     "--permission-mode must be 'read-only' or 'workspace-write'"),
    ({"agent_mode": "local-model"}, {}, ErrorCode.CONFIG_INVALID,
     "--agent-mode local-model needs --agent-model"),
    ({}, {ENV_AGENT_MODE: "cloud"}, ErrorCode.CONFIG_INVALID, "--agent-mode must be"),
    ({"agent_mode": "local-model", "agent_model": "m",
      "agent_endpoint": "http://example.com:1"}, {}, ErrorCode.ENDPOINT_REFUSED, ""),
    ({"work_db": "mysql://db/work"}, {}, ErrorCode.WORK_DB_INVALID, ""),
    ({}, {"LABFY_WORK_DB": "mysql://db/work"}, ErrorCode.WORK_DB_INVALID, ""),
    ({}, {CRASH_ENV: "somewhere:1"}, ErrorCode.CONFIG_INVALID, CRASH_ENV),
])
def test_worker_options_are_refused_with_a_code_before_any_claim(
        specimen: Path, values: dict[str, Any], environ: dict[str, str], code: ErrorCode,
        says: str) -> None:
    """Each bad option or variable is refused with its code, naming what is wrong."""
    with pytest.raises(LabfyError) as refused:
        run_worker_command(options(specimen, **values), environ=environ)
    assert refused.value.code is code
    assert says in refused.value.message
    assert "\n" not in refused.value.message
    assert not (specimen / "work.sqlite").exists() or code is not ErrorCode.WORK_DB_INVALID


@pytest.mark.req("WK-05")
def test_a_missing_workspace_is_refused(tmp_path: Path) -> None:
    """A directory that is not a workspace: WORKSPACE_INVALID, no database created."""
    with pytest.raises(LabfyError) as refused:
        run_worker_command(options(tmp_path / "nowhere"), environ={})
    assert refused.value.code is ErrorCode.WORKSPACE_INVALID
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.req("WK-04", "WK-05")
def test_once_with_nothing_to_do_exits_0_at_once_and_agent_env_is_used(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        capsys: pytest.CaptureFixture[str]) -> None:
    """``--once`` on an empty database prints nothing; the agent may come from LABFY_AGENT_*
    and the database from LABFY_WORK_DB (no flag), as serve's options do."""
    url = work_url.url.render_as_string(hide_password=False)
    environ = {ENV_AGENT_MODE: "local-model", ENV_AGENT_ENDPOINT: provider.base_url,
               ENV_AGENT_MODEL: "fake-model", "LABFY_WORK_DB": url}
    capsys.readouterr()
    assert run_worker_command(options(specimen, permission_mode="workspace-write"),
                              environ=environ) == 0
    assert capsys.readouterr().out == ""
    task_id = store.submit(message("write1", "v1")).task.id
    assert run_worker_command(options(specimen, permission_mode="workspace-write"),
                              environ=environ) == 0
    (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines()]
    assert (line["task_id"], line["outcome"]) == (task_id, "COMPLETED")
    check_exactly_once(store, task_id, "write1", "v1", specimen / "files", provider)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def _counted(count: Callable[[], int], expected: int) -> bool:
    return count() == expected


@pytest.mark.req("CLI-03")
def test_an_idle_worker_says_it_waits_once_per_idle_spell(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path) -> None:
    """An idle worker looks for work several times a second; its log says it is waiting
    once when the queue empties, and again only after it took a run; with ``--max-runs``
    it stops by itself once it took that many, and its last line says so."""
    out = tmp_path / "worker.out"
    worker = start_worker(specimen, work_url, provider, out, heartbeat=0.1, max_runs=2)
    errors = out.with_suffix(".err")

    def waits() -> int:
        return errors.read_text("utf-8").count(" waiting for queued runs")

    try:
        for number in (1, 2):
            wait_until(functools.partial(_counted, waits, number), timeout=30)
            time.sleep(1)  # about ten idle looks, 0.1 s apart
            store.submit(message("write1", f"idle{number}"))
            wait_until(functools.partial(_counted, lambda: len(lines(out)), number), timeout=60)
        assert worker.wait(timeout=30) == 0, errors.read_text("utf-8")
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
    assert [line["outcome"] for line in lines(out)] == ["COMPLETED", "COMPLETED"]
    said = [line.split(" labfy_ref.work ", 1)[-1] for line in
            errors.read_text("utf-8").splitlines() if " INFO labfy_ref.work " in line]
    assert sum("waiting for queued runs" in line for line in said) == 2, said
    took = [float(line.rsplit(" in ", 1)[1].removesuffix(" s")) for line in said
            if " COMPLETED in " in line]
    assert len(took) == 2 and all(0 <= seconds <= 120 for seconds in took), \
        "each run's line says how long it took (well within this test's waits)"
    assert said[-1].endswith("stopped: 2 run(s) done; 2 run(s) taken"), said


@pytest.mark.req("WK-04")
def test_a_bug_in_a_run_fails_that_run_never_the_worker(
        store: WorkStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unexpected error in a run ends it FAILED INTERNAL_ERROR (an incident id in the
    store, the worker goes on); when another worker took the run over meanwhile, the
    failed write is fenced off and the run is LOST to this worker, not failed."""
    from labfy_ref.work.run import worker as working  # noqa: PLC0415

    taken: list[str] = []

    async def buggy(work: WorkStore, claim: Any, services: Any, control: Any) -> Any:
        if taken:  # the lease lapses; another worker takes the run over first
            await asyncio.sleep(0.3)
            assert work.claim("w2", 30) is not None
        raise RuntimeError("a bug")

    monkeypatch.setattr(working, "drive_run", buggy)
    worker = working.Worker(store, cast(Any, None), working.WorkerSettings(
        "w1", lease_seconds=0.2, heartbeat_seconds=60))
    failed = store.submit("one").task.id
    claim = store.claim("w1", 30)
    assert claim is not None
    outcome = asyncio.run(worker.run(claim))
    assert (outcome.outcome, outcome.detail) == ("FAILED", "INTERNAL_ERROR")
    task = store.get_task(failed)
    assert task.state is State.FAILED
    finished = [e.data for e in store.list_events(failed) if e.type == "run.finished"]
    assert finished[0]["error"]["message"].startswith("internal error (incident ")
    lost = store.submit("two").task.id
    claim = store.claim("w1", 0.2)
    assert claim is not None and claim.task_id == lost
    taken.append(claim.run_id)
    outcome = asyncio.run(worker.run(claim))
    assert (outcome.outcome, outcome.detail) == ("LOST", "LEASE_NOT_HELD")
    assert store.get_task(lost).state is State.RUNNING, "the other worker's run goes on"


@pytest.mark.req("CLI-03", "WK-05")
def test_once_takes_one_run_even_with_more_waiting_and_says_so(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path) -> None:
    first = store.submit(message("write1", "once1")).task.id
    second = store.submit(message("write1", "once2")).task.id
    out = tmp_path / "worker.out"
    worker = start_worker(specimen, work_url, provider, out, once=True)
    assert worker.wait(timeout=60) == 0, out.with_suffix(".err").read_text("utf-8")
    assert [line["task_id"] for line in lines(out)] == [first]
    assert store.get_task(second).state is State.QUEUED, "the second waits for another worker"
    said = [line for line in out.with_suffix(".err").read_text("utf-8").splitlines()
            if " INFO labfy_ref.work " in line]
    assert said[-1].endswith("stopped: 1 run(s) done; 1 run(s) taken"), said
