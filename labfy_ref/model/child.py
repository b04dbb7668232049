"""One child process and its process group, owned from spawn to reap (SM-02).

The child runs in its own session (so its pid is its process group id), with
stdin closed and its output piped into a :class:`BoundedLog`. Its exit is
watched without reaping it (a pidfd, or ``waitid(WNOWAIT)`` polling), which is
what makes signalling its group safe: while the child is an unreaped zombie its
id cannot be given to any other process or group. So the group is signalled
only before the child is reaped, and on every exit the rest of the group is
killed first, then the child reaped: nothing of the group outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from labfy_ref.model.binary import describe_exit

_CHUNK = 64 * 1024
_REAP_TIMEOUT = 10.0

# Sets PR_SET_PDEATHSIG = SIGKILL, then becomes the program (exec keeps the pid
# and the setting). A wrapper rather than a preexec_fn: code run between fork
# and exec is unsafe in a process with threads, and ours has them.
_DIE_WITH_PARENT = (
    "import ctypes, os, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)\n"
    "if os.getppid() != int(sys.argv[1]): os._exit(1)\n"
    "try: os.execv(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc: sys.stderr.write(f'cannot run {sys.argv[2]}: {exc.strerror}\\n')\n"
    "os._exit(127)\n"
)


def die_with_parent(argv: list[str]) -> list[str]:
    """``argv`` run so that the kernel kills it when our process dies (Linux only).

    The kernel ties the signal to the *thread* that spawns the child: spawn it
    from a thread (an event loop's) that lives as long as the child should.
    """
    if sys.platform != "linux":
        return argv
    return [sys.executable, "-I", "-S", "-c", _DIE_WITH_PARENT, str(os.getpid()), *argv]


class BoundedLog:
    """A child's output on disk, at most ``cap`` bytes in two halves; the newest kept.

    When the current half is full it becomes ``<name>.1`` (replacing the older
    one) and a new half starts, so the oldest output is dropped first.
    """

    def __init__(self, path: Path, cap: int) -> None:
        self.path = path
        self._older = path.with_name(path.name + ".1")
        self._half = cap // 2
        self._size = 0
        with contextlib.suppress(FileNotFoundError):
            self._older.unlink()
        self._fd = self._open()

    def _open(self) -> int:
        return os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                       | os.O_CLOEXEC, 0o600)

    def write(self, data: bytes) -> None:
        """Append ``data`` (dropped once closed, or once the disk refused a write)."""
        if self._fd < 0:
            return
        try:
            if self._size + len(data) > self._half:
                os.close(self._fd)
                self._fd = -1
                os.replace(self.path, self._older)
                self._fd, self._size = self._open(), 0
            self._size += os.write(self._fd, data[: self._half])
        except OSError:  # a full disk or a removed folder must not stop the child's pipe
            self.close()

    def tail(self, max_bytes: int) -> bytes:
        """The last ``max_bytes`` written (across both halves)."""
        data = b""
        for path in (self.path, self._older):
            with contextlib.suppress(OSError), path.open("rb") as handle:
                handle.seek(max(0, handle.seek(0, os.SEEK_END) - (max_bytes - len(data))))
                data = handle.read(max_bytes - len(data)) + data
            if len(data) >= max_bytes:
                break
        return data

    def close(self) -> None:
        """Stop writing; idempotent."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class ChildProcess:
    """A spawned child in its own process group; must be created inside the event loop.

    ``on_exit`` runs (in the loop) once the child has ended on its own and
    its group has been killed and the child reaped.
    """

    def __init__(self, argv: list[str], *, cwd: Path, env: Mapping[str, str], log: BoundedLog,
                 on_exit: Callable[[], None], pass_fds: tuple[int, ...] = ()) -> None:
        self._log = log
        self._on_exit = on_exit
        self.exited = asyncio.Event()
        self.returncode: int | None = None
        self._loop = asyncio.get_running_loop()
        self._process = subprocess.Popen(
            die_with_parent(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, env=dict(env), cwd=cwd, start_new_session=True,
            close_fds=True, pass_fds=pass_fds)
        self.pid = self._process.pid
        self._output = self._process.stdout
        self._pidfd = -1
        self._poller: asyncio.Task[None] | None = None
        try:
            assert self._output is not None
            os.set_blocking(self._output.fileno(), False)
            self._loop.add_reader(self._output.fileno(), self._read_output)
            try:
                self._pidfd = os.pidfd_open(self.pid)
            except (AttributeError, OSError):  # no pidfd (old kernel): poll, never reap
                self._poller = self._loop.create_task(self._poll_exit())
            else:
                self._loop.add_reader(self._pidfd, self._pidfd_ready)
        except BaseException:
            self.release()
            raise

    @property
    def exit_description(self) -> str | None:
        """``"exit code N"`` or ``"signal NAME"`` once reaped."""
        return describe_exit(self.returncode) if self.returncode is not None else None

    def signal_group(self, signum: int) -> None:
        """Send ``signum`` to the child's group, only while the child is unreaped."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signum)

    def _read_output(self) -> None:
        if self._output is None or self._output.closed:
            return
        try:
            data = os.read(self._output.fileno(), _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self._log.write(data)
        else:
            self._close_output()

    def _close_output(self) -> None:
        if self._output is not None and not self._output.closed:
            self._loop.remove_reader(self._output.fileno())
            self._output.close()

    def _stop_watching(self) -> None:
        if self._pidfd >= 0:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = -1
        if self._poller is not None and self._poller is not asyncio.current_task(self._loop):
            self._poller.cancel()
        self._poller = None

    def _pidfd_ready(self) -> None:
        self._stop_watching()
        self._ended()

    async def _poll_exit(self) -> None:
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        while os.waitid(os.P_PID, self.pid, flags) is None:
            await asyncio.sleep(0.05)
        self._stop_watching()
        self._ended()

    def _reap(self) -> None:
        """Kill the rest of the group, then reap the child (it has ended or is being killed)."""
        if self.returncode is None:
            self.signal_group(signal.SIGKILL)
            self.returncode = self._process.wait(timeout=_REAP_TIMEOUT)
        self.exited.set()

    def _ended(self) -> None:
        if self.returncode is None:
            self._reap()
            self._on_exit()

    def release(self) -> None:
        """SIGKILL the group if the child is unreaped, reap it, drain and close its output."""
        self._stop_watching()
        self._reap()
        if self._output is not None and not self._output.closed:
            with contextlib.suppress(OSError):
                for _ in range(64):  # what is already in the pipe, bounded
                    data = os.read(self._output.fileno(), _CHUNK)
                    if not data:
                        break
                    self._log.write(data)
            self._close_output()

    async def terminate(self, grace: float) -> None:
        """SIGTERM the group; after ``grace`` s SIGKILL it; then :meth:`release`."""
        self.signal_group(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace):
                await self.exited.wait()
        self.release()


def _has_live_member(pgid: int) -> bool:
    """Whether a running process of group ``pgid`` is left (``/proc``; zombies are dead)."""
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_bytes()
            except OSError:
                continue
            fields = stat[stat.rindex(b")") + 2 :].split()  # state, ppid, pgrp, ...
            if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
                return True
    return False


async def group_gone(pgid: int, timeout: float) -> bool:
    """Wait (bounded) until no process of group ``pgid`` runs; sends signal 0 only.

    Killed members stay zombies until their reaper collects them: when we are
    PID 1 that is us (only this group's are reaped), else init, in its own
    time; a group of zombies only is gone already.
    """
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while True:
        if os.getpid() == 1:
            with contextlib.suppress(ChildProcessError):
                while os.waitpid(-pgid, os.WNOHANG)[0] > 0:
                    pass
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        with contextlib.suppress(OSError):
            if not _has_live_member(pgid):
                return True
        if loop.time() >= end:
            return False
        await asyncio.sleep(0.05)
