"""A turn's session records, written off the event loop, in order (BR-06, AV-06).

An append fsyncs; on the event loop that stalls every other stream for as long as
the disk takes. :class:`SessionWriter` splits a record in two:

* :meth:`~SessionWriter.stage` encodes it at once, on the caller's thread, so a
  record that can never be written (``RECORD_TOO_LARGE``, a lone surrogate) is
  refused where it is made, exactly as a direct append would;
* :meth:`~SessionWriter.flush` writes what is staged in a worker thread, one batch
  at a time, and returns only once every staged record is on disk — the
  guarantee of a direct append, at the points where a turn must have it: before
  it asks the model again, before a tool runs after an approval, and before its
  ``done`` chunk.

Records of one session are written in the order they were staged: one batch in
flight at a time, and the next only after it landed. A landed batch extends the
catalog's state of the session (the engine never re-reads its own records).
A writer is *busy* while anything is staged or in flight; the engine counts a
busy writer as a running turn, so nothing else is appended to that log meanwhile.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

from labfy_ref.bridge.store import SessionStore
from labfy_ref.bridge.store.logs import Appended
from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import LabfyError

Event = dict[str, Any]


class Landing(Protocol):
    """Where landed records are told (the catalog)."""

    def appended(self, session_id: str, records: list[tuple[Event, Appended]]) -> None: ...
    def forget(self, session_id: str) -> None: ...


@dataclasses.dataclass(slots=True)
class _Landed:
    records: list[tuple[Event, Appended]]
    error: LabfyError | None


class SessionWriter:
    """One session's records: encoded at once, written in a worker thread, in order."""

    def __init__(self, store: SessionStore, landing: Landing, session_id: str) -> None:
        self._store = store
        self._landing = landing
        self.session_id = session_id
        self._staged: list[tuple[Event, bytes]] = []
        self._inflight: asyncio.Future[_Landed] | None = None
        #: Called each time a batch lands (the engine forgets a finished turn once idle).
        self.on_idle: Callable[[], None] | None = None

    @property
    def busy(self) -> bool:
        """Is anything staged or being written?"""
        return bool(self._staged) or self._inflight is not None

    def stage(self, event: Event) -> bytes:
        """Stamp and encode a record for the next flush; refused here if it cannot be stored."""
        record = {**event, "at": iso(utcnow())}
        line = self._store.encode(self.session_id, record)
        self._staged.append((record, line))
        return line

    async def flush(self) -> None:
        """Write everything staged; returns once it is on disk (or raises its refusal)."""
        while self.busy:
            inflight = self._inflight or self._start()
            landed = await asyncio.shield(inflight)
            self._land(inflight)  # if its callback has not run yet (a no-op if it has)
            if landed.error is not None:
                raise landed.error

    def drain(self) -> None:
        """Start writing what is staged without waiting (a turn that ended without flushing)."""
        if self._staged and self._inflight is None:
            self._start()

    def _start(self) -> asyncio.Future[_Landed]:
        batch, self._staged = self._staged, []
        inflight = asyncio.get_running_loop().run_in_executor(None, self._write, batch)
        self._inflight = inflight
        inflight.add_done_callback(self._land)  # runs before any awaiter resumes
        return inflight

    def _write(self, batch: list[tuple[Event, bytes]]) -> _Landed:
        """In a worker thread: append each line in order; stop at the first refusal."""
        done: list[tuple[Event, Appended]] = []
        for record, line in batch:
            try:
                done.append((record, self._store.append_line(self.session_id, line)))
            except LabfyError as exc:
                return _Landed(done, exc)
        return _Landed(done, None)

    def _land(self, inflight: asyncio.Future[_Landed]) -> None:
        if self._inflight is not inflight:
            return  # landed already
        self._inflight = None
        if inflight.cancelled() or inflight.exception() is not None:
            self._staged.clear()
            self._landing.forget(self.session_id)
        else:
            landed = inflight.result()
            self._landing.appended(self.session_id, landed.records)
            if landed.error is not None:
                self._staged.clear()  # nothing is written after a refused record
        if self.on_idle is not None:
            self.on_idle()  # the owner drains what is left, or forgets an idle writer
