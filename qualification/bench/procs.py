"""The processes a bench section starts and stops itself, all on loopback free ports.

``serve`` (the product, as shipped), the fake provider and a plain stdlib
server each run in their own subprocess, so a client in the bench process
never shares a GIL with the server it times. Their output goes to files (a
full pipe would stall a server that logs), and every wait is bounded.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from labfy_ref.workspace import init_workspace
from qualification.harness import ApiClient, bridge_settled, wait_until

FAKE_MODEL = "fake-model"


class Child:
    """One subprocess that writes a ready file; stopped (SIGTERM, then SIGKILL) by its owner."""

    def __init__(self, argv: list[str], workdir: Path, name: str) -> None:
        self.ready_file = workdir / f"{name}.ready.json"
        self._log = (workdir / f"{name}.log").open("wb")
        self.process = subprocess.Popen([*argv, "--ready-file", str(self.ready_file)],
                                        stdout=self._log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, env={**os.environ})
        self.log_path = workdir / f"{name}.log"
        self.name = name

    def wait_ready(self, timeout: float = 60) -> dict[str, Any]:
        """The ready file's document; a child that exits first fails with its log."""
        wait_until(lambda: self.ready_file.exists() or self.process.poll() is not None,
                   timeout=timeout, interval=0.02)
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited {self.process.returncode}: "
                               f"{self.log_path.read_text('utf-8', 'replace')[-2000:]}")
        ready: dict[str, Any] = json.loads(self.ready_file.read_text("utf-8"))
        return ready

    @property
    def pid(self) -> int:
        """The child's process id."""
        return self.process.pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s; idempotent."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=15)
        self._log.close()


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text("ascii").splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def new_workspace(root: Path, name: str, *, specimen: bool = True) -> Path:
    """A fresh workspace directory under ``root``."""
    path = root / name
    init_workspace(path, specimen=specimen)
    return path


class Served:
    """``labfy-ref serve`` on a workspace, logged in as the admin."""

    def __init__(self, workspace: Path, workdir: Path, name: str, *args: str) -> None:
        self.child = Child([sys.executable, "-m", "labfy_ref.cli.main", "serve", "--workspace",
                            str(workspace), "--port", "0", "--log-level", "warning", *args],
                           workdir, name)
        try:
            ready = self.child.wait_ready()
            self.url = str(ready["url"]).rstrip("/")
            if "--bridge" in args:  # it settles in the background (HO-07)
                wait_until(lambda: bridge_settled(self.url), timeout=60, interval=0.05)
            self.api = ApiClient(self.url)
            self.api.http.timeout = httpx.Timeout(120)
            assert self.api.login(str(ready["token"])).status_code == 200
        except BaseException:
            self.child.stop()
            raise

    @property
    def pid(self) -> int:
        """The server's process id."""
        return self.child.pid

    def stop(self) -> None:
        """Close the client and stop the server."""
        self.api.close()
        self.child.stop()


@contextlib.contextmanager
def serving(workspace: Path, workdir: Path, name: str, *args: str) -> Iterator[Served]:
    """``with serving(ws, tmp, "bridge", "--bridge") as server: ...``."""
    server = Served(workspace, workdir, name, *args)
    try:
        yield server
    finally:
        server.stop()


def local_model_flags(fake_url: str) -> tuple[str, ...]:
    """``serve`` flags for the fake provider as the local model."""
    return ("--agent-mode", "local-model", "--agent-endpoint", fake_url,
            "--agent-model", FAKE_MODEL, "--agent-timeout", "120")


class Fake:
    """The shipped fake provider, standalone, scripted over its control API."""

    def __init__(self, workdir: Path) -> None:
        scenario = workdir / "fake-empty.json"
        scenario.write_text(json.dumps({"name": "empty", "models": [FAKE_MODEL],
                                        "answers": []}), "utf-8")
        self.child = Child([sys.executable, "-m", "fake_provider", "--scenario", str(scenario),
                            "--port", "0"], workdir, "fake-provider")
        try:
            self.url = str(self.child.wait_ready()["url"])
        except BaseException:
            self.child.stop()
            raise
        self._control = httpx.Client(base_url=self.url, trust_env=False, timeout=30)

    def script(self, answers: list[dict[str, Any]], *, repeat_last: bool = False) -> None:
        """Replace the scenario (and rewind it); the request log is cleared."""
        document = {"name": "bench", "models": [FAKE_MODEL], "answers": answers,
                    "when_exhausted": "repeat_last" if repeat_last else "error"}
        assert self._control.post("/_fake/scenario", json=document).status_code == 200
        assert self._control.post("/_fake/reset").status_code == 200

    def requests(self) -> list[dict[str, Any]]:
        """Every recorded request since the last :meth:`script`."""
        log: list[dict[str, Any]] = self._control.get("/_fake/requests").json()["requests"]
        return log

    def stop(self) -> None:
        """Stop the provider."""
        self._control.close()
        self.child.stop()


@contextlib.contextmanager
def fake_provider(workdir: Path) -> Iterator[Fake]:
    """``with fake_provider(tmp) as fake: fake.script([...])``."""
    fake = Fake(workdir)
    try:
        yield fake
    finally:
        fake.stop()


@contextlib.contextmanager
def plain_server(workdir: Path) -> Iterator[str]:
    """The stdlib baseline server (:mod:`qualification.bench.plain_server`); yields its URL."""
    child = Child([sys.executable, "-m", "qualification.bench.plain_server"], workdir,
                  "plain-server")
    try:
        yield str(child.wait_ready()["url"])
    finally:
        child.stop()


def timed(fn: Any, *args: Any) -> tuple[float, Any]:
    """(seconds, result) of one call."""
    start = time.perf_counter()
    result = fn(*args)
    return time.perf_counter() - start, result
