"""JSONL session logs (BR-06..BR-08): one append-only file per session under ``sessions/``.

* The header is written (and fsynced) at creation, so an empty session survives a restart.
* Every event is one line, appended with a single ``write`` and fsynced before the
  call returns: an acknowledged event is never lost.
* A torn last line (a crash mid-append) is dropped and cut off before the next
  append; any other bad line makes the log ``SESSION_INVALID`` (409).
* The root and every file are opened without following symlinks (a symlinked
  ``sessions/`` or session file is refused); the root is checked by lstat and
  realpath equality.
* Delete renames the log to a tombstone, then removes it.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from labfy_ref.errors import ErrorCode, RuntimeRefused, SessionInvalid
from labfy_ref.ids import id_pattern

SESSION_ID = id_pattern("ses")
FORMAT_VERSION = 1
MAX_LOG_BYTES = 64 * 1024 * 1024
_SUFFIX = ".jsonl"
_OPEN = os.O_NOFOLLOW | os.O_CLOEXEC


def _not_found(session_id: str) -> RuntimeRefused:
    return RuntimeRefused(ErrorCode.SESSION_NOT_FOUND, f"no session {session_id[:40]}")


class JsonlSessionStore:
    """Session logs in one directory, reached only through a held directory descriptor."""

    def __init__(self, root: Path) -> None:
        try:
            info = os.lstat(root)
        except OSError as exc:
            raise SessionInvalid(f"session root {root.name}/ is missing") from exc
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
            raise SessionInvalid(f"session root {root.name}/ is a symlink or not a directory")
        if os.path.realpath(root) != os.path.abspath(root):
            raise SessionInvalid(f"session root {root.name}/ is reached through a symlink")
        self.root = root
        self._dir = os.open(root, os.O_RDONLY | os.O_DIRECTORY | _OPEN)

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

    # -- writing --------------------------------------------------------------------

    def create(self, session_id: str, header: dict[str, Any]) -> None:
        """Write the header of a new session, durably."""
        line = _line({"kind": "header", "version": FORMAT_VERSION, "session_id": session_id,
                      **header})
        fd = self._open(session_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(self._dir)

    def append(self, session_id: str, event: dict[str, Any]) -> None:
        """Append one event; returns only once it is on disk."""
        line = _line(event)
        fd = self._open(session_id, os.O_RDWR | os.O_APPEND)
        try:
            self._cut_torn_tail(fd)
            written = os.write(fd, line)
            if written != len(line):
                raise SessionInvalid(f"short write to session {session_id}")
            os.fsync(fd)
        finally:
            os.close(fd)

    @staticmethod
    def _cut_torn_tail(fd: int) -> None:
        size = os.fstat(fd).st_size
        if size == 0:
            return
        if os.pread(fd, 1, size - 1) == b"\n":
            return
        window = min(size, 1024 * 1024)
        tail = os.pread(fd, window, size - window)
        cut = tail.rfind(b"\n")
        os.ftruncate(fd, size - window + cut + 1 if cut >= 0 else 0)

    # -- reading --------------------------------------------------------------------

    def read(self, session_id: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """The header and every complete event (a torn last line is dropped)."""
        fd = self._open(session_id, os.O_RDONLY)
        try:
            size = os.fstat(fd).st_size
            if size > MAX_LOG_BYTES:
                raise SessionInvalid(f"session {session_id} log exceeds {MAX_LOG_BYTES} bytes")
            data = os.pread(fd, size, 0)
        finally:
            os.close(fd)
        complete, _, _torn = data.rpartition(b"\n")
        records = []
        for number, raw in enumerate(complete.split(b"\n") if complete else [], start=1):
            try:
                record = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError):
                raise SessionInvalid(f"session {session_id}: line {number} is corrupt") from None
            if not isinstance(record, dict):
                raise SessionInvalid(f"session {session_id}: line {number} is not an object")
            records.append(record)
        if not records or records[0].get("kind") != "header" \
                or records[0].get("session_id") != session_id:
            raise SessionInvalid(f"session {session_id} has no valid header")
        return records[0], records[1:]

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
        try:
            os.rename(name, tombstone, src_dir_fd=self._dir, dst_dir_fd=self._dir)
        except FileNotFoundError:
            raise _not_found(session_id) from None
        os.unlink(tombstone, dir_fd=self._dir)
        os.fsync(self._dir)


def _line(record: dict[str, Any]) -> bytes:
    # ASCII-escaped: any text, lone surrogates included, makes a valid UTF-8 line.
    return json.dumps(record, ensure_ascii=True, separators=(",", ":"),
                      allow_nan=False).encode("ascii") + b"\n"
