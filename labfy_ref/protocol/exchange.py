"""One model round under the contract: ask, parse, repair once, or give up (PR-03, PR-05).

The round asks the model for an action with the bound action schema as
``response_format`` (constrained decoding) and still parses strictly, because
constrained decoding is known to fail open. On the first refusal it asks once
for a format repair; a second refusal in the same round is final
(``MODEL_PROTOCOL_ERROR``), and the caller runs no tool.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from labfy_ref.errors import ProtocolRefused
from labfy_ref.protocol.action import Action, ActionParser, bound_action_schema
from labfy_ref.protocol.prompt import ChatMessage, repair_message
from labfy_ref.tools.catalog import ToolCatalog


class Reply(Protocol):
    """What a model answers: its text (the client's ``ChatReply`` is one)."""

    @property
    def content(self) -> str:
        """The assistant's whole message."""
        ...


class ChatModel(Protocol):
    """Anything that completes chat messages (``LocalModelClient``, the demo policy)."""

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None) -> Reply:
        """Complete ``messages`` and return the reply."""
        ...


def response_format_for(catalog: ToolCatalog) -> dict[str, Any]:
    """The OpenAI/llama-server ``response_format`` carrying the bound action schema."""
    return {"type": "json_schema",
            "json_schema": {"name": "labfy_agent_model_action_v1", "strict": True,
                            "schema": bound_action_schema(catalog)}}


@dataclasses.dataclass(frozen=True, slots=True)
class Round:
    """The outcome of one accepted round."""

    action: Action
    reply: Reply
    repaired: bool


async def request_action(model: ChatModel, messages: Sequence[ChatMessage],
                         parser: ActionParser, response_format: Mapping[str, Any]) -> Round:
    """Ask ``model`` for one action; at most two requests; raise on the second refusal."""
    reply = await model.chat(messages, response_format=response_format)
    try:
        return Round(parser.parse(reply.content), reply, repaired=False)
    except ProtocolRefused as first:
        repair = repair_message(first)
    reply = await model.chat([*messages, repair], response_format=response_format)
    try:
        return Round(parser.parse(reply.content), reply, repaired=True)
    except ProtocolRefused as second:
        raise ProtocolRefused(second.defect,
                              f"refused twice in one round; last: {second.message}") from None
