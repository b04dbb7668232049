"""Session projections: a session log's events → the messages a client shows (BR-06).

Tool results stay attached to their call (one ``tool`` message per call), so
after a reload every result is still shown at its operation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labfy_ref.protocol import ChatMessage, canonical, tool_exchange

Event = dict[str, Any]


def project_messages(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The visible messages of a session, in order."""
    messages: list[dict[str, Any]] = []
    for event in events:
        kind = event.get("kind")
        if kind == "message":
            messages.append({key: event[key] for key in ("role", "text", "reasoning", "at")
                             if key in event})
        elif kind == "tool":
            messages.append({"role": "tool", **{key: event.get(key) for key in (
                "call_id", "tool_id", "arguments", "status", "result", "approval", "at")}})
    return messages


def project_settings(header: Event, events: Iterable[Event]) -> dict[str, Any]:
    """The settings in force: the header's, updated by each settings event."""
    settings = dict(header.get("settings", {}))
    for event in events:
        if event.get("kind") == "settings":
            settings.update(event["settings"])
    return settings


def chat_history(messages: Iterable[dict[str, Any]]) -> list[ChatMessage]:
    """The conversation sent back to the model for a later turn."""
    history: list[ChatMessage] = []
    for message in messages:
        role = message["role"]
        if role == "user":
            history.append({"role": "user", "content": message["text"]})
        elif role == "assistant":
            history.append({"role": "assistant",
                            "content": canonical({"type": "final", "text": message["text"]})})
        elif role == "tool":
            history += tool_exchange(message["tool_id"], message["arguments"], message["result"])
    return history
