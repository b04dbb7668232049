"""File access confined to a workspace's ``files/`` by construction (GW-06).

Every path is walked from a directory file descriptor of ``files/``, one
component at a time, each opened with ``O_NOFOLLOW`` (directories with
``O_DIRECTORY`` too). No path is ever resolved by the kernel and then opened, so
swapping a component for a symlink between check and use cannot lead outside:
the open itself refuses the symlink. A symlink met on the walk is resolved by the
walk itself, inside the tree: its target's components are walked in its place
from the directory that holds it (an absolute target only when it names a place
under ``files/``); a ``..`` above ``files/`` is ``PATH_OUTSIDE_WORKSPACE``, more
than 40 links in one path (a loop) ``PATH_LOOP``, and a link whose target does not
exist ``PATH_NOT_FOUND`` — nothing is ever created through it. Writes go to a
fresh temporary file that is then renamed over the target inside the same
directory descriptor, so a reader never sees a partial file and a hard link to an
outside file is never written through (and is refused outright). Device files
and FIFOs are refused after ``fstat`` of the opened descriptor, never by a name
check.
"""

from __future__ import annotations

import builtins
import codecs
import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import stat
import time
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labfy_ref.errors import ErrorCode, ToolError
from labfy_ref.text import find_surrogate

MAX_PATH_CHARS = 1024
#: The most symlinks one path may pass through (Linux's own bound): past it, a loop.
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY


def _outside(reason: str) -> ToolError:
    return ToolError(reason, code=ErrorCode.PATH_OUTSIDE_WORKSPACE)


def split_path(path: str) -> list[str]:
    """The components of a relative path under ``files/``; refuses anything else."""
    if len(path) > MAX_PATH_CHARS:
        raise _outside(f"path is longer than {MAX_PATH_CHARS} characters")
    if "\x00" in path:
        raise _outside("path contains a NUL byte")
    if path.startswith("/"):
        raise _outside("absolute paths are refused; paths are relative to files/")
    if path in ("", "."):
        return []
    parts = path.removesuffix("/").split("/")
    for part in parts:
        if part == "..":
            raise _outside("'..' is refused")
        if part in ("", "."):
            raise _outside("empty or '.' path components are refused")
    return parts


def _invisible(part: str) -> str | None:
    """The first control or format character of a name (``U+202E``), if it holds one.

    Direction overrides, zero-width and other format characters (Unicode Cf) and controls
    (Cc) make a name read differently from what it is — ``run\u202etxt.sh`` shows as
    ``runhs.txt`` — so a human approving a write could approve another file than the one
    written. Names the agent creates never hold them; existing files can still be read.
    """
    for char in part:
        if unicodedata.category(char) in ("Cc", "Cf"):
            return f"U+{ord(char):04X}"
    return None


def _refuse_invisible(parts: list[str]) -> None:
    """Refuse a name to write that holds an invisible character (:func:`_invisible`)."""
    for part in parts:
        if (char := _invisible(part)) is not None:
            raise ToolError(f"files.write: a name holds the invisible or direction-control "
                            f"character {char}; it would read as another name",
                            code=ErrorCode.INVALID_ARGUMENTS)


def _written_already(name: str, dir_fd: int, what: str, data: bytes,
                     prior_sha256: str | None) -> bool:
    """A conditional write's check, under the directory's write lock: True when the file
    already holds ``data`` (the write was done); ``FILE_CHANGED`` unless it still holds
    what was decided on (``prior_sha256``, None for no file); False: write it."""
    now = _file_sha256(name, dir_fd, what)
    if now == hashlib.sha256(data).hexdigest():
        return True
    if now != prior_sha256:
        raise ToolError(f"{what}: changed since this write was decided; nothing was written",
                        code=ErrorCode.FILE_CHANGED)
    return False


def _os_error(exc: OSError, what: str) -> ToolError:
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return _outside(f"{what}: symlinks are never followed")
    if exc.errno == errno.ENOENT:
        return ToolError(f"{what}: no such file or directory", code=ErrorCode.FILE_NOT_FOUND)
    if exc.errno == errno.ENOTDIR:
        return ToolError(f"{what}: not a directory", code=ErrorCode.NOT_A_DIRECTORY)
    if exc.errno == errno.EISDIR:
        return ToolError(f"{what}: is a directory", code=ErrorCode.NOT_A_FILE)
    return ToolError(f"{what}: {errno.errorcode.get(exc.errno or 0, 'error')}",
                     code=ErrorCode.TOOL_UNAVAILABLE)


#: How many bytes of a name its temporary name keeps: with the dot, a random 12 and
#: ".tmp", 82 bytes at most, well under NAME_MAX.
_TEMP_KEPT_BYTES = 64
#: How long a write waits for another write into the same directory to finish.
LOCK_WAIT_SECONDS = 10.0
_LOCK_POLL = 0.01


def _temp_name(name: str) -> str:
    """A fresh hidden name to write ``name``'s bytes into before the rename.

    It keeps the start of ``name``, to tell whose it is, cut to :data:`_TEMP_KEPT_BYTES`
    encoded bytes, not characters: a name of up to ``NAME_MAX`` (255) bytes in characters
    of four bytes would otherwise make a temporary name too long to create.
    """
    kept = name[:_TEMP_KEPT_BYTES]
    while len(os.fsencode(kept)) > _TEMP_KEPT_BYTES:
        kept = kept[:-1]
    return f".{kept}.{secrets.token_hex(6)}.tmp"


@contextmanager
def _locked(dir_fd: int, what: str) -> Iterator[None]:
    """Hold the directory's write lock (``flock``; every write into it takes it)."""
    for _ in range(int(LOCK_WAIT_SECONDS / _LOCK_POLL) + 1):
        try:
            fcntl.flock(dir_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(_LOCK_POLL)
    else:
        raise ToolError(f"{what}: another write to its directory is still in progress; "
                        "nothing was written", code=ErrorCode.FILE_CHANGED)
    try:
        yield
    finally:
        fcntl.flock(dir_fd, fcntl.LOCK_UN)


def _file_sha256(name: str, dir_fd: int, what: str) -> str | None:
    """The SHA-256 of a regular file's bytes (streamed); None when there is no such name."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _os_error(exc, what) from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _outside(f"{what}: not a regular file")
        digest = hashlib.sha256()
        while chunk := os.read(fd, 1 << 20):
            digest.update(chunk)
    except OSError as exc:
        raise _os_error(exc, what) from exc
    finally:
        os.close(fd)
    return digest.hexdigest()


def _is_symlink(name: str, dir_fd: int) -> bool:
    """Only names the refusal: the open already refused, whatever this answers."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _dangling(what: str) -> ToolError:
    return ToolError(f"{what}: a symlink whose target does not exist; nothing is created "
                     "through it", code=ErrorCode.PATH_NOT_FOUND)


class _Walk:
    """Directory descriptors from ``files/`` down to where a path leads (a stack, so a
    ``..`` from a link's target goes up without ever leaving the tree)."""

    def __init__(self, root: Path, root_fd: int) -> None:
        self.root = root
        self.stack = [root_fd]
        self.links = 0

    @property
    def top(self) -> int:
        return self.stack[-1]

    def close(self) -> None:
        for fd in reversed(self.stack):
            os.close(fd)
        self.stack.clear()

    def up(self, where: str) -> None:
        if len(self.stack) == 1:
            raise _outside(f"{where}: a symlink leads out of files/")
        os.close(self.stack.pop())

    def down(self, part: str, where: str) -> None:
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=self.top)
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and _is_symlink(part, self.top):
                raise _outside(f"{where}: changed into a symlink while it was walked; "
                               "refused") from exc
            raise _os_error(exc, where) from exc
        self.stack.append(child)

    def target(self, part: str, where: str) -> list[tuple[str, str, bool]]:
        """The components of ``part``'s link target, to walk in its place (each named, in
        what is said, by the link ``where``)."""
        self.links += 1
        if self.links > MAX_LINKS:
            raise ToolError(f"{where}: more than {MAX_LINKS} symlinks on the way (a loop)",
                            code=ErrorCode.PATH_LOOP)
        try:
            target = os.readlink(part, dir_fd=self.top)
        except OSError as exc:  # no longer a link: it changed under the walk
            raise _outside(f"{where}: changed while it was walked; refused") from exc
        if target.startswith("/"):  # absolute: only a place under files/ itself
            inside = next((target[len(base):] for base in _bases(self.root)
                           if target == base or target.startswith(base + "/")), None)
            if inside is None:
                raise _outside(f"{where}: a symlink leads out of files/")
            while len(self.stack) > 1:
                os.close(self.stack.pop())
            target = inside
        return [(component, where, True) for component in target.split("/")]


def _bases(root: Path) -> tuple[str, ...]:
    """``files/`` as an absolute link target may name it: as given, and its real path."""
    given = os.path.abspath(root)
    return tuple(dict.fromkeys((given.rstrip("/"), os.path.realpath(root).rstrip("/"))))


class ConfinedFiles:
    """List, read and write text files under one root, never outside it."""

    def __init__(self, root: Path, *, max_read_bytes: int = 256 * 1024,
                 max_write_bytes: int = 256 * 1024, max_entries: int = 1000) -> None:
        self._root = root
        self.max_read_bytes = max_read_bytes
        self.max_write_bytes = max_write_bytes
        self.max_entries = max_entries

    @contextmanager
    def _located(self, parts: list[str], *, leaf: bool,
                 create: bool = False) -> Iterator[tuple[int, str | None]]:
        """Walk ``parts`` from ``files/``, symlinks resolved inside it (module docstring):
        ``(directory descriptor, name)`` of the path's last component — never a symlink
        itself; ``leaf`` False: the path is a directory (``name`` None). ``create`` makes
        missing directories on the way, never through a link."""
        try:
            root_fd = os.open(self._root, _DIR_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENOTDIR and self._root.is_symlink():
                raise _outside("files/ is a symlink; it is never followed") from exc
            raise _os_error(exc, "files/") from exc
        walk = _Walk(self._root, root_fd)
        try:
            # (component, what names it in a refusal, from a link's target?), popped from
            # the end; the path's own components are named by the path up to them
            pending = [(part, "/".join(parts[: index + 1]), False)
                       for index, part in reversed(list(enumerate(parts)))]
            name: str | None = None
            where = "files/"
            while pending:
                part, where, linked = pending.pop()
                if part in ("", "."):
                    continue
                if part == "..":
                    walk.up(where)
                    continue
                last = not pending
                try:
                    info: os.stat_result | None = os.stat(part, dir_fd=walk.top,
                                                          follow_symlinks=False)
                except FileNotFoundError:
                    info = None
                except OSError as exc:
                    raise _os_error(exc, where) from exc
                if info is not None and stat.S_ISLNK(info.st_mode):
                    pending.extend(reversed(walk.target(part, where)))
                    continue
                if info is None and linked:
                    raise _dangling(where)
                if last and leaf:
                    name = part
                    break
                if info is None and create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=walk.top)
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        raise _os_error(exc, where) from exc
                walk.down(part, where)
            if leaf and name is None:
                raise ToolError(f"{where}: is a directory", code=ErrorCode.NOT_A_FILE)
            yield walk.top, name
        finally:
            walk.close()

    @contextmanager
    def _directory(self, parts: list[str]) -> Iterator[int]:
        """A descriptor of the directory ``parts`` leads to under the root."""
        with self._located(parts, leaf=False) as (fd, _):
            yield fd

    @contextmanager
    def _file(self, parts: list[str], *, create: bool = False) -> Iterator[tuple[int, str]]:
        """The directory descriptor and name of the file ``parts`` leads to."""
        with self._located(parts, leaf=True, create=create) as (fd, name):
            assert name is not None
            yield fd, name

    def list(self, path: str) -> dict[str, Any]:
        """Entries of a directory: files (with size) and directories. A symlink is listed as
        what it leads to when that is inside ``files/`` (resolved as every path is); one
        that leads outside, nowhere or round in a loop is left out.

        A name that is not UTF-8 cannot be shown, cited or opened by a model: it
        is left out, and ``skipped`` says how many were (AV-02).
        """
        parts = split_path(path)
        entries: list[dict[str, Any]] = []
        skipped = 0
        with self._directory(parts) as fd, os.scandir(fd) as listing:
            for entry in sorted(listing, key=lambda e: e.name):
                if len(entries) >= self.max_entries:
                    break
                if find_surrogate(entry.name) is not None:  # undecodable bytes in the name
                    skipped += 1
                    continue
                found: os.stat_result | None = entry.stat(follow_symlinks=False)
                if found is not None and stat.S_ISLNK(found.st_mode):
                    found = self._resolved_info([*parts, entry.name])
                if found is None:
                    continue
                info = found
                if stat.S_ISDIR(info.st_mode):
                    entries.append({"name": entry.name, "type": "directory"})
                elif stat.S_ISREG(info.st_mode):
                    entries.append({"name": entry.name, "type": "file", "size": info.st_size})
        return {"path": "/".join(parts), "entries": entries, "skipped": skipped}

    def _resolved_info(self, parts: builtins.list[str]) -> os.stat_result | None:
        """What a listed symlink leads to inside ``files/``; None when it leads nowhere
        there (outside, dangling, a loop)."""
        try:
            with self._file(parts) as (dir_fd, name):
                return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except (ToolError, OSError):
            return None

    def read(self, path: str) -> dict[str, Any]:
        """A UTF-8 text file, cut at ``max_read_bytes`` (``truncated`` says so)."""
        parts = split_path(path)
        if not parts:
            raise ToolError("files.read needs a file path", code=ErrorCode.NOT_A_FILE)
        with self._file(parts) as (dir_fd, name):
            try:
                fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
            except OSError as exc:
                raise _os_error(exc, path) from exc
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise _outside(f"{path}: not a regular file (devices and FIFOs are refused)")
                data = os.read(fd, self.max_read_bytes + 1)
            except OSError as exc:
                raise _os_error(exc, path) from exc
            finally:
                os.close(fd)
        truncated = len(data) > self.max_read_bytes
        decoder = codecs.getincrementaldecoder("utf-8")()
        try:
            text = decoder.decode(data[: self.max_read_bytes], final=not truncated)
        except UnicodeDecodeError:
            raise ToolError(f"{path}: not UTF-8 text", code=ErrorCode.NOT_UTF8) from None
        return {"path": "/".join(parts), "content": text, "truncated": truncated}

    def sha256(self, path: str) -> str | None:
        """The SHA-256 of a file's bytes, None when it does not exist (links refused)."""
        parts = split_path(path)
        if not parts:
            raise ToolError("a file path is needed", code=ErrorCode.NOT_A_FILE)
        try:
            with self._file(parts) as (dir_fd, name):
                return _file_sha256(name, dir_fd, path)
        except ToolError as exc:
            if exc.code is ErrorCode.FILE_NOT_FOUND:  # a missing directory: no such file
                return None
            raise

    def write(self, path: str, content: str, *, conditional: bool = False,
              prior_sha256: str | None = None) -> dict[str, Any]:
        """Replace (or create) a text file atomically; refuses links and special files.

        ``conditional``: write only if the file still holds what was decided on
        (``prior_sha256``, None for no file), checked under the directory's write
        lock right before the rename; a file that already holds ``content`` is a
        write already done. Anything else is ``FILE_CHANGED`` and nothing is
        written: a worker paused past its lease cannot overwrite a later write.
        """
        parts = split_path(path)
        if not parts:
            raise ToolError("files.write needs a file path", code=ErrorCode.NOT_A_FILE)
        _refuse_invisible(parts)
        data = content.encode("utf-8")
        if len(data) > self.max_write_bytes:
            raise ToolError(f"content exceeds {self.max_write_bytes} bytes",
                            code=ErrorCode.FILE_TOO_LARGE)
        with self._file(parts, create=True) as (dir_fd, name):
            try:
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                info = None
            except OSError as exc:
                raise _os_error(exc, path) from exc
            if info is not None:
                if stat.S_ISLNK(info.st_mode):
                    raise _outside(f"{path}: is a symlink; symlinks are never written through")
                if not stat.S_ISREG(info.st_mode):
                    raise _outside(f"{path}: not a regular file")
                if info.st_nlink > 1:
                    raise _outside(f"{path}: has other hard links; it is not written")
            temp = _temp_name(name)
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644, dir_fd=dir_fd)
                with os.fdopen(fd, "wb", closefd=True) as handle:
                    handle.write(data)
                    handle.flush()
                    os.fsync(handle.fileno())
                with _locked(dir_fd, path):
                    if conditional and _written_already(name, dir_fd, path, data,
                                                        prior_sha256):
                        os.unlink(temp, dir_fd=dir_fd)
                        return {"path": "/".join(parts), "bytes_written": len(data)}
                    os.rename(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            except BaseException as exc:
                with contextlib.suppress(OSError):
                    os.unlink(temp, dir_fd=dir_fd)
                if isinstance(exc, OSError):
                    raise _os_error(exc, path) from exc
                raise
        return {"path": "/".join(parts), "bytes_written": len(data)}
