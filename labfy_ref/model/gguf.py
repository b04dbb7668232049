"""GGUF checks before any model starts (SM-01): the magic, the version, the SHA-256.

The file is hashed in a stream (never read whole into memory); a progress
callback sees each step. A wrong magic or a digest that differs from the
expected one is a refusal, so a corrupt or substituted model never starts.
Without an expected digest the file's magic and version are checked and its
digest is only reported (to be pinned later with ``--model-sha256``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
import struct
from collections.abc import Callable
from pathlib import Path

from labfy_ref.errors import ConfigRefused, ErrorCode

MAGIC = b"GGUF"
KNOWN_VERSIONS = frozenset({1, 2, 3})
CHUNK_BYTES = 1024 * 1024
_SHA256 = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
Progress = Callable[[int, int], None]


@dataclasses.dataclass(frozen=True, slots=True)
class GgufInfo:
    """What a verified file is."""

    path: Path
    size: int
    version: int
    sha256: str


def expected_digest(text: str) -> str:
    """A SHA-256 given on the command line, normalised to lower case."""
    if not _SHA256.fullmatch(text):
        raise ConfigRefused("--sha256 must be 64 hexadecimal digits")
    return text.lower()


def verify_gguf(path: Path, sha256: str | None, progress: Progress | None = None) -> GgufInfo:
    """Check magic, version and (when given) digest; raise ConfigRefused otherwise."""
    expected = expected_digest(sha256) if sha256 is not None else None
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ConfigRefused(f"{path.name}: cannot open ({exc.strerror})",
                            code=ErrorCode.GGUF_INVALID) from exc
    with handle:
        header = handle.read(8)
        if len(header) < 8 or header[:4] != MAGIC:
            raise ConfigRefused(f"{path.name}: not a GGUF file (bad magic)",
                                code=ErrorCode.GGUF_INVALID)
        version = struct.unpack("<I", header[4:8])[0]
        if version not in KNOWN_VERSIONS:
            raise ConfigRefused(f"{path.name}: unknown GGUF version {version}",
                                code=ErrorCode.GGUF_INVALID)
        handle.seek(0, 2)
        size = handle.tell()
        handle.seek(0)
        digest = hashlib.sha256()
        done = 0
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress(done, size)
    actual = digest.hexdigest()
    if expected is not None and not hmac.compare_digest(actual, expected):
        raise ConfigRefused(f"{path.name}: SHA-256 is {actual}, expected {expected}",
                            code=ErrorCode.GGUF_SHA256_MISMATCH)
    return GgufInfo(path, size, version, actual)
