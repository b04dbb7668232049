"""What both SQL stores share, on SQLAlchemy Core: SQLite's connection rules and one
migration runner (WS-01, WK-02, WK-06).

The workspace store (``labfy.sqlite``) and Work's store (SQLite or PostgreSQL) keep their
own tables, their own version stamp and their own policy -- the workspace is upgraded only
when asked, with a backup kept first; a Work database is brought forward when opened --
but a schema step is the same thing in both, and runs the same way:

* a :class:`Migration` takes a database at ``version - 1`` to ``version``; its ``apply``
  issues DDL through the Core connection it is given and never commits;
* :func:`migrate` runs the steps a database lacks, **each in its own write transaction
  together with the stamp of its version**, so a failure or a crash leaves the database
  at the last step that completed, never in between; a database stamped past the newest
  step is refused, untouched.

On SQLite (:func:`sqlite_rules`) we begin transactions ourselves: ``BEGIN IMMEDIATE`` for
a write, so two writers queue on the lock at ``BEGIN`` instead of both reading and then
failing to upgrade; ``BEGIN`` for a read, so it sees one snapshot. WAL lets readers go on
while a writer writes; foreign keys are on.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, event

#: The execution option that says how SQLite begins the connection's next transaction.
_BEGIN = "labfy_begin"
#: The first and the longest pause between two tries to switch a database to WAL.
_FIRST_PAUSE_S = 0.001
_LONGEST_PAUSE_S = 0.05


@dataclasses.dataclass(frozen=True, slots=True)
class Migration:
    """One forward step: ``apply`` takes a database at ``version - 1`` to ``version``.

    ``apply`` runs inside the step's transaction and must not commit.
    """

    version: int
    summary: str
    apply: Callable[[Connection], None]


def statements(*sql: str) -> Callable[[Connection], None]:
    """A step's ``apply`` that runs these DDL statements, verbatim, in order."""
    def apply(conn: Connection) -> None:
        for statement in sql:
            conn.exec_driver_sql(statement)

    return apply


def newest(migrations: Sequence[Migration], *, first: int, empty: bool = False) -> int:
    """The version ``migrations`` lead to; they must be numbered ``first``, ``first + 1``, …
    in order, and there must be one unless ``empty`` (none at all leads to ``first - 1``)."""
    versions = [step.version for step in migrations]
    if (not versions and not empty) or versions != list(range(first, first + len(versions))):
        raise ValueError(f"migrations must be numbered {first}, {first + 1}, ... in order: "
                         f"{versions}")
    return first - 1 + len(versions)


class VersionStamp(Protocol):
    """Where a store keeps its schema version: read and written inside a step's transaction."""

    def read(self, conn: Connection) -> int:
        """The version the database is at (take any lock the store needs first)."""
        ...

    def stamp(self, conn: Connection, step: Migration) -> None:
        """Record that ``step`` was applied."""
        ...


def migrate(begin: Callable[[], contextlib.AbstractContextManager[Connection]],
            migrations: Sequence[Migration], stamp: VersionStamp, *, first: int,
            too_new: Callable[[int, int], Exception], empty: bool = False) -> tuple[int, int]:
    """Apply the steps the database lacks, one write transaction each (``begin`` opens one);
    return the version found and the version reached.

    A database past the newest step raises ``too_new(found, newest)`` and is left as it was.
    Each transaction reads the version again, so a process that migrated the database in
    the meantime is seen, never repeated.
    """
    target = newest(migrations, first=first, empty=empty)
    found: int | None = None
    while True:
        with begin() as conn:
            current = stamp.read(conn)
            found = current if found is None else found
            if current > target:
                raise too_new(current, target)
            if current == target:
                return found, current
            step = migrations[current - first + 1]
            step.apply(conn)
            stamp.stamp(conn, step)


def sqlite_rules(engine: Engine, *, busy_timeout_s: float,
                 text_factory: Callable[[bytes], Any] | None = None) -> Engine:
    """Give ``engine`` (pysqlite) our connection and transaction rules; return it."""
    def connect(dbapi_connection: Any, _record: Any) -> None:
        # pysqlite would begin transactions itself, deferred and only before a write; we
        # begin them (below) so a read sees one snapshot and a write takes the lock first
        dbapi_connection.isolation_level = None
        if text_factory is not None:
            dbapi_connection.text_factory = text_factory
        enter_wal(dbapi_connection, timeout_s=busy_timeout_s)
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        finally:
            cursor.close()

    event.listen(engine, "connect", connect)
    event.listen(engine, "begin", _begin)
    return engine


def enter_wal(dbapi_connection: Any, *, timeout_s: float) -> None:
    """Put the database of ``dbapi_connection`` (pysqlite) in WAL mode, which it keeps.

    Switching a database to WAL writes its header, so the connection that has read it
    must then take the write lock; SQLite answers ``SQLITE_BUSY`` at once, without
    waiting for its busy timeout, when another connection holds that lock or is
    switching the same database (each would wait for the other). Processes opening a
    new database at once would fail; the switch is tried again until ``timeout_s`` has
    passed, as long as a writer waits for the lock.
    """
    deadline = time.monotonic() + timeout_s
    pause = _FIRST_PAUSE_S
    while True:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except dbapi_connection.OperationalError as exc:
            # SQLITE_BUSY or one of its extended codes (_RECOVERY, _SNAPSHOT, _TIMEOUT)
            busy = getattr(exc, "sqlite_errorname", "").startswith("SQLITE_BUSY")
            if not busy or time.monotonic() >= deadline:
                raise
        finally:
            cursor.close()
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))
        pause = min(2 * pause, _LONGEST_PAUSE_S)


def _begin(conn: Connection) -> None:
    statement = conn.get_execution_options().get(_BEGIN, "BEGIN")
    if statement:  # straight to the driver: this runs before every transaction
        conn.connection.driver_connection.execute(statement)  # type: ignore[union-attr]


def begin_as(conn: Connection, *, write: bool, snapshot: bool = True) -> Connection:
    """Say how SQLite begins ``conn``'s next transaction: ``BEGIN IMMEDIATE`` for a write;
    ``BEGIN`` for a read of several statements, so they see one snapshot; nothing for a
    read of one statement, which is atomic by itself. Other engines ignore it."""
    return conn.execution_options(**{_BEGIN: "BEGIN IMMEDIATE" if write
                                     else "BEGIN" if snapshot else ""})


@contextlib.contextmanager
def transaction(conn: Connection, *, write: bool, snapshot: bool = True
                ) -> Iterator[Connection]:
    """One transaction on an open connection, committed when the block ends, rolled back on
    an error; begun as :func:`begin_as` says."""
    begin_as(conn, write=write, snapshot=snapshot)
    with conn.begin():
        yield conn
