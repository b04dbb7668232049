"""WS-01, WS-02, RT-08: a workspace made by the previous release is upgraded, never lost.

The store of ``fixtures/workspaces/v1`` was written by labfy-ref ``cf0bdbe``
(schema version 1). This build refuses it with ``WORKSPACE_OUTDATED`` naming
the command that upgrades it; the upgrade keeps a consistent backup first, then
migrates step by step, each step one transaction, so a failure or a crash
leaves the store as it was.
"""

from __future__ import annotations

import datetime
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import Connection

from labfy_ref.errors import ErrorCode, LabfyError, WorkspaceError
from labfy_ref.sqlcore import Migration
from labfy_ref.workspace import (
    SCHEMA_VERSION,
    WorkspaceLock,
    init_workspace,
    open_workspace,
    upgrade_workspace,
)
from labfy_ref.workspace.layout import _read_layout
from labfy_ref.workspace.migrations import MIGRATIONS
from qualification.conftest import REPO
from qualification.harness import ServeProcess
from qualification.workspace.previous_release import (
    dump,
    indexes,
    restore_v1_workspace,
    rows,
    schema,
)

BACKUP = re.compile(r"labfy\.sqlite\.v1-\d{8}T\d{6}Z(-\d+)?\.bak")
#: The fixture's grants by id: (campaign, revoked?, expires_at), as the previous release wrote them.
FIXTURE_GRANTS = {
    "grant_01M8P8GDJHZRZ9TVM6SEH0FNBD": ("camp_01M8P8GDJFJ7DTTYGAXEDXY12G", False, None),
    "grant_01M8P8GDJHGWNX3WRJW5V3R0J1": ("camp_01M8P8GDJFJ7DTTYGAXEDXY12G", True, None),
    "grant_01M8P8GDJJCRGCFCDYGHPHYJWR": ("camp_01M8P8GDJGXBH7J7PYJNDNTJFD", False,
                                         "2026-11-29T12:57:34.033611Z"),
    "grant_01M8P8GDJJ5KX2TB2DHQNBCHYG": ("camp_01M8P8GDJGXBH7J7PYJNDNTJFD", False,
                                         "2099-01-01T00:00:00Z"),
    "grant_01M8P8GDJKCPYXAAJ00A7Y679M": ("camp_01M8P8GDJHDYAEC6STSS5GQWFS", False, None),
}


@pytest.fixture
def v1(tmp_path: Path) -> Path:
    """The previous release's workspace."""
    return restore_v1_workspace(tmp_path / "v1")


def _backups(root: Path) -> list[Path]:
    return sorted(path for path in root.iterdir() if path.name.endswith(".bak"))


def _failing_after_the_real_step(db: Connection) -> None:
    MIGRATIONS[0].apply(db)
    db.exec_driver_sql("INSERT INTO no_such_table VALUES (1)")  # fails half-way through the step


@pytest.mark.req("WS-01", "WS-05")
def test_a_store_of_the_previous_release_is_refused_with_the_way_out(v1: Path) -> None:
    before = dump(v1 / "labfy.sqlite")
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(v1)
    assert caught.value.code is ErrorCode.WORKSPACE_OUTDATED
    assert caught.value.message.endswith(f"run: labfy-ref workspace upgrade {v1.resolve()}")
    assert f"version 1 is older than this build's {SCHEMA_VERSION}" in caught.value.message
    assert dump(v1 / "labfy.sqlite") == before, "refusing it changes nothing"
    assert _backups(v1) == []


@pytest.mark.req("WS-02", "RT-08", "WS-05")
def test_upgrade_keeps_every_object_campaign_and_grant_and_adds_the_indexes(v1: Path) -> None:
    before = rows(v1 / "labfy.sqlite")
    assert (len(before["objects"]), len(before["campaigns"]), len(before["grants"])) == (12, 3, 5)
    done = upgrade_workspace(v1)
    assert (done.from_version, done.to_version) == (1, SCHEMA_VERSION) == (1, 3)
    after = rows(v1 / "labfy.sqlite")
    assert after["meta"] == [("schema_version", "3")]
    assert {t: r for t, r in after.items() if t != "meta"} == \
        {t: r for t, r in before.items() if t != "meta"}, "every row intact"
    assert indexes(v1 / "labfy.sqlite", "grants") == {
        "grants_by_campaign": ["campaign_id", "created_at", "grant_id"]}
    assert indexes(v1 / "labfy.sqlite", "objects") == {
        "objects_by_creation": ["created_at", "object_id"],
        "objects_by_kind": ["kind", "created_at", "object_id"]}

    workspace = open_workspace(v1)  # and this build reads it through its own store
    store = workspace.open_store()
    try:
        # A fixed "now", after the fixture was made: one grant has expired by then, one not.
        now = datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)
        seen = {}
        for campaign in sorted({c for c, _, _ in FIXTURE_GRANTS.values()}):
            for grant in store.grants_for(campaign):
                seen[grant.grant_id] = (grant.campaign_id, grant.revoked_at is not None,
                                        grant.expires_at)
        assert seen == FIXTURE_GRANTS
        active = {g for g in seen if store.get_grant(g).active_for(  # type: ignore[union-attr]
            workspace.workspace_id, now)}
        assert active == {"grant_01M8P8GDJHZRZ9TVM6SEH0FNBD", "grant_01M8P8GDJJ5KX2TB2DHQNBCHYG"}
        done_campaign = store.get_campaign("camp_01M8P8GDJGXBH7J7PYJNDNTJFD",
                                           workspace.workspace_id)
        assert done_campaign is not None and done_campaign.status == "COMPLETED"
        assert done_campaign.topic == "Pollinator counts — ünïcode"
        assert done_campaign.evidence == ({"source": "field-log.txt",
                                           "excerpt": "Bees peak at 10:00."},)
        assert [o.object_id for o in store.list_objects()] == \
            [row[0] for row in sorted(before["objects"], key=lambda r: (r[4], r[0]))]
        assert len(store.all_evidence()) == 5
    finally:
        store.close()


@pytest.mark.req("WS-01", "WS-05")
def test_an_upgraded_store_has_exactly_the_schema_of_a_new_one(v1: Path,
                                                              tmp_path: Path) -> None:
    upgrade_workspace(v1)
    fresh = init_workspace(tmp_path / "fresh", specimen=False)
    assert schema(v1 / "labfy.sqlite") == schema(fresh.store_path)


@pytest.mark.req("WS-01", "ARC-04")
def test_the_tables_the_store_queries_are_the_tables_its_migrations_make(tmp_path: Path) -> None:
    """``workspace/schema.py`` (what the store's Core statements name) against a new store
    made by the released DDL: the same tables, the same columns in the same order, the same
    types and the same nullability."""
    from labfy_ref.workspace.schema import METADATA  # noqa: PLC0415

    fresh = init_workspace(tmp_path / "fresh", specimen=False)
    with sqlite3.connect(fresh.store_path) as db:
        names = {row[0] for row in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        made = {name: [(r[1], r[2], bool(r[3]) or bool(r[5])) for r in db.execute(
            f"PRAGMA table_info({name})")] for name in names}
    declared = {table.name: [(column.name, str(column.type.compile()).replace("FLOAT", "REAL"),
                              not column.nullable) for column in table.columns]
                for table in METADATA.sorted_tables}
    assert declared == made


@pytest.mark.req("WS-01", "WS-05")
def test_the_backup_is_a_readable_copy_of_the_previous_store(v1: Path) -> None:
    before = dump(v1 / "labfy.sqlite")
    done = upgrade_workspace(v1)
    assert done.backup is not None and done.backup.parent == v1.resolve()
    assert BACKUP.fullmatch(done.backup.name), done.backup.name
    assert _backups(v1) == [done.backup]
    assert not done.backup.with_name(done.backup.name + "-wal").exists(), "one self-contained file"
    assert dump(done.backup) == before, "equal to the store before the upgrade"
    with sqlite3.connect(f"{done.backup.as_uri()}?mode=ro", uri=True) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert dump(v1 / "labfy.sqlite") != before


@pytest.mark.req("WS-01", "WS-05")
def test_upgrading_twice_is_harmless(v1: Path) -> None:
    first = upgrade_workspace(v1)
    upgraded = dump(v1 / "labfy.sqlite")
    second = upgrade_workspace(v1)
    assert (second.from_version, second.to_version, second.backup) == \
        (SCHEMA_VERSION, SCHEMA_VERSION, None)
    assert dump(v1 / "labfy.sqlite") == upgraded
    assert _backups(v1) == [first.backup], "no second backup of a current store"


@pytest.mark.req("WS-01", "WS-05")
def test_a_backup_never_overwrites_a_file(v1: Path) -> None:
    # Every name the backup could take during the next minute is already someone's file.
    now = datetime.datetime.now(datetime.UTC)
    planted = [v1 / f"labfy.sqlite.v1-{now + datetime.timedelta(seconds=s):%Y%m%dT%H%M%SZ}.bak"
               for s in range(-1, 60)]
    for path in planted:
        path.write_text("mine")
    done = upgrade_workspace(v1)
    assert done.backup is not None and done.backup not in planted
    assert done.backup.name.endswith("-2.bak")
    assert all(path.read_text() == "mine" for path in planted)


@pytest.mark.req("WS-01", "WS-05")
def test_a_failing_step_leaves_the_store_at_the_previous_version_untouched(v1: Path) -> None:
    before = dump(v1 / "labfy.sqlite")
    broken = (Migration(2, "the real step, then a failure", _failing_after_the_real_step),)
    with pytest.raises(LabfyError) as caught:
        upgrade_workspace(v1, broken)
    assert caught.value.code is ErrorCode.WORKSPACE_OUTDATED
    assert "the store stays at version 1; backup: " in caught.value.message
    assert dump(v1 / "labfy.sqlite") == before, "the step rolled back whole"
    assert indexes(v1 / "labfy.sqlite", "grants") == {}
    with pytest.raises(WorkspaceError) as still:
        open_workspace(v1)
    assert still.value.code is ErrorCode.WORKSPACE_OUTDATED
    assert upgrade_workspace(v1).to_version == SCHEMA_VERSION, \
        "the real upgrade still runs afterwards"


@pytest.mark.req("WS-01", "WS-05")
def test_each_step_is_its_own_transaction(v1: Path) -> None:
    broken_third = (MIGRATIONS[0], Migration(3, "fails", _failing_after_the_real_step))
    with pytest.raises(LabfyError) as caught:
        upgrade_workspace(v1, broken_third)
    assert "the store stays at version 2" in caught.value.message
    assert rows(v1 / "labfy.sqlite")["meta"] == [("schema_version", "2")]
    assert upgrade_workspace(v1).from_version == 2, "version 2 completed and stayed"


CRASH = """
import os, signal, sys
from pathlib import Path
from labfy_ref.workspace import upgrade_workspace
from labfy_ref.sqlcore import Migration
from labfy_ref.workspace.migrations import MIGRATIONS

def crash(db):
    MIGRATIONS[0].apply(db)
    os.kill(os.getpid(), signal.SIGKILL)  # the power goes out mid-step

upgrade_workspace(Path(sys.argv[1]), (Migration(2, "crashes", crash),))
"""


@pytest.mark.req("WS-01", "WS-05")
def test_a_crash_mid_migration_leaves_the_store_untouched(v1: Path) -> None:
    before = dump(v1 / "labfy.sqlite")
    done = subprocess.run([sys.executable, "-c", CRASH, str(v1)], capture_output=True,
                          text=True, timeout=60, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == -9, done.stderr
    assert dump(v1 / "labfy.sqlite") == before
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(v1)
    assert caught.value.code is ErrorCode.WORKSPACE_OUTDATED
    assert upgrade_workspace(v1).to_version == SCHEMA_VERSION, "the lock died with the process"


@pytest.mark.req("WS-01", "SV-01", "WS-05")
def test_upgrade_is_refused_while_a_server_holds_the_workspace(v1: Path) -> None:
    before = dump(v1 / "labfy.sqlite")
    lock = WorkspaceLock(_read_layout(v1))  # as a server of the previous release holds it
    lock.acquire()
    try:
        with pytest.raises(WorkspaceError) as caught:
            upgrade_workspace(v1)
    finally:
        lock.release()
    assert caught.value.code is ErrorCode.WORKSPACE_LOCKED
    assert caught.value.message.endswith("stop it, then upgrade")
    assert dump(v1 / "labfy.sqlite") == before and _backups(v1) == []


@pytest.mark.req("WS-01", "WS-05")
@pytest.mark.parametrize("version", [str(SCHEMA_VERSION + 1), "0", "two"])
def test_upgrade_refuses_a_store_it_cannot_read_and_changes_nothing(v1: Path,
                                                                     version: str) -> None:
    with sqlite3.connect(v1 / "labfy.sqlite") as db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
    before = dump(v1 / "labfy.sqlite")
    with pytest.raises(WorkspaceError) as caught:
        upgrade_workspace(v1)
    assert caught.value.code is ErrorCode.WORKSPACE_INVALID
    reason = (f"newer than this build's {SCHEMA_VERSION}" if version.isdigit() and version != "0"
              else "is not a version")
    assert reason in caught.value.message
    assert dump(v1 / "labfy.sqlite") == before and _backups(v1) == []


@pytest.mark.req("WS-03", "SV-01", "WS-05")
def test_serve_upgrades_the_per_user_specimen_copy_of_an_older_release(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "labfy-ref").mkdir(parents=True)
    copy = restore_v1_workspace(data / "labfy-ref" / "specimen")
    workspace_id = _read_layout(copy).workspace_id
    before = rows(copy / "labfy.sqlite")
    server = ServeProcess(ready_file=tmp_path / "ready.json", env={"XDG_DATA_HOME": str(data)})
    try:
        server.wait_ready()
    finally:
        code, _, err = server.stop()
    assert code == 0, err
    assert "workspace upgraded" in err and f"from=1 to={SCHEMA_VERSION}" in err
    upgraded = open_workspace(copy)
    assert upgraded.workspace_id == workspace_id, "the same copy, not a new one"
    assert rows(copy / "labfy.sqlite")["grants"] == before["grants"]
    [backup] = _backups(copy)
    assert rows(backup) == before


@pytest.mark.req("WS-06", "WS-05")
def test_an_upgrade_backup_is_owner_only_even_of_a_world_readable_store(v1: Path) -> None:
    (v1 / "labfy.sqlite").chmod(0o644)  # as an older release left it
    old = os.umask(0o022)
    try:
        done = upgrade_workspace(v1)
    finally:
        os.umask(old)
    assert done.backup is not None
    assert done.backup.stat().st_mode & 0o777 == 0o600
    open_workspace(v1)
    assert (v1 / "labfy.sqlite").stat().st_mode & 0o777 == 0o600
