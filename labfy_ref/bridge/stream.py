"""``StreamHandle``: the chunks of one turn, replayed to late subscribers (BR-02, BR-03).

Every chunk carries ``session_id``, ``agent_id`` and a ``seq``. At most one
``error`` is emitted and ``done`` is always last: after it nothing more is
accepted. Everything emitted is kept (bounded in chunks and bytes) so that
:meth:`subscribe` replays it: the first fast chunk is never lost before the
HTTP writer attaches. Over a bound the handle emits ``error STREAM_LIMIT``
then ``done``. A subscriber that raises is dropped; the others go on.

Ownership ends: once ``done`` has been delivered to a subscriber, the buffer is
released — only the ending (``error`` if any, and ``done``) is kept, so a
finished turn costs a few hundred bytes, not up to its 8 MiB. The turn itself
is durable in the session log; the replay is for the *active* turn's writer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from labfy_ref.errors import ErrorCode

Chunk = dict[str, Any]
Subscriber = Callable[[Chunk], None]
CHUNK_TYPES = frozenset({"text", "reasoning", "tool-call", "tool-result", "approval-request",
                         "approval-decision", "error", "done"})
DEFAULT_MAX_CHUNKS = 10_000
DEFAULT_MAX_BYTES = 8 * 1024 * 1024


class StreamHandle:
    """The ordered, bounded, replayable chunks of one turn."""

    def __init__(self, session_id: str, agent_id: str, *, max_chunks: int = DEFAULT_MAX_CHUNKS,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.session_id = session_id
        self.agent_id = agent_id
        self._max_chunks = max_chunks
        self._max_bytes = max_bytes
        self._chunks: list[Chunk] = []
        self._bytes = 0
        self._errored = False
        self._subscribers: list[Subscriber] = []
        self._cancel: Callable[[], None] | None = None
        self._released = False
        self.dropped_subscribers = 0

    @property
    def finished(self) -> bool:
        """Has ``done`` been emitted?"""
        return bool(self._chunks) and self._chunks[-1]["type"] == "done"

    @property
    def released(self) -> bool:
        """Was the buffer released (``done`` delivered; only the ending is kept)?"""
        return self._released

    @property
    def chunks(self) -> list[Chunk]:
        """Everything emitted so far (a copy)."""
        return list(self._chunks)

    def on_cancel(self, callback: Callable[[], None]) -> None:
        """What :meth:`cancel` does (the engine cancels the turn)."""
        self._cancel = callback

    def cancel(self) -> None:
        """Ask the producer to stop (e.g. the HTTP client went away)."""
        if self._cancel is not None and not self.finished:
            self._cancel()

    def emit(self, type_: str, **fields: Any) -> bool:
        """Append one chunk; False once ``done`` was emitted (nothing is accepted after it)."""
        if type_ not in CHUNK_TYPES:
            raise ValueError(f"unknown chunk type {type_}")
        if self.finished or (type_ == "error" and self._errored):
            return False
        chunk = {"type": type_, "session_id": self.session_id, "agent_id": self.agent_id,
                 "seq": len(self._chunks) + 1, **fields}
        size = len(json.dumps(chunk, ensure_ascii=False))
        reserve = 2  # room for the STREAM_LIMIT error and done
        if type_ not in ("error", "done") and (
                len(self._chunks) + 1 > self._max_chunks - reserve
                or self._bytes + size > self._max_bytes):
            self._append({"type": "error", "session_id": self.session_id,
                          "agent_id": self.agent_id, "seq": len(self._chunks) + 1,
                          "code": ErrorCode.STREAM_LIMIT.value,
                          "message": "the turn's stream exceeded its bounds"})
            self._errored = True
            self._append({"type": "done", "session_id": self.session_id,
                          "agent_id": self.agent_id, "seq": len(self._chunks) + 1,
                          "reason": "error", "interrupted": True})
            if self._cancel is not None:  # the producer must stop: its stream is closed
                self._cancel()
            return False
        if type_ == "error":
            self._errored = True
        self._append(chunk)
        self._bytes += size
        return True

    def _append(self, chunk: Chunk) -> None:
        self._chunks.append(chunk)
        for subscriber in list(self._subscribers):
            self._deliver(subscriber, chunk)
        if chunk["type"] == "done" and self._subscribers:
            self._release()

    def _release(self) -> None:
        """Keep only the ending: everything before it has been delivered."""
        self._chunks = [c for c in self._chunks if c["type"] in ("error", "done")]
        self._bytes = 0
        self._released = True

    def _deliver(self, subscriber: Subscriber, chunk: Chunk) -> None:
        try:
            subscriber(chunk)
        except Exception:  # one broken subscriber must not break the stream for others
            with contextlib.suppress(ValueError):
                self._subscribers.remove(subscriber)
            self.dropped_subscribers += 1

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Replay everything emitted, then deliver live chunks; returns an unsubscribe."""
        self._subscribers.append(subscriber)
        for chunk in list(self._chunks):
            if subscriber not in self._subscribers:
                break
            self._deliver(subscriber, chunk)
        if self.finished and not self._released and subscriber in self._subscribers:
            self._release()  # the whole turn reached its first reader

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(subscriber)

        return unsubscribe

    async def iterate(self) -> AsyncIterator[Chunk]:
        """Every chunk, replayed then live, until ``done`` (for the HTTP writer)."""
        queue: asyncio.Queue[Chunk] = asyncio.Queue()
        unsubscribe = self.subscribe(queue.put_nowait)
        try:
            while True:
                chunk = await queue.get()
                yield chunk
                if chunk["type"] == "done":
                    return
        finally:
            unsubscribe()
