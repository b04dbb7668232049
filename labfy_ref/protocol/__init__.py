"""The action contract between a model and the runtime (SPEC §4)."""

from labfy_ref.protocol.action import (
    CONTRACT_ID,
    Action,
    ActionParser,
    Final,
    ToolCall,
    action_schema,
    bound_action_schema,
)
from labfy_ref.protocol.prompt import repair_message, system_prompt
from labfy_ref.protocol.strict_json import Defect, loads_strict

__all__ = [
    "CONTRACT_ID",
    "Action",
    "ActionParser",
    "Defect",
    "Final",
    "ToolCall",
    "action_schema",
    "bound_action_schema",
    "loads_strict",
    "repair_message",
    "system_prompt",
]
