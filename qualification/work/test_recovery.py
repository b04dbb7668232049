"""WK-03, WK-04: a worker killed with SIGKILL mid-run; another takes the run over and finishes it.

Workers are real ``labfy-ref work worker`` processes. A worker dies at a chosen step
boundary by sending itself SIGKILL (``LABFY_WORK_CRASH_AT``, :mod:`labfy_ref.work.run.crash`)
— the same death as ``kill -9`` from outside, at a known point — or is killed from here
while its run waits for an approval. After every kill the checks are the same: the task
completes; each ``files.write`` happened exactly once (one effect row, one audit entry,
the content); no model request was asked twice for a step already answered (the fake
provider's log). The matrix draws its kills at random; the seed is in every failure
message.
"""

from __future__ import annotations

import contextlib
import json
import random
import signal
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fake_provider import Scenario
from fake_provider.server import FakeProvider
from labfy_ref.work import DatabaseUrl, EffectStatus, State, WorkStore
from labfy_ref.work.run.effects import AUDIT_EVENT
from qualification.conftest import ProviderFactory
from qualification.harness import wait_until
from qualification.work.wire import open_for
from qualification.work.workers import (
    check_exactly_once,
    conversation_requests,
    lines,
    message,
    start_worker,
    stop,
    work_scenario,
)

KILLED = -signal.SIGKILL
#: The boundaries a worker may die at while it runs (approvals are killed from outside).
RUNNING_BOUNDARIES = ("model.answered", "effect.started", "effect.applied", "effect.audited",
                      "effect.completed")


@pytest.fixture
def store(work_url: DatabaseUrl, specimen: Path) -> Iterator[WorkStore]:
    """The test's view of the Work database (workers open their own)."""
    opened = open_for(work_url, specimen)
    yield opened
    opened.close()


@pytest.fixture
def provider(provider_factory: ProviderFactory) -> FakeProvider:
    """A fake provider serving the Work scripts."""
    return provider_factory(work_scenario())


def resolutions(store: WorkStore, task_id: str) -> list[str]:
    """How the task's started-but-unfinished effects were resolved, in order."""
    return [e.data["how"] for e in store.list_events(task_id) if e.type == "effect.resolved"]


@pytest.mark.req("WK-03", "WK-04")
@pytest.mark.parametrize(("crash", "resolved"), [
    ("model.answered:2", []),
    ("effect.started:1", ["never began"]),
    ("effect.applied:2", ["content written"]),
    ("effect.audited:1", ["audited"]),
    ("effect.completed:2", []),
])
def test_a_run_killed_at_a_boundary_is_finished_by_another_worker_exactly_once(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path, crash: str, resolved: list[str]) -> None:
    """SIGKILL at each boundary: the next worker waits out the lease, takes the run over,
    replays what was answered and done, resolves what was started, and finishes it."""
    task_id = store.submit(message("write2", "r1")).task.id
    dying = start_worker(specimen, work_url, provider, tmp_path / "dying.out", crash=crash)
    assert dying.wait(timeout=60) == KILLED, (tmp_path / "dying.err").read_text()
    assert lines(tmp_path / "dying.out") == []
    (run,) = store.list_runs(task_id)
    assert (run.state, run.attempt) == (State.RUNNING, 1)
    taker = start_worker(specimen, work_url, provider, tmp_path / "taker.out", max_runs=1)
    assert taker.wait(timeout=60) == 0, (tmp_path / "taker.err").read_text()
    (line,) = lines(tmp_path / "taker.out")
    assert (line["outcome"], line["attempt"]) == ("COMPLETED", 2)
    events = [e.type for e in store.list_events(task_id)]
    assert "run.taken_over" in events
    assert "replay.diverged" not in events, "the replayed steps asked what they asked before"
    assert resolutions(store, task_id) == resolved
    check_exactly_once(store, task_id, "write2", "r1", specimen / "files", provider)


@pytest.mark.req("WK-03")
def test_a_started_write_whose_file_changed_since_is_refused_never_repeated(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path) -> None:
    """Killed after writing, before its audit; then someone else changes the file. The
    file holds neither its prior nor the written content: EFFECT_UNRESOLVED, a normal
    tool result; the file is left as found; the run goes on to its answer."""
    task_id = store.submit(message("write2", "x1")).task.id
    dying = start_worker(specimen, work_url, provider, tmp_path / "dying.out",
                         crash="effect.applied:1")
    assert dying.wait(timeout=60) == KILLED
    target = specimen / "files/notes/x1-1.md"
    assert target.read_text("utf-8") == "note 1 x1"
    target.write_text("changed by someone else", "utf-8")
    taker = start_worker(specimen, work_url, provider, tmp_path / "taker.out", max_runs=1)
    assert taker.wait(timeout=60) == 0
    assert store.get_task(task_id).state is State.COMPLETED
    assert target.read_text("utf-8") == "changed by someone else"
    (run,) = store.list_runs(task_id)
    first = store.list_effects(run.id)[0]
    assert first.status is EffectStatus.REFUSED
    assert first.result["ok"] is False, "stored as the failure a replay gives back"
    assert first.result["error"]["code"] == "EFFECT_UNRESOLVED"
    assert [e.data["ok"] for e in store.list_events(task_id) if e.type == "effect.completed"
            and e.data["effect_id"] == first.id] == [False]
    audited = [e.data["effect_id"] for e in store.list_events(task_id) if e.type == AUDIT_EVENT]
    assert first.id not in audited
    answered = [e.data for e in store.list_events(task_id) if e.type == "tool.answered"]
    assert answered[0] == {"step": 1, "tool_id": "files.write", "status": "error",
                           "error_code": "EFFECT_UNRESOLVED"}
    assert resolutions(store, task_id) == ["unresolved"]


def kill_while_waiting_for_approval(specimen: Path, work_url: DatabaseUrl, store: WorkStore,
                                    provider: FakeProvider, out: Path, nonce: str) -> str:
    """Submit a one-write task, let a read-only worker park it, SIGKILL that worker."""
    task_id = store.submit(message("write1", nonce)).task.id
    worker = start_worker(specimen, work_url, provider, out, mode="read-only")
    try:
        wait_until(lambda: store.get_task(task_id).state is State.WAITING_APPROVAL,
                   timeout=60)
    finally:
        worker.kill()
    assert worker.wait(timeout=30) == KILLED
    return task_id


@pytest.mark.req("WK-03", "WK-04")
def test_kill_9_matrix(specimen: Path, work_url: DatabaseUrl, store: WorkStore,
                       provider: FakeProvider, tmp_path: Path) -> None:
    """Ten kills on this engine (twenty over both): two while a run waits for its approval,
    eight at boundaries drawn at random while runs run. Another worker finishes every run;
    every write happened exactly once; no answered step was asked again."""
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    files = specimen / "files"
    # two kills while waiting for an approval, answered afterwards
    waiting = [kill_while_waiting_for_approval(specimen, work_url, store, provider,
                                               tmp_path / f"approval-{i}.out", f"ap{i}")
               for i in range(2)]
    for task_id in waiting:
        (approval,) = store.list_approvals(task_id)
        store.answer_approval(approval.id, "allowed-once")
    resumer = start_worker(specimen, work_url, provider, tmp_path / "resumer.out",
                           mode="read-only", max_runs=2)
    assert resumer.wait(timeout=60) == 0, (tmp_path / "resumer.err").read_text()
    for i, task_id in enumerate(waiting):
        check_exactly_once(store, task_id, "write1", f"ap{i}", files, provider)
    # eight kills at random boundaries while runs run: a worker finishes at most two runs
    # and leaves a third before its planned boundary (N <= 3), so 4 runs per kill always
    # leave work for the next worker to die in, whatever the plan
    running = [store.submit(message("write2", f"k{i}")).task.id for i in range(32)]
    plan = [f"{rng.choice(RUNNING_BOUNDARIES)}:{rng.randint(1, 3)}" for _ in range(8)]
    kills = []
    for i, crash in enumerate(plan):
        out = tmp_path / f"crash-{i}.out"
        worker = start_worker(specimen, work_url, provider, out, crash=crash)

        def dead_or_done(worker: subprocess.Popen[bytes] = worker) -> bool:
            return worker.poll() is not None or all(store.get_task(t).state.finished
                                                    for t in running)

        wait_until(dead_or_done, timeout=90)
        kills.append(worker.poll() == KILLED)
        stop(worker)
    assert kills == [True] * 8, f"seed {seed}: plan {plan} killed {kills}"
    finisher = start_worker(specimen, work_url, provider, tmp_path / "finisher.out")
    try:
        wait_until(lambda: all(store.get_task(t).state.finished for t in running), timeout=120)
    finally:
        assert stop(finisher) == 0
    for i, task_id in enumerate(running):
        try:
            check_exactly_once(store, task_id, "write2", f"k{i}", files, provider)
        except AssertionError as exc:
            raise AssertionError(f"seed {seed}, plan {plan}, task k{i}: {exc}") from exc
    taken_over = sum(e.type == "run.taken_over" for t in running for e in store.list_events(t))
    assert taken_over >= 1, f"seed {seed}: plan {plan}"


@pytest.mark.req("WK-03")
def test_a_refused_effect_is_replayed_as_the_refusal_it_was_never_run_again(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, tmp_path: Path) -> None:
    """Killed right after a write was refused (outside files/) and recorded: the next
    worker replays the stored refusal — a failed outcome, never run again, never read
    as a success — and the run goes on to its answer."""
    outside = {"content": json.dumps({"type": "tool_call", "tool_id": "files.write",
                                      "arguments": {"path": "../escape.md", "content": "x"}})}
    final = {"content": json.dumps({"type": "final", "text": "refused"})}
    provider = provider_factory(Scenario.from_json({"answers": [outside, final]}))
    task_id = store.submit("write outside").task.id
    dying = start_worker(specimen, work_url, provider, tmp_path / "dying.out",
                         crash="effect.completed:1")
    assert dying.wait(timeout=60) == KILLED, (tmp_path / "dying.err").read_text()
    taker = start_worker(specimen, work_url, provider, tmp_path / "taker.out", max_runs=1)
    assert taker.wait(timeout=60) == 0, (tmp_path / "taker.err").read_text()
    (line,) = lines(tmp_path / "taker.out")
    assert (line["outcome"], line["attempt"]) == ("COMPLETED", 2)
    (run,) = store.list_runs(task_id)
    (effect,) = store.list_effects(run.id)
    assert effect.status is EffectStatus.REFUSED
    assert effect.result["ok"] is False
    assert effect.result["error"]["code"] == "PATH_OUTSIDE_WORKSPACE"
    events = store.list_events(task_id)
    assert [e.data["ok"] for e in events if e.type == "effect.completed"] == [False]
    assert [e.data["status"] for e in events if e.type == "tool.answered"] == ["error"]
    assert not (specimen / "escape.md").exists()


def campaigns(workspace: Path, topic: str) -> list[str]:
    """The ids of the workspace's campaigns about ``topic``."""
    with contextlib.closing(sqlite3.connect(workspace / "labfy.sqlite")) as db:
        return [row[0] for row in db.execute(
            "SELECT campaign_id FROM campaigns WHERE topic = ?", (topic,))]


@pytest.mark.req("WK-03")
@pytest.mark.parametrize(("crash", "resolved"), [
    ("effect.started:1", "never began"),
    ("effect.applied:1", "campaign found"),
])
def test_a_crashed_research_prepare_makes_its_campaign_once(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, tmp_path: Path, crash: str, resolved: str) -> None:
    """Killed around ``research.prepare``: the next worker looks for the campaign that run
    and step made; found, it is adopted, not made again. Work has no grant flow: the task
    ends FAILED GRANT_REQUIRED naming the one campaign."""
    prepare = {"content": json.dumps({"type": "tool_call", "tool_id": "research.prepare",
                                      "arguments": {"topic": "topic {nonce}",
                                                    "questions": ["why {nonce}?"]}})}
    provider = provider_factory(work_scenario(research=[prepare]))
    task_id = store.submit(message("research", "q1")).task.id
    dying = start_worker(specimen, work_url, provider, tmp_path / "dying.out", crash=crash)
    assert dying.wait(timeout=60) == KILLED
    taker = start_worker(specimen, work_url, provider, tmp_path / "taker.out", max_runs=1)
    assert taker.wait(timeout=60) == 0, (tmp_path / "taker.err").read_text()
    (line,) = lines(tmp_path / "taker.out")
    assert (line["outcome"], line["detail"], line["attempt"]) == ("FAILED", "GRANT_REQUIRED", 2)
    (campaign_id,) = campaigns(specimen, "topic q1")
    assert resolutions(store, task_id) == [resolved]
    (run,) = store.list_runs(task_id)
    (effect,) = store.list_effects(run.id)
    assert effect.status is EffectStatus.COMPLETED
    assert effect.result["data"]["campaign_id"] == campaign_id
    finished = [e.data for e in store.list_events(task_id) if e.type == "run.finished"]
    assert campaign_id in finished[0]["error"]["message"]
    assert len(conversation_requests(provider, "q1")) == 1


@contextlib.contextmanager
def _taken_over_while_paused(specimen: Path, work_url: DatabaseUrl, provider: FakeProvider,
                             tmp_path: Path, pause: str) -> Iterator[None]:
    """A worker SIGSTOPped at ``pause`` (its lease runs out), and another that takes its run
    over and ends; the body checks what that one did, then the paused one is resumed and
    waited for (killed if it hangs)."""
    paused = start_worker(specimen, work_url, provider, tmp_path / "paused.out", crash=pause,
                          once=True)
    try:
        wait_until(lambda: _paused(paused.pid) or paused.poll() is not None, timeout=60)
        assert paused.poll() is None, (tmp_path / "paused.err").read_text()
        taker = start_worker(specimen, work_url, provider, tmp_path / "taker.out", max_runs=1)
        assert taker.wait(timeout=60) == 0, (tmp_path / "taker.err").read_text()
        yield
        paused.send_signal(signal.SIGCONT)
        paused.wait(timeout=60)
    finally:
        if paused.poll() is None:
            paused.kill()
            paused.wait(timeout=30)


def _paused(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP): state ``T`` in ``/proc/PID/stat``."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text("ascii")
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[-1].split()[0] == "T"


@pytest.mark.req("WK-12", "WK-03")
@pytest.mark.parametrize(("pause", "resolved"), [
    ("effect.started:1:stop", ["never began"]),  # paused before the fenced target record
    ("effect.target:1:stop", ["content unchanged"]),  # paused between it and the write
])
def test_a_worker_paused_past_its_lease_never_overwrites_the_later_write(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore, provider: FakeProvider,
        tmp_path: Path, pause: str, resolved: list[str]) -> None:
    """ATTACKS.md §H: a worker SIGSTOPped mid-effect (a debugger, a VM pause, a stall) loses
    its lease; another worker takes the run over, writes the file and then writes it
    again. Resumed, the paused worker must not write its stale content over the later
    write (a lost update): the fenced target record refuses it, or the conditional
    write finds the file changed. Before, it wrote "first" over "second"."""
    nonce = "p" + pause.split(".")[1][:3]
    task_id = store.submit(message("rewrite", nonce)).task.id
    target = specimen / f"files/notes/{nonce}-1.md"
    with _taken_over_while_paused(specimen, work_url, provider, tmp_path, pause):
        assert store.get_task(task_id).state is State.COMPLETED
        assert target.read_text("utf-8") == f"second {nonce}"
    assert target.read_text("utf-8") == f"second {nonce}", "the paused worker overwrote it"
    assert resolutions(store, task_id) == resolved
    assert lines(tmp_path / "paused.out") == [] or all(
        line["outcome"] != "COMPLETED" for line in lines(tmp_path / "paused.out"))


@pytest.mark.req("WK-12")
def test_a_worker_paused_past_its_lease_never_makes_a_second_campaign(
        specimen: Path, work_url: DatabaseUrl, store: WorkStore,
        provider_factory: ProviderFactory, tmp_path: Path) -> None:
    """The lease is checked right before an effect that makes something, too: a worker
    SIGSTOPped as its ``research.prepare`` starts loses the run to another, which makes
    the campaign; resumed, the paused worker's fenced target record is refused, so it
    never makes a second one."""
    prepare = {"content": json.dumps({"type": "tool_call", "tool_id": "research.prepare",
                                      "arguments": {"topic": "topic {nonce}",
                                                    "questions": ["why {nonce}?"]}})}
    provider = provider_factory(work_scenario(research=[prepare]))
    task_id = store.submit(message("research", "pm")).task.id
    with _taken_over_while_paused(specimen, work_url, provider, tmp_path,
                                  "effect.started:1:stop"):
        (line,) = lines(tmp_path / "taker.out")
        assert (line["outcome"], line["detail"]) == ("FAILED", "GRANT_REQUIRED")
        assert len(campaigns(specimen, "topic pm")) == 1
    assert len(campaigns(specimen, "topic pm")) == 1, "the paused worker made another"
    assert resolutions(store, task_id) == ["never began"]


@pytest.mark.req("WK-03")
def test_a_resumed_prepare_finds_only_the_campaign_with_exactly_its_fields(
        tmp_path: Path) -> None:
    """What a crashed ``research.prepare`` made is found by every field it was called with,
    in this workspace, since the effect began: a campaign differing in any one field (a
    topic that sorts before or after, a question, a reference, another workspace, an older
    one) is not it, so it is never adopted in its place."""
    from labfy_ref.clock import iso, utcnow  # noqa: PLC0415
    from labfy_ref.workspace import init_workspace  # noqa: PLC0415

    ws, other = "ws_" + "4" * 26, "ws_" + "5" * 26
    store = init_workspace(tmp_path / "ws", specimen=False).open_store()
    try:
        older = store.add_campaign(ws, "hedges", ["why?"], ["obj_1"])
        since = iso(utcnow())
        for _ in range(1_000_000):  # the next millisecond (times are kept to the ms)
            if since > older.created_at:
                break
            since = iso(utcnow())
        made = [store.add_campaign(*fields).campaign_id for fields in (
            (ws, "hedge", ["why?"], ["obj_1"]), (ws, "hedgez", ["why?"], ["obj_1"]),
            (ws, "hedges", ["why not?"], ["obj_1"]), (ws, "hedges", ["why?"], ["obj_2"]),
            (other, "hedges", ["why?"], ["obj_1"]))]
        assert len(set(made)) == 5 and older.campaign_id not in made
        assert store.campaigns_like(ws, "hedges", ["why?"], ["obj_1"], since) == []
        ours = store.add_campaign(ws, "hedges", ["why?"], ["obj_1"]).campaign_id
        assert store.campaigns_like(ws, "hedges", ["why?"], ["obj_1"], since) == [ours]
        assert store.campaigns_like(ws, "hedge", ["why?"], ["obj_1"], since) == [made[0]]
    finally:
        store.close()
