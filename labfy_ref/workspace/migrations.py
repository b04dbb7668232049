"""The store's schema: version 1 as first released, and the forward steps since (WS-01).

A new store is made by running the version 1 schema and then every step, so a
fresh store and an upgraded one cannot drift apart. An existing store is
migrated only when asked (``labfy-ref workspace upgrade``): a consistent copy is
kept first through SQLite's backup API, then the runner both stores share
(:func:`labfy_ref.sqlcore.migrate`) runs each step in its own transaction together
with the version it stamps, so a failure or a crash leaves the store at the last
version that completed, never in between.

To change the schema, append a :class:`~labfy_ref.sqlcore.Migration` to
:data:`MIGRATIONS` and the same change to :mod:`labfy_ref.workspace.schema`; never
edit a released step or the version 1 schema.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shlex
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import Connection, insert, select, update
from sqlalchemy.exc import DBAPIError

from labfy_ref.errors import ErrorCode, LabfyError, WorkspaceError
from labfy_ref.private import PRIVATE_MODE
from labfy_ref.sqlcore import Migration, newest, statements, transaction
from labfy_ref.sqlcore import migrate as run_steps
from labfy_ref.workspace.engine import store_engine
from labfy_ref.workspace.schema import meta

BASE_VERSION = 1
_VERSION_1 = (
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    """CREATE TABLE objects (
    object_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('fact', 'observation', 'source', 'note')),
    title TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at TEXT NOT NULL
)""",
    """CREATE TABLE campaigns (
    campaign_id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    topic TEXT NOT NULL,
    questions TEXT NOT NULL,
    object_refs TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('PREPARED', 'COMPLETED', 'FAILED')),
    evidence TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
)""",
    """CREATE TABLE grants (
    grant_id TEXT PRIMARY KEY,
    campaign_id TEXT NOT NULL REFERENCES campaigns (campaign_id),
    workspace_id TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT
)""",
    """CREATE TABLE specimen_evidence (
    evidence_id INTEGER PRIMARY KEY,
    keywords TEXT NOT NULL,
    source TEXT NOT NULL,
    excerpt TEXT NOT NULL
)""",
)


MIGRATIONS: tuple[Migration, ...] = (
    # grants_for() filtered by campaign with a full scan, and list_objects() sorted the
    # whole table (or every object of a kind) for each call: both now read an index in order.
    Migration(2, "index grants by campaign, objects by creation and by kind", statements(
        "CREATE INDEX grants_by_campaign ON grants (campaign_id, created_at, grant_id)",
        "CREATE INDEX objects_by_creation ON objects (created_at, object_id)",
        "CREATE INDEX objects_by_kind ON objects (kind, created_at, object_id)",
    )),
    # BR-14: one row per model call of the runtime and the engine; ``usage_id`` orders
    # calls made in the same millisecond, and pruning keeps the newest rows by it.
    Migration(3, "add the provider usage ledger", statements(
        """CREATE TABLE usage (
    usage_id INTEGER PRIMARY KEY,
    at TEXT NOT NULL,
    model TEXT NOT NULL,
    prompt_tokens INTEGER CHECK (prompt_tokens >= 0),
    completion_tokens INTEGER CHECK (completion_tokens >= 0),
    cached_tokens INTEGER CHECK (cached_tokens >= 0),
    latency_ms REAL NOT NULL CHECK (latency_ms >= 0),
    outcome TEXT NOT NULL,
    caller TEXT NOT NULL
)""",
        "CREATE INDEX usage_by_time ON usage (at, usage_id)",
    )),
)
#: The version this build reads and writes.
SCHEMA_VERSION = newest(MIGRATIONS, first=BASE_VERSION + 1, empty=True)


@dataclasses.dataclass(frozen=True, slots=True)
class StoreUpgrade:
    """What an upgrade did: the versions before and after, and the backup it kept (if any)."""

    from_version: int
    to_version: int
    backup: Path | None


_VERSION = meta.c.key == "schema_version"


def create_schema(conn: Connection, migrations: Sequence[Migration] = MIGRATIONS) -> None:
    """Make a new store at the newest version: version 1, then every step, in one transaction."""
    target = newest(migrations, first=BASE_VERSION + 1, empty=True)
    with transaction(conn, write=True):
        statements(*_VERSION_1)(conn)
        for step in migrations:
            step.apply(conn)
        conn.execute(insert(meta).values(key="schema_version", value=str(target)))


def stored_version(conn: Connection) -> int:
    """The version stamped in ``meta``, or ``WORKSPACE_INVALID`` if there is none."""
    text = conn.execute(select(meta.c.value).where(_VERSION)).scalar()
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and int(text) >= 1):
        raise WorkspaceError(f"store schema version {text!r} is not a version")
    return int(text)


class _Stamp:
    """The workspace's version stamp: ``meta.schema_version``."""

    def read(self, conn: Connection) -> int:
        return stored_version(conn)

    def stamp(self, conn: Connection, step: Migration) -> None:
        conn.execute(update(meta).where(_VERSION).values(value=str(step.version)))


def check_version(conn: Connection, path: Path) -> None:
    """Refuse a store of another version: an older one says how to upgrade it."""
    found = stored_version(conn)
    if found < SCHEMA_VERSION:
        raise outdated(path, found)
    if found > SCHEMA_VERSION:
        raise WorkspaceError(f"store schema version {found} is newer than this build's "
                             f"{SCHEMA_VERSION}; open it with the newer labfy-ref that wrote it")


def outdated(path: Path, found: int) -> WorkspaceError:
    """``WORKSPACE_OUTDATED`` for the store at ``path``, naming the command that upgrades it."""
    return WorkspaceError(f"store schema version {found} is older than this build's "
                          f"{SCHEMA_VERSION}; to upgrade it (a backup is kept), run: "
                          f"labfy-ref workspace upgrade {shlex.quote(str(path.parent))}",
                          code=ErrorCode.WORKSPACE_OUTDATED)


def _reserve_backup(path: Path, version: int) -> Path:
    """Create an empty, never-before-used backup file beside ``path`` (never overwrites)."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    for attempt in range(1, 100):
        suffix = "" if attempt == 1 else f"-{attempt}"
        target = path.with_name(f"{path.name}.v{version}-{stamp}{suffix}.bak")
        try:
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, PRIVATE_MODE)
        except FileExistsError:
            continue
        except OSError as exc:
            raise _not_backed_up(path, exc.strerror or type(exc).__name__) from exc
        os.close(fd)
        return target
    raise _not_backed_up(path, "too many backups made this second")


def _not_backed_up(path: Path, reason: str) -> LabfyError:
    # A runtime failure (exit 1), not a refusal: the store is fine, the disk or directory is not.
    return LabfyError(f"cannot back up {path.name} ({reason}); nothing was changed",
                      code=ErrorCode.WORKSPACE_OUTDATED)


def _backup(db: sqlite3.Connection, path: Path, version: int) -> Path:
    """A consistent copy of the store, one self-contained file (no -wal beside it)."""
    target = _reserve_backup(path, version)
    try:
        copy = sqlite3.connect(target, isolation_level=None)
        try:
            db.backup(copy)
            copy.execute("PRAGMA journal_mode = DELETE")
        finally:
            copy.close()
    except sqlite3.Error as exc:
        target.unlink(missing_ok=True)
        raise _not_backed_up(path, str(exc)) from exc
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    return target


def _newer(found: int, target: int) -> WorkspaceError:
    return WorkspaceError(f"store schema version {found} is newer than this build's "
                          f"{target}; nothing to upgrade")


def upgrade_store(path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> StoreUpgrade:
    """Back up the store at ``path``, then apply the steps it lacks (the caller holds its lock).

    A current store is left alone (no backup); a newer one is refused. A step
    that fails rolls back, leaving the store at the last version completed.
    """
    target = newest(migrations, first=BASE_VERSION + 1, empty=True)
    engine = store_engine(path)
    try:
        with engine.connect() as conn:
            return _upgrade(conn, path, migrations, target)
    except DBAPIError as exc:  # the store could not be read: nothing was changed
        raise WorkspaceError(f"store {path.name} is unreadable: {exc.orig}") from None
    finally:
        engine.dispose()


def _upgrade(conn: Connection, path: Path, migrations: Sequence[Migration],
             target: int) -> StoreUpgrade:
    with transaction(conn, write=False):
        found = stored_version(conn)
    if found > target:
        raise _newer(found, target)
    if found == target:
        return StoreUpgrade(found, found, None)
    raw = conn.connection.driver_connection
    assert isinstance(raw, sqlite3.Connection)
    backup = _backup(raw, path, found)
    try:
        run_steps(lambda: transaction(conn, write=True), migrations, _Stamp(),
                  first=BASE_VERSION + 1, too_new=_newer, empty=True)
    except DBAPIError as exc:
        with transaction(conn, write=False):
            now = stored_version(conn)
        raise LabfyError(f"upgrade to schema version {now + 1} failed ({exc.orig}); "
                         f"the store stays at version {now}; backup: {backup}",
                         code=ErrorCode.WORKSPACE_OUTDATED) from None
    return StoreUpgrade(found, target, backup)
