"""Start a server the way a stranger's would be started: its own process, read from its output.

The kit knows a target only by what any user sees: the URL and the
login code ``labfy-ref serve`` prints. No ready file, no port chosen for it, no
look at its workspace. The mutants (``qualification/mutants``) are launched the
same way, with a different command in front of ``serve``.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

#: The line ``labfy-ref serve`` prints before the code (SV-01: the code on its own line); a
#: build before SV-10 called it a one-time code.
_PROMPTS = (" and log in with this login code:", " and log in with this one-time code:")
SERVE = (sys.executable, "-m", "labfy_ref.cli.main", "serve")


class LaunchError(Exception):
    """The server did not start or did not print its URL and code (one line, with its log)."""


class ServeLaunch:
    """``labfy-ref serve ARGS`` in its own process; :meth:`start` returns ``(url, code)``."""

    def __init__(self, args: list[str], *, log: Path, command: tuple[str, ...] = SERVE,
                 env: dict[str, str] | None = None) -> None:
        self.args, self.log, self.command = args, log, command
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[str] | None = None
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader: threading.Thread | None = None
        #: Processes started beside it (the launch profile's Work worker), stopped with it.
        self.beside: list[subprocess.Popen[bytes]] = []

    def start_beside(self, args: list[str], *, log: Path) -> subprocess.Popen[bytes]:
        """Start ``COMMAND ARGS`` beside the server (its command's ``serve`` replaced by
        ``args``: a mutant's worker runs the mutant too), its output to ``log``."""
        with log.open("wb") as out:
            process = subprocess.Popen([*self.command[:-1], *args], stdout=out,
                                       stderr=subprocess.STDOUT, env=self.env,
                                       start_new_session=True)
        self.beside.append(process)
        return process

    def start(self, timeout: float = 60.0) -> tuple[str, str]:
        """Start it and read its URL and code from its output (bounded wait)."""
        with self.log.open("w", encoding="utf-8") as errors:
            self.process = subprocess.Popen(
                [*self.command, *self.args], stdout=subprocess.PIPE, stderr=errors, text=True,
                env=self.env, start_new_session=True)
        assert self.process.stdout is not None
        self._reader = threading.Thread(target=self._read, args=(self.process.stdout,),
                                        daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        url = None
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            if url is not None:
                return url, line.strip()
            prompt = next((p for p in _PROMPTS if p in line), None)
            if line.startswith("Open ") and prompt is not None:
                url = line.removeprefix("Open ").split(prompt, 1)[0].strip()
        self.stop()
        raise LaunchError(f"{' '.join(self.command[-2:])} did not print its URL and code in "
                          f"{timeout:.0f} s; its log: {self.tail()}")

    def _read(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def tail(self, chars: int = 2000) -> str:
        """The end of its stderr log."""
        try:
            return self.log.read_text("utf-8", errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after 10 s (what runs beside it first); its exit code."""
        for process in self.beside:
            terminate(process)
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self._reader is not None:
            self._reader.join(timeout=5)  # it ends at the output's end
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL after 10 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)
