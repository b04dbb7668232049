"""The held-out-class faults of issue 22, written from SPEC before their tests.

Each one replaces a single product function with a small regression taken from
SPEC.md and the product code only, not from the suite; its ``killer`` named a
test that did not exist yet, written after it (the kit's in
``qualification/conformance/test_behaviour.py``, the in-process ones beside the
tests of what they break). Five were already killed by a test of their own IDs:
their killer names that test. The classes, in order:
ownership across owners, time and ordering while a turn runs, bounds of
human-supplied fields, a rule with one kind of outcome only, filesystem attacks on
the stores beside ``files/``, and numbers as the provider reported them.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import os
import stat
from pathlib import Path
from typing import Any

from sqlalchemy import select

from labfy_ref.bridge import engine as bridge_engine
from labfy_ref.bridge.contract import MAX_PAGE_SIZE, PAGE_SIZE
from labfy_ref.bridge.loop import PendingApproval, _StreamPort, decide
from labfy_ref.bridge.store import index as session_index
from labfy_ref.bridge.store import logs as jsonl
from labfy_ref.bridge.stream import StreamHandle
from labfy_ref.errors import ErrorCode, RuntimeRefused, SessionInvalid
from labfy_ref.gateway import ToolOutcome
from labfy_ref.gateway.services import GrantService
from labfy_ref.gateway.usage import UsageService
from labfy_ref.modes import Approval
from labfy_ref.protocol import ToolCall
from labfy_ref.protocol.exchange import Usage
from labfy_ref.protocol.narrowing import ALL_RULES, Observations
from labfy_ref.runtime.driver import Conversation, Pending
from labfy_ref.runtime.runtime import AgentRuntime
from labfy_ref.server.auth import (
    MAX_SESSIONS_PER_ACCOUNT,
    MAX_SESSIONS_PER_ROLE,
    Authenticator,
    Role,
)
from labfy_ref.tools.catalog import ToolCatalog
from labfy_ref.work.run.driver import WorkPort
from labfy_ref.work.store.model import Task
from labfy_ref.work.store.schema import tasks
from labfy_ref.work.store.tasks import DEFAULT_LIMIT, WorkStore
from labfy_ref.workspace.store import Grant
from qualification.mutants.registry import FAULTS, fault

__all__ = ["FAULTS"]

KIT = "qualification/conformance/test_behaviour.py"
FLOWS = "qualification/conformance/test_flow_contracts.py"
ENDINGS = "qualification/runtime/test_turn_endings.py"
SESSIONS = "qualification/bridge/test_sessions.py"

_decide_approval = bridge_engine.ReferenceEngine.decide_approval
_work_approve = WorkPort.approve
_approve = _StreamPort.approve
_cancel = AgentRuntime.cancel
_start_turn = AgentRuntime.start_turn
_answer = Conversation.answer
_observe = Observations.observe
_record = UsageService.record


# -- 1. ownership across owners ---------------------------------------------------------------

@fault("approval-of-another-session", ids=("BR-12",),
       replaces="labfy_ref.bridge.engine:ReferenceEngine.decide_approval",
       killer=f"{KIT}::test_a_decision_through_another_sessions_url_is_refused",
       breaks="an approval id is looked up among every running turn, not this session's",
       served=True)
def _any_sessions_approval(self: Any, session_id: str, approval_id: str,
                           decision: str) -> dict[str, Any]:
    answer = Approval.parse(decision)
    if answer is None:
        refused: dict[str, Any] = _decide_approval(self, session_id, approval_id, decision)
        return refused
    self._state(session_id)
    pending = {key: value for running in self._running.values()
               for key, value in running.approvals.items()}
    decide(pending, approval_id, answer)
    return {"approval_id": approval_id, "decision": answer.value}


@fault("work-approval-reused", ids=("WK-05", "GW-07"),
       replaces="labfy_ref.work.run.driver:WorkPort.approve",
       killer="qualification/work/test_driver.py::"
              "test_one_work_approval_allows_one_write_of_its_run",
       breaks="an answered Work approval answers every later write of the same tool in its run",
       served=False)
async def _approve_by_tool(self: WorkPort, call_id: str, action: ToolCall) -> Any:
    for approval in self._store.list_approvals(self._claim.task_id):
        if approval.run_id == self._claim.run_id and approval.tool_id == action.tool_id \
                and approval.decision is not None:
            return approval.decision  # whichever step it was asked for
    decision: Approval | Pending | None = await _work_approve(self, call_id, action)
    return decision


@fault("revoke-another-workspaces-grant", ids=("RT-08",),
       replaces="labfy_ref.gateway.services:GrantService.revoke",
       killer="qualification/gateway/test_gateway.py::"
              "test_a_grant_of_another_workspace_cannot_be_revoked_from_this_one",
       breaks="a grant id is revoked whichever workspace it belongs to",
       served=False)
def _revoke_any(self: GrantService, grant_id: str) -> Grant:
    if self._store.get_grant(grant_id) is None:
        raise RuntimeRefused(ErrorCode.GRANT_NOT_FOUND, f"unknown grant {grant_id}")
    self._store.revoke_grant(grant_id)
    revoked = self._store.get_grant(grant_id)
    assert revoked is not None
    return revoked


@fault("login-evicts-another-account", ids=("AV-03", "SV-03"),
       replaces="labfy_ref.server.auth:Authenticator._make_room",
       killer="qualification/security/test_auth_unit.py::"
              "test_logging_in_many_times_never_ends_another_accounts_session",
       breaks="the per-account cap evicts the oldest session of the whole role, another "
              "user's too",
       served=False)
def _evict_by_role(self: Authenticator, role: Role, name: str) -> None:
    now = self.clock()
    for sid in [s for s, v in self._sessions.items() if v.expires_at <= now]:
        del self._sessions[sid]
    own = [s for s, v in self._sessions.items() if v.role is role]  # the name is not compared
    for sid in own[:max(0, len(own) - MAX_SESSIONS_PER_ACCOUNT + 1)]:
        del self._sessions[sid]
    if sum(1 for v in self._sessions.values() if v.role is role) >= MAX_SESSIONS_PER_ROLE:
        raise RuntimeRefused(ErrorCode.TOO_MANY_SESSIONS, f"too many {role.value} sessions")


@fault("work-task-of-another-workspace", ids=("WK-11",),
       replaces="labfy_ref.work.store.tasks:WorkStore.get_task",
       killer="qualification/work/test_store.py::test_another_workspaces_task_is_task_not_found",
       breaks="a task is found by its id alone, whichever workspace submitted it",
       served=False)
def _any_task(self: WorkStore, task_id: str) -> Task:
    with self._db.transaction(write=False) as conn:
        row = conn.execute(select(tasks).where(tasks.c.id == task_id)).first()
    if row is None:
        raise RuntimeRefused(ErrorCode.TASK_NOT_FOUND, f"no task {task_id}")
    return Task.of(row)


# -- 2. time and ordering while a turn is still running ----------------------------------------

@fault("expired-approval-decidable", ids=("BR-12",),
       replaces="labfy_ref.bridge.engine:decide",
       killer=f"{FLOWS}::"
              f"test_an_approval_expires_while_its_turn_is_alive_and_then_refuses_a_decision",
       breaks="only a resolved future counts as answered: an expired (or cancelled) approval "
              "of a live turn can still be decided", served=True)
def _decide_unresolved(approvals: dict[str, PendingApproval], approval_id: str,
                       decision: Approval) -> None:
    approval = approvals.get(approval_id)
    if approval is None or approval.future.done():  # its state is not looked at
        raise RuntimeRefused(ErrorCode.APPROVAL_NOT_PENDING, "approval is not pending")
    approval.state = "decided"
    approval.future.set_result(decision)


@fault("cancel-during-approval-is-a-rejection", ids=("BR-05", "BR-12"),
       replaces="labfy_ref.bridge.loop:_StreamPort.approve",
       killer=f"{KIT}::test_a_client_that_leaves_while_asked_for_approval_cancels_the_turn",
       breaks="a cancel that lands while the human is asked is taken as 'Deny': the turn goes "
              "on and asks the model again", served=True)
async def _cancel_is_rejection(self: _StreamPort, call_id: str,
                               action: ToolCall) -> Approval | None:
    try:
        decision: Approval | None = await _approve(self, call_id, action)
    except asyncio.CancelledError:
        return Approval.REJECTED
    return decision


@fault("delete-leaves-the-turn-running", ids=("BR-08", "BR-05"),
       replaces="labfy_ref.bridge.engine:ReferenceEngine.delete_session",
       killer=f"{KIT}::test_deleting_a_session_while_the_model_answers_cancels_the_turn_first",
       breaks="delete removes the log at once and never cancels the turn that is answering",
       served=True)
async def _delete_log_only(self: Any, session_id: str) -> None:
    if not self._store.deletes:
        raise RuntimeRefused(ErrorCode.DELETE_UNSUPPORTED, "this session store cannot delete")
    self._state(session_id)
    with self.catalog.own_change():
        self._store.delete(session_id)
    self.catalog.deleted(session_id)


@fault("cancel-of-the-running-turn-left-to-its-task", ids=("RT-05", "RT-02"),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.cancel",
       killer="qualification/conformance/test_runtime_flows.py::"
              "test_a_cancelled_turn_runs_no_tool_the_model_asked_for_afterwards",
       breaks="cancelling the turn being driven only cancels its task: it stays RUNNING "
              "for good", served=True)
def _cancel_by_task(self: AgentRuntime, turn_id: str) -> Any:
    turn = self.get(turn_id)
    if not turn.state.terminal and self._current is not None and self._current[0] == turn_id:
        self._current[1].cancel()  # "the task's cancellation will end the turn"
        return turn
    return _cancel(self, turn_id)


# -- 3. bounds of human-supplied fields --------------------------------------------------------

@fault("sessions-page-of-200-refused", ids=("BR-15",),
       replaces="labfy_ref.bridge.engine:ReferenceEngine.list_sessions",
       killer=f"{KIT}::test_session_pages_admit_limit_1_to_200_exactly",
       breaks="limit is checked against range(1, 200): a page of 200 is refused 422",
       served=True)
def _short_range(self: Any, limit: int = PAGE_SIZE, cursor: str | None = None) -> dict[str, Any]:
    if isinstance(limit, bool) or limit not in range(1, MAX_PAGE_SIZE):
        raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, f"limit must be 1-{MAX_PAGE_SIZE}")
    rows, next_cursor = self.catalog.page(limit, cursor)
    return {"sessions": [self._summary_view(row) for row in rows], "next_cursor": next_cursor}


@fault("work-full-last-page-has-a-cursor", ids=("WK-05",),
       replaces="labfy_ref.server.work_routes:task_page",
       killer=f"{KIT}::test_a_work_page_that_ends_the_list_exactly_has_no_next_cursor",
       breaks="every full page gets a next_cursor, the last one too (then an empty page)",
       served=True)
def _page_without_lookahead(store: WorkStore, *, state: str | None = None,
                            limit: int = DEFAULT_LIMIT,
                            cursor: str | None = None) -> dict[str, Any]:
    found = store.list_tasks(state=state, limit=limit, before=cursor)
    last = found[-1].id if len(found) == limit else None
    return {"tasks": [task.as_dict() for task in found], "next_cursor": last}


@fault("request-id-keyed-with-its-message", ids=("RT-04",),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.start_turn",
       killer=f"{KIT}::test_a_client_request_id_retried_with_another_message_is_the_same_turn",
       breaks="a client_request_id retried with a different message starts a second turn",
       served=True)
def _keyed_with_message(self: AgentRuntime, message: str,
                        client_request_id: str | None = None) -> Any:
    if client_request_id is not None:
        existing = self._by_request.get(client_request_id)
        if existing in self._turns and self._turns[existing].message != message:
            del self._by_request[client_request_id]  # "another body: another request"
    return _start_turn(self, message, client_request_id)


@fault("retry-refused-while-the-queue-is-full", ids=("RT-04", "RT-03"),
       replaces="labfy_ref.runtime.runtime:AgentRuntime.start_turn",
       killer=f"{ENDINGS}::test_a_retried_start_while_the_queue_is_full_is_the_same_turn",
       breaks="capacity is checked before the client_request_id: a retry of a queued turn "
              "is 429 QUEUE_FULL",
       served=False)
def _capacity_first(self: AgentRuntime, message: str,
                    client_request_id: str | None = None) -> Any:
    self._refuse_if_closed()
    self._check_capacity()
    return _start_turn(self, message, client_request_id)


# -- 4. a rule tested with one kind of outcome only --------------------------------------------

@fault("repeated-refusal-not-a-failure", ids=("GW-05",),
       replaces="labfy_ref.runtime.driver:Conversation.answer",
       killer=f"{KIT}::test_a_failed_call_repeated_at_once_ends_repeated_tool_failure",
       breaks="only service errors arm REPEATED_TOOL_FAILURE: the same refused call may be "
              "repeated forever", served=True)
def _refusals_forgotten(self: Conversation, outcome: ToolOutcome, catalog: ToolCatalog, *,
                        exempt: bool = False, rules: frozenset[str] = ALL_RULES) -> None:
    _answer(self, outcome, catalog, exempt=exempt, rules=rules)
    if outcome.status == "refused":
        self.last_failure = None


@fault("repeated-error-not-a-failure", ids=("GW-05",),
       replaces="labfy_ref.runtime.driver:Conversation.answer",
       killer=f"{KIT}::test_a_failed_call_repeated_at_once_ends_repeated_tool_failure",
       breaks="only refusals arm REPEATED_TOOL_FAILURE: a call the service failed (a missing "
              "file) may be repeated forever", served=True)
def _errors_forgotten(self: Conversation, outcome: ToolOutcome, catalog: ToolCatalog, *,
                      exempt: bool = False, rules: frozenset[str] = ALL_RULES) -> None:
    _answer(self, outcome, catalog, exempt=exempt, rules=rules)
    if outcome.status == "error":
        self.last_failure = None


@fault("tool-budget-counts-successes-only", ids=("RT-03",),
       replaces="labfy_ref.protocol.narrowing.observations:Observations.observe",
       killer=f"{ENDINGS}::test_refused_calls_spend_the_tool_call_budget",
       breaks="a refused or failed call costs nothing of max_tool_calls",
       served=False)
def _counts_successes(self: Observations, tool_id: str, arguments: Any, result: Any,
                      catalog: ToolCatalog | None = None) -> Observations:
    seen = _observe(self, tool_id, arguments, result, catalog)
    if result.get("ok") is True:
        return seen
    return dataclasses.replace(seen, tool_calls=self.tool_calls)


@fault("usage-ledger-records-successes-only", ids=("BR-14",),
       replaces="labfy_ref.gateway.usage:UsageService.record",
       killer=f"{KIT}::test_a_failed_model_call_is_recorded_with_its_error_code",
       breaks="a model call that failed is never recorded in the usage ledger", served=True)
def _record_ok_only(self: UsageService, model: str, usage: Usage, latency_ms: float,
                    outcome: str, caller: str) -> None:
    if outcome == "ok":
        _record(self, model, usage, latency_ms, outcome, caller)


# -- 5. filesystem attacks on the stores beside files/ -----------------------------------------

@fault("session-log-hard-link-accepted", ids=("BR-07",),
       replaces="labfy_ref.bridge.store.logs:JsonlSessionStore._open",
       killer=f"{SESSIONS}::test_a_hard_linked_session_log_is_session_invalid",
       breaks="a session log with a second hard link (to a file outside sessions/) is opened",
       served=False)
def _open_linked(self: jsonl.JsonlSessionStore, session_id: str, flags: int) -> int:
    try:
        fd = os.open(self._name(session_id), flags | jsonl._OPEN, 0o600, dir_fd=self._dir)
    except FileNotFoundError:
        raise jsonl._not_found(session_id) from None
    except OSError as exc:
        raise SessionInvalid(f"session {session_id}: {exc.strerror}") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # st_nlink is not looked at
        os.close(fd)
        raise SessionInvalid(f"session {session_id} is not a plain file")
    return fd


@fault("session-index-hard-link-kept", ids=("WS-06",),
       replaces="labfy_ref.bridge.store.index:_remove_strays",
       killer="qualification/bridge/test_session_index.py::"
              "test_a_hard_linked_session_index_is_replaced_not_written_through",
       breaks="only symlinks and non-files are removed from the index's names: a hard link "
              "to an outside file is written through",
       served=False)
def _strays_symlinks_only(path: Path) -> None:
    for name in session_index._files(path):
        if name.is_symlink() or (name.exists() and not name.is_file()):
            name.unlink()


@fault("upgrade-backup-by-umask", ids=("WS-06", "WS-05"),
       replaces="labfy_ref.workspace.migrations:_reserve_backup",
       killer="qualification/workspace/test_upgrade.py::"
              "test_an_upgrade_backup_is_owner_only_even_of_a_world_readable_store",
       breaks="the upgrade backup is created 0666 & ~umask (0644 under 022), not 0600",
       served=False)
def _reserve_by_umask(path: Path, version: int) -> Path:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1, 100):
        suffix = "" if attempt == 1 else f"-{attempt}"
        target = path.with_name(f"{path.name}.v{version}-{stamp}{suffix}.bak")
        with contextlib.suppress(FileExistsError):
            os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW,
                             0o666))
            return target
    raise OSError("too many backups made this second")


# -- 6. numbers as the provider reported them --------------------------------------------------

@fault("unreported-tokens-summed-as-zero", ids=("BR-14",),
       replaces="labfy_ref.protocol.exchange:Usage.__add__",
       killer=f"{KIT}::test_a_token_count_the_provider_never_reported_stays_null",
       breaks="summing usage counts an unreported count as 0: null becomes 0 in round "
              "events and turn totals", served=True)
def _add_unknown_as_zero(self: Usage, other: Usage) -> Usage:
    return Usage((self.prompt_tokens or 0) + (other.prompt_tokens or 0),
                 (self.completion_tokens or 0) + (other.completion_tokens or 0),
                 (self.cached_tokens or 0) + (other.cached_tokens or 0))


@fault("ledger-unreported-tokens-as-zero", ids=("BR-14",),
       replaces="labfy_ref.gateway.usage:UsageService.record",
       killer=f"{KIT}::test_a_failed_model_call_is_recorded_with_its_error_code",
       breaks="the usage ledger stores an unreported token count as 0", served=True)
def _record_unknown_as_zero(self: UsageService, model: str, usage: Usage, latency_ms: float,
                            outcome: str, caller: str) -> None:
    said = Usage(usage.prompt_tokens or 0, usage.completion_tokens or 0,
                 usage.cached_tokens or 0)
    _record(self, model, said, latency_ms, outcome, caller)


@fault("turn-usage-last-round-only", ids=("BR-14", "BR-13"),
       replaces="labfy_ref.bridge.stream:StreamHandle.add_usage",
       killer=f"{KIT}::test_a_completions_usage_sums_every_model_call_of_its_turn",
       breaks="a turn's usage is its last model call's, not the sum over its rounds",
       served=True)
def _last_round_usage(self: StreamHandle, usage: Usage) -> None:
    if usage != Usage():
        self.usage = usage


@fault("usage-latency-in-seconds", ids=("BR-14",),
       replaces="labfy_ref.gateway.usage:UsageService.record",
       killer=f"{KIT}::test_a_usage_records_latency_is_in_milliseconds",
       breaks="latency_ms is recorded in seconds (a 300 ms call reads 0.3)", served=True)
def _record_seconds(self: UsageService, model: str, usage: Usage, latency_ms: float,
                    outcome: str, caller: str) -> None:
    _record(self, model, usage, latency_ms / 1000.0, outcome, caller)
