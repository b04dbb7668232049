"""SM-02: one child process and its output, owned from spawn to reap.

:class:`BoundedLog` at its exact bounds (a half filled to the byte, a tail across
both halves, a symlink in its place); :class:`ChildProcess` watching its child's exit
without a pidfd (the polling path an older kernel takes) and keeping what the child
wrote last when it is released.
"""

from __future__ import annotations

import asyncio
import errno
import os
import sys
import time
from pathlib import Path

import pytest

from labfy_ref.model.child import BoundedLog, ChildProcess


@pytest.mark.req("SM-02")
def test_a_half_filled_to_the_byte_is_kept_and_one_byte_more_starts_the_next(
        tmp_path: Path) -> None:
    path = tmp_path / "out.log"
    log = BoundedLog(path, 16)  # halves of 8 bytes
    log.write(b"abcd")
    log.write(b"efgh")  # exactly full: still the first half
    assert (path.read_bytes(), path.with_name("out.log.1").exists()) == (b"abcdefgh", False)
    log.write(b"i")
    assert (path.read_bytes(), path.with_name("out.log.1").read_bytes()) == (b"i", b"abcdefgh")
    log.close()


@pytest.mark.req("SM-02")
@pytest.mark.parametrize(("max_bytes", "tail"), [
    (1, b"l"), (4, b"ijkl"), (5, b"hijkl"), (8, b"efghijkl"), (12, b"abcdefghijkl"),
    (100, b"abcdefghijkl"),
])
def test_the_tail_reads_the_newest_bytes_across_both_halves(
        tmp_path: Path, max_bytes: int, tail: bytes) -> None:
    log = BoundedLog(tmp_path / "out.log", 16)
    for piece in (b"abcdefgh", b"ijkl"):  # the first half full, then four in the next
        log.write(piece)
    assert log.tail(max_bytes) == tail
    log.close()


@pytest.mark.req("SM-02")
def test_a_symlink_where_the_log_goes_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_bytes(b"keep")
    (tmp_path / "out.log").symlink_to(target)
    with pytest.raises(OSError, match="symbolic links") as refused:
        BoundedLog(tmp_path / "out.log", 1024)
    assert refused.value.errno == errno.ELOOP
    assert target.read_bytes() == b"keep"


@pytest.mark.req("SM-02")
def test_the_log_is_not_inherited_by_a_program_the_server_runs(tmp_path: Path) -> None:
    log = BoundedLog(tmp_path / "out.log", 1024)
    try:
        assert not os.get_inheritable(log._fd)
        assert os.get_blocking(log._fd)
    finally:
        log.close()


def _spawn_and_wait(tmp_path: Path, script: str, *, release: bool) -> tuple[int | None, bytes]:
    """Run ``python -c script`` as a child; (its returncode, its log's tail)."""
    log = BoundedLog(tmp_path / "child.log", 64 * 1024)
    ended: list[bool] = []
    kept: list[bytes] = []

    async def run() -> int | None:
        child = ChildProcess([sys.executable, "-c", script], cwd=tmp_path,
                             env={"PATH": os.environ["PATH"]}, log=log,
                             on_exit=lambda: ended.append(True))
        if release:
            wrote = tmp_path / "wrote"
            for _ in range(3000):  # bounded: 30 s; the loop never runs meanwhile, so what
                if wrote.exists():  # the child wrote before saying so is still in the pipe
                    break
                time.sleep(0.01)
            child.release()
            kept.append(log.tail(8192))  # before the loop could read the pipe itself
        else:
            await asyncio.wait_for(child.exited.wait(), 30)
        return child.returncode

    try:
        code = asyncio.run(run())
        return code, kept[0] if release else log.tail(8192)
    finally:
        log.close()
        assert ended == ([] if release else [True])


@pytest.mark.req("SM-02")
def test_without_a_pidfd_the_exit_is_polled_and_its_code_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An older kernel has no pidfd: ``waitid(WNOWAIT)`` polls without reaping, so the
    child's own exit code is what is reported (a reaped child would read 0)."""
    def no_pidfd(pid: int) -> int:
        raise OSError(errno.ENOSYS, "no pidfd")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)  # what the module calls
    code, output = _spawn_and_wait(tmp_path, "print('bye', flush=True); raise SystemExit(3)",
                                   release=False)
    assert code == 3
    assert output == b"bye\n"


@pytest.mark.req("SM-02")
def test_release_keeps_what_the_child_wrote_last(tmp_path: Path) -> None:
    script = "import sys, time; sys.stdout.write('x' * 5000 + 'last'); sys.stdout.flush(); " \
             "open('wrote', 'w').close(); time.sleep(60)"  # (its folder: the test's tmp_path)
    code, output = _spawn_and_wait(tmp_path, script, release=True)
    assert code is not None and code < 0, "killed"
    assert output.endswith(b"last") and len(output) == 5004
