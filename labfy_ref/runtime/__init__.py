"""The agent runtime: turn loop, states, budgets, events (SPEC §6)."""

from labfy_ref.errors import IllegalTransition
from labfy_ref.runtime.events import Event, EventLog
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.runtime import AgentRuntime
from labfy_ref.runtime.states import TRANSITIONS, TurnState
from labfy_ref.runtime.turn import ToolCallRecord, Turn

__all__ = ["TRANSITIONS", "AgentRuntime", "Event", "EventLog", "IllegalTransition",
           "RuntimeLimits", "ToolCallRecord", "Turn", "TurnState"]
