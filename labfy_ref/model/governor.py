"""The resource governor: will this model fit before we start it? (SM-04)

It looks at the model file's size and at its GGUF header only -- never hashes
or reads the whole file -- and compares what the model needs with what the
machine has:

* need = model bytes + KV cache for ``ctx_size`` tokens + a margin;
* have = ``MemAvailable`` + ``SwapFree`` from ``/proc/meminfo``.

The KV cache is computed from the header (f16 keys and values, as
llama-server allocates by default): ``ctx_size * block_count * head_count_kv
* (key_length + value_length) * 2`` bytes, where a per-layer array counts as
its largest entry (an over- rather than an under-estimate). When the header
cannot be read within its bounds, the KV cache is estimated at
:data:`FALLBACK_KV_PER_TOKEN` per token of context, which covers f16 caches up
to 13 B-class models without grouped-query attention (800 KiB a token).

The margin (:data:`MARGIN_FIXED` + 1/16 of the model) stands for llama.cpp's
compute buffers and the process itself. The scratch folder must hold the
child's log and, when a CPU variant is staged, a copy of the binary's folder.
"""

from __future__ import annotations

import dataclasses
import shutil
import struct
from pathlib import Path
from typing import BinaryIO

from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.model.variants import staging_bytes

MARGIN_FIXED = 256 * 1024 * 1024
FALLBACK_KV_PER_TOKEN = 1024 * 1024
#: The child's log on disk at most (two halves, see the supervisor).
LOG_CAP_BYTES = 1024 * 1024
#: The header reader never looks past this offset, holds more than this many
#: metadata entries or walks more string-array items than this.
MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 1 << 16
MAX_ITEMS = 1 << 20
MAX_KEY_BYTES = 1 << 16
_MAX_KEPT_STRING = 256
_MAX_KEPT_ARRAY = 1 << 16
_STRING, _ARRAY = 8, 9
_SCALARS: dict[int, str] = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f",
                            7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_INTEGERS = frozenset({0, 1, 2, 3, 4, 5, 10, 11})
_FIELDS = ("block_count", "embedding_length", "attention.head_count",
           "attention.head_count_kv", "attention.key_length", "attention.value_length")
#: Plausible bounds of each field; a value outside makes the header unreadable.
_BOUNDS = {"block_count": (1, 1 << 16), "embedding_length": (1, 1 << 20),
           "attention.head_count": (1, 1 << 16), "attention.head_count_kv": (1, 1 << 16),
           "attention.key_length": (1, 1 << 20), "attention.value_length": (1, 1 << 20)}


class _Unreadable(Exception):
    """The header broke one of the reader's bounds or ended early."""


class _Reader:
    """Sequential little-endian reads over a file, refusing to pass ``limit``."""

    def __init__(self, handle: BinaryIO, size: int) -> None:
        self._handle = handle
        self._limit = min(size, MAX_HEADER_BYTES)
        self._pos = 0
        self._buffer = b""
        self._offset = 0  # of the buffer's start in the file
        self.items = 0

    def _check(self, count: int) -> None:
        if count < 0 or self._pos + count > self._limit:
            raise _Unreadable

    def take(self, count: int) -> bytes:
        self._check(count)
        start = self._pos - self._offset
        if start + count > len(self._buffer):
            self._handle.seek(self._pos)
            self._buffer = self._handle.read(max(count, 64 * 1024))
            self._offset, start = self._pos, 0
            if len(self._buffer) < count:
                raise _Unreadable
        self._pos += count
        return self._buffer[start : start + count]

    def skip(self, count: int) -> None:
        self._check(count)
        self._pos += count  # the next take() seeks if this left the buffer

    def unpack(self, fmt: str) -> int | float | bool:
        value: int | float | bool = struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]
        return value


def _length(reader: _Reader, version: int) -> int:
    return int(reader.unpack("<I" if version == 1 else "<Q"))


def _skip_array(reader: _Reader, etype: int, count: int, version: int) -> None:
    if etype in _SCALARS:
        reader.skip(count * struct.calcsize(_SCALARS[etype]))
    elif etype == _STRING:
        reader.items += count
        if reader.items > MAX_ITEMS:
            raise _Unreadable
        for _ in range(count):
            reader.skip(_length(reader, version))
    else:  # nested arrays: nothing we need lives there
        raise _Unreadable


def _skip_value(reader: _Reader, vtype: int, version: int) -> None:
    if vtype in _SCALARS:
        reader.skip(struct.calcsize(_SCALARS[vtype]))
    elif vtype == _STRING:
        reader.skip(_length(reader, version))
    elif vtype == _ARRAY:
        etype, count = int(reader.unpack("<I")), _length(reader, version)
        _skip_array(reader, etype, count, version)
    else:
        raise _Unreadable


def _read_value(reader: _Reader, vtype: int, version: int) -> object:
    """A value we may want: a scalar, a short string or a short integer array; else None."""
    if vtype in _SCALARS:
        return reader.unpack(_SCALARS[vtype])
    if vtype == _STRING:
        length = _length(reader, version)
        if length <= _MAX_KEPT_STRING:
            return reader.take(length).decode("utf-8", "replace")
        reader.skip(length)
        return None
    if vtype == _ARRAY:
        etype, count = int(reader.unpack("<I")), _length(reader, version)
        if etype in _INTEGERS and count <= _MAX_KEPT_ARRAY:
            return [reader.unpack(_SCALARS[etype]) for _ in range(count)]
        _skip_array(reader, etype, count, version)
        return None
    raise _Unreadable


def _metadata(handle: BinaryIO, size: int) -> dict[str, object]:
    reader = _Reader(handle, size)
    if reader.take(4) != b"GGUF":
        raise _Unreadable
    version = int(reader.unpack("<I"))
    if version not in (1, 2, 3):
        raise _Unreadable
    _length(reader, version)  # tensor count: not needed
    entries = _length(reader, version)
    if entries > MAX_ENTRIES:
        raise _Unreadable
    wanted: dict[str, object] = {}
    for _ in range(entries):
        key_length = _length(reader, version)
        if key_length > MAX_KEY_BYTES:
            raise _Unreadable
        key = reader.take(key_length).decode("utf-8", "replace")
        vtype = int(reader.unpack("<I"))
        if key == "general.architecture" or key.endswith(_FIELDS):
            wanted[key] = _read_value(reader, vtype, version)
        else:
            _skip_value(reader, vtype, version)
    return wanted


def _field(meta: dict[str, object], arch: str, name: str) -> int | None:
    value = meta.get(f"{arch}.{name}")
    if isinstance(value, list):
        value = max(value, default=None)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Unreadable
    low, high = _BOUNDS[name]
    if not low <= value <= high:
        raise _Unreadable
    return value


def kv_bytes_per_token(model_file: Path) -> int | None:
    """f16 KV-cache bytes per token of context from the GGUF header; None when unreadable.

    Bounded and safe on any input: counts and lengths are checked before
    anything is read or skipped, nothing past :data:`MAX_HEADER_BYTES` is
    looked at, and only short values of the fields we need are kept.
    """
    try:
        with model_file.open("rb") as handle:
            size = model_file.stat().st_size
            meta = _metadata(handle, size)
        arch = meta.get("general.architecture")
        if not isinstance(arch, str) or not arch:
            return None
        layers = _field(meta, arch, "block_count")
        width = _field(meta, arch, "embedding_length")
        heads = _field(meta, arch, "attention.head_count")
        if layers is None or width is None or heads is None:
            return None
        heads_kv = _field(meta, arch, "attention.head_count_kv") or heads
        key = _field(meta, arch, "attention.key_length") or max(1, width // heads)
        value = _field(meta, arch, "attention.value_length") or key
    except (OSError, _Unreadable, struct.error):
        return None
    return layers * heads_kv * (key + value) * 2


def format_bytes(count: int) -> str:
    """``0 B``, ``512 B``, ``1.5 KiB`` ... ``9.1 GiB``, ``2.0 TiB``."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if value < 1024 or unit == "TiB":
            break
    return f"{value:.1f} {unit}"


@dataclasses.dataclass(frozen=True, slots=True)
class ResourceReport:
    """What the model needs and what the machine has, in bytes."""

    model_bytes: int
    kv_bytes: int
    kv_estimated: bool  # True: the header was unreadable, the fallback rate was used
    margin_bytes: int
    ram_available: int
    swap_free: int
    scratch: Path
    scratch_free: int
    scratch_need: int

    @property
    def need_bytes(self) -> int:
        """Model + KV cache + margin."""
        return self.model_bytes + self.kv_bytes + self.margin_bytes

    @property
    def have_bytes(self) -> int:
        """Available RAM + free swap."""
        return self.ram_available + self.swap_free

    @property
    def fits(self) -> bool:
        """Whether both memory and scratch disk suffice."""
        return self.need_bytes <= self.have_bytes and self.scratch_need <= self.scratch_free

    def memory_text(self) -> str:
        """``need … (model … + KV … + margin …), have … (RAM … + swap …)``."""
        kv = format_bytes(self.kv_bytes) + (" estimated" if self.kv_estimated else "")
        return (f"need {format_bytes(self.need_bytes)} (model {format_bytes(self.model_bytes)}"
                f" + KV {kv} + margin {format_bytes(self.margin_bytes)}), "
                f"have {format_bytes(self.have_bytes)} (RAM {format_bytes(self.ram_available)}"
                f" + swap {format_bytes(self.swap_free)})")

    def scratch_text(self) -> str:
        """``scratch PATH: need …, have … free``."""
        return (f"scratch {self.scratch}: need {format_bytes(self.scratch_need)}, "
                f"have {format_bytes(self.scratch_free)} free")


#: Where the machine says how much memory is free.
MEMINFO = Path("/proc/meminfo")


def _meminfo(meminfo: Path) -> tuple[int, int]:
    """(MemAvailable, SwapFree) in bytes."""
    values: dict[str, int] = {}
    try:
        with meminfo.open("rb") as handle:
            text = handle.read(64 * 1024).decode("ascii", "replace")
    except OSError as exc:
        raise ConfigRefused(f"cannot tell free memory: {meminfo}: {exc.strerror}",
                            code=ErrorCode.RESOURCES_INSUFFICIENT) from exc
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isascii() and fields[0].isdigit():
            scale = 1024 if fields[1:] == ["kB"] else 1
            values[name.strip()] = int(fields[0]) * scale
    if "MemAvailable" not in values:
        raise ConfigRefused(f"cannot tell free memory: no MemAvailable in {meminfo}",
                            code=ErrorCode.RESOURCES_INSUFFICIENT)
    return values["MemAvailable"], values.get("SwapFree", 0)


def _free_space(scratch: Path) -> int:
    """Free bytes for us at ``scratch``, or at its nearest existing parent."""
    probe = scratch.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_resources(model_file: Path, *, ctx_size: int, scratch: Path,
                    meminfo: Path = MEMINFO,
                    binary: Path | None = None) -> ResourceReport:
    """Refuse (``RESOURCES_INSUFFICIENT``) a model that cannot fit; else say what it needs.

    ``binary``, when given, adds what staging a CPU variant of it may copy to
    the scratch need (pinning a variant, or the retry after a SIGILL).
    """
    if ctx_size < 1:
        raise ConfigRefused(f"context size must be at least 1, not {ctx_size}")
    try:
        model_bytes = model_file.stat().st_size
    except OSError as exc:
        raise ConfigRefused(f"{model_file.name}: cannot read ({exc.strerror})",
                            code=ErrorCode.GGUF_INVALID) from exc
    per_token = kv_bytes_per_token(model_file)
    ram, swap = _meminfo(meminfo)
    report = ResourceReport(
        model_bytes=model_bytes,
        kv_bytes=ctx_size * (per_token or FALLBACK_KV_PER_TOKEN),
        kv_estimated=per_token is None,
        margin_bytes=MARGIN_FIXED + model_bytes // 16,
        ram_available=ram, swap_free=swap, scratch=scratch,
        scratch_free=_free_space(scratch),
        scratch_need=LOG_CAP_BYTES + (staging_bytes(binary) if binary is not None else 0))
    if report.need_bytes > report.have_bytes:
        raise ConfigRefused(report.memory_text(), code=ErrorCode.RESOURCES_INSUFFICIENT)
    if report.scratch_need > report.scratch_free:
        raise ConfigRefused(report.scratch_text(), code=ErrorCode.RESOURCES_INSUFFICIENT)
    return report
