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

Each chunk is encoded once, as its NDJSON line, when it is emitted: that line is
what the byte bound counts, what the buffer keeps and what :meth:`lines` hands the
HTTP writer. Subscribers of chunks get the emitted dict live, and a replayed
chunk decoded from its line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from labfy_ref.bridge.ndjson import encode_line
from labfy_ref.errors import ErrorCode
from labfy_ref.protocol import Usage

Chunk = dict[str, Any]
Subscriber = Callable[[Chunk], None]
#: A chunk as delivered inside the handle: its type, the dict (None when replayed), its line.
_Listener = Callable[[str, Chunk | None, bytes], None]
CHUNK_TYPES = frozenset({"text", "reasoning", "tool-call", "tool-result", "approval-request",
                         "approval-decision", "facts", "error", "done"})
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
        self._entries: list[tuple[str, bytes]] = []  # (type, NDJSON line) of each chunk
        self._bytes = 0
        self._errored = False
        self._listeners: list[_Listener] = []
        self._cancel: Callable[[], None] | None = None
        self._released = False
        self.dropped_subscribers = 0
        #: The tokens the provider reported for this turn's model calls (None: none said).
        self.usage: Usage | None = None
        #: How many model calls the turn made, reported or not.
        self.model_calls = 0
        #: Is the turn's provider a model? (False: the demo policy, which counts no tokens.)
        self.is_model = True

    @property
    def finished(self) -> bool:
        """Has ``done`` been emitted?"""
        return bool(self._entries) and self._entries[-1][0] == "done"

    @property
    def released(self) -> bool:
        """Was the buffer released (``done`` delivered; only the ending is kept)?"""
        return self._released

    @property
    def chunks(self) -> list[Chunk]:
        """Everything kept so far, decoded (a copy)."""
        return [json.loads(line) for _, line in self._entries]

    def add_usage(self, usage: Usage) -> None:
        """Count one model call and its reported tokens (a call that reported none adds no
        tokens)."""
        self.model_calls += 1
        if usage != Usage():
            self.usage = usage if self.usage is None else self.usage + usage

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
                 "seq": len(self._entries) + 1, **fields}
        line = encode_line(chunk)  # the one encoding: the bound counts what the wire carries
        if type_ not in ("error", "done") and self._over_bounds(line):
            self._overflow()
            return False
        if type_ == "error":
            self._errored = True
        self._append(chunk, line)
        self._bytes += len(line)
        return True

    def _over_bounds(self, line: bytes) -> bool:
        """Would ``line`` take the stream past its chunks (less room for the error and done
        that end it) or its bytes (BR-03)?"""
        reserve = 2  # room for the STREAM_LIMIT error and done
        return (len(self._entries) + 1 > self._max_chunks - reserve
                or self._bytes + len(line) > self._max_bytes)

    def _overflow(self) -> None:
        """End the stream at its bound: STREAM_LIMIT (unless the turn already said its one
        error, BR-02), then an interrupted done, numbered on from the last chunk; the
        producer is told to stop (its stream is closed)."""
        if not self._errored:
            self._append({"type": "error", "session_id": self.session_id,
                          "agent_id": self.agent_id, "seq": len(self._entries) + 1,
                          "code": ErrorCode.STREAM_LIMIT.value,
                          "message": "the turn's stream exceeded its bounds"})
            self._errored = True
        self._append({"type": "done", "session_id": self.session_id,
                      "agent_id": self.agent_id, "seq": len(self._entries) + 1,
                      "reason": "error", "interrupted": True})
        if self._cancel is not None:
            self._cancel()

    def _append(self, chunk: Chunk, line: bytes | None = None) -> None:
        type_ = chunk["type"]
        line = encode_line(chunk) if line is None else line
        self._entries.append((type_, line))
        for listener in list(self._listeners):
            self._deliver(listener, type_, chunk, line)
        if type_ == "done" and self._listeners:
            self._release()

    def _release(self) -> None:
        """Keep only the ending: everything before it has been delivered."""
        self._entries = [e for e in self._entries if e[0] in ("error", "done")]
        self._bytes = 0
        self._released = True

    def _deliver(self, listener: _Listener, type_: str, chunk: Chunk | None,
                 line: bytes) -> None:
        try:
            listener(type_, chunk, line)
        except Exception:  # one broken subscriber must not break the stream for others
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)
            self.dropped_subscribers += 1

    def _listen(self, listener: _Listener) -> Callable[[], None]:
        """Replay everything kept, then deliver live; returns an unsubscribe."""
        self._listeners.append(listener)
        for type_, line in list(self._entries):
            if listener not in self._listeners:
                break
            self._deliver(listener, type_, None, line)
        if self.finished and not self._released and listener in self._listeners:
            self._release()  # the whole turn reached its first reader

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return unsubscribe

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Replay everything emitted, then deliver live chunks; returns an unsubscribe."""

        def listener(_type: str, chunk: Chunk | None, line: bytes) -> None:
            subscriber(json.loads(line) if chunk is None else chunk)

        return self._listen(listener)

    async def _follow(self) -> AsyncIterator[tuple[str, Chunk | None, bytes]]:
        queue: asyncio.Queue[tuple[str, Chunk | None, bytes]] = asyncio.Queue()
        unsubscribe = self._listen(lambda *entry: queue.put_nowait(entry))
        try:
            while True:
                entry = await queue.get()
                yield entry
                if entry[0] == "done":
                    return
        finally:
            unsubscribe()

    async def iterate(self) -> AsyncGenerator[Chunk, None]:
        """Every chunk, replayed then live, until ``done``."""
        async for _type, chunk, line in self._follow():
            yield json.loads(line) if chunk is None else chunk

    async def lines(self) -> AsyncIterator[bytes]:
        """Every chunk's NDJSON line, replayed then live, until ``done`` (the HTTP writer).

        Lines already waiting when the writer gets to them go out together: a burst
        of chunks costs one write, not one per chunk.
        """
        queue: asyncio.Queue[tuple[str, Chunk | None, bytes]] = asyncio.Queue()
        unsubscribe = self._listen(lambda *entry: queue.put_nowait(entry))
        try:
            while True:
                entries = [await queue.get()]
                while not queue.empty():
                    entries.append(queue.get_nowait())
                yield b"".join(line for _type, _chunk, line in entries)
                if entries[-1][0] == "done":  # done is always the last chunk
                    return
        finally:
            unsubscribe()
