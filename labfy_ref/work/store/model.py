"""The typed values the Work store hands out, and their pinned wire shapes (SPEC §15)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from sqlalchemy import Row

from labfy_ref.modes import Approval
from labfy_ref.work.store.fields import load_json
from labfy_ref.work.store.schema import PENDING


class State(enum.StrEnum):
    """A task's state, and its runs' (SPEC §15)."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    WAITING_APPROVAL = "WAITING_APPROVAL"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def finished(self) -> bool:
        """No worker will run it again."""
        return self in FINISHED


FINISHED = frozenset({State.COMPLETED, State.FAILED, State.CANCELLED})


class EffectStatus(enum.StrEnum):
    """``started`` is written before a tool effect runs; the others after it."""

    STARTED = "started"
    COMPLETED = "completed"
    REFUSED = "refused"


@dataclasses.dataclass(frozen=True, slots=True)
class Task:
    """A submitted piece of work: one message, run by one run at a time."""

    id: str
    state: State
    message: str
    final_text: str | None
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, row: Row[Any]) -> Task:
        """The task stored in ``row``."""
        return cls(row.id, State(row.state), row.message, row.final_text, row.created_at,
                   row.updated_at)

    def as_dict(self) -> dict[str, Any]:
        """The pinned ``task`` shape."""
        return {"id": self.id, "state": self.state.value, "message": self.message,
                "final_text": self.final_text, "created_at": self.created_at,
                "updated_at": self.updated_at}


@dataclasses.dataclass(frozen=True, slots=True)
class Run:
    """One execution of a task; ``attempt`` counts its claims."""

    id: str
    task_id: str
    state: State
    attempt: int
    worker: str | None
    lease_expires_at: str | None
    created_at: str
    updated_at: str

    @classmethod
    def of(cls, row: Row[Any]) -> Run:
        """The run stored in ``row``."""
        return cls(row.id, row.task_id, State(row.state), row.attempt, row.worker,
                   row.lease_expires_at, row.created_at, row.updated_at)

    def as_dict(self) -> dict[str, Any]:
        """The pinned ``runs[]`` shape."""
        return {"id": self.id, "state": self.state.value, "attempt": self.attempt,
                "worker": self.worker, "lease_expires_at": self.lease_expires_at}


@dataclasses.dataclass(frozen=True, slots=True)
class Submission:
    """What ``submit`` made: the task and its first run."""

    task: Task
    run: Run

    def as_dict(self) -> dict[str, Any]:
        """``{"task": {"id", "run_id", "state"}}`` as ``work submit`` prints it (SPEC §14)."""
        return {"task": {"id": self.task.id, "run_id": self.run.id,
                         "state": self.task.state.value}}


@dataclasses.dataclass(frozen=True, slots=True)
class Claim:
    """A worker's hold on a run until ``lease_expires_at``.

    Every write made on the run's behalf names its claim; the store accepts it only
    while the run is still ``RUNNING`` under this worker and this attempt, so a worker
    whose lease expired and was taken over can no longer write (fencing).
    """

    run_id: str
    task_id: str
    worker: str
    attempt: int
    lease_expires_at: str


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One entry of a task's event log; ``seq`` counts from 1 per task."""

    task_id: str
    seq: int
    run_id: str | None
    type: str
    data: Any
    at: str

    @classmethod
    def of(cls, row: Row[Any]) -> Event:
        """The event stored in ``row``."""
        return cls(row.task_id, row.seq, row.run_id, row.type, load_json(row.data), row.at)

    def as_dict(self) -> dict[str, Any]:
        """The pinned ``events[]`` shape."""
        return {"seq": self.seq, "type": self.type, "data": self.data, "at": self.at}


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message of a run's conversation, at ``position`` from 1."""

    run_id: str
    position: int
    role: str
    content: str
    at: str


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """A model request of one run step and the response stored for it (provider replay)."""

    run_id: str
    step: int
    request: Any
    response: Any
    at: str


@dataclasses.dataclass(frozen=True, slots=True)
class Effect:
    """One tool effect, keyed by (run, step, call); ``attempt`` is the claim that began it."""

    id: str
    run_id: str
    step: int
    call: int
    attempt: int
    tool_id: str
    arguments: Any
    status: EffectStatus
    result: Any
    started_at: str
    completed_at: str | None

    @classmethod
    def of(cls, row: Row[Any]) -> Effect:
        """The effect stored in ``row``."""
        result = None if row.result is None else load_json(row.result)
        return cls(row.id, row.run_id, row.step, row.call, row.attempt, row.tool_id,
                   load_json(row.arguments), EffectStatus(row.status), result,
                   row.started_at, row.completed_at)

    def as_dict(self) -> dict[str, Any]:
        """The pinned ``effects[]`` shape."""
        return {"id": self.id, "run_id": self.run_id, "step": self.step,
                "tool_id": self.tool_id, "arguments": self.arguments,
                "status": self.status.value, "result": self.result}


@dataclasses.dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A question to a human about one tool call of a run, answered at most once."""

    id: str
    task_id: str
    run_id: str
    step: int
    call: int
    tool_id: str
    summary: str
    #: None while pending.
    decision: Approval | None
    created_at: str
    answered_at: str | None

    @classmethod
    def of(cls, row: Row[Any]) -> ApprovalRequest:
        """The approval stored in ``row``."""
        return cls(row.id, row.task_id, row.run_id, row.step, row.call, row.tool_id,
                   row.summary, Approval.parse(row.decision), row.created_at, row.answered_at)

    def as_dict(self) -> dict[str, Any]:
        """The pinned ``approvals[]`` shape."""
        return {"id": self.id, "run_id": self.run_id, "tool_id": self.tool_id,
                "summary": self.summary,
                "decision": PENDING if self.decision is None else self.decision.value}
