"""The store's schema: version 1 as first released, and the forward steps since (WS-01).

A new store is made by running the version 1 schema and then every step, so a
fresh store and an upgraded one cannot drift apart. An existing store is
migrated only when asked (``labfy-ref workspace upgrade``): a consistent copy is
kept first through SQLite's backup API, then each step runs in its own
transaction together with the version it stamps, so a failure or a crash
leaves the store at the last version that completed, never in between.

To change the schema, append a :class:`Migration` to :data:`MIGRATIONS`; never
edit a released step or the version 1 schema.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import shlex
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path

from labfy_ref.errors import ErrorCode, LabfyError, WorkspaceError
from labfy_ref.private import PRIVATE_MODE

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


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    """One forward step: ``apply`` takes a store at ``version - 1`` to ``version``.

    ``apply`` runs inside the step's transaction and must not commit.
    """

    version: int
    summary: str
    apply: Callable[[sqlite3.Connection], None]


def _statements(*sql: str) -> Callable[[sqlite3.Connection], None]:
    def apply(db: sqlite3.Connection) -> None:
        for statement in sql:
            db.execute(statement)

    return apply


MIGRATIONS: tuple[Migration, ...] = (
    # grants_for() filtered by campaign with a full scan, and list_objects() sorted the
    # whole table (or every object of a kind) for each call: both now read an index in order.
    Migration(2, "index grants by campaign, objects by creation and by kind", _statements(
        "CREATE INDEX grants_by_campaign ON grants (campaign_id, created_at, grant_id)",
        "CREATE INDEX objects_by_creation ON objects (created_at, object_id)",
        "CREATE INDEX objects_by_kind ON objects (kind, created_at, object_id)",
    )),
    # BR-14: one row per model call of the runtime and the engine; ``usage_id`` orders
    # calls made in the same millisecond, and pruning keeps the newest rows by it.
    Migration(3, "add the provider usage ledger", _statements(
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
SCHEMA_VERSION = MIGRATIONS[-1].version if MIGRATIONS else BASE_VERSION


@dataclasses.dataclass(frozen=True, slots=True)
class StoreUpgrade:
    """What an upgrade did: the versions before and after, and the backup it kept (if any)."""

    from_version: int
    to_version: int
    backup: Path | None


def _target(migrations: Sequence[Migration]) -> int:
    """The version ``migrations`` lead to; they must be consecutive from version 2."""
    versions = [step.version for step in migrations]
    if versions != list(range(BASE_VERSION + 1, BASE_VERSION + 1 + len(versions))):
        raise ValueError(f"migrations must be consecutive from {BASE_VERSION + 1}: {versions}")
    return versions[-1] if versions else BASE_VERSION


def create_schema(db: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS) -> None:
    """Make a new store at the newest version: version 1, then every step, in one transaction."""
    target = _target(migrations)
    db.execute("BEGIN IMMEDIATE")
    try:
        for statement in _VERSION_1:
            db.execute(statement)
        for step in migrations:
            step.apply(db)
        db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(target),))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def stored_version(db: sqlite3.Connection) -> int:
    """The version stamped in ``meta``, or ``WORKSPACE_INVALID`` if there is none."""
    row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    text = row[0] if row else None
    if not (isinstance(text, str) and text.isascii() and text.isdigit() and int(text) >= 1):
        raise WorkspaceError(f"store schema version {text!r} is not a version")
    return int(text)


def check_version(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a store of another version: an older one says how to upgrade it."""
    found = stored_version(db)
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


def _step(db: sqlite3.Connection, step: Migration) -> None:
    """Run one step and stamp its version, in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        found = stored_version(db)
        if found != step.version - 1:
            raise WorkspaceError(f"store schema version {found} changed during the upgrade")
        step.apply(db)
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (str(step.version),))
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def upgrade_store(path: Path, migrations: Sequence[Migration] = MIGRATIONS) -> StoreUpgrade:
    """Back up the store at ``path``, then apply the steps it lacks (the caller holds its lock).

    A current store is left alone (no backup); a newer one is refused. A step
    that fails rolls back, leaving the store at the last version completed.
    """
    target = _target(migrations)
    try:
        db = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise WorkspaceError(f"store {path.name} is unreadable: {exc}") from exc
    try:
        try:
            found = stored_version(db)
        except sqlite3.DatabaseError as exc:
            raise WorkspaceError(f"store {path.name} is unreadable: {exc}") from exc
        if found > target:
            raise WorkspaceError(f"store schema version {found} is newer than this build's "
                                 f"{target}; nothing to upgrade")
        if found == target:
            return StoreUpgrade(found, found, None)
        backup = _backup(db, path, found)
        for step in migrations[found - BASE_VERSION:]:
            try:
                _step(db, step)
            except sqlite3.Error as exc:
                now = stored_version(db)
                raise LabfyError(f"upgrade to schema version {step.version} failed ({exc}); "
                                 f"the store stays at version {now}; backup: {backup}",
                                 code=ErrorCode.WORKSPACE_OUTDATED) from exc
        return StoreUpgrade(found, target, backup)
    finally:
        db.close()
