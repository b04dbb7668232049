"""The deterministic demo agent (RT-07): a real policy behind the same contract.

It is a :class:`~labfy_ref.protocol.ChatModel` whose "model" is a fixed
policy: it answers with action JSON text, which the runtime parses strictly
like any model output and runs through the same gateway. It lists the
objects, reads the first note, prepares research on the user's question,
waits for the human grant like any agent, then summarises the evidence.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

from labfy_ref.runtime.turn import TOOL_RESULT_PREFIX, canonical

DEMO_LABEL = "Deterministic demo agent"


@dataclasses.dataclass(frozen=True, slots=True)
class DemoReply:
    """The demo's reply: action JSON text, like a model's."""

    content: str


def _last_result(messages: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    for message in reversed(messages):
        content = str(message.get("content", ""))
        if message.get("role") == "user" and content.startswith(TOOL_RESULT_PREFIX):
            result: dict[str, Any] = json.loads(content[len(TOOL_RESULT_PREFIX):])
            return result
        if message.get("role") == "user":
            return None
    return None


def _user_request(messages: Sequence[Mapping[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            return " ".join(str(message.get("content", "")).split())
    return ""


def _call(tool_id: str, **arguments: Any) -> str:
    return canonical({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})


def _final(text: str) -> str:
    return canonical({"type": "final", "text": text})


class DemoAgent:
    """The default agent: deterministic, offline, and bound by the same gateway."""

    label = DEMO_LABEL

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None) -> DemoReply:
        """Decide the next action from the conversation so far."""
        return DemoReply(self.decide(messages))

    def decide(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The policy itself (pure: the same conversation gives the same action)."""
        result = _last_result(messages)
        if result is None:
            return _call("workspace.list_objects")
        tool, data = result["tool_id"], result["data"]
        if not result["ok"]:
            error = data["error"]
            return _final(f"I stopped: {tool} failed with {error['code']}.")
        if tool == "workspace.list_objects":
            objects = data["objects"]
            if not objects:
                return _final("The workspace holds no objects yet.")
            notes = [o for o in objects if o["kind"] == "note"] or objects
            return _call("workspace.read_object", object_id=notes[0]["object_id"])
        if tool == "workspace.read_object":
            question = _user_request(messages)[:500] or data["title"]
            return _call("research.prepare", topic=data["title"][:200],
                         questions=[question], object_refs=[data["object_id"]])
        if tool == "research.get_state":
            evidence = data["evidence"]
            sources = "; ".join(item["source"] for item in evidence[:3])
            return _final(f"Research campaign {data['campaign_id']} is {data['status']} with "
                          f"{len(evidence)} evidence item(s)"
                          + (f" from: {sources}." if sources else "."))
        if tool == "research.prepare":
            return _final(f"Research campaign {data['campaign_id']} is prepared; it runs only "
                          "after a human grants it.")
        return _final(f"Done ({tool}).")
