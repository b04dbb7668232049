"""GGUF checks before any model starts (SM-01): the magic, the version, the SHA-256.

The file is hashed in a stream (never read whole into memory); a progress
callback sees each step. A wrong magic or a digest that differs from the
expected one is a refusal, so a corrupt or substituted model never starts.
Without an expected digest the file's magic and version are checked and its
digest is only reported (to be pinned later with ``--model-sha256``).

What is verified is what runs (SM-09): :func:`open_gguf` opens the file once
(a symlink is followed at that moment, never again) and keeps the descriptor;
the header, the governor's size, the hash and the server all read *that*
descriptor -- the child is handed ``/proc/self/fd/N`` of a copy it alone
inherits -- so renaming another file over the path or retargeting a link
after the open changes nothing that runs. What a descriptor cannot pin is a
rewrite of the same inode: its identity (device, inode, size, mtime and
ctime -- the last is set by the kernel on every write and on every
``utime``, so restoring mtime does not hide a rewrite) is taken at open and
compared after the hash, right before the child starts and once it is
ready; any difference is ``GGUF_CHANGED``. Only regular files are opened, and
never in a way that waits (a FIFO is refused, not waited on).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import hmac
import os
import re
import stat
import struct
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from labfy_ref.errors import ConfigRefused, ErrorCode

MAGIC = b"GGUF"
KNOWN_VERSIONS = frozenset({1, 2, 3})
CHUNK_BYTES = 1024 * 1024
_SHA256 = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
_FD_FOLDER = Path("/proc/self/fd")
Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True, slots=True)
class GgufInfo:
    """What a verified file is."""

    path: Path
    size: int
    version: int
    sha256: str


@dataclasses.dataclass(frozen=True, slots=True)
class FileIdentity:
    """What tells one state of a file from another without reading it."""

    device: int
    inode: int
    size: int
    mtime_ns: int
    ctime_ns: int

    @classmethod
    def of(cls, status: os.stat_result) -> FileIdentity:
        """The identity in a ``stat`` result."""
        return cls(status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
                   status.st_ctime_ns)


def expected_digest(text: str) -> str:
    """A SHA-256 given on the command line, normalised to lower case."""
    if not _SHA256.fullmatch(text):
        raise ConfigRefused("--sha256 must be 64 hexadecimal digits")
    return text.lower()


def _close_quietly(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)


def _changed(path: Path, when: str) -> ConfigRefused:
    return ConfigRefused(f"{path.name}: the file changed {when}; nothing runs a model "
                         "that is not the one verified", code=ErrorCode.GGUF_CHANGED)


class PinnedGguf:
    """A GGUF held open from its check to its server's start; use as a context manager."""

    def __init__(self, path: Path, fd: int, version: int, identity: FileIdentity) -> None:
        self.path = path
        self.version = version
        self.identity = identity
        self._fd = fd
        self._release = weakref.finalize(self, _close_quietly, fd)  # closed when dropped, too
        self.sha256: str | None = None  # set by :meth:`hash`

    @property
    def size(self) -> int:
        """The file's size when it was opened."""
        return self.identity.size

    @property
    def fd(self) -> int:
        """The descriptor (close-on-exec: a child inherits it only when handed it)."""
        if self._fd < 0:
            raise ValueError(f"{self.path.name}: the pinned file is closed")
        return self._fd

    def by_descriptor(self) -> Path | None:
        """``/proc/self/fd/N``: the pinned file by its descriptor, where the system has that."""
        return _FD_FOLDER / str(self.fd) if _FD_FOLDER.is_dir() else None

    def check_unchanged(self, when: str) -> None:
        """Refuse (``GGUF_CHANGED``) if the file is not in the state it was opened in."""
        try:
            now = FileIdentity.of(os.fstat(self.fd))
        except OSError as exc:
            raise _changed(self.path, when) from exc
        if now != self.identity:
            raise _changed(self.path, when)

    def hash(self, sha256: str | None, progress: Progress | None = None) -> GgufInfo:
        """Stream the descriptor's SHA-256; refuse a mismatch or a change while hashing."""
        expected = expected_digest(sha256) if sha256 is not None else None
        digest = hashlib.sha256()
        done = 0
        size = self.identity.size
        while done < size:
            try:
                chunk = os.pread(self.fd, min(CHUNK_BYTES, size - done), done)
            except OSError as exc:
                raise ConfigRefused(f"{self.path.name}: cannot read ({exc.strerror})",
                                    code=ErrorCode.GGUF_INVALID) from exc
            if not chunk:
                raise _changed(self.path, "while it was hashed")
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, size)
        self.check_unchanged("while it was hashed")
        actual = digest.hexdigest()
        if expected is not None and not hmac.compare_digest(actual, expected):
            raise ConfigRefused(f"{self.path.name}: SHA-256 is {actual}, expected {expected}",
                                code=ErrorCode.GGUF_SHA256_MISMATCH)
        self.sha256 = actual
        return GgufInfo(self.path, size, self.version, actual)

    def close(self) -> None:
        """Let the file go (idempotent)."""
        self._fd = -1
        self._release()

    def __enter__(self) -> PinnedGguf:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()


def open_gguf(path: Path) -> PinnedGguf:
    """Open ``path`` once, a regular file with the GGUF magic and a known version."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigRefused(f"{path.name}: cannot open ({exc.strerror})",
                            code=ErrorCode.GGUF_INVALID) from exc
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise ConfigRefused(f"{path.name}: not a regular file", code=ErrorCode.GGUF_INVALID)
        os.set_blocking(fd, True)
        header = os.pread(fd, 8, 0)
        if len(header) < 8 or header[:4] != MAGIC:
            raise ConfigRefused(f"{path.name}: not a GGUF file (bad magic)",
                                code=ErrorCode.GGUF_INVALID)
        version = struct.unpack("<I", header[4:8])[0]
        if version not in KNOWN_VERSIONS:
            raise ConfigRefused(f"{path.name}: unknown GGUF version {version}",
                                code=ErrorCode.GGUF_INVALID)
    except OSError as exc:
        os.close(fd)
        raise ConfigRefused(f"{path.name}: cannot read ({exc.strerror})",
                            code=ErrorCode.GGUF_INVALID) from exc
    except BaseException:
        os.close(fd)
        raise
    return PinnedGguf(path, fd, version, FileIdentity.of(status))


def verify_gguf(path: Path, sha256: str | None, progress: Progress | None = None) -> GgufInfo:
    """Check magic, version and (when given) digest; raise ConfigRefused otherwise."""
    with open_gguf(path) as pinned:
        return pinned.hash(sha256, progress)
