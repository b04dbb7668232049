"""The second batch of held-out-class faults (issue 22), written from SPEC before their tests.

Like :mod:`qualification.mutants.faults_teeth`: each replaces one product function
with a small regression read from SPEC.md and the product code, never from the
suite, and names the test written afterwards to kill it. The classes: ownership
across workspaces in Work, time and ordering (a cancel of a queued turn, a
resume of a turn cancelled while paused), the bounds of human-supplied fields
(the message, ``client_request_id`` in characters, a Work page past its cap),
a rule with one kind of outcome (a repair for a parse refusal only), the
filesystem vectors on the stores' own files, numbers as reported (a round's
unreported tokens, a repaired round's cost) and tooling edges (a digest compared
by a prefix, an event log's oldest cursor).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import select, true

from labfy_ref.errors import ConfigRefused, ErrorCode, ProtocolRefused, RuntimeRefused
from labfy_ref.model import gguf
from labfy_ref.private import create_private
from labfy_ref.protocol import exchange
from labfy_ref.protocol.exchange import Answer, Ask, Round
from labfy_ref.protocol.narrowing import Decoding
from labfy_ref.protocol.prompt import ChatMessage
from labfy_ref.runtime import runtime as runtime_module
from labfy_ref.runtime.events import EventLog
from labfy_ref.runtime.runtime import AgentRuntime, _RuntimePort
from labfy_ref.runtime.states import TurnState
from labfy_ref.runtime.turn import Turn
from labfy_ref.work.store import engine as work_engine
from labfy_ref.work.store.model import Run, State, Task
from labfy_ref.work.store.schema import runs, tasks
from labfy_ref.work.store.tasks import MAX_LIMIT, WorkStore
from qualification.mutants.registry import FAULTS, fault

__all__ = ["FAULTS"]

KIT = "qualification/conformance/test_behaviour.py"
STORE = "qualification/work/test_store.py"

_cancel = AgentRuntime.cancel
_work_cancel = WorkStore.cancel
_hash = gguf.PinnedGguf.hash
_request_action = exchange.request_action
_start_turn = AgentRuntime.start_turn
_list_tasks = WorkStore.list_tasks


@contextlib.contextmanager
def _every_workspace(store: WorkStore) -> Iterator[None]:
    """Within this block the store's workspace filter holds for every row."""
    store._mine = true  # type: ignore[method-assign]
    try:
        yield
    finally:
        del store._mine


# -- 1. ownership across owners: Work's workspaces --------------------------------------------

@fault("work-cancel-of-another-workspace", ids=("WK-11",),
       replaces="labfy_ref.work.store.tasks:WorkStore.cancel",
       killer=f"{STORE}::test_another_workspaces_task_is_task_not_found",
       breaks="a task is cancelled by its id alone, whichever workspace submitted it",
       served=False)
def _cancel_any_task(self: WorkStore, task_id: str) -> Task:
    with _every_workspace(self):  # the id alone decides
        cancelled: Task = _work_cancel(self, task_id)
    return cancelled


@fault("work-list-of-every-workspace", ids=("WK-11",),
       replaces="labfy_ref.work.store.tasks:WorkStore.list_tasks",
       killer=f"{STORE}::test_a_list_shows_only_this_workspaces_tasks_even_by_state",
       breaks="a list filtered by state forgets the workspace filter", served=False)
def _list_every_workspace(self: WorkStore, *, state: str | None = None, limit: int = 50,
                          before: str | None = None) -> list[Task]:
    if state is None:
        return _list_tasks(self, limit=limit, before=before)
    if state not in State.__members__:
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "unknown state")
    with self._db.transaction(write=False) as conn:
        rows = conn.execute(select(tasks).where(tasks.c.state == state)
                            .order_by(tasks.c.created_at.desc(), tasks.c.id.desc())
                            .limit(limit)).all()
    return [Task.of(row) for row in rows]


@fault("work-runs-of-another-workspace", ids=("WK-11",),
       replaces="labfy_ref.work.store.tasks:WorkStore.list_runs",
       killer=f"{STORE}::test_another_workspaces_runs_are_not_listed",
       breaks="the runs of a task id are listed whichever workspace it belongs to",
       served=False)
def _any_runs(self: WorkStore, task_id: str) -> list[Run]:
    with self._db.transaction(write=False) as conn:
        rows = conn.execute(select(runs).where(runs.c.task_id == task_id)
                            .order_by(runs.c.created_at, runs.c.id)).all()
    return [Run.of(row) for row in rows]


@fault("work-cursor-of-another-workspace", ids=("WK-11",),
       replaces="labfy_ref.work.store.tasks:WorkStore.list_tasks",
       killer=f"{STORE}::test_another_workspaces_task_is_an_unknown_cursor",
       breaks="a page after a cursor is looked up among every workspace's tasks", served=False)
def _any_cursor(self: WorkStore, *, state: str | None = None, limit: int = 50,
                before: str | None = None) -> list[Task]:
    if before is None:
        return _list_tasks(self, state=state, limit=limit)
    with _every_workspace(self):
        listed: list[Task] = _list_tasks(self, state=state, limit=limit, before=before)
    return listed


# -- 2. time and ordering while a turn is still running ----------------------------------------

@fault("cancel-of-a-queued-turn-ignored", ids=("RT-05",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.cancel",
       killer=f"{KIT}::test_a_turn_cancelled_while_queued_never_runs",
       breaks="only the running turn is cancelled: a queued one is answered 'ok' and later runs",
       served=True)
def _cancel_running_only(self: AgentRuntime, turn_id: str) -> Turn:
    turn = self.get(turn_id)
    if turn.state.terminal or turn.state is TurnState.QUEUED:
        return turn
    turn_cancelled: Turn = _cancel(self, turn_id)
    return turn_cancelled


@fault("resume-of-a-cancelled-pause", ids=("RT-08", "RT-02"),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.resume",
       killer=f"{KIT}::test_a_turn_cancelled_while_paused_cannot_be_resumed",
       breaks="resume looks at the pause's record, not the turn's state: a turn cancelled "
              "while it waited for its grant is not refused TURN_NOT_RESUMABLE", served=True)
def _resume_by_record(self: AgentRuntime, turn_id: str) -> Turn:
    turn = self.get(turn_id)
    if turn.authorization is None:
        raise RuntimeRefused(ErrorCode.TURN_NOT_RESUMABLE, f"turn is {turn.state.value}")
    if not self.gateway.grants.has_active(turn.authorization["campaign_id"]):
        raise RuntimeRefused(ErrorCode.GRANT_REQUIRED, "the campaign has no active grant")
    turn.resume_campaign = turn.authorization["campaign_id"]
    turn.move(TurnState.QUEUED)
    self._enqueue(turn)
    return turn


@fault("cancel-of-a-finished-turn-refused", ids=("RT-05",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.cancel",
       killer=f"{KIT}::test_cancelling_a_turn_twice_is_harmless",
       breaks="a cancel that lands after the turn ended is refused 409, not answered with "
              "the turn as it is", served=True)
def _cancel_finished_refused(self: AgentRuntime, turn_id: str) -> Turn:
    turn = self.get(turn_id)
    if turn.state.terminal:
        raise RuntimeRefused(ErrorCode.TURN_NOT_RESUMABLE, f"turn is {turn.state.value}")
    cancelled: Turn = _cancel(self, turn_id)
    return cancelled


# -- 3. bounds of human-supplied fields ---------------------------------------------------------

@fault("message-of-the-bound-refused", ids=("RT-03",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.start_turn",
       killer=f"{KIT}::test_a_message_of_exactly_the_bound_is_a_turn_one_more_is_refused",
       breaks="a message of exactly max_message_chars is refused (< where <= was meant)",
       served=True)
def _message_bound_exclusive(self: AgentRuntime, message: str,
                             client_request_id: str | None = None) -> tuple[Turn, bool]:
    if len(message) == self.limits.max_message_chars:
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                             f"message must be 1-{self.limits.max_message_chars} characters")
    started: tuple[Turn, bool] = _start_turn(self, message, client_request_id)
    return started


@fault("client-request-id-bound-in-bytes", ids=("RT-04",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.start_turn",
       killer=f"{KIT}::test_a_client_request_id_is_bounded_in_characters",
       breaks="client_request_id's 128 is counted in UTF-8 bytes: 128 accented letters are "
              "refused", served=True)
def _request_id_in_bytes(self: AgentRuntime, message: str,
                         client_request_id: str | None = None) -> tuple[Turn, bool]:
    if client_request_id is not None \
            and len(client_request_id.encode("utf-8", "surrogatepass")) > \
            runtime_module._MAX_CLIENT_REQUEST_ID:
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                             "client_request_id must be 1-128 printable characters")
    started: tuple[Turn, bool] = _start_turn(self, message, client_request_id)
    return started


@fault("work-page-past-its-cap-clamped", ids=("WK-05",),
       replaces="labfy_ref.work.store.tasks:WorkStore.list_tasks",
       killer=f"{KIT}::test_work_pages_admit_limit_1_to_200_exactly",
       breaks="a Work page limit over the cap is clamped to it (a silent fallback), not "
              "refused", served=True)
def _clamp_work_limit(self: WorkStore, *, state: str | None = None, limit: int = 50,
                      before: str | None = None) -> list[Task]:
    clamped = min(limit, MAX_LIMIT) if isinstance(limit, int) else limit
    listed: list[Task] = _list_tasks(self, state=state, limit=clamped, before=before)
    return listed


@fault("events-missed-at-the-oldest-cursor", ids=("RT-06",),
       replaces="labfy_ref.runtime.events:EventLog.page",
       killer="qualification/runtime/test_runtime_units.py::"
              "test_a_client_at_the_oldest_cursor_missed_nothing_one_before_it_did",
       breaks="a client whose cursor is exactly the oldest one is told it missed events",
       served=False)
def _missed_inclusive(self: EventLog, cursor: int, limit: int = 100) -> dict[str, Any]:
    events = [e for e in self._events if e.seq > cursor][:limit]
    return {"events": [e.as_json() for e in events],
            "next_cursor": events[-1].seq if events else max(cursor, self.oldest_cursor),
            "oldest_cursor": self.oldest_cursor,
            "missed": cursor <= self.oldest_cursor and bool(self._events)
            and self._events[0].seq > 1}


# -- 4. a rule tested with one kind of outcome only --------------------------------------------

@fault("repair-of-parse-refusals-only", ids=("PR-03",),
       replaces="labfy_ref.runtime.driver:request_action",
       killer=f"{KIT}::test_a_reply_the_client_refuses_gets_the_repair_round_too",
       breaks="only a reply the strict parser refused is repaired; one the model client "
              "refused (a lone surrogate) ends the turn at once", served=True)
async def _repair_parse_only(ask: Ask, messages: list[ChatMessage], parser: Any,
                             decoding: Decoding) -> Round:
    async def unrepaired(attempt: Any, decoding: Decoding) -> Answer:
        try:
            return await ask(attempt, decoding)
        except ProtocolRefused as exc:  # the client's refusals are not the parser's
            raise ProtocolRefused(exc.defect, exc.message, repairable=False) from None
    done: Round = await _request_action(unrepaired, messages, parser, decoding)
    return done


# -- 5. filesystem attacks on the stores' own files --------------------------------------------

@fault("narrow-follows-a-link", ids=("WS-06",),
       replaces="labfy_ref.private:narrow",
       killer="qualification/workspace/test_workspace.py::"
              "test_a_link_in_a_databases_place_is_refused_and_its_target_untouched",
       breaks="narrowing a database's mode follows a symbolic link and chmods its target",
       served=False)
def _narrow_through_links(path: Path) -> None:
    try:
        mode = os.stat(path).st_mode  # follows a link
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise IsADirectoryError(f"{path.name} is not a regular file")
    if mode & 0o077:
        os.chmod(path, stat.S_IMODE(mode) & 0o700)


@fault("work-database-link-followed", ids=("WS-06",),
       replaces="labfy_ref.work.store.engine:_create_private",
       killer="qualification/work/test_store.py::test_the_sqlite_database_is_created_owner_only",
       breaks="a symbolic link in the Work database's place is opened, and SQLite writes "
              "where it points", served=False)
def _create_through_links(url: Any, path: Path) -> None:
    try:
        create_private(path)
    except OSError as exc:
        raise work_engine.unavailable(url, exc.strerror or type(exc).__name__) from None


# -- 6. numbers as the provider reported them --------------------------------------------------

@fault("round-unreported-tokens-as-zero", ids=("BR-14",),
       replaces="labfy_ref.runtime.runtime:_RuntimePort.spent",
       killer=f"{KIT}::test_a_rounds_event_keeps_an_unreported_count_null",
       breaks="a runtime round's event says 0 for a count the provider did not report",
       served=True)
def _round_zeroes(self: _RuntimePort, round_number: int, usage: Any) -> None:
    data = {key: (0 if value is None else value) for key, value in usage.as_json().items()}
    self._runtime.events.append(self._turn.id, "turn.round", {"round": round_number, **data})


@fault("repaired-round-costs-its-last-request", ids=("BR-14", "PR-03"),
       replaces="labfy_ref.runtime.driver:request_action",
       killer=f"{KIT}::test_a_repaired_rounds_tokens_are_both_requests",
       breaks="a repaired round reports the repair request's tokens only, not both",
       served=True)
async def _last_request_cost(ask: Ask, messages: list[ChatMessage], parser: Any,
                             decoding: Decoding) -> Round:
    done: Round = await _request_action(ask, messages, parser, decoding)
    return dataclasses.replace(done, usage=done.answer.usage)


# -- 7. tooling edges ---------------------------------------------------------------------------

@fault("gguf-digest-compared-by-prefix", ids=("SM-01",),
       replaces="labfy_ref.model.gguf:PinnedGguf.hash",
       killer="qualification/integration/test_verify_gguf.py::"
              "test_a_digest_that_differs_in_one_character_anywhere_is_refused",
       breaks="the SHA-256 check compares the first 32 hex characters only", served=False)
def _prefix_digest(self: gguf.PinnedGguf, sha256: str | None,
                   progress: gguf.Progress | None = None) -> gguf.GgufInfo:
    info: gguf.GgufInfo = _hash(self, None, progress)
    if sha256 is not None and info.sha256[:32] != gguf.expected_digest(sha256)[:32]:
        raise ConfigRefused(f"{self.path.name}: SHA-256 is {info.sha256}",
                            code=ErrorCode.GGUF_SHA256_MISMATCH)
    return info



@fault("answered-connection-closed-at-once", ids=("SV-09",),
       replaces="labfy_ref.server.connections:GuardedH11Protocol._answer_and_close",
       killer="qualification/security/test_connections.py::"
              "test_an_answered_connection_is_half_closed_so_its_answer_survives_what_follows",
       breaks="a 408 or 503 is written and the socket closed at once, unread bytes and all",
       served=False)
def _close_at_once(self: Any, response: bytes) -> None:
    self.transport.write(response)
    self._close()


@fault("bridge-disable-keeps-the-host", ids=("BR-16",),
       replaces="labfy_ref.bridge.service:Bridge._release",
       killer="qualification/bridge/test_toggle.py::"
              "test_disable_ends_open_streams_interrupted_with_no_effect_after_it",
       breaks="disable forgets the host without releasing it: its streams, files and tasks "
              "stay open",
       served=False)
async def _forget_host(self: Any) -> None:
    self._engine = None
    self._settling = None
    self.host = None
