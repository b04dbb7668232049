"""The session index: one summary row per session log, in a SQLite sidecar (BR-06).

``sessions/.index.sqlite`` holds, for every log, what a listing shows — created and
updated times, settings, title — and what says whether the row still describes
its log: the log's size and modification time (its :class:`Stamp`) and the end of
its last complete record. It is never the source of truth: a missing, corrupt or
older-schema file is deleted and rebuilt from the logs, and a row whose stamp no
longer matches its log is rebuilt from that log (:mod:`labfy_ref.bridge.store.catalog`).

Why SQLite: rows are updated on every append (one small ``UPDATE``), a page is
one indexed range query — ``(sort_at, id) < cursor`` newest first — whatever the
number of sessions, and nothing but the page reaches memory. The file is a cache,
so it is written without fsync (``synchronous=OFF``: never a stall of the event
loop); WAL keeps it consistent through a crash of the process, and a crash of the
machine that damages it only costs a rebuild. A sidecar name that is a symlink or
not a plain file is removed before SQLite opens the file, never followed.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import datetime
import functools
import json
import os
import sqlite3
import stat
import threading
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from labfy_ref.bridge.store.logs import SESSION_ID, Appended, Stamp
from labfy_ref.clock import parse_iso
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.private import private_database

INDEX_NAME = ".index.sqlite"
SCHEMA_VERSION = 1
#: How long a title is: the first user message, cut (SPEC §15).
TITLE_CHARS = 80
#: A created_at that is not an ISO time sorts by its first characters only.
_SORT_CHARS = 64
_MAX_CURSOR = 256
_SELECT = ("SELECT id, sort_at, created_at, updated_at, settings, title, end_offset, size, "
           "mtime_ns, error FROM sessions ")
_PUT = ("INSERT OR REPLACE INTO sessions (id, sort_at, created_at, updated_at, settings, title, "
        "end_offset, size, mtime_ns, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
_NEWEST = "ORDER BY sort_at DESC, id DESC LIMIT ?"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    sort_at TEXT NOT NULL,      -- created_at as a sortable key ('' for an invalid log)
    created_at TEXT,
    updated_at TEXT,            -- JSON: the last record's "at", whatever it holds
    settings TEXT,              -- JSON
    title TEXT,                 -- NULL until the first user message
    end_offset INTEGER NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    error TEXT                  -- JSON {{code, message}} of a SESSION_INVALID log
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS sessions_newest ON sessions (sort_at DESC, id DESC);
PRAGMA user_version = {SCHEMA_VERSION};
"""

Key = tuple[str, str]


def sort_at(created_at: str | None) -> str:
    """A created_at as a key that sorts in time (``.000`` and no fraction sort alike)."""
    if not created_at:
        return ""
    try:
        moment = parse_iso(created_at)
        if moment.tzinfo is not None:
            moment = moment.astimezone(datetime.UTC).replace(tzinfo=None)
        return moment.isoformat(timespec="microseconds")
    except (ValueError, OverflowError):
        return created_at[:_SORT_CHARS]


@dataclasses.dataclass(frozen=True, slots=True)
class Summary:
    """What a listing shows of one session, and which state of its log that describes."""

    session_id: str
    created_at: str | None
    updated_at: Any  # the last record's "at" (a record of an unknown kind may hold anything)
    settings: Mapping[str, Any] | None
    title: str | None  # None: no user message yet
    end: int  # just past the last complete record ("last offset")
    stamp: Stamp
    error: Mapping[str, str] | None = None  # a SESSION_INVALID log's error

    @property
    def key(self) -> Key:
        """Newest first is descending order of this key (ids are monotonic: no ties)."""
        return (sort_at(self.created_at), self.session_id)

    @classmethod
    def invalid(cls, session_id: str, error: Mapping[str, str], stamp: Stamp) -> Summary:
        """The row of a log that is SESSION_INVALID (listed with its error)."""
        return cls(session_id, None, None, None, None, 0, stamp, error)

    def extend(self, event: Mapping[str, Any], appended: Appended) -> Summary | None:
        """This summary after ``event`` was appended; None if the log had changed first."""
        if self.error is not None or appended.before != self.stamp \
                or appended.offset != self.end:
            return None
        settings = self.settings
        if event.get("kind") == "settings":
            settings = {**(settings or {}), **event["settings"]}
        title = self.title
        if title is None and event.get("kind") == "message" and event.get("role") == "user":
            title = str(event["text"])[:TITLE_CHARS]
        elif event.get("kind") == "title":  # the model's (BR-18): it replaces the preview
            title = str(event["title"])[:TITLE_CHARS]
        return dataclasses.replace(self, updated_at=event.get("at"), settings=settings,
                                   title=title, end=appended.after.size, stamp=appended.after)


def encode_cursor(key: Key) -> str:
    """An opaque cursor: the key of the last session of a page."""
    raw = json.dumps(list(key), ensure_ascii=True, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Key:
    """The key a cursor names; 422 VALIDATION_FAILED for anything this server did not give."""
    refused = RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                             "cursor: not a cursor this server gave; start without one")
    if not 0 < len(cursor) <= _MAX_CURSOR or not cursor.isascii():
        raise refused
    try:
        value = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (binascii.Error, ValueError, RecursionError):
        raise refused from None
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(part, str) for part in value)
            and len(value[0]) <= _SORT_CHARS * 2 and SESSION_ID.fullmatch(value[1])
            and _encodable(value[0])):
        raise refused
    return (value[0], value[1])


def _encodable(text: str) -> bool:
    """Whether ``text`` is Unicode SQLite can bind (a lone surrogate from JSON is not)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class IndexLost(Exception):
    """The index file failed under us; it was reset empty and must be rebuilt."""


class SessionIndex:
    """Summary rows in SQLite (a file beside the logs, or memory); thread-safe."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = self._connect()

    @classmethod
    def beside(cls, root: Path) -> SessionIndex:
        """The index file in the sessions directory ``root``."""
        return cls(root / INDEX_NAME)

    @classmethod
    def in_memory(cls) -> SessionIndex:
        """An index that lives as long as the process (a store without a directory)."""
        return cls(None)

    # -- opening ----------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        """Open the file; if it is corrupt or of another schema, start it afresh."""
        if self.path is None:
            return _prepare(sqlite3.connect(":memory:", check_same_thread=False))
        _remove_strays(self.path)
        private_database(self.path, create=True)  # titles copy users' first messages
        try:
            return _prepare(sqlite3.connect(self.path, check_same_thread=False))
        except sqlite3.DatabaseError:
            _remove_files(self.path)  # a cache: rebuilt from the logs
            private_database(self.path, create=True)
            return _prepare(sqlite3.connect(self.path, check_same_thread=False))

    def _reset(self) -> None:
        """Start afresh after a failure under us (the caller rebuilds from the logs)."""
        with contextlib.suppress(sqlite3.Error):
            self._db.close()
        if self.path is not None:
            _remove_files(self.path)
        self._db = self._connect()

    def close(self) -> None:
        """Close the database; idempotent."""
        with self._lock:
            self._db.close()

    def _run(self, sql: str, parameters: Iterable[Any] = ()) -> list[Any]:
        with self._lock:
            try:
                return self._db.execute(sql, tuple(parameters)).fetchall()
            except sqlite3.ProgrammingError:
                raise  # our mistake, not the file's
            except sqlite3.DatabaseError as exc:
                self._reset()
                raise IndexLost(str(exc)) from exc

    # -- rows -------------------------------------------------------------------------

    def get(self, session_id: str) -> Summary | None:
        """The row of one session, if any."""
        rows = self._run(_SELECT + "WHERE id = ?", (session_id,))
        return _summary(rows[0]) if rows else None

    def put(self, summary: Summary) -> None:
        """Insert or replace a session's row."""
        self._run(_PUT, _row(summary))

    def put_many(self, summaries: Iterable[Summary]) -> None:
        """Insert or replace many rows in one transaction (a rebuild)."""
        with self._lock:
            try:
                self._db.execute("BEGIN")
                try:
                    self._db.executemany(_PUT, (_row(s) for s in summaries))
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                self._db.execute("COMMIT")
            except sqlite3.ProgrammingError:
                raise
            except sqlite3.DatabaseError as exc:
                self._reset()
                raise IndexLost(str(exc)) from exc

    def remove(self, session_ids: Iterable[str]) -> None:
        """Drop the rows of sessions whose logs are gone."""
        for session_id in session_ids:
            self._run("DELETE FROM sessions WHERE id = ?", (session_id,))

    def page(self, after: Key | None, limit: int) -> list[Summary]:
        """Up to ``limit`` rows, newest first, strictly after ``after`` (from the start: None)."""
        if after is None:
            rows = self._run(_SELECT + _NEWEST, (limit,))
        else:
            rows = self._run(_SELECT + "WHERE (sort_at, id) < (?, ?) " + _NEWEST, (*after, limit))
        return [_summary(row) for row in rows]

    def count(self) -> int:
        """How many sessions are indexed."""
        return int(self._run("SELECT COUNT(*) FROM sessions")[0][0])

    def stamps(self) -> dict[str, Stamp]:
        """Every indexed session's stamp (to compare with the logs on disk)."""
        return {row[0]: Stamp(row[1], row[2])
                for row in self._run("SELECT id, size, mtime_ns FROM sessions")}


def _prepare(db: sqlite3.Connection) -> sqlite3.Connection:
    """Pragmas, integrity and schema; an older or foreign schema is dropped (a cache)."""
    try:
        db.isolation_level = None  # autocommit: each statement is its own transaction
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = OFF")
        db.execute("PRAGMA cache_size = -1024")  # KiB: a page is read, the rest stays on disk
        if db.execute("PRAGMA quick_check").fetchone()[0] != "ok":
            raise sqlite3.DatabaseError("the index failed its integrity check")
        if db.execute("PRAGMA user_version").fetchone()[0] != SCHEMA_VERSION:
            db.execute("DROP TABLE IF EXISTS sessions")
        db.executescript(_SCHEMA)
    except sqlite3.DatabaseError:
        db.close()
        raise
    return db


def _files(path: Path) -> list[Path]:
    return [Path(f"{path}{suffix}") for suffix in ("", "-wal", "-shm", "-journal")]


def _remove_strays(path: Path) -> None:
    """Remove a sidecar name that is a symlink or not a plain file: it is never followed."""
    for name in _files(path):
        try:
            info = os.lstat(name)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            name.unlink()


def _remove_files(path: Path) -> None:
    for name in _files(path):
        name.unlink(missing_ok=True)


def _row(summary: Summary) -> tuple[Any, ...]:
    return (summary.session_id, summary.key[0], summary.created_at,
            json.dumps(summary.updated_at),
            None if summary.settings is None else json.dumps(dict(summary.settings)),
            summary.title, summary.end, summary.stamp.size, summary.stamp.mtime_ns,
            None if summary.error is None else json.dumps(summary.error))


def _summary(row: tuple[Any, ...]) -> Summary:
    (session_id, _sort, created_at, updated_at, settings, title, end, size, mtime_ns,
     error) = row
    return Summary(session_id, created_at, _value(updated_at),
                   None if settings is None else _settings(settings), title, end,
                   Stamp(size, mtime_ns), None if error is None else json.loads(error))


def _value(text: str) -> Any:
    """A JSON value; a string without escapes (a timestamp) is read without the parser."""
    if text.startswith('"') and "\\" not in text:
        return text[1:-1]
    return json.loads(text)


@functools.lru_cache(maxsize=256)
def _settings(text: str) -> Mapping[str, Any]:
    """Settings read back (most sessions share a few: decoded once each, never mutated)."""
    return types.MappingProxyType(json.loads(text))
