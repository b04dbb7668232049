"""WK-06 (and WK-02, WK-11): the Work database moves by versioned forward migrations, on
both engines.

The next migration here (``ADD_PRIORITY``) is a real one, written the way a later release
would write it (one DDL statement appended to the list), applied to a database this
build wrote; migration 2, this build's own, is tried on the database release 1 left.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, inspect, select, text

from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.sqlcore import enter_wal
from labfy_ref.work import (
    MIGRATIONS,
    SCHEMA_VERSION,
    DatabaseUrl,
    Migration,
    State,
    WorkStore,
    sqlite_url,
)
from labfy_ref.work.store.schema import METADATA
from labfy_ref.work.store.tasks import ALL_WORKSPACES
from qualification.work.wire import STORE_WORKSPACE


def _add_priority(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE work_tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0"))


#: What a later release's next migration looks like: one step appended to MIGRATIONS.
ADD_PRIORITY = Migration(SCHEMA_VERSION + 1, "add tasks.priority", _add_priority)
#: The version rows this build stamps.
STAMPED = [(step.version, step.summary) for step in MIGRATIONS]
NEXT = SCHEMA_VERSION + 1


def open_store(url: DatabaseUrl, **options: object) -> WorkStore:
    """The store of the suite's workspace on ``url``."""
    return WorkStore.open(url, workspace_id=STORE_WORKSPACE, **options)  # type: ignore[arg-type]


def versions(url: DatabaseUrl) -> list[tuple[int, str]]:
    """The version rows of the database, read with a connection of its own."""
    engine = create_engine(url.url)
    try:
        with engine.connect() as conn:
            return [(row.version, row.summary) for row in conn.execute(
                text("SELECT version, summary FROM work_schema_version ORDER BY version"))]
    finally:
        engine.dispose()


def columns(url: DatabaseUrl, table: str) -> list[str]:
    """The column names of ``table`` as the database reports them."""
    engine = create_engine(url.url)
    try:
        return [column["name"] for column in inspect(engine).get_columns(table)]
    finally:
        engine.dispose()


@pytest.mark.req("WK-06", "WK-02")
def test_a_database_written_by_this_build_opens_again_with_its_data(
        work_url: DatabaseUrl) -> None:
    store = open_store(work_url)
    submitted = store.submit("kept across opens")
    claim = store.claim("w1", 600)
    assert claim is not None
    effect = store.begin_effect(claim, 1, 0, "files.write", {"path": "a"})
    store.record_reply(claim, 1, {"q": 1}, {"a": 1})
    store.close()
    assert versions(work_url) == STAMPED

    reopened = open_store(work_url)
    try:
        assert reopened.get_task(submitted.task.id).state is State.RUNNING
        assert reopened.find_effect(claim.run_id, 1, 0) == effect
        reply = reopened.get_reply(claim.run_id, 1)
        assert reply is not None and reply.response == {"a": 1}
        reopened.heartbeat(claim, 600)  # the claim made before the reopen still holds
    finally:
        reopened.close()
    assert versions(work_url) == STAMPED


@pytest.mark.req("WK-06")
def test_the_migrated_schema_is_the_schema_the_store_queries(work_url: DatabaseUrl) -> None:
    open_store(work_url).close()
    engine = create_engine(work_url.url)
    try:
        inspector = inspect(engine)
        assert set(inspector.get_table_names()) == set(METADATA.tables)
        for name, table in METADATA.tables.items():
            found = {c["name"]: c["nullable"] for c in inspector.get_columns(name)}
            assert found == {c.name: c.nullable for c in table.columns}, name
            key = inspector.get_pk_constraint(name)["constrained_columns"]
            assert key == [c.name for c in table.primary_key.columns], name
            indexes = {index["name"]: index["column_names"]
                       for index in inspector.get_indexes(name)}
            for index in table.indexes:  # the store's queries lean on them
                assert indexes.get(index.name) == [c.name for c in index.columns], index.name
    finally:
        engine.dispose()


@pytest.mark.req("WK-06")
def test_a_next_migration_is_applied_once_to_a_database_of_this_build(
        work_url: DatabaseUrl) -> None:
    store = open_store(work_url)
    submitted = store.submit("before the next migration")
    store.close()
    newer = (*MIGRATIONS, ADD_PRIORITY)
    for _ in range(2):  # the second open finds nothing to do (a second ALTER would fail)
        upgraded = open_store(work_url, migrations=newer)
        assert upgraded.get_task(submitted.task.id).message == "before the next migration"
        upgraded.close()
    assert [version for version, _ in versions(work_url)] == list(range(1, NEXT + 1))
    assert "priority" in columns(work_url, "work_tasks")


@pytest.mark.req("WK-06")
def test_a_database_newer_than_the_code_is_refused_and_left_untouched(
        work_url: DatabaseUrl) -> None:
    open_store(work_url, migrations=(*MIGRATIONS, ADD_PRIORITY)).close()
    with pytest.raises(LabfyError) as refused:
        open_store(work_url)
    assert refused.value.code is ErrorCode.WORK_DB_TOO_NEW
    assert str(refused.value) == (
        f"WORK_DB_TOO_NEW: the work database is at schema version {NEXT}; this labfy-ref "
        f"knows up to {SCHEMA_VERSION}: run a newer labfy-ref")
    assert [version for version, _ in versions(work_url)] == list(range(1, NEXT + 1))
    assert "priority" in columns(work_url, "work_tasks")


def _half_done(conn: Connection) -> None:
    conn.execute(text("ALTER TABLE work_tasks ADD COLUMN priority INTEGER"))
    raise RuntimeError("the step fails after its first statement")


@pytest.mark.req("WK-06")
def test_a_failed_step_leaves_the_database_at_the_last_completed_version(
        work_url: DatabaseUrl) -> None:
    open_store(work_url).close()
    with pytest.raises(RuntimeError, match="fails after its first statement"):
        open_store(work_url, migrations=(*MIGRATIONS, Migration(NEXT, "broken", _half_done)))
    assert versions(work_url) == STAMPED
    assert "priority" not in columns(work_url, "work_tasks")
    open_store(work_url).close()


@pytest.mark.req("WK-06")
def test_workers_opening_a_new_database_at_once_migrate_it_once(
        work_url: DatabaseUrl) -> None:
    start = threading.Barrier(6, timeout=30)
    opened: list[WorkStore] = []
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            start.wait()
            opened.append(open_store(work_url))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for store in opened:
        store.close()
    assert failures == [] and len(opened) == 6
    assert versions(work_url) == STAMPED


@pytest.mark.req("WK-06")
def test_a_new_database_opens_once_another_connection_lets_go_of_its_write_lock(
        tmp_path: Path) -> None:
    """Switching a new database to WAL needs its write lock, and SQLite answers BUSY at
    once, without its busy timeout, while another connection holds it: the open waits for
    the lock as a writer would, instead of failing (workers opening a new file at once)."""
    path = tmp_path / "work.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    opened: list[float] = []
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            open_store(sqlite_url(path)).close()
            opened.append(time.monotonic())
        except BaseException as exc:  # reported below
            failures.append(exc)

    thread = threading.Thread(target=open_it)
    thread.start()
    thread.join(timeout=0.5)  # the open is under way, waiting on the holder's lock
    released = time.monotonic()
    holder.execute("COMMIT")
    holder.close()
    thread.join(timeout=60)
    assert failures == [] and len(opened) == 1
    assert opened[0] >= released  # it could not open while the lock was held
    assert versions(sqlite_url(path)) == STAMPED


def journal_mode(path: Path) -> str:
    """The journal mode of the database at ``path``, read by a connection of its own."""
    reader = sqlite3.connect(path)
    try:
        return str(reader.execute("PRAGMA journal_mode").fetchone()[0])
    finally:
        reader.close()


@pytest.mark.req("WK-06")
def test_the_switch_to_wal_gives_up_with_the_busy_timeout_and_changes_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "held.sqlite"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute("CREATE TABLE kept (x)")
    opener = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        with pytest.raises(sqlite3.OperationalError) as raised:
            enter_wal(opener, timeout_s=0.2)
        assert raised.value.sqlite_errorname == "SQLITE_BUSY"
        holder.execute("COMMIT")
        assert journal_mode(path) == "delete"
        enter_wal(opener, timeout_s=0.2)  # the lock is free: it switches
        assert journal_mode(path) == "wal"
        assert holder.execute("SELECT name FROM sqlite_master").fetchall() == [("kept",)]
    finally:
        opener.close()
        holder.close()


@pytest.mark.req("WK-06")
def test_migrations_must_be_numbered_from_one_in_order(work_url: DatabaseUrl) -> None:
    for broken in ((), (ADD_PRIORITY,), (*MIGRATIONS, ADD_PRIORITY, ADD_PRIORITY)):
        with pytest.raises(ValueError, match="numbered 1, 2"):
            open_store(work_url, migrations=broken)
    engine = create_engine(work_url.url)
    try:
        assert inspect(engine).get_table_names() == []  # nothing was created
        with engine.connect() as conn:
            assert conn.execute(select(1)).scalar_one() == 1
    finally:
        engine.dispose()


RELEASE_1 = Path(__file__).with_name("release_1.sql")
FINISHED_IN_1 = "task_01M8PXTGFX39XZENAZTK0W92M6"
WAITING_IN_1 = "task_01M8PXTGGB3Y1P7FRDQ4J7XN4W"
APPROVAL_IN_1 = "appr_01M8PXTGGEAB8JYPX9383FHFNY"
QUEUED_IN_1 = "task_01M8PXTGGGR4JX4HWH1BF5EPDR"


def release_1_database(path: Path) -> Path:
    """A SQLite file as the first release of the Work store left it (release_1.sql is its
    dump: three tasks, finished, waiting for an approval, queued)."""
    db = sqlite3.connect(path)
    try:
        db.executescript(RELEASE_1.read_text("utf-8"))
    finally:
        db.close()
    return path


def sqlite_schema(path: Path) -> list[tuple[str, str, str]]:
    """Every table and index of a SQLite file, with the SQL that made it."""
    db = sqlite3.connect(path)
    try:
        return db.execute("SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE "
                          "'sqlite_%' ORDER BY name").fetchall()
    finally:
        db.close()


@pytest.mark.req("WK-06")
def test_migration_1_still_creates_exactly_what_release_1_created(tmp_path: Path) -> None:
    """A released step is never edited: today's migration 1 makes release 1's schema."""
    open_store(sqlite_url(tmp_path / "fresh.sqlite"), migrations=MIGRATIONS[:1]).close()
    released = release_1_database(tmp_path / "release_1.sqlite")
    assert sqlite_schema(tmp_path / "fresh.sqlite") == sqlite_schema(released)


@pytest.mark.req("WK-06", "WK-02")
def test_a_database_left_by_release_1_opens_and_its_work_goes_on(tmp_path: Path) -> None:
    """Opened as the workspace whose own work.sqlite it is, its tasks become that
    workspace's (WK-11) and go on."""
    store = open_store(sqlite_url(release_1_database(tmp_path / "work.sqlite")), adopt=True)
    try:
        finished = store.show(FINISHED_IN_1)
        assert finished["task"]["final_text"] == "done"
        assert [e["status"] for e in finished["effects"]] == ["completed"]
        reply = store.get_reply(finished["runs"][0]["id"], 1)
        assert reply is not None and reply.request["messages"][0]["role"] == "user"
        assert [t.id for t in store.list_tasks()] == [QUEUED_IN_1, WAITING_IN_1, FINISHED_IN_1]

        store.answer_approval(APPROVAL_IN_1, "allowed-once")
        for expected in (WAITING_IN_1, QUEUED_IN_1):  # the older run first
            claim = store.claim("worker-r2", 60)
            assert claim is not None and claim.task_id == expected
            store.finish(claim, State.COMPLETED, final_text="finished by this build")
        assert store.claim("worker-r2", 60) is None
        assert store.get_task(WAITING_IN_1).final_text == "finished by this build"
    finally:
        store.close()


@pytest.mark.req("WK-11", "WK-06")
def test_tasks_of_release_1_on_a_shared_database_belong_to_no_workspace(
        tmp_path: Path) -> None:
    """Opened by a workspace that does not own the file, release 1's tasks stay unowned:
    that workspace neither sees nor claims them; only the admin's view lists them."""
    url = sqlite_url(release_1_database(tmp_path / "shared.sqlite"))
    other = open_store(url)
    try:
        assert other.list_tasks() == [] and other.claim("worker-b", 60) is None
        with pytest.raises(LabfyError) as hidden:
            other.show(QUEUED_IN_1)
        assert hidden.value.code is ErrorCode.TASK_NOT_FOUND
        with pytest.raises(LabfyError) as unanswered:
            other.answer_approval(APPROVAL_IN_1, "allowed-once")
        assert unanswered.value.code is ErrorCode.APPROVAL_NOT_FOUND
    finally:
        other.close()
    admin = WorkStore.open(url, workspace_id=ALL_WORKSPACES)
    try:
        assert [t.id for t in admin.list_tasks()] == [QUEUED_IN_1, WAITING_IN_1, FINISHED_IN_1]
        assert admin.get_approval(APPROVAL_IN_1).decision is None
        for refused in (lambda: admin.submit("m"), lambda: admin.claim("w", 60)):
            with pytest.raises(LabfyError) as one:
                refused()
            assert one.value.code is ErrorCode.VALIDATION_FAILED
    finally:
        admin.close()


@pytest.mark.req("WK-11")
def test_only_the_workspace_that_owns_the_database_adopts_its_unowned_tasks(
        tmp_path: Path) -> None:
    """Adopting release 1's unowned tasks is one workspace's act: its store takes them
    (another workspace's still sees none); the admin's view of all workspaces cannot adopt
    (VALIDATION_FAILED), and opening it that way changes nothing."""
    url = sqlite_url(release_1_database(tmp_path / "work.sqlite"))
    with pytest.raises(LabfyError) as refused:
        WorkStore.open(url, workspace_id=ALL_WORKSPACES, adopt=True)
    assert refused.value.code is ErrorCode.VALIDATION_FAILED
    assert "only one workspace adopts" in refused.value.message
    owner = open_store(url, adopt=True)
    other = WorkStore.open(url, workspace_id="ws_" + "6" * 26)
    try:
        assert [t.id for t in owner.list_tasks()] == [QUEUED_IN_1, WAITING_IN_1, FINISHED_IN_1]
        assert other.list_tasks() == []
    finally:
        other.close()
        owner.close()


@pytest.mark.req("WK-06")
def test_migrate_answers_the_version_the_database_is_at_after_it(tmp_path: Path) -> None:
    """``migrate`` returns the version it brought the database to: the newest step's on a
    fresh database, on one already there, and after a next migration."""
    from labfy_ref.work.store.engine import WorkEngine  # noqa: PLC0415
    from labfy_ref.work.store.migrations import migrate  # noqa: PLC0415

    engine = WorkEngine(sqlite_url(tmp_path / "work.sqlite"))
    try:
        assert migrate(engine) == SCHEMA_VERSION
        assert migrate(engine) == SCHEMA_VERSION
        assert migrate(engine, (*MIGRATIONS, ADD_PRIORITY)) == NEXT
    finally:
        engine.close()
