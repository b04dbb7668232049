"""The workspace directory (WS-01, WS-03): manifest, store, files/, sessions/.

::

    DIR/
      labfy-workspace.toml   kind = "SPECIMEN" | "LIVE", name, workspace_id, format
      labfy.sqlite           objects, research campaigns, grants
      files/                 the only tree file tools may touch
      sessions/              bridge JSONL session logs
"""

from __future__ import annotations

import dataclasses
import enum
import fcntl
import json
import logging
import os
import secrets
import shutil
import tomllib
from importlib import resources
from importlib.abc import Traversable
from pathlib import Path
from typing import IO

from labfy_ref.errors import ErrorCode, WorkspaceError
from labfy_ref.ids import id_pattern, new_id
from labfy_ref.private import private_database
from labfy_ref.sqlcore import Migration
from labfy_ref.workspace.migrations import MIGRATIONS, StoreUpgrade, upgrade_store
from labfy_ref.workspace.store import WorkspaceStore

MANIFEST = "labfy-workspace.toml"
STORE = "labfy.sqlite"
FILES = "files"
SESSIONS = "sessions"
LOCK = ".labfy.lock"
FORMAT = 1
_WORKSPACE_ID = id_pattern("ws")
_MAX_NAME = 120
log = logging.getLogger("labfy_ref.workspace")


class WorkspaceKind(enum.StrEnum):
    """SPECIMEN workspaces hold sample data and a canned research adapter."""

    SPECIMEN = "SPECIMEN"
    LIVE = "LIVE"


@dataclasses.dataclass(frozen=True, slots=True)
class Workspace:
    """An opened, validated workspace directory."""

    root: Path
    kind: WorkspaceKind
    name: str
    workspace_id: str

    @property
    def store_path(self) -> Path:
        """The SQLite store."""
        return self.root / STORE

    @property
    def files_dir(self) -> Path:
        """The only tree file tools may touch."""
        return self.root / FILES

    @property
    def sessions_dir(self) -> Path:
        """Where bridge sessions are logged."""
        return self.root / SESSIONS

    def open_store(self) -> WorkspaceStore:
        """A new handle on the store (owner-only, narrowed if an older release made it wider)."""
        try:
            private_database(self.store_path, create=False)
        except OSError as exc:
            raise WorkspaceError(f"store {STORE} is not a plain file "
                                 f"({exc.strerror or type(exc).__name__})",
                                 code=ErrorCode.WORKSPACE_INVALID) from exc
        return WorkspaceStore(self.store_path)


def _manifest_text(kind: WorkspaceKind, name: str, workspace_id: str) -> str:
    return (f"# labfy-ref workspace\nformat = {FORMAT}\nkind = {json.dumps(kind.value)}\n"
            f"name = {json.dumps(name)}\nworkspace_id = {json.dumps(workspace_id)}\n")


def _folder_name(folder: Path) -> str:
    """A display name from a folder's name: valid, printable text of at most the limit.

    A name that is not UTF-8 (bytes Python holds as lone surrogates) keeps what it
    can, with U+FFFD for the rest, so the manifest is always text it can read back.
    """
    text = os.fsencode(folder.name).decode("utf-8", "replace")
    text = "".join(char if char.isprintable() else "\ufffd" for char in text)
    return text[:_MAX_NAME] or "workspace"


def open_workspace(path: Path) -> Workspace:
    """Open ``path`` as a workspace, or raise ``WORKSPACE_INVALID`` saying why.

    A store of an older schema is ``WORKSPACE_OUTDATED``, naming the command
    that upgrades it.
    """
    workspace = _read_layout(path)
    workspace.open_store().close()
    return workspace


def _read_layout(path: Path) -> Workspace:
    """The manifest and directories of the workspace at ``path``; the store is not opened."""
    root = path.resolve()
    manifest = root / MANIFEST
    if not manifest.is_file():
        raise WorkspaceError(f"{path} is not a workspace (no {MANIFEST})")
    try:
        document = tomllib.loads(manifest.read_text("utf-8"))
        kind = WorkspaceKind(document["kind"])
        name = str(document["name"])
        workspace_id = str(document["workspace_id"])
        fmt = document.get("format")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, KeyError, ValueError) as exc:
        raise WorkspaceError(f"{MANIFEST} is malformed: {type(exc).__name__}") from exc
    if fmt != FORMAT or not _WORKSPACE_ID.fullmatch(workspace_id):
        raise WorkspaceError(f"{MANIFEST} has an unknown format or workspace_id")
    for sub in (FILES, SESSIONS):
        if not (root / sub).is_dir() or (root / sub).is_symlink():
            raise WorkspaceError(f"workspace {sub}/ is missing or is a symlink")
    if not (root / STORE).is_file():
        raise WorkspaceError(f"store {STORE} is missing")
    return Workspace(root, kind, name, workspace_id)


def upgrade_workspace(path: Path,
                      migrations: tuple[Migration, ...] = MIGRATIONS) -> StoreUpgrade:
    """Migrate the store of the workspace at ``path`` to this build's schema, keeping a backup.

    Refused while a server holds the workspace (``WORKSPACE_LOCKED``): the
    lock is the one ``serve`` takes, so no server can start mid-upgrade.
    """
    workspace = _read_layout(path)
    lock = WorkspaceLock(workspace)
    try:
        lock.acquire()
    except WorkspaceError as exc:
        if exc.code is not ErrorCode.WORKSPACE_LOCKED:
            raise
        raise WorkspaceError(f"{exc.message}; stop it, then upgrade",
                             code=ErrorCode.WORKSPACE_LOCKED) from None
    try:
        return upgrade_store(workspace.store_path, migrations)
    finally:
        lock.release()


def _specimen() -> Traversable:
    return resources.files(__package__).joinpath("specimen")


def _copy_tree(source: Traversable, target: Path) -> None:
    target.mkdir(exist_ok=True)
    for entry in source.iterdir():
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
        else:
            (target / entry.name).write_bytes(entry.read_bytes())


def init_workspace(path: Path, *, specimen: bool, name: str | None = None) -> Workspace:
    """Create a workspace at ``path`` (absent or an empty directory).

    Like ``mkdir`` without ``-p``, the parent directory must exist. Every
    failure of the file system is one ``WORKSPACE_INVALID`` line saying why;
    nothing is left behind.
    """
    if name is not None and not (0 < len(name) <= _MAX_NAME and name.isprintable()):
        raise WorkspaceError(f"--name must be 1-{_MAX_NAME} printable characters",
                             code=ErrorCode.CONFIG_INVALID)
    try:
        return _create(path, specimen=specimen, name=name)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise WorkspaceError(f"cannot create {path}: {reason}") from exc


def _create(path: Path, *, specimen: bool, name: str | None) -> Workspace:
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise WorkspaceError(f"{path} exists and is not an empty directory",
                             code=ErrorCode.WORKSPACE_EXISTS)
    absolute = Path(os.path.abspath(path))  # "." has no name to build a sibling from
    data = json.loads(_specimen().joinpath("objects.json").read_text("utf-8"))
    kind = WorkspaceKind.SPECIMEN if specimen else WorkspaceKind.LIVE
    chosen = name or (data["name"] if specimen else _folder_name(absolute.resolve()))
    # A random staging name: a predictable one could be planted, or removed under another
    # user's feet; mkdir (never exist_ok) fails rather than reuse a directory it did not make,
    # and (never parents) refuses a missing parent as mkdir without -p does.
    staging = absolute.with_name(f".{absolute.name}.init-{secrets.token_hex(8)}")
    staging.mkdir()
    try:
        (staging / SESSIONS).mkdir()
        if specimen:
            _copy_tree(_specimen().joinpath("files"), staging / FILES)
        else:
            (staging / FILES).mkdir()
        private_database(staging / STORE, create=True)  # the ledger, campaign questions
        store = WorkspaceStore(staging / STORE, create=True)
        try:
            if specimen:
                for obj in data["objects"]:
                    store.add_object(obj["kind"], obj["title"], obj["body"])
                for item in data["evidence"]:
                    store.add_evidence(item["keywords"], item["source"], item["excerpt"])
        finally:
            store.close()
        (staging / MANIFEST).write_text(_manifest_text(kind, chosen, new_id("ws")), "utf-8")
        open_workspace(staging)  # it reads back before it takes the name: else nothing is left
        if path.exists():
            path.rmdir()
        staging.rename(path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return open_workspace(path)


def user_data_dir() -> Path:
    """The per-user data directory (``$XDG_DATA_HOME/labfy-ref`` or ``~/.local/share/...``)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "labfy-ref"


def default_specimen_path() -> Path:
    """Where the per-user SPECIMEN workspace lives (WS-03); it may not exist yet."""
    return user_data_dir() / "specimen"


def existing_default_specimen() -> Workspace | None:
    """The per-user SPECIMEN workspace, opened, or ``None`` while it is not created yet."""
    path = default_specimen_path()
    if not (path / MANIFEST).exists():
        return None
    return open_workspace(path)


def default_specimen_workspace() -> Workspace:
    """The per-user SPECIMEN workspace, created from the embedded one on first use (WS-03).

    A copy made by an older release is ours, so it is upgraded here (with its
    backup) rather than refused.
    """
    try:
        existing = existing_default_specimen()
    except WorkspaceError as exc:
        if exc.code is not ErrorCode.WORKSPACE_OUTDATED:
            raise
        done = upgrade_workspace(default_specimen_path())
        log.info("workspace upgraded path=%s from=%d to=%d backup=%s", default_specimen_path(),
                 done.from_version, done.to_version, done.backup)
        existing = existing_default_specimen()
    if existing is not None:
        return existing
    path = default_specimen_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists() and not any(path.iterdir()):
            path.rmdir()
    except OSError as exc:
        raise WorkspaceError(f"cannot create {path}: {exc.strerror}") from exc
    return init_workspace(path, specimen=True)


class WorkspaceLock:
    """An exclusive, advisory lock held while one server uses a workspace (SV-01)."""

    def __init__(self, workspace: Workspace) -> None:
        self._path = workspace.root / LOCK
        self._handle: IO[str] | None = None

    def acquire(self) -> None:
        """Take the lock or raise ``WORKSPACE_LOCKED``."""
        try:
            fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise WorkspaceError(f"cannot open the workspace lock ({exc.strerror})") from exc
        handle = os.fdopen(fd, "r+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            raise WorkspaceError("another labfy-ref server is using this workspace",
                                 code=ErrorCode.WORKSPACE_LOCKED) from None
        self._handle = handle

    def release(self) -> None:
        """Release the lock; idempotent."""
        if self._handle is not None:
            fcntl.flock(self._handle, fcntl.LOCK_UN)
            self._handle.close()
            self._handle = None
