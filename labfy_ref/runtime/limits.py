"""Caps and budgets of the runtime (RT-03), reported in status."""

from __future__ import annotations

import dataclasses
from typing import Any

from labfy_ref.protocol.narrowing import DEFAULT_CONCLUDE_AFTER, DEFAULT_GUIDANCE, Guidance


@dataclasses.dataclass(frozen=True, slots=True)
class RuntimeLimits:
    """Every bound of the runtime; reaching a budget ends the turn BUDGET_EXHAUSTED."""

    max_queued_turns: int = 16
    max_live_turns: int = 32
    max_retained_turns: int = 256
    max_events: int = 128
    max_rounds: int = 16
    max_tool_calls: int = 64
    max_context_bytes: int = 1024 * 1024
    max_result_bytes: int = 256 * 1024
    max_message_chars: int = 8000
    #: After this many tool calls only concluding actions are offered (PR-06; 0 = never).
    conclude_after: int = DEFAULT_CONCLUDE_AFTER
    #: The narrowing's guidance profile in force (``--guidance``, PR-08); the guards hold
    #: under every one.
    guidance: Guidance = DEFAULT_GUIDANCE

    @property
    def narrowing_rules(self) -> frozenset[str]:
        """Every narrowing rule in force: the guards and the profile's guidance."""
        return self.guidance.profile.names

    def as_json(self) -> dict[str, Any]:
        """The limits as reported by ``GET /api/v1/agent-runtime/status``."""
        limits = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        limits["guidance"] = self.guidance.as_json()
        limits["narrowing_rules"] = sorted(self.narrowing_rules)
        return limits
