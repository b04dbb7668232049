"""A turn: its bounded in-memory state and its wire shape (SPEC §15)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import LabfyError
from labfy_ref.gateway import ToolOutcome
from labfy_ref.runtime.driver import Conversation
from labfy_ref.runtime.states import TurnState, check_transition

#: Creation order of turns: "newest first" never depends on the clock's resolution.
_SEQUENCE = itertools.count(1)


@dataclasses.dataclass(slots=True)
class ToolCallRecord:
    """One call as shown on the wire."""

    call_id: str
    tool_id: str
    arguments: dict[str, Any]
    status: str
    result: dict[str, Any]

    def as_json(self) -> dict[str, Any]:
        """Wire shape of one entry of ``tool_calls``."""
        return dataclasses.asdict(self)


@dataclasses.dataclass(slots=True)
class Turn:
    """A turn owned by the runtime; only the runtime mutates it."""

    id: str
    message: str
    client_request_id: str | None
    state: TurnState = TurnState.QUEUED
    tool_calls: list[ToolCallRecord] = dataclasses.field(default_factory=list)
    final_text: str | None = None
    #: A completed turn's checked facts (PR-09): found, derived or not found.
    facts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    error: dict[str, str] | None = None
    authorization: dict[str, str] | None = None
    created_at: str = dataclasses.field(default_factory=lambda: iso(utcnow()))
    updated_at: str = ""
    conversation: Conversation = dataclasses.field(
        default_factory=lambda: Conversation.start([]))
    resume_campaign: str | None = None
    sequence: int = dataclasses.field(default_factory=lambda: next(_SEQUENCE))

    @property
    def rounds(self) -> int:
        """Model rounds used so far."""
        return self.conversation.rounds

    def move(self, target: TurnState) -> None:
        """Transition to ``target`` (checked against the table of RT-02)."""
        check_transition(self.state, target)
        self.state = target
        self.updated_at = iso(utcnow())

    def fail(self, target: TurnState, error: LabfyError) -> None:
        """End in ``target`` with an error ``{code, message}``."""
        self.error = error.as_dict()
        self.move(target)

    def add_call(self, call_id: str, outcome: ToolOutcome) -> ToolCallRecord:
        """Record a gateway outcome for the wire."""
        record = ToolCallRecord(call_id, outcome.tool_id, outcome.arguments, outcome.status,
                                outcome.result)
        self.tool_calls.append(record)
        return record

    def as_json(self) -> dict[str, Any]:
        """Wire shape of SPEC §15 (the conversation stays private)."""
        return {
            "id": self.id, "state": self.state.value,
            "client_request_id": self.client_request_id, "message": self.message,
            "rounds": self.rounds, "tool_calls": [c.as_json() for c in self.tool_calls],
            "final_text": self.final_text, "facts": self.facts, "error": self.error,
            "authorization": self.authorization, "created_at": self.created_at,
            "updated_at": self.updated_at or self.created_at,
        }
