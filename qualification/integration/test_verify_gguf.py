"""SM-01: ``labfy-ref verify-gguf FILE [--sha256 HEX]`` checks the magic and a streamed SHA-256."""

from __future__ import annotations

import hashlib
import io
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from labfy_ref.cli.main import _progress_bar
from labfy_ref.errors import ConfigRefused, ErrorCode
from labfy_ref.model import gguf
from labfy_ref.model.gguf import verify_gguf


def _gguf(path: Path, version: int = 3, size: int = 3 * 1024 * 1024 + 17) -> str:
    body = gguf.MAGIC + struct.pack("<I", version) + os.urandom(size - 8)
    path.write_bytes(body)
    return hashlib.sha256(body).hexdigest()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "labfy_ref.cli.main", "verify-gguf", *args],
                          capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.req("SM-01")
def test_a_matching_file_is_verified_with_a_streamed_digest(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    digest = _gguf(model)
    steps: list[tuple[int, int]] = []
    info = verify_gguf(model, digest.upper(), lambda done, total: steps.append((done, total)))
    assert (info.version, info.sha256, info.size) == (3, digest, model.stat().st_size)
    assert len(steps) == 4, "hashed in 1 MiB chunks, not read whole"
    assert steps[-1] == (info.size, info.size)
    done = _cli(str(model), "--sha256", digest)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["sha256"] == digest
    assert done.stderr == "", "no progress bar when stderr is not a terminal"


@pytest.mark.req("SM-01")
@pytest.mark.parametrize(("damage", "code"), [
    ("mismatch", "GGUF_SHA256_MISMATCH"), ("magic", "GGUF_INVALID"),
    ("version", "GGUF_INVALID"), ("short", "GGUF_INVALID"), ("missing", "GGUF_INVALID"),
    ("bad-hex", "CONFIG_INVALID"),
])
def test_a_bad_file_or_digest_is_refused(tmp_path: Path, damage: str, code: str) -> None:
    model = tmp_path / "m.gguf"
    digest = _gguf(model, size=4096)
    if damage == "mismatch":
        digest = "0" * 64
    elif damage == "magic":
        model.write_bytes(b"GGML" + model.read_bytes()[4:])
        digest = hashlib.sha256(model.read_bytes()).hexdigest()
    elif damage == "version":
        digest = _gguf(model, version=99, size=4096)
    elif damage == "short":
        model.write_bytes(b"GGUF")
        digest = hashlib.sha256(b"GGUF").hexdigest()
    elif damage == "missing":
        model.unlink()
    elif damage == "bad-hex":
        digest = "xyz"
    done = _cli(str(model), "--sha256", digest)
    assert done.returncode == 2
    assert done.stderr.startswith(f"{code}: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr


@pytest.mark.req("SM-01")
@pytest.mark.parametrize("position", [0, 31, 32, 63])
def test_a_digest_that_differs_in_one_character_anywhere_is_refused(tmp_path: Path,
                                                                    position: int) -> None:
    """Every one of the 64 digits counts: one changed at the start, either side of the
    middle or at the very end is a mismatch."""
    model = tmp_path / "m.gguf"
    digest = _gguf(model, size=4096)
    flipped = "0" if digest[position] != "0" else "1"
    wrong = digest[:position] + flipped + digest[position + 1:]
    with pytest.raises(ConfigRefused) as refused:
        verify_gguf(model, wrong)
    assert refused.value.code is ErrorCode.GGUF_SHA256_MISMATCH
    assert verify_gguf(model, digest.upper()).sha256 == digest, "the same digits, any case"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.req("SM-01")
def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    digest = _gguf(model)
    terminal = _Terminal()
    verify_gguf(model, digest, _progress_bar(terminal))
    shown = terminal.getvalue()
    assert shown.count("\r") == 4 and "100.0%" in shown and shown.endswith("\n")
    assert _progress_bar(io.StringIO()) is None


@pytest.mark.req("SM-01", "CLI-02")
@pytest.mark.parametrize(("done", "total", "shown"), [
    (512, 1000, " 51.2% 512 B of 1000 B"),
    (3 * 1024 * 1024 + 17, 3 * 1024 * 1024 + 17, "100.0% 3.0 MiB of 3.0 MiB"),
    (2 ** 30, 4 * 2 ** 30, " 25.0% 1.0 GiB of 4.0 GiB"),
])
def test_progress_is_shown_in_human_units(done: int, total: int, shown: str) -> None:
    terminal = _Terminal()
    show = _progress_bar(terminal)
    assert show is not None
    show(done, total)
    assert terminal.getvalue().rstrip("\n").endswith(f"] {shown}")
    assert "bytes" not in terminal.getvalue()
    bar = terminal.getvalue().split("[", 1)[1].split("]", 1)[0]
    assert bar == ("#" * (30 * done // total)).ljust(30), "30 cells, filled by the share done"


@pytest.mark.req("SM-01", "CLI-02")
def test_without_a_digest_the_file_is_checked_and_its_digest_printed(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    digest = _gguf(model, size=4096)
    done = _cli(str(model))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"file": str(model), "size": 4096, "gguf_version": 3,
                                       "sha256": digest, "sha256_checked": False}
    assert json.loads(_cli(str(model), "--sha256", digest).stdout)["sha256_checked"] is True
    model.write_bytes(b"GGML" + model.read_bytes()[4:])
    refused = _cli(str(model))
    assert refused.returncode == 2
    assert refused.stderr == "GGUF_INVALID: m.gguf: not a GGUF file (bad magic)\n"
