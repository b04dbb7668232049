"""The SQLAlchemy engine of one workspace store (``labfy.sqlite``), WS-01.

One SQLite connection per engine (a :class:`~sqlalchemy.pool.StaticPool`): the store
serialises its threads on a lock around it, as the server, the bridge and a worker each
hold one store. The connection follows :func:`labfy_ref.sqlcore.sqlite_rules`, and text
that is not UTF-8 (written by another tool) reads back with U+FFFD instead of failing
(AV-02).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import StaticPool

from labfy_ref.sqlcore import sqlite_rules

#: How long a writer waits for another process's write lock (sqlite3's own default).
BUSY_TIMEOUT_S = 5.0


def _decode(raw: bytes) -> str:
    """SQLite TEXT as str; bytes that are not UTF-8 read as U+FFFD instead of failing."""
    return raw.decode("utf-8", errors="replace")


def store_engine(path: Path) -> Engine:
    """The engine of the store at ``path``; nothing is opened until it is first used."""
    def connect() -> sqlite3.Connection:
        return sqlite3.connect(path, check_same_thread=False, isolation_level=None,
                               timeout=BUSY_TIMEOUT_S)

    # hide_parameters: a driver error's text never carries the values of a statement
    engine = create_engine("sqlite://", creator=connect, poolclass=StaticPool,
                           hide_parameters=True)
    return sqlite_rules(engine, busy_timeout_s=BUSY_TIMEOUT_S, text_factory=_decode)
