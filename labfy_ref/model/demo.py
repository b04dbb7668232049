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

from labfy_ref.protocol import TOOL_RESULT_PREFIX, Usage, canonical
from labfy_ref.protocol.narrowing import QUESTION_CHARS, TOPIC_CHARS, offered_tools

DEMO_LABEL = "Deterministic demo agent"


@dataclasses.dataclass(frozen=True, slots=True)
class DemoReply:
    """The demo's reply: action JSON text, like a model's (it costs no tokens)."""

    content: str
    usage: Usage = dataclasses.field(default_factory=Usage)


def _tool_result(messages: Sequence[Mapping[str, Any]], index: int) -> dict[str, Any] | None:
    """The wrapped result at ``messages[index]``, if that message is one.

    A tool result is known by its place, not by its text: a user message right
    after the assistant's tool call. A user who types the result prefix is
    still just a user (the text is never trusted to say what it is).
    """
    if index < 1:
        return None
    message, previous = messages[index], messages[index - 1]
    content = str(message.get("content", ""))
    if (message.get("role") != "user" or previous.get("role") != "assistant"
            or not content.startswith(TOOL_RESULT_PREFIX)):
        return None
    try:
        call = json.loads(str(previous.get("content", "")))
        # the result object, then what the round adds after it (the answers on offer)
        result, _ = json.JSONDecoder().raw_decode(content[len(TOOL_RESULT_PREFIX):])
    except ValueError:
        return None
    if not (isinstance(call, dict) and call.get("type") == "tool_call"
            and isinstance(result, dict) and isinstance(result.get("tool_id"), str)
            and isinstance(result.get("ok"), bool) and isinstance(result.get("data"), dict)):
        return None
    return result


def _user_request(messages: Sequence[Mapping[str, Any]]) -> str:
    """The latest thing the user asked (tool results are not requests)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and _tool_result(messages, index) is None:
            return " ".join(str(message.get("content", "")).split())
    return ""


def _call(tool_id: str, **arguments: Any) -> str:
    return canonical({"type": "tool_call", "tool_id": tool_id, "arguments": arguments})


def _final(text: str) -> str:
    return canonical({"type": "final", "text": text})


class DemoAgent:
    """The default agent: deterministic, offline, and bound by the same gateway."""

    label = DEMO_LABEL
    #: The model id it answers as (``engine:demo:deterministic-demo``, BR-10).
    model = "deterministic-demo"

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None,
                   max_tokens: int | None = None) -> DemoReply:
        """Decide the next action from the conversation and the tools offered.

        Its actions are short, far under any round's completion limit.
        """
        return DemoReply(self.decide(messages, offered_tools(response_format)))

    def decide(self, messages: Sequence[Mapping[str, Any]],
               offered: frozenset[str] | None = None) -> str:
        """The policy itself (pure: the same conversation gives the same action).

        ``offered`` are the tools the round's schema admits (None: all of them);
        like a constrained model, the demo never calls a tool it is not offered.
        """
        result = _tool_result(messages, len(messages) - 1) if messages else None
        if result is None:
            return _call("workspace.list_objects")
        try:
            return self._next(result, messages, offered)
        except (KeyError, TypeError, IndexError, AttributeError):
            return _final(f"I could not read the result of {result['tool_id'][:64]}.")

    @staticmethod
    def _next(result: dict[str, Any], messages: Sequence[Mapping[str, Any]],
              offered: frozenset[str] | None) -> str:
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
            if offered is not None and "research.prepare" not in offered:
                return _final(f"Read {data['object_id']} ({data['title'][:200]}); research "
                              "is not offered here.")
            question = _user_request(messages)[:QUESTION_CHARS] or data["title"][:QUESTION_CHARS]
            return _call("research.prepare", topic=data["title"][:TOPIC_CHARS],
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
