"""The running servers of this user (SV-12): one private file per server, never its code.

``serve`` writes ``<pid>-<port>.json`` (mode 0600, in a 0700 directory) once it
accepts requests — its workspace, URL, PID and start time — and removes it when
it stops. ``labfy-ref list`` reads them back; a file whose process is gone (a
server that was killed) is stale: it is removed and not listed. A second
``serve`` refused ``WORKSPACE_LOCKED`` names the holder from here.

The directory is ``$LABFY_RUNTIME_DIR`` if set, else ``$XDG_RUNTIME_DIR/labfy-ref``
(a per-user tmpfs on most Linux systems), else ``~/.local/state/labfy-ref/servers``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ENV_RUNTIME_DIR = "LABFY_RUNTIME_DIR"
_FIELDS = ("workspace", "url", "pid", "started_at")


@dataclasses.dataclass(frozen=True, slots=True)
class RunningServer:
    """One running ``serve``: what ``labfy-ref list`` shows of it."""

    workspace: str
    url: str
    pid: int
    started_at: str

    def as_json(self) -> dict[str, Any]:
        """``{"workspace", "url", "pid", "started_at"}``."""
        return dataclasses.asdict(self)


def registry_dir(environ: Mapping[str, str]) -> Path:
    """Where this user's servers are listed (see the module's text)."""
    if environ.get(ENV_RUNTIME_DIR):
        return Path(environ[ENV_RUNTIME_DIR])
    if environ.get("XDG_RUNTIME_DIR") and Path(environ["XDG_RUNTIME_DIR"]).is_dir():
        return Path(environ["XDG_RUNTIME_DIR"]) / "labfy-ref"
    return Path.home() / ".local" / "state" / "labfy-ref" / "servers"


def register(server: RunningServer, environ: Mapping[str, str]) -> Path:
    """Write ``server``'s file (0600, atomically); its path, to :func:`unregister` at stop."""
    folder = registry_dir(environ)
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    port = server.url.rstrip("/").rsplit(":", 1)[-1]
    path = folder / f"{server.pid}-{port}.json"
    temp = folder / f".{path.name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        json.dump(server.as_json(), out, ensure_ascii=False)
    temp.replace(path)
    return path


def unregister(path: Path) -> None:
    """Remove a server's file (it stopped)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the number: not our server
        return False
    return True


def _read(path: Path) -> RunningServer | None:
    try:
        document = json.loads(path.read_text("utf-8"))
        values = [document[field] for field in _FIELDS]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    workspace, url, pid, started = values
    if not (isinstance(workspace, str) and isinstance(url, str) and type(pid) is int
            and isinstance(started, str)):
        return None
    return RunningServer(workspace, url, pid, started)


def running(environ: Mapping[str, str]) -> list[RunningServer]:
    """The servers running now, oldest first; stale files (their process is gone, or they
    cannot be read) are removed."""
    folder = registry_dir(environ)
    found = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for path in sorted(folder.glob("*.json")):
            server = _read(path)
            if server is None or not _alive(server.pid):
                unregister(path)
                continue
            found.append(server)
    return sorted(found, key=lambda s: (s.started_at, s.pid))


def holder_of(workspace: Path, environ: Mapping[str, str]) -> RunningServer | None:
    """The running server of ``workspace``, if this user has one."""
    wanted = str(workspace.resolve())
    return next((s for s in running(environ) if s.workspace == wanted), None)
