"""WK-02: every operation of the Work store, the same on SQLite and on a real PostgreSQL.

Each test runs twice (``work_url`` is parametrized by engine) against a fresh database.
"""

from __future__ import annotations

import datetime
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.ids import id_pattern
from labfy_ref.modes import Approval
from labfy_ref.work import (
    ApprovalRequest,
    DatabaseUrl,
    EffectStatus,
    State,
    Task,
    WorkStore,
    sqlite_url,
)
from qualification.work.conftest import Clock
from qualification.work.wire import STORE_WORKSPACE

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def code_of(excinfo: pytest.ExceptionInfo[LabfyError]) -> ErrorCode:
    """The code of a refusal caught by ``pytest.raises``."""
    return excinfo.value.code


@pytest.mark.req("WK-02")
def test_submit_stores_a_queued_task_with_its_first_run_and_message(store: WorkStore) -> None:
    submitted = store.submit("summarise notes.md")
    assert submitted.as_dict() == {"task": {"id": submitted.task.id,
                                            "run_id": submitted.run.id, "state": "QUEUED"}}
    assert id_pattern("task").fullmatch(submitted.task.id)
    assert id_pattern("run").fullmatch(submitted.run.id)
    task = store.get_task(submitted.task.id)
    assert task == submitted.task
    assert (task.state, task.message, task.final_text) == (State.QUEUED, "summarise notes.md",
                                                           None)
    assert ISO.fullmatch(task.created_at) and task.created_at == task.updated_at
    [run] = store.list_runs(task.id)
    assert (run.id, run.state, run.attempt, run.worker, run.lease_expires_at) == (
        submitted.run.id, State.QUEUED, 0, None, None)
    [message] = store.list_messages(run.id)
    assert (message.position, message.role, message.content) == (1, "user",
                                                                 "summarise notes.md")
    assert [(e.seq, e.type, e.data) for e in store.list_events(task.id)] == [
        (1, "task.submitted", {"run_id": run.id})]


@pytest.mark.req("WK-02")
def test_an_unknown_task_is_task_not_found(store: WorkStore) -> None:
    for call in (lambda: store.get_task("task_nope"), lambda: store.show("task_nope"),
                 lambda: store.cancel("task_nope"),
                 lambda: store.append_event("task_nope", "note", {})):
        with pytest.raises(LabfyError) as refused:
            call()
        assert code_of(refused) is ErrorCode.TASK_NOT_FOUND
    assert store.list_runs("task_nope") == [] and store.list_events("task_nope") == []


@pytest.mark.req("WK-02")
def test_tasks_are_listed_newest_first_by_state_with_a_limit_and_cursor(
        store: WorkStore, clock: Clock) -> None:
    made = []
    for index in range(5):
        made.append(store.submit(f"task {index}").task.id)
        clock.advance(1)
    made.append(store.submit("same millisecond as the next").task.id)
    made.append(store.submit("newest").task.id)  # a tie on created_at is ordered by id
    newest_first = list(reversed(made))
    assert [t.id for t in store.list_tasks()] == newest_first
    assert [t.id for t in store.list_tasks(limit=2)] == newest_first[:2]
    page = store.list_tasks(limit=3, before=newest_first[2])
    assert [t.id for t in page] == newest_first[3:6]
    assert [t.id for t in store.list_tasks(before=newest_first[-1])] == []
    store.cancel(made[1])
    assert [t.id for t in store.list_tasks(state="CANCELLED")] == [made[1]]
    assert [t.id for t in store.list_tasks(state="QUEUED", limit=1)] == [newest_first[0]]
    for bad in ({"limit": 0}, {"limit": 201}, {"limit": True}, {"state": "queued"},
                {"state": "DONE"}, {"before": "task_unknown"}):
        with pytest.raises(LabfyError) as refused:
            store.list_tasks(**bad)
        assert code_of(refused) is ErrorCode.VALIDATION_FAILED, bad


@pytest.mark.req("WK-02")
def test_cancel_ends_the_task_and_its_runs_once_and_refuses_a_finished_task(
        store: WorkStore) -> None:
    queued = store.submit("to cancel")
    cancelled = store.cancel(queued.task.id)
    assert cancelled.state is State.CANCELLED
    assert [r.state for r in store.list_runs(queued.task.id)] == [State.CANCELLED]
    assert store.cancel(queued.task.id) == cancelled  # idempotent: no second event
    assert [e.type for e in store.list_events(queued.task.id)].count("task.cancelled") == 1
    assert store.claim("w", 30) is None  # a cancelled run is never claimed

    done = store.submit("to finish")
    claim = store.claim("w", 30)
    assert claim is not None
    store.finish(claim, State.COMPLETED, final_text="ok")
    with pytest.raises(LabfyError) as refused:
        store.cancel(done.task.id)
    assert code_of(refused) is ErrorCode.TASK_FINISHED
    assert store.get_task(done.task.id).state is State.COMPLETED


@pytest.mark.req("WK-02")
def test_finish_stores_the_final_text_and_failure_reason(store: WorkStore) -> None:
    first = store.submit("one")
    claim = store.claim("w", 30)
    assert claim is not None and claim.run_id == first.run.id
    task = store.finish(claim, State.COMPLETED, final_text="all done ✓")
    assert (task.state, task.final_text) == (State.COMPLETED, "all done ✓")
    run = store.get_run(first.run.id)
    assert run is not None and (run.state, run.lease_expires_at) == (State.COMPLETED, None)

    second = store.submit("two")
    claim = store.claim("w", 30)
    assert claim is not None
    error = {"code": "BUDGET_EXHAUSTED", "message": "eight rounds"}
    assert store.finish(claim, State.FAILED, error=error).state is State.FAILED
    assert store.list_events(second.task.id)[-1].data == {"state": "FAILED", "error": error}
    with pytest.raises(LabfyError) as refused:
        store.finish(claim, State.CANCELLED)
    assert code_of(refused) is ErrorCode.VALIDATION_FAILED


@pytest.mark.req("WK-02", "WK-10")
def test_provider_replies_are_stored_per_step_and_the_first_answer_wins(
        store: WorkStore) -> None:
    store.submit("ask the model")
    claim = store.claim("w", 30)
    assert claim is not None
    assert store.get_reply(claim.run_id, 1) is None
    request = {"messages": [{"role": "user", "content": "hi"}], "temperature": 0}
    response = {"choices": [{"message": {"content": '{"action": "final", "text": "é\\u0000"}'}}]}
    stored = store.record_reply(claim, 1, request, response)
    assert (stored.step, stored.request, stored.response) == (1, request, response)
    assert store.get_reply(claim.run_id, 1) == stored
    again = store.record_reply(claim, 1, request, {"choices": []})
    assert again == stored  # a step is answered once: the stored answer is kept
    store.record_reply(claim, 2, {"step": 2}, {"answer": 2})
    reply = store.get_reply(claim.run_id, 2)
    assert reply is not None and reply.response == {"answer": 2}
    # a step's answer is its run's: the later-sorting run answered first takes nothing
    store.submit("one more")
    store.submit("and another")
    runs = [run for run in (store.claim("w", 30), store.claim("w", 30)) if run is not None]
    assert len(runs) == 2
    for late in sorted(runs, key=lambda c: c.run_id, reverse=True):
        kept = store.record_reply(late, 1, {}, {"run": late.run_id})
        assert kept.response == {"run": late.run_id}
    with pytest.raises(LabfyError) as refused:
        store.record_reply(claim, 0, {}, {})
    assert code_of(refused) is ErrorCode.VALIDATION_FAILED


@pytest.mark.req("WK-02")
def test_an_effect_is_started_before_and_completed_after_keyed_by_run_step_call(
        store: WorkStore, clock: Clock) -> None:
    store.submit("write a file")
    claim = store.claim("w", 30)
    assert claim is not None
    arguments = {"path": "notes/a.md", "content": "# A\n"}
    started = store.begin_effect(claim, 3, 0, "files.write", arguments)
    assert id_pattern("eff").fullmatch(started.id)
    assert (started.status, started.result, started.completed_at, started.attempt) == (
        EffectStatus.STARTED, None, None, 1)
    assert ISO.fullmatch(started.started_at)
    # the same key is recognised, not started twice
    assert store.begin_effect(claim, 3, 0, "files.write", {"other": 1}) == started
    assert store.find_effect(claim.run_id, 3, 0) == started
    assert store.find_effect(claim.run_id, 3, 1) is None
    clock.advance(2)
    done = store.complete_effect(claim, started.id, {"ok": True, "bytes": 4})
    assert (done.status, done.result) == (EffectStatus.COMPLETED, {"ok": True, "bytes": 4})
    assert done.completed_at is not None and done.completed_at > done.started_at
    with pytest.raises(LabfyError) as refused:
        store.complete_effect(claim, started.id, {"ok": True})
    assert code_of(refused) is ErrorCode.EFFECT_NOT_STARTED
    with pytest.raises(LabfyError) as refused:
        store.complete_effect(claim, "eff_unknown", {})
    assert code_of(refused) is ErrorCode.EFFECT_NOT_STARTED

    other = store.begin_effect(claim, 3, 1, "files.write", {"path": "x"})
    refused_effect = store.complete_effect(claim, other.id, {"code": "PERMISSION_DENIED"},
                                           refused=True)
    assert refused_effect.status is EffectStatus.REFUSED
    first = store.begin_effect(claim, 1, 0, "files.read", {"path": "a"})
    assert [(e.step, e.call) for e in store.list_effects(claim.run_id)] == [(1, 0), (3, 0),
                                                                             (3, 1)]
    assert store.list_effects(claim.run_id)[0] == first


@pytest.mark.req("WK-02")
def test_a_runs_replies_and_effects_are_its_own_never_a_later_runs(
        store: WorkStore) -> None:
    """Two runs held at once: what the later run (a larger id) recorded for step 1 is never
    read, listed or adopted as the earlier run's: each sees its own replies and effects."""
    store.submit("first")
    store.submit("second")
    first, second = store.claim("w1", 30), store.claim("w2", 30)
    assert first is not None and second is not None and first.run_id < second.run_id
    store.record_reply(second, 1, {"q": "second"}, {"a": "second"})
    theirs = store.begin_effect(second, 1, 0, "files.write", {"path": "b.md"})
    assert store.get_reply(first.run_id, 1) is None
    assert store.list_effects(first.run_id) == []
    assert store.find_effect(first.run_id, 1, 0) is None
    ours = store.begin_effect(first, 1, 0, "files.write", {"path": "a.md"})
    assert ours.id != theirs.id and ours.arguments == {"path": "a.md"}
    assert store.list_effects(first.run_id) == [ours]
    assert store.list_effects(second.run_id) == [theirs]
    reply = store.record_reply(first, 1, {"q": "first"}, {"a": "first"})
    assert store.get_reply(first.run_id, 1) == reply and reply.response == {"a": "first"}


@pytest.mark.req("WK-02")
def test_what_the_store_hands_out_are_values_no_reader_can_change(store: WorkStore) -> None:
    """Tasks, runs, claims, messages, replies, effects, events and approvals are values: a
    reader cannot change one in place (a claim is the fence's token), two reads of the same
    record are equal, and those holding no JSON document hash alike (a dict key, a set)."""
    import dataclasses  # noqa: PLC0415

    submitted = store.submit("values")
    claim = store.claim("w", 30)
    assert claim is not None
    reply = store.record_reply(claim, 1, {"q": 1}, {"a": 1})
    effect = store.begin_effect(claim, 1, 0, "files.write", {"path": "a.md"})
    approval = store.request_approval(claim, 1, 1, "files.write", "files.write a.md")
    values: list[Any] = [
        submitted, store.get_task(submitted.task.id), store.list_runs(claim.task_id)[0],
        claim, store.list_messages(claim.run_id)[0], reply, effect,
        store.list_events(claim.task_id)[0], approval]
    again = [submitted, store.get_task(submitted.task.id), store.list_runs(claim.task_id)[0],
             claim, store.list_messages(claim.run_id)[0], store.get_reply(claim.run_id, 1),
             store.find_effect(claim.run_id, 1, 0), store.list_events(claim.task_id)[0],
             store.get_approval(approval.id)]
    for value, read in zip(values, again, strict=True):
        name = dataclasses.fields(value)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, name, None)
        assert value == read, type(value).__name__
    # those without a JSON document inside (a reply, an effect, an event carry one)
    for value, read in zip(values[:5] + values[8:], again[:5] + again[8:], strict=True):
        assert hash(value) == hash(read) and {value: 1}[read] == 1, type(value).__name__


@pytest.mark.req("WK-02")
def test_events_append_in_order_and_page_by_cursor(store: WorkStore) -> None:
    task = store.submit("events").task
    for index in range(5):
        event = store.append_event(task.id, "note", {"index": index, "text": "ü\u0000"})
        assert event.seq == index + 2
    seqs = [e.seq for e in store.list_events(task.id)]
    assert seqs == [1, 2, 3, 4, 5, 6]
    page = store.list_events(task.id, after=2, limit=2)
    assert [(e.seq, e.data["index"]) for e in page] == [(3, 1), (4, 2)]
    assert page[0].data["text"] == "ü\u0000"
    assert store.list_events(task.id, after=6) == []
    for bad in ({"limit": 0}, {"limit": 1001}, {"after": -1}, {"after": "2"}):
        with pytest.raises(LabfyError) as refused:
            store.list_events(task.id, **bad)
        assert code_of(refused) is ErrorCode.VALIDATION_FAILED, bad


@pytest.mark.req("WK-02")
def test_an_approval_parks_the_run_is_answered_once_and_requeues_it(
        store: WorkStore) -> None:
    submitted = store.submit("write after approval")
    claim = store.claim("w1", 30)
    assert claim is not None
    approval = store.request_approval(claim, 2, 0, "files.write", "write notes/a.md (4 B)")
    assert id_pattern("appr").fullmatch(approval.id)
    assert approval.as_dict() == {"id": approval.id, "run_id": claim.run_id,
                                  "tool_id": "files.write", "summary": "write notes/a.md (4 B)",
                                  "decision": "pending"}
    assert store.get_task(submitted.task.id).state is State.WAITING_APPROVAL
    run = store.get_run(claim.run_id)
    assert run is not None and (run.state, run.worker, run.lease_expires_at) == (
        State.WAITING_APPROVAL, None, None)
    assert store.claim("w2", 30) is None  # nothing runs while it waits

    answered = store.answer_approval(approval.id, "allowed-once")
    assert answered.decision is Approval.ALLOWED_ONCE and answered.answered_at is not None
    with pytest.raises(LabfyError) as refused:
        store.answer_approval(approval.id, "rejected")
    assert code_of(refused) is ErrorCode.APPROVAL_NOT_PENDING
    assert store.get_approval(approval.id).decision is Approval.ALLOWED_ONCE
    assert store.get_task(submitted.task.id).state is State.QUEUED
    resumed = store.claim("w2", 30)
    assert resumed is not None and (resumed.run_id, resumed.attempt) == (claim.run_id, 2)
    assert [a.id for a in store.list_approvals(submitted.task.id)] == [approval.id]

    for unknown, code in (("appr_unknown", ErrorCode.APPROVAL_NOT_FOUND),):
        with pytest.raises(LabfyError) as refused:
            store.answer_approval(unknown, "rejected")
        assert code_of(refused) is code
    with pytest.raises(LabfyError) as refused:
        store.answer_approval(approval.id, "allow")
    assert code_of(refused) is ErrorCode.VALIDATION_FAILED


@pytest.mark.req("WK-02")
def test_an_approval_of_a_cancelled_task_cannot_be_answered(store: WorkStore) -> None:
    submitted = store.submit("cancel while waiting")
    claim = store.claim("w", 30)
    assert claim is not None
    approval = store.request_approval(claim, 1, 0, "files.write", "write")
    store.cancel(submitted.task.id)
    with pytest.raises(LabfyError) as refused:
        store.answer_approval(approval.id, "allowed-once")
    assert code_of(refused) is ErrorCode.APPROVAL_NOT_PENDING
    assert store.get_approval(approval.id).decision is None
    assert store.claim("w", 30) is None


@pytest.mark.req("WK-02")
def test_messages_of_a_run_keep_their_order(store: WorkStore) -> None:
    store.submit("converse")
    claim = store.claim("w", 30)
    assert claim is not None
    store.append_message(claim, "assistant", '{"action": "tool"}')
    store.append_message(claim, "tool", "")
    assert [(m.position, m.role, m.content) for m in store.list_messages(claim.run_id)] == [
        (1, "user", "converse"), (2, "assistant", '{"action": "tool"}'), (3, "tool", "")]
    with pytest.raises(LabfyError) as refused:
        store.append_message(claim, "admin", "x")
    assert code_of(refused) is ErrorCode.VALIDATION_FAILED


@pytest.mark.req("WK-02")
def test_show_is_the_pinned_work_shape(store: WorkStore) -> None:
    submitted = store.submit("show me")
    claim = store.claim("w", 30)
    assert claim is not None
    effect = store.begin_effect(claim, 1, 0, "files.write", {"path": "a", "content": "b"})
    store.complete_effect(claim, effect.id, {"ok": True})
    approval = store.request_approval(claim, 2, 0, "files.write", "write b")
    shown = store.show(submitted.task.id)
    assert set(shown) == {"task", "runs", "events", "effects", "approvals"}
    assert set(shown["task"]) == {"id", "state", "message", "final_text", "created_at",
                                  "updated_at"}
    assert shown["task"]["state"] == "WAITING_APPROVAL"
    assert shown["runs"] == [{"id": claim.run_id, "state": "WAITING_APPROVAL", "attempt": 1,
                              "worker": None, "lease_expires_at": None}]
    assert [set(e) for e in shown["events"]] == [{"seq", "type", "data", "at"}] * len(
        shown["events"])
    assert [e["type"] for e in shown["events"]] == ["task.submitted", "run.claimed",
                                                    "approval.requested"]
    assert shown["effects"] == [{"id": effect.id, "run_id": claim.run_id, "step": 1,
                                 "tool_id": "files.write",
                                 "arguments": {"path": "a", "content": "b"},
                                 "status": "completed", "result": {"ok": True}}]
    assert shown["approvals"] == [{**approval.as_dict(), "arguments": None}]  # no reply stored


@pytest.mark.req("WK-02")
def test_prune_removes_finished_tasks_older_than_the_age_with_all_they_hold(
        store: WorkStore, clock: Clock) -> None:
    old = store.submit("old and done")
    claim = store.claim("w", 30)
    assert claim is not None
    store.record_reply(claim, 1, {"q": 1}, {"a": 1})
    effect = store.begin_effect(claim, 1, 0, "files.write", {"path": "a"})
    store.complete_effect(claim, effect.id, {"ok": True})
    store.append_message(claim, "assistant", "done")
    store.finish(claim, State.COMPLETED, final_text="done")
    old_cancelled = store.submit("old and cancelled")
    waiting = store.submit("old and waiting")
    clock.advance(7200)
    store.cancel(old_cancelled.task.id)  # finished now: too recent to prune
    fresh = store.submit("new")

    assert store.prune(datetime.timedelta(hours=1)) == 1
    with pytest.raises(LabfyError):
        store.get_task(old.task.id)
    assert store.get_reply(old.run.id, 1) is None
    assert store.list_effects(old.run.id) == [] and store.list_messages(old.run.id) == []
    assert store.list_events(old.task.id) == [] and store.get_run(old.run.id) is None
    remaining = {t.id for t in store.list_tasks()}
    assert remaining == {old_cancelled.task.id, waiting.task.id, fresh.task.id}
    clock.advance(7200)
    assert store.prune(datetime.timedelta(hours=1)) == 1  # the cancelled one; never unfinished
    assert {t.id for t in store.list_tasks()} == {waiting.task.id, fresh.task.id}
    with pytest.raises(LabfyError) as refused:
        store.prune(datetime.timedelta(seconds=-1))
    assert code_of(refused) is ErrorCode.VALIDATION_FAILED


@pytest.mark.req("WK-02")
def test_prune_works_in_batches(store: WorkStore, clock: Clock) -> None:
    for index in range(5):
        store.submit(f"t{index}")
        claim = store.claim("w", 30)
        assert claim is not None
        store.finish(claim, State.COMPLETED)
    clock.advance(10)
    assert store.prune(datetime.timedelta(seconds=5), batch=2) == 5
    assert store.list_tasks() == []


def run_together(count: int, action: Callable[[int], object]) -> tuple[list[object],
                                                                       list[BaseException]]:
    """Run ``action(0..count-1)`` in ``count`` threads released at once; results and errors."""
    start = threading.Barrier(count, timeout=30)
    results: list[object] = []
    errors: list[BaseException] = []

    def body(index: int) -> None:
        start.wait()
        try:
            results.append(action(index))
        except BaseException as exc:  # collected: the caller asserts on them
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(index,)) for index in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return results, errors


@pytest.mark.req("WK-02")
def test_concurrent_events_of_one_task_get_consecutive_distinct_seqs(store: WorkStore) -> None:
    task = store.submit("busy").task

    def append_ten(index: int) -> list[int]:
        return [store.append_event(task.id, "note", {"thread": index, "n": n}).seq
                for n in range(10)]

    results, errors = run_together(6, append_ten)
    assert errors == []
    seqs = sorted(seq for batch in results if isinstance(batch, list) for seq in batch)
    assert seqs == list(range(2, 62))
    assert [e.seq for e in store.list_events(task.id)] == list(range(1, 62))


@pytest.mark.req("WK-02")
def test_an_approval_answered_at_once_by_several_people_takes_one_answer(
        store: WorkStore) -> None:
    submitted = store.submit("race the answers")
    claim = store.claim("w", 30)
    assert claim is not None
    approval = store.request_approval(claim, 1, 0, "files.write", "write")
    decisions = ["allowed-once", "rejected"] * 3
    results, errors = run_together(6, lambda i: store.answer_approval(approval.id,
                                                                      decisions[i]))
    assert len(results) == 1 and len(errors) == 5
    assert {e.code for e in errors if isinstance(e, LabfyError)} == {
        ErrorCode.APPROVAL_NOT_PENDING}
    winner = results[0]
    assert isinstance(winner, ApprovalRequest)
    assert store.get_approval(approval.id).decision is winner.decision
    events = [e for e in store.list_events(submitted.task.id) if e.type == "approval.answered"]
    assert len(events) == 1
    assert store.get_task(submitted.task.id).state is State.QUEUED


@pytest.mark.req("WK-02", "WS-06")
def test_the_sqlite_database_is_created_owner_only(tmp_path: Path) -> None:
    store = WorkStore.open(sqlite_url(tmp_path / "work.sqlite"), workspace_id=STORE_WORKSPACE)
    try:
        store.submit("private")
    finally:
        store.close()
    assert stat.S_IMODE((tmp_path / "work.sqlite").stat().st_mode) == 0o600
    link = tmp_path / "link.sqlite"
    link.symlink_to(tmp_path / "elsewhere.sqlite")
    with pytest.raises(LabfyError) as refused:
        WorkStore.open(sqlite_url(link), workspace_id=STORE_WORKSPACE)
    assert refused.value.code is ErrorCode.WORK_DB_UNAVAILABLE
    assert refused.value.message.endswith(": the database file is a symbolic link")
    assert not (tmp_path / "elsewhere.sqlite").exists()


@pytest.mark.req("WK-11")
def test_another_workspaces_task_is_task_not_found(store: WorkStore,
                                                   work_url: DatabaseUrl) -> None:
    """Two workspaces on one database: each sees, shows, lists and cancels only its own
    tasks; the other's id is TASK_NOT_FOUND and the task is left as it was."""
    other = WorkStore.open(work_url, workspace_id="ws_" + "1" * 26)
    try:
        theirs = other.submit("their task").task
        mine = store.submit("my task").task
        for refused in (lambda: store.get_task(theirs.id), lambda: store.show(theirs.id),
                        lambda: store.cancel(theirs.id)):
            with pytest.raises(LabfyError) as caught:
                refused()
            assert code_of(caught) is ErrorCode.TASK_NOT_FOUND
        assert [t.id for t in store.list_tasks()] == [mine.id]
        assert [t.id for t in other.list_tasks()] == [theirs.id]
        assert other.get_task(theirs.id).state is State.QUEUED
    finally:
        other.close()


@pytest.mark.req("WK-09", "WK-11")
def test_a_cancel_from_another_workspace_never_fences_the_running_claim(
        store: WorkStore, work_url: DatabaseUrl) -> None:
    """A cancel ends a run's lease (WK-09) only for the task's own workspace: another
    workspace's cancel of a running task is TASK_NOT_FOUND, and the holder's heartbeat,
    writes and finish go on under its claim."""
    other = WorkStore.open(work_url, workspace_id="ws_" + "3" * 26)
    try:
        theirs = other.submit("their running task").task
        claim = other.claim("their-worker", 60)
        assert claim is not None and claim.task_id == theirs.id
        with pytest.raises(LabfyError) as caught:
            store.cancel(theirs.id)
        assert code_of(caught) is ErrorCode.TASK_NOT_FOUND
        renewed = other.heartbeat(claim, 60)
        other.finish(renewed, State.COMPLETED, final_text="done")
        assert other.get_task(theirs.id).state is State.COMPLETED
    finally:
        other.close()


@pytest.fixture
def two(store: WorkStore, work_url: DatabaseUrl) -> Iterator[tuple[WorkStore, Task, Task]]:
    """This workspace's store, and one task of each workspace on the same database (theirs
    submitted first, so it is the older)."""
    other = WorkStore.open(work_url, workspace_id="ws_" + "2" * 26)
    try:
        theirs = other.submit("their task").task
        mine = store.submit("my task").task
        yield store, mine, theirs
    finally:
        other.close()


@pytest.mark.req("WK-11")
def test_a_list_shows_only_this_workspaces_tasks_even_by_state(
        two: tuple[WorkStore, Task, Task]) -> None:
    store, mine, _ = two
    for state in (None, "QUEUED"):
        assert [t.id for t in store.list_tasks(state=state)] == [mine.id], state
    assert store.list_tasks(state="CANCELLED") == []


@pytest.mark.req("WK-11")
def test_another_workspaces_runs_are_not_listed(two: tuple[WorkStore, Task, Task]) -> None:
    store, mine, theirs = two
    assert len(store.list_runs(mine.id)) == 1
    assert store.list_runs(theirs.id) == []


@pytest.mark.req("WK-11")
def test_another_workspaces_task_is_an_unknown_cursor(two: tuple[WorkStore, Task, Task]) -> None:
    """A page cursor is a task of this workspace: another's id is refused as any unknown
    one, and tells nothing of where that task sits."""
    store, mine, theirs = two
    with pytest.raises(LabfyError) as caught:
        store.list_tasks(before=theirs.id)
    assert code_of(caught) is ErrorCode.VALIDATION_FAILED
    assert store.list_tasks(before=mine.id) == []
