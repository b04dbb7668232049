"""What the engine knows of its sessions without re-reading every log (BR-06, BR-07).

:class:`SessionCatalog` joins the log store, the summary index and the history
cache, and keeps them honest:

* At start, the index is compared with the logs on disk (names and stamps, no
  log is read unless its row is missing or stale): a log without a row, or whose
  size or modification time differs from its row, is read and indexed; a row
  without a log is dropped. A missing, corrupt or older index is rebuilt whole.
* While serving, every row of a page is checked against its log's stamp (one
  ``stat`` each) and rebuilt if the log changed behind the engine's back; a log
  created or removed by someone else shows in the directory's stamp, and only
  then are the names compared again.
* A session's history is served from the cache when the log's stamp is the one
  the state describes, else read again; the engine's own appends extend it.

A log that is SESSION_INVALID keeps a row with its error, so a listing shows it.
Thread-safe (one lock): the engine lives on the event loop, tests may look in.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from labfy_ref.bridge.store import SessionStore
from labfy_ref.bridge.store.history import HistoryCache, SessionState
from labfy_ref.bridge.store.index import (
    IndexLost,
    SessionIndex,
    Summary,
    decode_cursor,
    encode_cursor,
)
from labfy_ref.bridge.store.logs import Appended, Stamp, StoredLog
from labfy_ref.errors import RuntimeRefused, SessionInvalid

T = TypeVar("T")
#: A directory stamp this recent may hide a change made in the same clock tick (a
#: kernel's coarse file times advance by ticks of at most 10 ms).
_RACY_NS = 20_000_000
#: How often a page is fetched again when checking it found rows out of date.
_PAGE_PASSES = 3


class SessionCatalog:
    """The index and the cache of one store's sessions, checked against the logs."""

    def __init__(self, store: SessionStore, index: SessionIndex,
                 cache: HistoryCache | None = None) -> None:
        self._store = store
        self.index = index
        self.cache = cache or HistoryCache()
        self._lock = threading.RLock()
        self._seen: Stamp | None = None  # the directory as last compared (None: compare)
        self.sync()

    # -- keeping the index true -----------------------------------------------------------

    def sync(self) -> None:
        """Compare every row with its log's stamp; read and index what differs."""
        with self._lock:
            self._guarded(self._sync)

    def _sync(self) -> None:
        seen = self._store.dir_stamp()
        rows = self.index.stamps()
        on_disk = {sid: self._store.stamp(sid) for sid in self._store.list_ids()}
        self.index.remove(sid for sid in rows if on_disk.get(sid) is None)
        self.index.put_many(summary for sid, stamp in on_disk.items()
                            if stamp is not None and rows.get(sid) != stamp
                            and (summary := self._summarize(sid)) is not None)
        self._settle(seen)

    def _names(self) -> None:
        """If the directory changed, index new logs and drop rows of removed ones."""
        seen = self._store.dir_stamp()
        if seen == self._seen:
            return
        rows = self.index.stamps()
        names = set(self._store.list_ids())
        self.index.remove(sid for sid in rows if sid not in names)
        self.index.put_many(summary for sid in names if sid not in rows
                            and (summary := self._summarize(sid)) is not None)
        for sid in set(rows) - names:
            self.cache.drop(sid)
        self._settle(seen)

    def _settle(self, seen: Stamp) -> None:
        # A change in the same clock tick as the stamp would not move it: trust it later.
        racy = time.time_ns() - seen.mtime_ns < _RACY_NS
        self._seen = None if racy else seen

    @contextlib.contextmanager
    def own_change(self) -> Iterator[None]:
        """Bracket the engine's own create or delete: it is not someone else's change."""
        with self._lock:
            before = self._store.dir_stamp()
            try:
                yield
            finally:
                if self._seen is not None and before == self._seen:
                    self._settle(self._store.dir_stamp())

    def _guarded(self, action: Callable[[], T]) -> T:
        """Run ``action``; if the index file failed under it, rebuild it and run it again."""
        try:
            return action()
        except IndexLost:
            self._seen = None
            self._sync()
            return action()

    def _summarize(self, session_id: str) -> Summary | None:
        """A fresh summary read from the log (an invalid log's holds its error); None: gone."""
        try:
            stamp = self._store.stamp(session_id)
            if stamp is None:
                return None
            return SessionState.load(session_id, self._store.read_log(session_id)).summary
        except SessionInvalid as exc:
            return Summary.invalid(session_id, exc.as_dict(), stamp or Stamp(-1, -1))
        except RuntimeRefused:  # removed meanwhile (SESSION_NOT_FOUND)
            return None

    # -- reading --------------------------------------------------------------------------

    def state(self, session_id: str) -> SessionState:
        """The session's checked projection: cached if its log is unchanged, else read."""
        with self._lock:
            cached = self.cache.get(session_id)
            if cached is not None and cached.summary.stamp == self._store.stamp(session_id):
                return cached
            self.cache.drop(session_id)
            try:
                state = SessionState.load(session_id, self._store.read_log(session_id))
            except SessionInvalid as exc:
                stamp = self._store.stamp(session_id)
                if stamp is not None:
                    invalid = Summary.invalid(session_id, exc.as_dict(), stamp)
                    self._guarded(lambda: self.index.put(invalid))
                raise
            self.cache.put(state)
            self._guarded(lambda: self.index.put(state.summary))
            return state

    def page(self, limit: int, cursor: str | None) -> tuple[list[Summary], str | None]:
        """Up to ``limit`` summaries newest first after ``cursor``, and the next cursor."""
        after = None if cursor is None else decode_cursor(cursor)
        with self._lock:
            return self._guarded(lambda: self._page(after, limit))

    def _page(self, after: tuple[str, str] | None,
              limit: int) -> tuple[list[Summary], str | None]:
        self._names()
        rows = self.index.page(after, limit + 1)
        for _ in range(_PAGE_PASSES):
            if not self._refresh(rows):
                break
            rows = self.index.page(after, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return rows, encode_cursor(rows[-1].key) if more and rows else None

    def _refresh(self, rows: list[Summary]) -> bool:
        """Rebuild rows whose logs changed (in place); True if the page must be fetched again."""
        again = False
        for number, row in enumerate(rows):
            stamp = self._store.stamp(row.session_id)
            if stamp == row.stamp:
                continue
            fresh = None if stamp is None else self._summarize(row.session_id)
            if fresh is None:
                self.index.remove([row.session_id])
                self.cache.drop(row.session_id)
                again = True
                continue
            self.index.put(fresh)
            rows[number] = fresh
            again = again or fresh.key != row.key
        return again

    def count(self) -> int:
        """How many sessions there are (from the index; no log is read)."""
        with self._lock:
            return self._guarded(self._count)

    def _count(self) -> int:
        self._names()
        return self.index.count()

    # -- the engine's own writes -------------------------------------------------------------

    def created(self, session_id: str, log: StoredLog) -> SessionState:
        """Index and cache a log the engine just created."""
        with self._lock:
            state = SessionState.load(session_id, log)
            self.cache.put(state)
            self._guarded(lambda: self.index.put(state.summary))
            return state

    def appended(self, session_id: str,
                 records: Sequence[tuple[dict[str, Any], Appended]]) -> None:
        """Extend the cached state and the row with records the engine appended, in order."""
        with self._lock:
            state = self.cache.get(session_id)
            try:
                for event, appended in records:
                    if state is not None and not state.extend(event, appended):
                        self.cache.drop(session_id)
                        state = None
            except SessionInvalid:
                self.cache.drop(session_id)
                state = None
            if state is not None:
                self.cache.trim()
                self._guarded(lambda: self.index.put(state.summary))
                return
            self._guarded(lambda: self._extend_row(session_id, records))

    def _extend_row(self, session_id: str,
                    records: Sequence[tuple[dict[str, Any], Appended]]) -> None:
        row = self.index.get(session_id)
        for event, appended in records:
            row = None if row is None else row.extend(event, appended)
        if row is not None:
            self.index.put(row)
        # else: the row stays as it was; its stamp now differs, so it is rebuilt when served

    def forget(self, session_id: str) -> None:
        """Drop the cached state (a write's outcome is unknown: read the log next time)."""
        with self._lock:
            self.cache.drop(session_id)

    def deleted(self, session_id: str) -> None:
        """Drop everything known of a session whose log the engine removed."""
        with self._lock:
            self.cache.drop(session_id)
            self._guarded(lambda: self.index.remove([session_id]))

    def close(self) -> None:
        """Close the index."""
        with self._lock:
            self.index.close()
