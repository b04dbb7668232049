"""CPU variants of a llama-server built with dynamically loaded backends (SM-06).

Such a build ships ``libggml-cpu-<variant>.so`` beside the binary and loads the
best one the CPU reports, looking next to the binary's *resolved* path. So a
variant is pinned by staging a private copy of the binary's folder that holds
only that one backend: real files (hard links, or copies where a link is not
possible), never symlinks to the originals, which would lead the loader back
to the full folder. The other shared libraries and their relative symlinks
come along so the ``$ORIGIN`` run paths still resolve.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
from collections.abc import Iterable
from pathlib import Path

from labfy_ref.errors import ConfigRefused

_BACKEND = re.compile(r"libggml-cpu-(\w+)\.so", re.ASCII)
#: Variants that run on most x86-64 CPUs, best first: what a SIGILL retry runs on.
CONSERVATIVE = ("haswell", "sse42", "x64")
#: /proc/cpuinfo flags each conservative variant needs (ggml's own feature lists).
_NEEDS: dict[str, frozenset[str]] = {
    "haswell": frozenset({"sse4_2", "avx", "f16c", "avx2", "bmi2", "fma"}),
    "sse42": frozenset({"sse4_2"}),
    "x64": frozenset(),
}
_MAX_MAPS_BYTES = 8 * 1024 * 1024
# Where a hard link is refused (another file system, fs.protected_hardlinks,
# a link count at its limit), the file is copied instead.
_COPY_INSTEAD = frozenset({errno.EXDEV, errno.EPERM, errno.EACCES, errno.EMLINK})


def available_variants(binary: Path) -> tuple[str, ...]:
    """The CPU backends beside the resolved ``binary``, sorted; empty for a static build."""
    folder = binary.resolve().parent
    names = (_BACKEND.fullmatch(entry.name) for entry in folder.iterdir())
    return tuple(sorted(match.group(1) for match in names if match))


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str]:
    """The feature flags of the first CPU in ``cpuinfo`` (empty when unreadable)."""
    try:
        with cpuinfo.open(encoding="ascii", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def conservative_variant(available: Iterable[str], cpu_flags: frozenset[str], *,
                         exclude: frozenset[str] = frozenset()) -> str | None:
    """The best of haswell, sse42, x64 that is available, not excluded and the CPU supports."""
    present = set(available) - exclude
    return next((name for name in CONSERVATIVE
                 if name in present and _NEEDS[name] <= cpu_flags), None)


def check_variant(binary: Path, variant: str) -> None:
    """Refuse (``CONFIG_INVALID``) a variant that ``binary`` does not ship, naming those it has."""
    available = available_variants(binary)
    if variant in available:
        return
    if not available:
        raise ConfigRefused(f"CPU variant {variant!r}: {binary.name} has no dynamically "
                            "loaded CPU backends (libggml-cpu-*.so) to choose from")
    raise ConfigRefused(f"unknown CPU variant {variant!r}; available: {', '.join(available)}")


def _staged_entries(folder: Path, binary_name: str, variant: str) -> list[Path]:
    """The entries a staging of ``variant`` takes: the binary, the libraries, one backend."""
    chosen = []
    for entry in sorted(folder.iterdir()):
        backend = _BACKEND.fullmatch(entry.name)
        if backend:
            if backend.group(1) == variant:
                chosen.append(entry)
        elif entry.name == binary_name or ".so" in entry.name:
            chosen.append(entry)
    return chosen


def staging_bytes(binary: Path) -> int:
    """The most a staging of ``binary`` can write when it must copy (largest backend)."""
    folder = binary.resolve().parent
    variants = available_variants(binary)
    backends = [(folder / f"libggml-cpu-{name}.so").stat().st_size for name in variants]
    entries = _staged_entries(folder, binary.resolve().name, "")
    return sum(e.stat().st_size for e in entries if not e.is_symlink()) + max(backends, default=0)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError as exc:
        if exc.errno not in _COPY_INSTEAD:
            raise
        shutil.copy2(source, target)


def stage_variant(binary: Path, variant: str, into: Path) -> Path:
    """Stage ``binary`` in the new private folder ``into`` (0700) with only ``variant``.

    Returns the staged binary. ``into`` must not exist yet; on any failure it
    is removed again, so no half-staged folder is ever run.
    """
    check_variant(binary, variant)
    resolved = binary.resolve()
    into.mkdir(mode=0o700)
    try:
        into.chmod(0o700)
        for entry in _staged_entries(resolved.parent, resolved.name, variant):
            target = into / entry.name
            if entry.is_symlink():
                link = os.readlink(entry)
                if "/" not in link:  # a sibling: keep the relative link as it is
                    target.symlink_to(link)
                    continue
            _link_or_copy(entry.resolve(), target)
    except BaseException:
        shutil.rmtree(into, ignore_errors=True)
        raise
    return into / resolved.name


def loaded_variant(pid: int) -> str | None:
    """The CPU backend process ``pid`` has mapped (``/proc/<pid>/maps``), if any."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/maps", "rb") as handle:
        maps = handle.read(_MAX_MAPS_BYTES).decode("utf-8", "replace")
        found = _BACKEND.search(maps)
        return found.group(1) if found else None
    return None
