"""Turn states and their explicit transitions (RT-02). Terminal states are final."""

from __future__ import annotations

import enum

from labfy_ref.errors import IllegalTransition


class TurnState(enum.StrEnum):
    """The nine states of a turn."""

    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    AUTHORIZATION_REQUIRED = "AUTHORIZATION_REQUIRED"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    MODEL_UNAVAILABLE = "MODEL_UNAVAILABLE"
    MODEL_PROTOCOL_ERROR = "MODEL_PROTOCOL_ERROR"
    BUDGET_EXHAUSTED = "BUDGET_EXHAUSTED"

    @property
    def terminal(self) -> bool:
        """No transition leaves a terminal state."""
        return self not in _NON_TERMINAL


_NON_TERMINAL = frozenset({TurnState.QUEUED, TurnState.RUNNING,
                           TurnState.AUTHORIZATION_REQUIRED})
_ENDINGS = frozenset(s for s in TurnState if s not in _NON_TERMINAL)

#: Every allowed transition; anything else is a bug, raised as IllegalTransition.
TRANSITIONS: dict[TurnState, frozenset[TurnState]] = {
    TurnState.QUEUED: frozenset({TurnState.RUNNING, TurnState.CANCELLED}),
    TurnState.RUNNING: _ENDINGS | {TurnState.AUTHORIZATION_REQUIRED},
    TurnState.AUTHORIZATION_REQUIRED: frozenset({TurnState.QUEUED, TurnState.CANCELLED}),
    **{state: frozenset() for state in _ENDINGS},
}


def check_transition(current: TurnState, target: TurnState) -> None:
    """Raise :class:`IllegalTransition` unless ``current -> target`` is allowed."""
    if target not in TRANSITIONS[current]:
        raise IllegalTransition(f"turn cannot go from {current.value} to {target.value}")
