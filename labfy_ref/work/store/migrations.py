"""Versioned forward migrations of the Work database (WK-02, WK-06).

The database records each applied step in ``work_schema_version``; opening it runs
the steps it lacks through the runner both stores share (:func:`labfy_ref.sqlcore.migrate`:
each step in its own transaction together with the row that stamps it, so a failure or a
crash leaves the database at the last step that completed). Processes opening one
database at once take turns (PostgreSQL: an advisory lock; SQLite: the immediate
transaction). A database stamped with a version newer than this build knows is refused
``WORK_DB_TOO_NEW`` and left untouched.

To change the schema, append a :class:`~labfy_ref.sqlcore.Migration` to
:data:`MIGRATIONS` (its ``apply`` issues DDL through the connection it is given,
portable Core constructs or one statement per dialect) and make the same change to
:data:`labfy_ref.work.store.schema.METADATA`; never edit a released step. The version
table itself never changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection, MetaData, func, insert, select, text
from sqlalchemy.schema import CreateIndex

from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.sqlcore import Migration
from labfy_ref.sqlcore import migrate as run_steps
from labfy_ref.work.store import schema
from labfy_ref.work.store.engine import WorkEngine


def _create_version_1(conn: Connection) -> None:
    metadata = MetaData()
    schema.declare_v1(metadata)
    # the runner made the version table already, before it could read a version
    metadata.create_all(conn, tables=[table for table in metadata.sorted_tables
                                      if table.name != schema.schema_version.name])


def _task_workspaces(conn: Connection) -> None:
    # ADD COLUMN of a nullable column with no default: the same statement on both engines,
    # and neither rewrites the table; existing tasks keep a null workspace (WK-11: the store
    # gives them to the workspace whose own work.sqlite this is, when it opens it)
    table = schema.tasks.name
    conn.execute(text(f"ALTER TABLE {table} ADD COLUMN {schema.TASK_WORKSPACE} TEXT"))
    index = next(index for index in schema.tasks.indexes
                 if index.name == schema.TASKS_BY_WORKSPACE)
    conn.execute(CreateIndex(index))


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "create the work tables: tasks, runs, messages, events, approvals, "
                 "provider replies, effects", _create_version_1),
    Migration(2, "record the workspace each task belongs to", _task_workspaces),
)
#: The version this build reads and writes.
SCHEMA_VERSION = MIGRATIONS[-1].version


def stored_version(conn: Connection) -> int:
    """The newest version stamped in the database (0 for a new one)."""
    newest = conn.execute(select(func.max(schema.schema_version.c.version))).scalar_one()
    return int(newest or 0)


class _Stamp:
    """Work's version stamp: one row per applied step in ``work_schema_version``."""

    def __init__(self, engine: WorkEngine) -> None:
        self._engine = engine

    def read(self, conn: Connection) -> int:
        self._engine.lock_for_migration(conn)
        schema.schema_version.create(conn, checkfirst=True)
        return stored_version(conn)

    def stamp(self, conn: Connection, step: Migration) -> None:
        conn.execute(insert(schema.schema_version).values(
            version=step.version, summary=step.summary, applied_at=iso(utcnow())))


def _too_new(found: int, target: int) -> LabfyError:
    return LabfyError(f"the work database is at schema version {found}; this labfy-ref "
                      f"knows up to {target}: run a newer labfy-ref",
                      code=ErrorCode.WORK_DB_TOO_NEW)


def migrate(engine: WorkEngine, migrations: Sequence[Migration] = MIGRATIONS) -> int:
    """Bring the database forward to the newest of ``migrations``; return that version.

    ``WORK_DB_TOO_NEW`` when the database is already past it.
    """
    return run_steps(lambda: engine.transaction(write=True), migrations, _Stamp(engine),
                     first=1, too_new=_too_new)[1]
