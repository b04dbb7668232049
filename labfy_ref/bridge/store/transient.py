"""Transient sessions (BR-13): one turn over a transcript its caller supplies, then nothing.

A chat client sends its whole conversation with every request; the engine runs
it as a session of its own for one turn. Such a session differs from a stored
one in where its log lives, not in how its turn runs (the same agent loop, the
same gateway, the same records):

* its log is held in memory (:class:`TransientLog`), never written under
  ``sessions/``: it is deleted when the turn ends, so writing it to disk would
  only leave the caller's conversation there after a crash, and no listing,
  index or page can ever show it;
* every record is encoded and bounded exactly as a stored log's
  (``RECORD_TOO_LARGE``, ``SESSION_FULL``, a lone surrogate refused), so a turn
  meets the same limits whichever kind of session runs it;
* its id is of its own kind (``tmp_…``), so no session route can name it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from labfy_ref.bridge.contract import Transcript
from labfy_ref.bridge.store.projection import chat_turns
from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import SessionFull
from labfy_ref.ids import new_id
from labfy_ref.protocol import MessageLog

TRANSIENT_PREFIX = "tmp"

Encode = Callable[[str, dict[str, Any]], bytes]


def new_transient_id() -> str:
    """A fresh transient session id (never a stored session's ``ses_`` id)."""
    return new_id(TRANSIENT_PREFIX)


class TransientLog:
    """A transient session's records: checked as a stored log's, kept in memory, then deleted."""

    def __init__(self, encode: Encode, session_id: str, max_bytes: int) -> None:
        self._encode = encode
        self.session_id = session_id
        self.max_bytes = max_bytes
        self._lines: list[bytes] = []
        self.size = 0
        self.deleted = False

    def __len__(self) -> int:
        return len(self._lines)

    def stage(self, event: dict[str, Any]) -> bytes:
        """Stamp, encode and keep one record (refused whole, as a stored append would be)."""
        if self.deleted:
            raise SessionFull(f"transient session {self.session_id} has ended")
        line = self._encode(self.session_id, {**event, "at": iso(utcnow())})
        if self.size + len(line) > self.max_bytes:
            raise SessionFull(f"transient session {self.session_id} is full "
                              f"({self.size} of {self.max_bytes} bytes)")
        self._lines.append(line)
        self.size += len(line)
        return line

    def delete(self) -> None:
        """Drop every record; idempotent. Nothing is staged afterwards."""
        self._lines.clear()
        self.size = 0
        self.deleted = True


def seed(log: TransientLog, transcript: Transcript) -> MessageLog:
    """Record the transcript in ``log`` and return the conversation the model is sent.

    System messages are context records, never messages: they reach the model
    with the engine's own prompt, never as a user's turn. Earlier assistant
    messages read to the model as its own final answers, as a stored session's do.
    """
    for text in transcript.context:
        log.stage({"kind": "context", "text": text})
    history = MessageLog()
    for prior in transcript.history:
        message = {"role": prior.role, "text": prior.text}
        log.stage({"kind": "message", **message})
        history.add(chat_turns(message))
    log.stage({"kind": "message", "role": "user", "text": transcript.text})
    history.add([{"role": "user", "content": transcript.text}])
    return history
