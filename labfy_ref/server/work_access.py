"""The server's Work store (WK-05): opened on the first Work request, closed with the server.

The server only submits, shows, lists, cancels and answers; workers run the tasks. The
store opens lazily so that a server whose users never touch Work neither creates a
``work.sqlite`` in its workspace nor needs its PostgreSQL reachable to start; a
database that cannot be opened answers that request ``WORK_DB_UNAVAILABLE`` (503), and
the next request tries again.
"""

from __future__ import annotations

import threading
from pathlib import Path

from labfy_ref.work import DatabaseUrl, WorkStore
from labfy_ref.work.store.engine import unavailable
from labfy_ref.work.store.url import work_database


class WorkAccess:
    """One Work database's store for the whole server, opened once by whichever request
    comes first (the routes run in worker threads), for the server's workspace only
    (WK-11: the routes never see another workspace's tasks on a shared database)."""

    def __init__(self, url: DatabaseUrl, workspace_id: str, *, adopt: bool = False) -> None:
        self.url = url
        self.workspace_id = workspace_id
        self._adopt = adopt
        self._lock = threading.Lock()
        self._store: WorkStore | None = None
        self._closed = False

    @classmethod
    def of(cls, workspace: Path, workspace_id: str, given: DatabaseUrl | None) -> WorkAccess:
        """The database ``given`` (``--work-db``, ``LABFY_WORK_DB``), else the workspace's own
        ``work.sqlite``, for the workspace ``workspace_id``."""
        database = work_database(workspace, given)
        return cls(database.url, workspace_id, adopt=database.adopt)

    def store(self) -> WorkStore:
        """The open store, opening (and migrating) the database on first use.

        ``WORK_DB_UNAVAILABLE`` when it cannot be reached or the server is closing.
        """
        with self._lock:
            if self._store is None:
                if self._closed:
                    raise unavailable(self.url, "the server is shutting down")
                self._store = WorkStore.open(self.url, workspace_id=self.workspace_id,
                                             adopt=self._adopt)
            return self._store

    def close(self) -> None:
        """Release the store's connections; later requests are refused (idempotent)."""
        with self._lock:
            self._closed = True
            store, self._store = self._store, None
        if store is not None:
            store.close()
