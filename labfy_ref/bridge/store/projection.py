"""Session projections: a session log's events → the messages a client shows (BR-06).

Tool results stay attached to their call (one ``tool`` message per call), so
after a reload every result is still shown at its operation.

A log is checked before it is projected (:func:`check_log`): a record that is
JSON but not of its kind's shape (a settings event without settings, a message
without a role, a number where text belongs) makes the log ``SESSION_INVALID``
(409, BR-07) — never an exception in a route. Kinds this build does not know
are left alone (a later build may add some), and so are fields it does not know, in a
header, an event or the settings (an older release's persona fields: BR-21).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from labfy_ref.bridge.llm import ModelRoute
from labfy_ref.errors import LabfyError, SessionInvalid
from labfy_ref.modes import PermissionMode
from labfy_ref.protocol import ChatMessage, canonical, tool_exchange

Event = dict[str, Any]


_ROLES = frozenset({"user", "assistant"})
_MODES = frozenset(mode.value for mode in PermissionMode)
#: For each known kind: its required fields and their types.
_SHAPES: dict[str, dict[str, type | tuple[type, ...]]] = {
    "message": {"role": str, "text": str},
    "tool": {"call_id": str, "tool_id": str, "arguments": dict, "status": str, "result": dict},
    "approval": {"approval_id": str, "call_id": str, "decision": str},
    "settings": {"settings": dict},
    "title": {"title": str},  # BR-18: the session's model named it
}


#: The settings this release knows; any other field of a log's settings (an older
#: release's ``persona_model``, a later one's) is read past, never shown nor used (BR-21).
KNOWN_SETTINGS = ("model", "permission_mode")


def _settings_ok(settings: Any, *, partial: bool) -> bool:
    if not isinstance(settings, dict):
        return False
    if not partial and not set(KNOWN_SETTINGS) <= set(settings):
        return False
    if "permission_mode" in settings and settings["permission_mode"] not in _MODES:
        return False
    if "model" in settings:
        try:
            ModelRoute.parse(settings["model"] if isinstance(settings["model"], str) else "")
        except LabfyError:
            return False
    return True


def _event_ok(event: Event) -> bool:
    shape = _SHAPES.get(event.get("kind"))  # type: ignore[arg-type]
    if shape is None:
        return isinstance(event.get("kind"), str)
    if not all(isinstance(event.get(name), kind) for name, kind in shape.items()):
        return False
    if not isinstance(event.get("at", ""), str):
        return False
    if event["kind"] == "message":
        return event["role"] in _ROLES and isinstance(event.get("reasoning", ""), str)
    if event["kind"] == "settings":
        return _settings_ok(event["settings"], partial=True)
    return True


def check_log(session_id: str, header: Event, events: Iterable[Event]) -> None:
    """Refuse a log whose records do not have their kind's shape (SESSION_INVALID)."""
    if not isinstance(header.get("created_at"), str) or not _settings_ok(
            header.get("settings"), partial=False):
        raise SessionInvalid(f"session {session_id}: the header's fields are malformed")
    for number, event in enumerate(events, start=2):
        check_event(session_id, number, event)


def check_event(session_id: str, number: int, event: Event) -> None:
    """Refuse one event (line ``number`` of its log) that does not have its kind's shape."""
    if not _event_ok(event):
        raise SessionInvalid(f"session {session_id}: line {number} is not a valid "
                             f"{str(event.get('kind'))[:20]!r} record")


def project_message(event: Event) -> dict[str, Any] | None:
    """The visible message of one event (None for settings, approvals, unknown kinds)."""
    kind = event.get("kind")
    if kind == "message":
        return {key: event[key] for key in ("role", "text", "reasoning", "at") if key in event}
    if kind == "tool":
        return {"role": "tool", **{key: event.get(key) for key in (
            "call_id", "tool_id", "arguments", "status", "result", "approval", "at")}}
    return None


def project_messages(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The visible messages of a session, in order."""
    return [message for event in events if (message := project_message(event)) is not None]


def project_settings(header: Event, events: Iterable[Event]) -> dict[str, Any]:
    """The settings in force: the header's, updated by each settings event — the fields this
    release knows only (an unknown one is ignored, the log left as it is)."""
    settings = _known(header.get("settings", {}))
    for event in events:
        if event.get("kind") == "settings":
            settings.update(_known(event["settings"]))
    return settings


def _known(settings: dict[str, Any]) -> dict[str, Any]:
    return {key: settings[key] for key in KNOWN_SETTINGS if key in settings}


def chat_history(messages: Iterable[dict[str, Any]]) -> list[ChatMessage]:
    """The conversation sent back to the model for a later turn."""
    return [turn for message in messages for turn in chat_turns(message)]


def chat_turns(message: dict[str, Any]) -> list[ChatMessage]:
    """What one visible message adds to the conversation sent to the model."""
    role = message["role"]
    if role == "user":
        return [{"role": "user", "content": message["text"]}]
    if role == "assistant":
        return [{"role": "assistant",
                 "content": canonical({"type": "final", "text": message["text"]})}]
    if role == "tool":
        return tool_exchange(message["tool_id"], message["arguments"], message["result"])
    return []
