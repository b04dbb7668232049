"""JSONL session logs (BR-06..BR-08, AV-02, AV-06): one append-only file per session.

* The header is written (and fsynced) at creation, so an empty session survives a restart.
* Every event is one line, appended with a single ``write`` and fsynced before the
  call returns: an acknowledged event is never lost.
* A record (its line, newline included) is at most ``max_record_bytes``; a larger
  one is ``RECORD_TOO_LARGE`` before anything is written. An append that would take
  the log past ``max_log_bytes`` is refused whole (``SESSION_FULL``); a full log
  stays readable.
* A torn last line (a crash mid-append) is dropped on read and cut off before the
  next append, however long it is; the header and complete lines are never touched.
  A file without one complete line (a torn header) is ``SESSION_INVALID``, never cut.
  Any other bad line makes the log ``SESSION_INVALID`` (409).
* Text is valid at every edge: a record holding a lone surrogate is refused before
  writing, so lines are plain UTF-8; records stored earlier with one (a ``\\ud800``
  escape) or with bytes that are not UTF-8 read back with U+FFFD.
* The root and every file are opened without following symlinks (a symlinked
  ``sessions/`` or session file is refused); the root is checked by lstat and
  realpath equality.
* Delete renames the log to a tombstone, then removes it.
* Thread-safe: writes to one log never overlap (a lock per session, striped), so
  appends may run off the event loop. Each write says where it landed
  (:class:`Appended`: the log's :class:`Stamp` before and after) and each read what
  it read (:class:`StoredLog`), so a cache can tell its own appends from a change
  made behind its back.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import secrets
import stat
import threading
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from labfy_ref.errors import (
    ErrorCode,
    RecordTooLarge,
    RuntimeRefused,
    SessionFull,
    SessionInvalid,
)
from labfy_ref.ids import id_pattern
from labfy_ref.text import scrub

SESSION_ID = id_pattern("ses")
FORMAT_VERSION = 1
#: Longest record, its line and newline included (AV-06).
MAX_RECORD_BYTES = 4 * 1024 * 1024
#: Longest log an append may produce; a log at it stays readable (AV-06).
MAX_LOG_BYTES = 64 * 1024 * 1024
_SUFFIX = ".jsonl"
#: O_NONBLOCK: a FIFO planted under a session's name must not block the opening thread
#: (the server's event loop) waiting for a writer; regular files ignore the flag.
_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
#: How far back one read goes while looking for the end of the last complete line.
_SCAN_CHUNK = 1024 * 1024


class Stamp(NamedTuple):
    """What a log looked like: its size and modification time (equal: unchanged)."""

    size: int
    mtime_ns: int


class Appended(NamedTuple):
    """Where one record landed: the log as found, the record's offset, the log after it."""

    before: Stamp
    offset: int
    after: Stamp


class StoredLog(NamedTuple):
    """One read of a log: its header, complete events, stamp, and the end of its last line."""

    header: dict[str, Any]
    events: list[dict[str, Any]]
    stamp: Stamp
    end: int


def _stamp(info: os.stat_result) -> Stamp:
    return Stamp(info.st_size, info.st_mtime_ns)


def _not_found(session_id: str) -> RuntimeRefused:
    return RuntimeRefused(ErrorCode.SESSION_NOT_FOUND, f"no session {session_id[:40]}")


class JsonlSessionStore:
    """Session logs in one directory, reached only through a held directory descriptor."""

    def __init__(self, root: Path, *, max_record_bytes: int = MAX_RECORD_BYTES,
                 max_log_bytes: int = MAX_LOG_BYTES) -> None:
        try:
            info = os.lstat(root)
        except OSError as exc:
            raise SessionInvalid(f"session root {root.name}/ is missing") from exc
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise SessionInvalid(f"session root {root.name}/ is a symlink or not a directory")
        if os.path.realpath(root) != os.path.abspath(root):
            raise SessionInvalid(f"session root {root.name}/ is reached through a symlink")
        self.root = root
        self.deletes = True
        self.max_record_bytes = max_record_bytes
        self.max_log_bytes = max_log_bytes
        self._dir = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _OPEN)
        # One lock per log, alive while someone holds it: a write waiting on one log
        # (a disk that does not answer) never holds up another's (a shared stripe did).
        self._locks: weakref.WeakValueDictionary[str, threading.Lock] = (
            weakref.WeakValueDictionary())
        self._locks_guard = threading.Lock()

    def close(self) -> None:
        """Release the directory descriptor; idempotent."""
        if self._dir >= 0:
            os.close(self._dir)
            self._dir = -1

    @property
    def closed(self) -> bool:
        """Has :meth:`close` run?"""
        return self._dir < 0

    # -- paths ----------------------------------------------------------------------

    @staticmethod
    def _name(session_id: str) -> str:
        if not SESSION_ID.fullmatch(session_id):
            raise _not_found(session_id)
        return session_id + _SUFFIX

    def _open(self, session_id: str, flags: int) -> int:
        name = self._name(session_id)
        try:
            fd = os.open(name, flags | _OPEN, 0o600, dir_fd=self._dir)
        except FileNotFoundError:
            raise _not_found(session_id) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise SessionInvalid(f"session {session_id} is a symlink; refused") from exc
            raise SessionInvalid(f"session {session_id}: {exc.strerror}") from exc
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            os.close(fd)
            raise SessionInvalid(f"session {session_id} is not a plain file")
        return fd

    def _lock(self, session_id: str) -> threading.Lock:
        with self._locks_guard:
            lock = self._locks.get(session_id)
            if lock is None:
                lock = self._locks[session_id] = threading.Lock()
            return lock

    @contextlib.contextmanager
    def holding(self, session_id: str) -> Iterator[None]:
        """Hold a log still: its writes wait until the block ends (a consistent copy)."""
        with self._lock(session_id):
            yield

    def stamp(self, session_id: str) -> Stamp | None:
        """The log's stamp without opening it; None unless it is a plain file (absent too)."""
        try:
            info = os.stat(self._name(session_id), dir_fd=self._dir, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SessionInvalid(f"session {session_id}: {exc.strerror}") from exc
        return _stamp(info) if stat.S_ISREG(info.st_mode) else None

    def dir_stamp(self) -> Stamp:
        """The directory's own stamp: it changes when a log is created, renamed or removed."""
        return _stamp(os.fstat(self._dir))

    # -- writing --------------------------------------------------------------------

    def create(self, session_id: str, header: dict[str, Any]) -> StoredLog:
        """Write the header of a new session, durably (refused whole, like any record)."""
        # The store's own fields win: a header copied from another log still names this one.
        record = {"kind": "header", "version": FORMAT_VERSION, "session_id": session_id,
                  **{key: value for key, value in header.items()
                     if key not in ("kind", "version", "session_id")}}
        line = self.encode(session_id, record)
        self.check_room(session_id, 0, line)
        with self._lock(session_id):
            fd = self._open(session_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
            try:
                _write_whole(session_id, fd, line, 0)
                stamp = _stamp(os.fstat(fd))
            except SessionInvalid:
                # A header that is not on disk whole must not leave a file behind.
                with contextlib.suppress(OSError):
                    os.unlink(self._name(session_id), dir_fd=self._dir)
                raise
            finally:
                os.close(fd)
            os.fsync(self._dir)
        return StoredLog(record, [], stamp, len(line))

    def append(self, session_id: str, event: dict[str, Any]) -> Appended:
        """Append one event; returns only once it is on disk.

        Raises ``RecordTooLarge`` or ``SessionFull`` (nothing written), or
        ``RuntimeRefused`` VALIDATION_FAILED for a lone surrogate (nothing written).
        """
        return self.append_line(session_id, self.encode(session_id, event))

    def append_line(self, session_id: str, line: bytes) -> Appended:
        """Append a line made by :meth:`encode` (``SessionFull`` if it does not fit)."""
        with self._lock(session_id):
            fd = self._open(session_id, os.O_RDWR | os.O_APPEND)
            try:
                before = _stamp(os.fstat(fd))
                complete = _complete_end(fd, before.size)
                if complete == 0:
                    raise SessionInvalid(f"session {session_id} has no complete header")
                self.check_room(session_id, complete, line)
                if complete < before.size:
                    os.ftruncate(fd, complete)  # only the torn tail of a crashed append
                _write_whole(session_id, fd, line, complete)
                return Appended(before, complete, _stamp(os.fstat(fd)))
            finally:
                os.close(fd)

    def encode(self, session_id: str, record: dict[str, Any]) -> bytes:
        """A record's line, newline included; refused here (``RecordTooLarge``, a lone
        surrogate) before anything is written."""
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        try:
            line = text.encode("utf-8") + b"\n"
        except UnicodeEncodeError as exc:
            # Only a lone surrogate cannot be encoded: refuse it here rather than
            # store text that is not Unicode (AV-02).
            raise RuntimeRefused(
                ErrorCode.VALIDATION_FAILED,
                f"session {session_id}: a record holds a lone surrogate "
                f"U+{ord(exc.object[exc.start]):04X}; nothing was written") from None
        if len(line) > self.max_record_bytes:
            raise RecordTooLarge(f"session {session_id}: a record of {len(line)} bytes exceeds "
                                 f"{self.max_record_bytes}; nothing was written")
        return line

    def check_room(self, session_id: str, size: int, line: bytes) -> None:
        """``SessionFull`` unless ``line`` fits after ``size`` bytes of log."""
        if size + len(line) > self.max_log_bytes:
            raise SessionFull(f"session {session_id} is full ({size} of {self.max_log_bytes} "
                              f"bytes); start a new session")

    # -- reading --------------------------------------------------------------------

    def read(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The header and every complete event (a torn last line is dropped).

        A log of any size is read, a full one included. Text that is not valid
        Unicode (a lone surrogate escape, bytes that are not UTF-8) reads back
        with U+FFFD.
        """
        log = self.read_log(session_id)
        return log.header, log.events

    def read_log(self, session_id: str) -> StoredLog:
        """:meth:`read`, with the stamp of what was read and the end of its last line."""
        fd = self._open(session_id, os.O_RDONLY)
        try:
            stamp = _stamp(os.fstat(fd))
            data = os.pread(fd, stamp.size, 0)
        finally:
            os.close(fd)
        complete, newline, _torn = data.rpartition(b"\n")
        records = [_record(session_id, number, raw) for number, raw
                   in enumerate(complete.split(b"\n") if newline else [], start=1)]
        if not records or records[0].get("kind") != "header" \
                or records[0].get("session_id") != session_id:
            raise SessionInvalid(f"session {session_id} has no valid header")
        return StoredLog(records[0], records[1:], stamp, len(complete) + len(newline))

    def list_ids(self) -> list[str]:
        """Ids of the stored sessions (symlinks and strays are not listed)."""
        ids = []
        with os.scandir(self._dir) as entries:
            for entry in entries:
                session_id = entry.name.removesuffix(_SUFFIX)
                if entry.name.endswith(_SUFFIX) and SESSION_ID.fullmatch(session_id) \
                        and entry.is_file(follow_symlinks=False):
                    ids.append(session_id)
        return sorted(ids)

    def delete(self, session_id: str) -> None:
        """Rename the log to a tombstone, then remove it."""
        name = self._name(session_id)
        tombstone = f".{session_id}.{secrets.token_hex(4)}.tombstone"
        with self._lock(session_id):
            try:
                os.rename(name, tombstone, src_dir_fd=self._dir, dst_dir_fd=self._dir)
            except FileNotFoundError:
                raise _not_found(session_id) from None
            os.unlink(tombstone, dir_fd=self._dir)
            os.fsync(self._dir)


def _complete_end(fd: int, size: int) -> int:
    """The offset just past the last newline (0: no complete line), however long the tail."""
    end = size
    while end > 0:
        start = max(0, end - _SCAN_CHUNK)
        cut = os.pread(fd, end - start, start).rfind(b"\n")
        if cut >= 0:
            return start + cut + 1
        end = start
    return 0


def _write_whole(session_id: str, fd: int, line: bytes, size: int) -> None:
    """Write ``line`` at the end (the file is ``size`` bytes long) and fsync it, or nothing."""
    try:
        view = memoryview(line)
        while view:
            written = os.write(fd, view)
            if written <= 0:
                raise OSError(errno.EIO, "short write")
            view = view[written:]
        os.fsync(fd)
    except OSError as exc:
        # Never leave a partial record: put the file back as it was.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, size)
        raise SessionInvalid(f"session {session_id}: write failed: {exc.strerror}") from exc


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _record(session_id: str, number: int, raw: bytes) -> dict[str, Any]:
    """One stored line as a record; not UTF-8 or a lone surrogate reads as U+FFFD."""
    text = raw.decode("utf-8", errors="replace")
    try:
        # NaN and Infinity are not JSON (the store never writes them): a line holding
        # one is corrupt, not a value no answer could carry.
        record = json.loads(text, parse_constant=_not_json)
    except (ValueError, RecursionError):  # not JSON, a 5,000-digit number, deep nesting
        raise SessionInvalid(f"session {session_id}: line {number} is corrupt") from None
    if not isinstance(record, dict):
        raise SessionInvalid(f"session {session_id}: line {number} is not an object")
    # Only a \u escape can give a lone surrogate (decoding with replacement gives none).
    if "\\ud" in text or "\\uD" in text:
        scrubbed: dict[str, Any] = scrub(record)
        return scrubbed
    return record
