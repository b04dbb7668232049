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
from labfy_ref.protocol.exchange import (
    TOOL_RESULT_PREFIX,
    Answer,
    Ask,
    ChatModel,
    EncodedMessage,
    MessageLog,
    Round,
    canonical,
    chat_asker,
    encode_json,
    message_bytes,
    request_action,
    response_format_for,
    tool_exchange,
)
from labfy_ref.protocol.prompt import ChatMessage, repair_message, system_prompt
from labfy_ref.protocol.strict_json import Defect, loads_strict

__all__ = [
    "CONTRACT_ID",
    "TOOL_RESULT_PREFIX",
    "Action",
    "ActionParser",
    "Answer",
    "Ask",
    "ChatMessage",
    "ChatModel",
    "Defect",
    "EncodedMessage",
    "Final",
    "MessageLog",
    "Round",
    "ToolCall",
    "action_schema",
    "bound_action_schema",
    "canonical",
    "chat_asker",
    "encode_json",
    "loads_strict",
    "message_bytes",
    "repair_message",
    "request_action",
    "response_format_for",
    "system_prompt",
    "tool_exchange",
]
