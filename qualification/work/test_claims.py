"""WK-04, WK-09: runs are claimed under a lease by exactly one worker at a time.

Leases expire by the store's injected clock (never by sleeping); the races use real
threads and real worker processes on one database, on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from labfy_ref.clock import iso
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.work import Claim, DatabaseUrl, State, WorkStore
from labfy_ref.work.store.schema import runs
from qualification.work.conftest import Clock
from qualification.work.postgres import PrivateCluster
from qualification.work.wire import STORE_WORKSPACE

REPO = Path(__file__).resolve().parents[2]
LEASE = 30.0


def refused_code(call: Callable[[], Any]) -> ErrorCode:
    """The code ``call`` is refused with (it must be refused)."""
    with pytest.raises(LabfyError) as refused:
        call()
    return refused.value.code


def claimed(store: WorkStore, worker: str, lease: float = LEASE) -> Claim:
    """A claim that must exist."""
    claim = store.claim(worker, lease)
    assert claim is not None
    return claim


@pytest.mark.req("WK-10")
def test_the_oldest_runnable_run_is_claimed_once_while_its_lease_lives(
        store: WorkStore, clock: Clock) -> None:
    assert store.claim("w1", LEASE) is None
    first = store.submit("first")
    clock.advance(1)
    second = store.submit("second")
    claim = claimed(store, "w1")
    assert (claim.run_id, claim.task_id, claim.worker, claim.attempt) == (
        first.run.id, first.task.id, "w1", 1)
    assert claim.lease_expires_at == iso(clock.now + datetime.timedelta(seconds=LEASE))
    assert store.get_task(first.task.id).state is State.RUNNING
    run = store.get_run(first.run.id)
    assert run is not None and (run.state, run.worker, run.attempt,
                                run.lease_expires_at) == (State.RUNNING, "w1", 1,
                                                          claim.lease_expires_at)
    assert claimed(store, "w2").run_id == second.run.id
    clock.advance(LEASE - 1)  # both leases still live
    assert store.claim("w3", LEASE) is None


@pytest.mark.req("WK-10", "WK-09")
def test_an_expired_lease_is_taken_over_and_the_old_holder_is_fenced_out(
        store: WorkStore, clock: Clock) -> None:
    submitted = store.submit("crashy")
    old = claimed(store, "w1")
    clock.advance(LEASE + 0.001)
    new = claimed(store, "w2")
    assert (new.run_id, new.attempt, new.worker) == (old.run_id, 2, "w2")
    assert [e.type for e in store.list_events(submitted.task.id)][-1] == "run.taken_over"
    for write in (lambda: store.heartbeat(old, LEASE),
                  lambda: store.record_reply(old, 1, {}, {}),
                  lambda: store.begin_effect(old, 1, 0, "files.write", {}),
                  lambda: store.append_message(old, "assistant", "late"),
                  lambda: store.request_approval(old, 1, 0, "files.write", "late"),
                  lambda: store.finish(old, State.COMPLETED, final_text="late"),
                  lambda: store.release(old)):
        assert refused_code(write) is ErrorCode.LEASE_NOT_HELD
    assert store.list_effects(old.run_id) == [] and store.get_reply(old.run_id, 1) is None
    store.finish(new, State.COMPLETED, final_text="by w2")
    assert store.get_task(submitted.task.id).final_text == "by w2"


@pytest.mark.req("WK-09")
def test_a_worker_that_took_its_own_run_over_fences_its_earlier_attempt_out(
        store: WorkStore, clock: Clock) -> None:
    """A worker restarted under the same name takes over the run it held before its lease
    expired: the run's new attempt holds it; the earlier attempt's claim (same worker,
    same run, an older attempt, e.g. a paused thread of the old process) writes nothing."""
    store.submit("crashy")
    old = claimed(store, "w1")
    clock.advance(LEASE + 0.001)
    new = claimed(store, "w1")
    assert (new.run_id, new.worker, new.attempt) == (old.run_id, "w1", old.attempt + 1)
    for write in (lambda: store.heartbeat(old, LEASE),
                  lambda: store.append_message(old, "assistant", "late"),
                  lambda: store.finish(old, State.COMPLETED, final_text="late")):
        assert refused_code(write) is ErrorCode.LEASE_NOT_HELD
    store.finish(store.heartbeat(new, LEASE), State.COMPLETED, final_text="by attempt 2")


@pytest.mark.req("WK-10", "WK-09")
def test_a_heartbeat_extends_the_lease_for_the_holder_only(
        store: WorkStore, clock: Clock) -> None:
    store.submit("long")
    claim = claimed(store, "w1")
    forged = [Claim(claim.run_id, claim.task_id, "w2", claim.attempt, claim.lease_expires_at),
              Claim(claim.run_id, claim.task_id, "w1", claim.attempt + 1,
                    claim.lease_expires_at),
              Claim("run_unknown", claim.task_id, "w1", 1, claim.lease_expires_at)]
    for other in forged:
        with pytest.raises(LabfyError) as refused:
            store.heartbeat(other, LEASE)
        assert refused.value.code is ErrorCode.LEASE_NOT_HELD
    clock.advance(LEASE - 1)
    extended = store.heartbeat(claim, LEASE)
    assert extended.lease_expires_at > claim.lease_expires_at
    clock.advance(LEASE - 1)  # past the first lease, within the extended one
    assert store.claim("w2", LEASE) is None
    run = store.get_run(claim.run_id)
    assert run is not None and run.lease_expires_at == extended.lease_expires_at
    clock.advance(2)
    assert claimed(store, "w2").attempt == 2


@pytest.mark.req("WK-10", "WK-09")
def test_a_released_run_is_queued_again_for_any_worker(store: WorkStore) -> None:
    submitted = store.submit("stop me")
    claim = claimed(store, "w1")
    store.release(claim)
    run = store.get_run(claim.run_id)
    assert run is not None and (run.state, run.worker, run.lease_expires_at) == (
        State.QUEUED, None, None)
    assert store.get_task(submitted.task.id).state is State.QUEUED
    assert refused_code(lambda: store.heartbeat(claim, LEASE)) is ErrorCode.LEASE_NOT_HELD
    again = claimed(store, "w2")
    assert (again.run_id, again.attempt) == (claim.run_id, 2)
    assert [e.type for e in store.list_events(submitted.task.id)] == [
        "task.submitted", "run.claimed", "run.released", "run.claimed"]


@pytest.mark.req("WK-10", "WK-09")
def test_cancelling_a_held_run_fences_its_worker_out(store: WorkStore) -> None:
    submitted = store.submit("cancel me")
    claim = claimed(store, "w1")
    store.cancel(submitted.task.id)
    assert refused_code(lambda: store.heartbeat(claim, LEASE)) is ErrorCode.LEASE_NOT_HELD
    assert refused_code(lambda: store.begin_effect(claim, 1, 0, "files.write", {})) is \
        ErrorCode.LEASE_NOT_HELD
    run = store.get_run(claim.run_id)
    assert run is not None and run.state is State.CANCELLED


@pytest.mark.req("WK-10", "WK-09")
def test_a_run_parked_for_an_approval_fences_its_former_holder_out(store: WorkStore) -> None:
    store.submit("ask first")
    claim = claimed(store, "w1")
    approval = store.request_approval(claim, 1, 0, "files.write", "write a")
    for write in (lambda: store.heartbeat(claim, LEASE),
                  lambda: store.begin_effect(claim, 1, 0, "files.write", {}),
                  lambda: store.finish(claim, State.COMPLETED)):
        assert refused_code(write) is ErrorCode.LEASE_NOT_HELD
    store.answer_approval(approval.id, "rejected")
    resumed = claimed(store, "w2")
    assert (resumed.run_id, resumed.attempt) == (claim.run_id, 2)
    assert refused_code(lambda: store.heartbeat(claim, LEASE)) is ErrorCode.LEASE_NOT_HELD


@pytest.mark.req("WK-10")
@pytest.mark.parametrize("lease", [0, -1, float("nan"), float("inf"), True, "30", 86400.5])
def test_a_lease_outside_its_bounds_is_refused(store: WorkStore, lease: Any) -> None:
    store.submit("x")
    assert refused_code(lambda: store.claim("w1", lease)) is ErrorCode.VALIDATION_FAILED
    claim = claimed(store, "w1")
    assert refused_code(lambda: store.heartbeat(claim, lease)) is ErrorCode.VALIDATION_FAILED


@pytest.mark.req("WK-10")
@pytest.mark.parametrize("worker", ["", "w\n1", "w\u202e1", "w" * 501, b"w1", None])
def test_a_worker_name_must_be_short_printable_text(store: WorkStore, worker: Any) -> None:
    store.submit("x")
    assert refused_code(lambda: store.claim(worker, LEASE)) is ErrorCode.VALIDATION_FAILED
    assert store.claim("w" * 500, LEASE) is not None


@pytest.mark.req("WK-10")
def test_many_threads_claim_each_run_exactly_once(store: WorkStore) -> None:
    submitted = {store.submit(f"race {index}").run.id for index in range(40)}
    start = threading.Barrier(8, timeout=30)
    taken: list[tuple[str, str]] = []
    failures: list[BaseException] = []

    def work(worker: str) -> None:
        try:
            start.wait()
            # each thread takes at most its share, so all eight race for claims to the end
            # (one fast thread could otherwise drain the queue alone on a loaded machine)
            for _ in range(len(submitted) // 8):
                claim = store.claim(worker, 600)
                if claim is None:
                    return
                taken.append((claim.run_id, worker))
                store.finish(claim, State.COMPLETED, final_text=worker)
        except BaseException as exc:  # reported below, with the thread's error
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(f"t{i}",)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    assert failures == []
    counts = Counter(run_id for run_id, _ in taken)
    assert set(counts) == submitted and set(counts.values()) == {1}
    assert {t.state for t in store.list_tasks(limit=200)} == {State.COMPLETED}
    assert len({worker for _, worker in taken}) > 1  # the claims really were shared


@pytest.mark.req("WK-10")
def test_worker_processes_claim_each_run_exactly_once(store: WorkStore,
                                                      work_url: DatabaseUrl) -> None:
    submitted = {store.submit(f"process race {index}").run.id for index in range(60)}
    workers = [subprocess.Popen([sys.executable, "-m", "qualification.work.claimer",
                                 work_url.url.render_as_string(hide_password=False),
                                 f"p{index}"],
                                cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
               for index in range(4)]
    try:
        for worker in workers:
            assert worker.stdout is not None and worker.stdout.readline() == "ready\n"
        for worker in workers:  # every process starts claiming at once
            assert worker.stdin is not None
            worker.stdin.write("go\n")
            worker.stdin.flush()
        outputs = [worker.communicate(timeout=120) for worker in workers]
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.kill()
                worker.communicate(timeout=10)
    assert [worker.returncode for worker in workers] == [0] * 4, outputs
    taken = [json.loads(line)["run_id"] for out, _ in outputs for line in out.splitlines()]
    counts = Counter(taken)
    assert set(counts) == submitted and set(counts.values()) == {1}
    for run_id in submitted:
        [effect] = store.list_effects(run_id)
        assert effect.attempt == 1 and effect.status.value == "completed"


@pytest.mark.req("WK-10")
def test_postgresql_claims_skip_a_run_locked_by_another_transaction(
        pg_cluster: PrivateCluster) -> None:
    """FOR UPDATE SKIP LOCKED: a claim never waits on a row another worker is claiming."""
    with pg_cluster.database() as url:
        store = WorkStore.open(url, workspace_id=STORE_WORKSPACE)
        other = create_engine(url.url)
        try:
            first = store.submit("locked elsewhere")
            second = store.submit("free")
            got: list[Claim | None] = []
            with other.connect() as conn, conn.begin():
                conn.execute(select(runs.c.id).where(runs.c.id == first.run.id)
                             .with_for_update())
                claimer = threading.Thread(target=lambda: got.append(store.claim("w1", LEASE)))
                claimer.start()
                claimer.join(timeout=10)  # without SKIP LOCKED it would wait for our commit
                answered_while_locked = not claimer.is_alive()
            claimer.join(timeout=30)
            assert answered_while_locked
            assert got[0] is not None and got[0].run_id == second.run.id
            assert claimed(store, "w2").run_id == first.run.id
        finally:
            other.dispose()
            store.close()
