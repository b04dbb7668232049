"""A session's projection, kept in memory and extended on append (BR-06, AV-07).

:class:`SessionState` is what a checked log projects to — settings, visible
messages, the conversation for the model, the summary a listing shows — built
once from a read and then extended with each record the engine appends, so a
turn never re-reads and re-parses the whole log. Every record it holds passed
:func:`~labfy_ref.bridge.store.projection.check_log` (or :func:`check_event` for an
appended one). It describes one state of its log (a :class:`Stamp`): an append
that did not start from that state (the log changed behind the engine's back)
is not applied, and the state is dropped to be read again.

:class:`HistoryCache` keeps the most recently used states, bounded both in
sessions and in the bytes of their logs: least recently used leave first.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from labfy_ref.bridge.store.index import TITLE_CHARS, Summary
from labfy_ref.bridge.store.logs import Appended, StoredLog
from labfy_ref.bridge.store.projection import (
    chat_turns,
    check_event,
    check_log,
    project_message,
    project_settings,
)
from labfy_ref.protocol import EncodedMessage, MessageLog

DEFAULT_CACHED_SESSIONS = 64
DEFAULT_CACHED_BYTES = 64 * 1024 * 1024


def session_title(events: list[dict[str, Any]], messages: list[dict[str, Any]]) -> str | None:
    """The model's title (BR-18) when one was recorded (the last), else the first user
    message's preview; None before any."""
    return next((str(e["title"])[:TITLE_CHARS] for e in reversed(events)
                 if e.get("kind") == "title"),
                next((m["text"][:TITLE_CHARS] for m in messages if m["role"] == "user"), None))


class SessionState:
    """One checked log, projected: settings, messages, model history, summary."""

    __slots__ = ("_history", "header", "lines", "messages", "session_id", "summary")

    def __init__(self, session_id: str, header: dict[str, Any], summary: Summary,
                 messages: list[dict[str, Any]], lines: int) -> None:
        self.session_id = session_id
        self.header = header
        self.summary = summary
        self.messages = messages
        self.lines = lines  # records in the log, the header included
        self._history: MessageLog | None = None  # built on first use

    @classmethod
    def load(cls, session_id: str, log: StoredLog) -> SessionState:
        """Check a log that was just read (SESSION_INVALID if malformed) and project it."""
        check_log(session_id, log.header, log.events)
        messages = [m for e in log.events if (m := project_message(e)) is not None]
        title = session_title(log.events, messages)
        created_at = log.header["created_at"]
        summary = Summary(session_id, created_at,
                          log.events[-1].get("at") if log.events else created_at,
                          project_settings(log.header, log.events), title, log.end, log.stamp)
        return cls(session_id, log.header, summary, messages, 1 + len(log.events))

    @property
    def settings(self) -> Mapping[str, Any]:
        """The settings in force."""
        return self.summary.settings or {}

    @property
    def weight(self) -> int:
        """What this state costs the cache: its log's bytes."""
        return self.summary.end

    def history(self) -> MessageLog:
        """The conversation sent back to the model (a new log; messages and pieces shared)."""
        if self._history is None:
            self._history = MessageLog(EncodedMessage(turn) for m in self.messages
                                       for turn in chat_turns(m))
        return self._history.copy()

    def extend(self, event: dict[str, Any], appended: Appended) -> bool:
        """Apply one record the engine appended; False if the log had changed before it."""
        summary = self.summary.extend(event, appended)
        if summary is None:
            return False
        check_event(self.session_id, self.lines + 1, event)
        self.summary = summary
        self.lines += 1
        message = project_message(event)
        if message is not None:
            self.messages.append(message)
            if self._history is not None:
                self._history.add([EncodedMessage(turn) for turn in chat_turns(message)])
        return True


class HistoryCache:
    """The most recently used session states, bounded in sessions and in log bytes."""

    def __init__(self, *, max_sessions: int = DEFAULT_CACHED_SESSIONS,
                 max_bytes: int = DEFAULT_CACHED_BYTES) -> None:
        self.max_sessions = max_sessions
        self.max_bytes = max_bytes
        self._states: collections.OrderedDict[str, SessionState] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._states

    def get(self, session_id: str) -> SessionState | None:
        """A cached state (now the most recently used), or None."""
        state = self._states.get(session_id)
        if state is not None:
            self._states.move_to_end(session_id)
        return state

    def put(self, state: SessionState) -> None:
        """Keep a state; evict the least recently used past either bound (never this one)."""
        self._states[state.session_id] = state
        self._states.move_to_end(state.session_id)
        self.trim()

    def trim(self) -> None:
        """Evict least recently used states until both bounds hold (the newest stays)."""
        weight = sum(s.weight for s in self._states.values())
        while len(self._states) > 1 and (len(self._states) > self.max_sessions
                                         or weight > self.max_bytes):
            _, oldest = self._states.popitem(last=False)
            weight -= oldest.weight

    def drop(self, session_id: str) -> None:
        """Forget a session's state (deleted, or changed behind the engine's back)."""
        self._states.pop(session_id, None)
