"""One SQLAlchemy engine per Work database, and its transactions (WK-02, WK-04).

The store runs the same statements on both engines; what differs is set up here:

* SQLite: the rules of :func:`labfy_ref.sqlcore.sqlite_rules` (WAL, foreign keys, a busy
  timeout, ``BEGIN IMMEDIATE`` for a write: a deferred transaction's ``SQLITE_BUSY`` on
  upgrade does not wait for the timeout).
* PostgreSQL (psycopg 3): a connect timeout, a liveness check on pool checkout,
  READ COMMITTED; claims lock with ``FOR UPDATE SKIP LOCKED`` (the store's query,
  which SQLite compiles without the clause, its immediate transaction being the lock).

A driver error met here becomes ``WORK_DB_UNAVAILABLE`` with the driver's first line,
the password scrubbed out; nothing else of it reaches a user.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.private import create_private
from labfy_ref.sqlcore import begin_as, sqlite_rules
from labfy_ref.work.store.url import DatabaseUrl

#: How long a SQLite writer waits for the lock before WORK_DB_UNAVAILABLE.
BUSY_TIMEOUT_S = 30.0
#: How long a PostgreSQL connection attempt may take.
CONNECT_TIMEOUT_S = 10
# pg_advisory_xact_lock key of schema migrations ("labfy wk" in ASCII): two processes
# opening a new database at once migrate it one after the other.
_MIGRATION_LOCK = 0x6C6162667920776B


def unavailable(url: DatabaseUrl, reason: str) -> LabfyError:
    """A ``WORK_DB_UNAVAILABLE`` error naming the database (redacted) and ``reason``."""
    # redacted before it is cut, so no prefix of the password can survive the cut
    return LabfyError(url.redact(f"work database {url.redacted()}: {reason}"),
                      code=ErrorCode.WORK_DB_UNAVAILABLE)


class WorkEngine:
    """The engine of one Work database and the only place transactions begin."""

    def __init__(self, url: DatabaseUrl) -> None:
        self.url = url
        self.engine = _sqlite_engine(url) if url.dialect == "sqlite" else _postgres_engine(url)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.url.dialect

    @contextlib.contextmanager
    def transaction(self, *, write: bool) -> Iterator[Connection]:
        """One transaction, committed when the block ends, rolled back on an error.

        ``write`` begins it ``IMMEDIATE`` on SQLite. Driver errors other than an
        integrity violation (which the caller handles or which is a bug) become
        ``WORK_DB_UNAVAILABLE``.
        """
        try:
            with self.engine.connect() as conn:
                begin_as(conn, write=write)
                with conn.begin():
                    yield conn
        except IntegrityError:
            raise
        except DBAPIError as exc:
            first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else ""
            raise unavailable(self.url, first or type(exc.orig).__name__) from None
        except PoolTimeout:
            raise unavailable(self.url, "every pooled connection stayed busy") from None

    def lock_for_migration(self, conn: Connection) -> None:
        """Serialise schema migrations across processes for this transaction."""
        if self.dialect == "postgresql":
            conn.execute(select(func.pg_advisory_xact_lock(_MIGRATION_LOCK)))
        # SQLite: the write transaction's IMMEDIATE lock already excludes every other writer

    def close(self) -> None:
        """Close every pooled connection (idempotent)."""
        self.engine.dispose()


def _sqlite_engine(url: DatabaseUrl) -> Engine:
    path = url.sqlite_path
    if path is not None and not path.parent.is_dir():
        raise unavailable(url, f"directory {path.parent} does not exist")
    if path is not None:
        _create_private(url, path)
    # hide_parameters: a driver error's text never carries the values of a statement
    engine = create_engine(url.url, connect_args={"timeout": BUSY_TIMEOUT_S},
                           hide_parameters=True)
    return sqlite_rules(engine, busy_timeout_s=BUSY_TIMEOUT_S)


def _create_private(url: DatabaseUrl, path: Path) -> None:
    """Create the database file owner-only (it holds messages and model replies); SQLite
    gives its -wal and -shm files the same mode. An existing file is left as it is; a
    symbolic link is refused."""
    if path.is_symlink():  # SQLite would follow it, and write where the link points
        raise unavailable(url, "the database file is a symbolic link")
    try:
        create_private(path)  # an empty file is an empty SQLite database
    except OSError as exc:
        raise unavailable(url, exc.strerror or type(exc).__name__) from None


def _postgres_engine(url: DatabaseUrl) -> Engine:
    if importlib.util.find_spec("psycopg") is None:
        raise unavailable(url, "the PostgreSQL driver is not installed "
                               "(pip install 'labfy-ref[work-postgres]')")
    connect_args: dict[str, Any] = {}
    if "connect_timeout" not in url.url.query:
        connect_args["connect_timeout"] = CONNECT_TIMEOUT_S
    return create_engine(url.url, connect_args=connect_args, pool_pre_ping=True,
                         hide_parameters=True)
