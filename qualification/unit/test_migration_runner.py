"""ARC-04: the one migration runner both SQL stores share (``sqlcore.migrate``).

Run here on its own, on a real SQLite file under :func:`sqlcore.sqlite_rules`, with steps
that each create one table and a stamp that keeps the version in a one-row table: the
runner applies exactly the steps a database lacks, in order, each with its stamp; a
database at the newest step is left as it is; one past it is refused, untouched.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Connection, Engine, create_engine

from labfy_ref import sqlcore
from labfy_ref.sqlcore import Migration


class Stamp:
    """The version in a one-row table; every step stamped is remembered, in order."""

    def __init__(self) -> None:
        self.stamped: list[int] = []

    def read(self, conn: Connection) -> int:
        return int(conn.exec_driver_sql("SELECT version FROM stamp").scalar_one())

    def stamp(self, conn: Connection, step: Migration) -> None:
        conn.exec_driver_sql(f"UPDATE stamp SET version = {step.version}")
        self.stamped.append(step.version)


class TooNew(Exception):
    """What the store under test refuses a newer database with."""

    def __init__(self, found: int, target: int) -> None:
        super().__init__(found, target)
        self.found, self.target = found, target


def steps(first: int, count: int) -> list[Migration]:
    """``count`` steps numbered from ``first``, step ``v`` creating table ``t<v>``."""
    return [Migration(version, f"add t{version}",
                      sqlcore.statements(f"CREATE TABLE t{version} (x INTEGER)"))
            for version in range(first, first + count)]


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    made = sqlcore.sqlite_rules(create_engine(f"sqlite:///{tmp_path / 'db.sqlite'}"),
                                busy_timeout_s=1.0)
    yield made
    made.dispose()


def at_version(engine: Engine, version: int, *tables: int) -> None:
    """Make the database look like one stamped ``version`` holding tables ``t<n>``."""
    with engine.connect() as conn, sqlcore.transaction(conn, write=True):
        conn.exec_driver_sql("CREATE TABLE stamp (version INTEGER NOT NULL)")
        conn.exec_driver_sql(f"INSERT INTO stamp VALUES ({version})")
        for table in tables:
            conn.exec_driver_sql(f"CREATE TABLE t{table} (x INTEGER)")


def run(engine: Engine, migrations: list[Migration], stamp: Stamp, *,
        first: int) -> tuple[int, int]:
    """``sqlcore.migrate`` over ``engine``, one write transaction per step."""
    @contextlib.contextmanager
    def begin() -> Iterator[Connection]:
        with engine.connect() as conn, sqlcore.transaction(conn, write=True):
            yield conn

    return sqlcore.migrate(begin, migrations, stamp, first=first, too_new=TooNew)


def state(engine: Engine) -> tuple[int, list[str]]:
    """The stamped version and the tables, read with a connection of the test's own."""
    path = engine.url.database
    assert path is not None
    with contextlib.closing(sqlite3.connect(path)) as db:
        version = db.execute("SELECT version FROM stamp").fetchone()[0]
        tables = [row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != 'stamp' "
            "ORDER BY name")]
    return version, tables


@pytest.mark.req("ARC-04")
@pytest.mark.parametrize("first", [1, 2, 5])
@pytest.mark.parametrize("count", [1, 2, 3])
def test_the_newest_version_is_the_last_steps(first: int, count: int) -> None:
    assert sqlcore.newest(steps(first, count), first=first) == first + count - 1
    assert sqlcore.newest((), first=first, empty=True) == first - 1


@pytest.mark.req("ARC-04")
@pytest.mark.parametrize("first", [1, 2])
def test_a_database_without_any_step_gets_every_step_in_order_each_with_its_stamp(
        engine: Engine, first: int) -> None:
    at_version(engine, first - 1)
    stamp = Stamp()
    assert run(engine, steps(first, 3), stamp, first=first) == (first - 1, first + 2)
    assert stamp.stamped == [first, first + 1, first + 2]
    assert state(engine) == (first + 2, [f"t{v}" for v in range(first, first + 3)])


@pytest.mark.req("ARC-04")
@pytest.mark.parametrize("first", [1, 2])
def test_a_database_part_of_the_way_gets_only_the_steps_it_lacks(engine: Engine,
                                                                 first: int) -> None:
    at_version(engine, first, first)
    stamp = Stamp()
    assert run(engine, steps(first, 3), stamp, first=first) == (first, first + 2)
    assert stamp.stamped == [first + 1, first + 2]
    assert state(engine) == (first + 2, [f"t{v}" for v in range(first, first + 3)])


@pytest.mark.req("ARC-04")
def test_a_database_at_the_newest_step_is_left_as_it_is(engine: Engine) -> None:
    at_version(engine, 3, 1, 2, 3)
    stamp = Stamp()
    assert run(engine, steps(1, 3), stamp, first=1) == (3, 3)
    assert stamp.stamped == []
    assert state(engine) == (3, ["t1", "t2", "t3"])


@pytest.mark.req("ARC-04")
def test_a_database_past_the_newest_step_is_refused_and_left_untouched(engine: Engine) -> None:
    at_version(engine, 4, 1, 2, 3, 4)
    stamp = Stamp()
    with pytest.raises(TooNew) as refused:
        run(engine, steps(1, 3), stamp, first=1)
    assert (refused.value.found, refused.value.target) == (4, 3)
    assert stamp.stamped == []
    assert state(engine) == (4, ["t1", "t2", "t3", "t4"])


@pytest.mark.req("ARC-04")
def test_a_failing_step_leaves_the_database_at_the_last_step_completed(engine: Engine) -> None:
    at_version(engine, 0)
    broken = [*steps(1, 2), Migration(3, "half done", sqlcore.statements(
        "CREATE TABLE t3 (x INTEGER)", "INSERT INTO no_such_table VALUES (1)"))]
    stamp = Stamp()
    with pytest.raises(Exception, match="no_such_table"):
        run(engine, broken, stamp, first=1)
    assert state(engine) == (2, ["t1", "t2"])
