"""The bridge's session store: logs, their index and catalog, histories, journals (BR-06..BR-08).

One room, one contract: :class:`SessionStore` is everything the engine, its catalog and
its writers need of a store. What a backend may lack is an *attribute*, read, never
probed: ``root`` (the directory of its logs, where the summary index lives beside them;
None keeps the index in memory) and ``deletes`` (False: deleting a session answers
``DELETE_UNSUPPORTED``, BR-08).

* :mod:`~labfy_ref.bridge.store.logs` — the JSONL logs, one append-only file a session;
* :mod:`~labfy_ref.bridge.store.index` — one summary row a log, in a SQLite sidecar;
* :mod:`~labfy_ref.bridge.store.catalog` — the index and the history cache kept true to the logs;
* :mod:`~labfy_ref.bridge.store.history`, :mod:`~labfy_ref.bridge.store.projection` — a
  log's events as the messages a client shows;
* :mod:`~labfy_ref.bridge.store.journal` — a turn's records, written off the event loop;
* :mod:`~labfy_ref.bridge.store.transient` — the in-memory log of a transient session (BR-13).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from labfy_ref.bridge.store.logs import Appended, JsonlSessionStore, Stamp, StoredLog


class SessionStore(Protocol):
    """What the engine, its catalog and its writers need of a session store."""

    @property
    def root(self) -> Path | None:
        """The directory of the logs (the index lives beside them); None: keep it in memory."""
        ...

    @property
    def deletes(self) -> bool:
        """Can this store delete a log? (False: ``DELETE_UNSUPPORTED``, BR-08.)"""
        ...

    @property
    def max_record_bytes(self) -> int:
        """The largest record, its newline included."""
        ...

    @property
    def max_log_bytes(self) -> int:
        """The largest log."""
        ...

    def create(self, session_id: str, header: dict[str, Any]) -> StoredLog: ...
    def append(self, session_id: str, event: dict[str, Any]) -> Appended: ...
    def append_line(self, session_id: str, line: bytes) -> Appended: ...
    def encode(self, session_id: str, record: dict[str, Any]) -> bytes: ...
    def check_room(self, session_id: str, size: int, line: bytes) -> None: ...
    def read_log(self, session_id: str) -> StoredLog: ...
    def stamp(self, session_id: str) -> Stamp | None: ...
    def dir_stamp(self) -> Stamp: ...
    def list_ids(self) -> list[str]: ...
    def delete(self, session_id: str) -> None: ...


__all__ = ["Appended", "JsonlSessionStore", "SessionStore", "Stamp", "StoredLog"]
