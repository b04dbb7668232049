"""``labfy-ref verify-gguf`` against ``sha256sum`` on the same generated file.

The file (1 GiB, 256 MiB with ``--quick``) is a GGUF header followed by
pseudo-random bytes; once written it is in the page cache, so both commands
hash memory, not the disk. Each command runs as a whole process (start-up
included), alternately, and the median is kept. ``verify-gguf`` is given the
digest ``sha256sum`` printed, so it checks it too.
"""

from __future__ import annotations

import random
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

from qualification.bench.table import Row, at_most, median

SECTION = "gguf"
MiB = 1024 * 1024


def _write(path: Path, size: int) -> None:
    block = random.Random(8).randbytes(MiB)  # filler bytes, not a secret
    with path.open("wb") as handle:
        handle.write(b"GGUF" + struct.pack("<I", 3) + block[8:])
        for _ in range(size // MiB - 1):
            handle.write(block)


def _timed(argv: list[str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{argv[0]} exited {done.returncode}: {done.stderr[-300:]}")
    return elapsed, done.stdout


def run(workdir: Path, *, quick: bool) -> list[Row]:
    """The verify-gguf row (goal: no slower than sha256sum)."""
    sha256sum = shutil.which("sha256sum")
    if sha256sum is None:
        raise RuntimeError("sha256sum is not installed (coreutils)")
    size = (256 if quick else 1024) * MiB
    path = workdir / "bench.gguf"
    _write(path, size)
    try:
        ours, theirs = [], []
        digest = ""
        for _ in range(3):
            elapsed, out = _timed([sha256sum, str(path)])
            theirs.append(elapsed)
            digest = out.split()[0]
            elapsed, _ = _timed([sys.executable, "-m", "labfy_ref.cli.main", "verify-gguf",
                                 str(path), "--sha256", digest])
            ours.append(elapsed)
    finally:
        path.unlink()
    return [Row(SECTION, f"verify-gguf / sha256sum, {size // MiB:,} MiB", median(ours),
                median(theirs), "s", at_most(1.0),
                detail={"ours_s": ours, "sha256sum_s": theirs})]
