"""What a run leaves behind: its messages, provider replies, effects, events, approvals.

Writes made on a run's behalf name its :class:`~labfy_ref.work.store.model.Claim` and are
fenced by it (:meth:`StoreBase._fence`). Each value is checked
(:mod:`labfy_ref.work.store.fields`) before its transaction begins.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func, insert, select, update

from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.ids import new_id
from labfy_ref.modes import Approval
from labfy_ref.work.store import fields
from labfy_ref.work.store.base import StoreBase
from labfy_ref.work.store.model import (
    ApprovalRequest,
    Claim,
    Effect,
    EffectStatus,
    Event,
    Message,
    Reply,
    State,
)
from labfy_ref.work.store.schema import (
    PENDING,
    ROLES,
    approvals,
    effects,
    events,
    messages,
    replies,
    runs,
    tasks,
)

#: Most events one call returns.
MAX_EVENTS_PAGE = 1000


class RecordsMixin(StoreBase):
    """The per-run records of :class:`~labfy_ref.work.store.tasks.WorkStore`."""

    # -- messages ---------------------------------------------------------------------------

    def append_message(self, claim: Claim, role: str, content: str) -> Message:
        """Append one message to the run's conversation; its position counts from 1."""
        if role not in ROLES:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"role must be one of {', '.join(ROLES)}")
        content = fields.text(content, "content", allow_empty=True)
        with self._db.transaction(write=True) as conn:
            self._fence(conn, claim)
            position = conn.execute(update(runs).where(runs.c.id == claim.run_id).values(
                message_count=runs.c.message_count + 1).returning(runs.c.message_count)
            ).scalar_one()
            at = self._now()
            conn.execute(insert(messages).values(run_id=claim.run_id, position=position,
                                                 role=role, content=content, at=at))
        return Message(claim.run_id, position, role, content, at)

    def list_messages(self, run_id: str) -> list[Message]:
        """The run's conversation in order."""
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(select(messages).where(messages.c.run_id == run_id)
                                .order_by(messages.c.position)).all()
        return [Message(r.run_id, r.position, r.role, r.content, r.at) for r in rows]

    # -- provider replay ----------------------------------------------------------------------

    def record_reply(self, claim: Claim, step: int, request: Any, response: Any) -> Reply:
        """Store the model's response to the run's ``step``; the first one stored wins.

        When a reply is already stored for the step it is returned unchanged, so a
        step is answered once however often a driver asks (WK-04).
        """
        step = fields.count(step, "step", minimum=1)
        stored_request = fields.dump_json(request, "request")
        stored_response = fields.dump_json(response, "response")
        with self._db.transaction(write=True) as conn:
            self._fence(conn, claim)
            found = self._reply(conn, claim.run_id, step)
            if found is not None:
                return found
            conn.execute(insert(replies).values(
                run_id=claim.run_id, step=step, request=stored_request,
                response=stored_response, at=self._now()))
            reply = self._reply(conn, claim.run_id, step)
        assert reply is not None  # just inserted in this transaction
        return reply

    def get_reply(self, run_id: str, step: int) -> Reply | None:
        """The stored response to the run's ``step``, or None if it was never answered."""
        with self._db.transaction(write=False) as conn:
            return self._reply(conn, run_id, step)

    @staticmethod
    def _reply(conn: Any, run_id: str, step: int) -> Reply | None:
        row = conn.execute(select(replies).where(replies.c.run_id == run_id,
                                                 replies.c.step == step)).first()
        if row is None:
            return None
        return Reply(row.run_id, row.step, fields.load_json(row.request),
                     fields.load_json(row.response), row.at)

    # -- effects -------------------------------------------------------------------------------

    def begin_effect(self, claim: Claim, step: int, call: int, tool_id: str,
                     arguments: Any) -> Effect:
        """Record that the run's (``step``, ``call``) effect is about to run; commit first.

        If that key is already recorded, the stored effect is returned unchanged: a
        driver replaying the run recognises it by its status (``started`` by an earlier
        attempt means it may have happened: check the target, never run it blindly).
        """
        step = fields.count(step, "step", minimum=1)
        call = fields.count(call, "call")
        tool_id = fields.name(tool_id, "tool_id")
        stored = fields.dump_json(arguments, "arguments")
        with self._db.transaction(write=True) as conn:
            self._fence(conn, claim)
            key = (effects.c.run_id == claim.run_id, effects.c.step == step,
                   effects.c.call == call)
            row = conn.execute(select(effects).where(*key)).first()
            if row is None:
                conn.execute(insert(effects).values(
                    id=new_id("eff"), run_id=claim.run_id, step=step, call=call,
                    attempt=claim.attempt, tool_id=tool_id, arguments=stored,
                    status=EffectStatus.STARTED.value, started_at=self._now()))
                row = conn.execute(select(effects).where(*key)).one()
        return Effect.of(row)

    def record_target(self, claim: Claim, effect: Effect, data: Any) -> Event:
        """The effect's target event, appended only while ``claim`` holds the run.

        The fence and the event are one transaction, the last store write before the
        effect itself: a worker paused past its lease anywhere before this point
        is refused ``LEASE_NOT_HELD`` here and never reaches the effect.
        """
        fields.dump_json(data, "event data")
        with self._db.transaction(write=True) as conn:
            self._fence(conn, claim)
            return self._event(conn, claim.task_id, "effect.target",
                               {"effect_id": effect.id, "step": effect.step,
                                "tool_id": effect.tool_id, **data}, claim.run_id)

    def complete_effect(self, claim: Claim, effect_id: str, result: Any, *,
                        refused: bool = False) -> Effect:
        """Record the outcome of a started effect (``completed``, or ``refused``).

        ``EFFECT_NOT_STARTED`` when the effect is not the run's or is no longer open.
        """
        stored = fields.dump_json(result, "result")
        status = EffectStatus.REFUSED if refused else EffectStatus.COMPLETED
        with self._db.transaction(write=True) as conn:
            self._fence(conn, claim)
            done = conn.execute(update(effects).where(
                effects.c.id == effect_id, effects.c.run_id == claim.run_id,
                effects.c.status == EffectStatus.STARTED.value,
            ).values(status=status.value, result=stored, completed_at=self._now()))
            if done.rowcount != 1:
                raise RuntimeRefused(ErrorCode.EFFECT_NOT_STARTED,
                                     f"effect {effect_id} of run {claim.run_id} is not open")
            row = conn.execute(select(effects).where(effects.c.id == effect_id)).one()
        return Effect.of(row)

    def find_effect(self, run_id: str, step: int, call: int) -> Effect | None:
        """The effect recorded for the run's (``step``, ``call``), if any."""
        with self._db.transaction(write=False) as conn:
            row = conn.execute(select(effects).where(
                effects.c.run_id == run_id, effects.c.step == step,
                effects.c.call == call)).first()
        return None if row is None else Effect.of(row)

    def list_effects(self, run_id: str) -> list[Effect]:
        """The run's effects in (step, call) order."""
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(select(effects).where(effects.c.run_id == run_id)
                                .order_by(effects.c.step, effects.c.call)).all()
        return [Effect.of(row) for row in rows]

    # -- events --------------------------------------------------------------------------------

    def append_event(self, task_id: str, kind: str, data: Any,
                     run_id: str | None = None) -> Event:
        """Append an event to the task's log (``TASK_NOT_FOUND`` if there is no such task)."""
        kind = fields.name(kind, "event type")
        fields.dump_json(data, "event data")
        with self._db.transaction(write=True) as conn:
            return self._event(conn, task_id, kind, data, run_id)

    def list_events(self, task_id: str, *, after: int = 0,
                    limit: int = MAX_EVENTS_PAGE) -> list[Event]:
        """The task's events with ``seq`` above ``after`` (the cursor), oldest first."""
        after = fields.count(after, "after")
        limit = fields.count(limit, "limit", minimum=1)
        if limit > MAX_EVENTS_PAGE:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"limit must be 1-{MAX_EVENTS_PAGE}")
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(select(events).where(events.c.task_id == task_id,
                                                     events.c.task_id.in_(self._my_task_ids()),
                                                     events.c.seq > after)
                                .order_by(events.c.seq).limit(limit)).all()
        return [Event.of(row) for row in rows]

    # -- approvals -----------------------------------------------------------------------------

    def request_approval(self, claim: Claim, step: int, call: int, tool_id: str,
                         summary: str) -> ApprovalRequest:
        """Ask a human about the run's (``step``, ``call``) and park the run until answered.

        The run and its task go to ``WAITING_APPROVAL`` and the run is released (no
        worker, no lease): the claim ends here, and the run is claimable again once
        every approval it asked for is answered.
        """
        step = fields.count(step, "step", minimum=1)
        call = fields.count(call, "call")
        tool_id = fields.name(tool_id, "tool_id")
        summary = fields.name(summary, "summary")
        waiting = State.WAITING_APPROVAL.value
        with self._db.transaction(write=True) as conn:
            self._fence(conn, claim, state=waiting, worker=None, lease_expires_at=None)
            now = self._now()
            approval_id = new_id("appr")
            conn.execute(insert(approvals).values(
                id=approval_id, task_id=claim.task_id, run_id=claim.run_id, step=step,
                call=call, tool_id=tool_id, summary=summary,
                decision=PENDING, created_at=now))
            conn.execute(update(tasks).where(tasks.c.id == claim.task_id)
                         .values(state=waiting, updated_at=now))
            self._event(conn, claim.task_id, "approval.requested",
                        {"approval_id": approval_id, "tool_id": tool_id, "summary": summary},
                        claim.run_id)
            row = conn.execute(select(approvals).where(approvals.c.id == approval_id)).one()
        return ApprovalRequest.of(row)

    def answer_approval(self, approval_id: str, decision: str) -> ApprovalRequest:
        """Answer a pending approval once; a second answer is ``APPROVAL_NOT_PENDING``.

        When the run has no other pending approval it is queued again, for any worker.
        """
        answer = Approval.parse(decision)
        if answer is None:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 "decision must be allowed-once or rejected")
        with self._db.transaction(write=True) as conn:
            row = conn.execute(select(approvals).where(
                approvals.c.id == approval_id,
                approvals.c.task_id.in_(self._my_task_ids()))).first()
            if row is None:  # unknown, or another workspace's: never answered from here
                raise RuntimeRefused(ErrorCode.APPROVAL_NOT_FOUND, f"no approval {approval_id}")
            now = self._now()
            answered = conn.execute(update(approvals).where(
                approvals.c.id == approval_id, approvals.c.decision == PENDING,
            ).values(decision=answer.value, answered_at=now))
            if answered.rowcount != 1:
                raise RuntimeRefused(ErrorCode.APPROVAL_NOT_PENDING,
                                     f"approval {approval_id} was already answered")
            task_state = conn.execute(select(tasks.c.state)
                                      .where(tasks.c.id == row.task_id)).scalar_one()
            if State(task_state).finished:
                raise RuntimeRefused(ErrorCode.APPROVAL_NOT_PENDING,
                                     f"approval {approval_id} belongs to a {task_state} task")
            self._wake(conn, row.run_id, row.task_id, now)
            self._event(conn, row.task_id, "approval.answered",
                        {"approval_id": approval_id, "decision": answer.value}, row.run_id)
            row = conn.execute(select(approvals).where(approvals.c.id == approval_id)).one()
        return ApprovalRequest.of(row)

    @staticmethod
    def _wake(conn: Any, run_id: str, task_id: str, now: str) -> None:
        """Queue a waiting run again once none of its approvals is pending."""
        pending = conn.execute(select(func.count()).select_from(approvals).where(
            approvals.c.run_id == run_id,
            approvals.c.decision == PENDING)).scalar_one()
        if pending:
            return
        waiting, queued = State.WAITING_APPROVAL.value, State.QUEUED.value
        woken = conn.execute(update(runs).where(runs.c.id == run_id, runs.c.state == waiting)
                             .values(state=queued, updated_at=now))
        if woken.rowcount == 1:
            conn.execute(update(tasks).where(tasks.c.id == task_id, tasks.c.state == waiting)
                         .values(state=queued, updated_at=now))

    def get_approval(self, approval_id: str) -> ApprovalRequest:
        """One approval, or ``APPROVAL_NOT_FOUND``."""
        with self._db.transaction(write=False) as conn:
            row = conn.execute(select(approvals).where(
                approvals.c.id == approval_id,
                approvals.c.task_id.in_(self._my_task_ids()))).first()
        if row is None:
            raise RuntimeRefused(ErrorCode.APPROVAL_NOT_FOUND, f"no approval {approval_id}")
        return ApprovalRequest.of(row)

    def list_approvals(self, task_id: str) -> list[ApprovalRequest]:
        """The task's approvals, oldest first."""
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(select(approvals).where(approvals.c.task_id == task_id,
                                                        approvals.c.task_id.in_(
                                                            self._my_task_ids()))
                                .order_by(approvals.c.created_at, approvals.c.id)).all()
        return [ApprovalRequest.of(row) for row in rows]
