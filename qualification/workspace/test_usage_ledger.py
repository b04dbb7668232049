"""BR-14, WS-05: the usage ledger's retention bound, and the migration that brings it.

The ledger keeps the newest ``USAGE_RETENTION`` records, pruned on every write;
a store of the previous schema version (2) is refused ``WORKSPACE_OUTDATED``
until upgraded, and the upgrade keeps every row and adds an empty ledger.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from labfy_ref.errors import ErrorCode, RuntimeRefused, WorkspaceError
from labfy_ref.gateway import AgentGateway
from labfy_ref.gateway.usage import UsageService
from labfy_ref.protocol import Usage
from labfy_ref.workspace import (
    SCHEMA_VERSION,
    init_workspace,
    open_workspace,
    upgrade_workspace,
)
from labfy_ref.workspace.migrations import MIGRATIONS, upgrade_store
from labfy_ref.workspace.usage import USAGE_RETENTION
from qualification.workspace.previous_release import restore_v1_workspace, rows, schema


def _callers(service: UsageService) -> list[str]:
    """Every record's caller, newest first, read through the API's pages."""
    callers: list[str] = []
    cursor = None
    for _ in range(service.keep // 500 + 2):  # bounded: at most keep records
        page = service.report(limit=500, cursor=cursor)
        callers += [record["caller"] for record in page["usage"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return callers
    raise AssertionError("more pages than records")


@pytest.mark.req("BR-14")
def test_the_ledger_keeps_exactly_the_newest_records_of_its_bound(tmp_path: Path) -> None:
    workspace = init_workspace(tmp_path / "ws", specimen=False)
    store = workspace.open_store()
    try:
        ledger = AgentGateway(workspace, store).usage
        assert ledger.keep == USAGE_RETENTION == 10_000, "the documented bound is the one used"
        for number in range(USAGE_RETENTION + 3):
            ledger.record("engine:local:m", Usage(number, 1, 0), 1.5, "ok", f"turn_{number}")
        callers = _callers(ledger)
        assert callers == [f"turn_{n}" for n in range(USAGE_RETENTION + 2, 2, -1)], \
            "the three oldest went, the newest stayed, in order"
        [totals] = ledger.report()["totals"]["by_model"]
        assert (totals["calls"], totals["prompt_tokens"]) == (
            USAGE_RETENTION, sum(range(3, USAGE_RETENTION + 3)))
    finally:
        store.close()
    with sqlite3.connect(workspace.store_path) as db:
        assert db.execute("SELECT COUNT(*) FROM usage").fetchone() == (USAGE_RETENTION,)


@pytest.mark.req("BR-14")
def test_a_smaller_bound_prunes_on_the_write_that_passes_it(tmp_path: Path) -> None:
    workspace = init_workspace(tmp_path / "ws", specimen=False)
    store = workspace.open_store()
    try:
        ledger = UsageService(store, keep=3)
        seen = []
        for number in range(5):
            ledger.record("engine:demo:d", Usage(), 0.0, "MODEL_UNAVAILABLE", f"ses_{number}")
            seen.append(_callers(ledger))
        assert seen == [["ses_0"], ["ses_1", "ses_0"], ["ses_2", "ses_1", "ses_0"],
                        ["ses_3", "ses_2", "ses_1"], ["ses_4", "ses_3", "ses_2"]]
        [totals] = ledger.report()["totals"]["by_model"]
        assert totals == {"model": "engine:demo:d", "calls": 3, "prompt_tokens": None,
                          "completion_tokens": None, "cached_tokens": None, "errors": 3,
                          "cancelled": 0}
    finally:
        store.close()


def _previous_version_workspace(path: Path) -> Path:
    """A workspace as the previous release (schema version 2) left it, with its data."""
    restore_v1_workspace(path)
    assert upgrade_store(path / "labfy.sqlite", MIGRATIONS[:1]).to_version == 2
    for backup in path.glob("*.bak"):
        backup.unlink()  # that release's own upgrade, not the one under test
    return path


@pytest.mark.req("BR-14", "WS-05", "WS-01")
def test_the_previous_version_is_refused_then_upgraded_with_its_data_and_an_empty_ledger(
        tmp_path: Path) -> None:
    old = _previous_version_workspace(tmp_path / "v2")
    before = rows(old / "labfy.sqlite")
    assert before["meta"] == [("schema_version", "2")] and len(before["objects"]) == 12
    with pytest.raises(WorkspaceError) as caught:
        open_workspace(old)
    assert caught.value.code is ErrorCode.WORKSPACE_OUTDATED
    assert f"version 2 is older than this build's {SCHEMA_VERSION}" in caught.value.message

    done = upgrade_workspace(old)
    assert (done.from_version, done.to_version) == (2, SCHEMA_VERSION) == (2, 3)
    assert done.backup is not None and rows(done.backup) == before
    after = rows(old / "labfy.sqlite")
    assert after["meta"] == [("schema_version", "3")]
    assert {t: r for t, r in after.items() if t != "meta"} == \
        {t: r for t, r in before.items() if t != "meta"}, "every row intact"
    assert schema(old / "labfy.sqlite") == schema(
        init_workspace(tmp_path / "fresh", specimen=False).store_path)
    with sqlite3.connect(old / "labfy.sqlite") as db:
        assert db.execute("SELECT COUNT(*) FROM usage").fetchone() == (0,), "starts empty"

    workspace = open_workspace(old)
    store = workspace.open_store()
    try:
        ledger = AgentGateway(workspace, store).usage
        assert ledger.report()["usage"] == []
        ledger.record("engine:local:m", Usage(7, 2, None), 12.25, "ok", "turn_a")
        [record] = ledger.report()["usage"]
        assert {k: v for k, v in record.items() if k != "at"} == {
            "model": "engine:local:m", "prompt_tokens": 7, "completion_tokens": 2,
            "cached_tokens": None, "latency_ms": 12.2, "outcome": "ok", "caller": "turn_a"}
    finally:
        store.close()


@pytest.mark.req("BR-14")
def test_a_call_recorded_in_a_running_loop_is_read_back_and_survives_close(
        tmp_path: Path) -> None:
    """In an event loop the ledger's write waits for the loop's next pass (the turn is then
    waiting for its model), and calls recorded meanwhile share one commit; but a read right
    after a record sees it, and closing the store writes what is still pending."""
    workspace = init_workspace(tmp_path / "ws", specimen=False)
    store = workspace.open_store()
    ledger = UsageService(store)

    async def turn() -> tuple[list[str], list[str], int]:
        for number in range(3):
            ledger.record("engine:local:m", Usage(number, 1, None), 2.0, "ok", f"turn_{number}")
        on_disk = _rows(workspace.store_path)  # nothing written yet: the loop has not turned
        read = _callers(ledger)  # a read writes what is pending first
        ledger.record("engine:local:m", Usage(), 1.0, "ok", "turn_late")
        await asyncio.sleep(0)  # one pass of the loop: the pending record is written
        await asyncio.sleep(0)
        return on_disk, read, len(_rows(workspace.store_path))

    try:
        on_disk, read, written = asyncio.run(turn())
        assert on_disk == []
        assert read == ["turn_2", "turn_1", "turn_0"]
        assert written == 4
        ledger.record("engine:local:m", Usage(), 1.0, "ok", "outside_a_loop")
        assert _rows(workspace.store_path)[-1] == "outside_a_loop", "written at once"

        async def pending_at_close() -> None:
            ledger.record("engine:local:m", Usage(), 1.0, "ok", "last_before_close")
            store.close()  # before the loop turns

        asyncio.run(pending_at_close())
    finally:
        store.close()
    assert _rows(workspace.store_path)[-1] == "last_before_close"


@pytest.mark.req("BR-14")
def test_a_deferred_write_that_fails_is_logged_with_its_count(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    workspace = init_workspace(tmp_path / "ws", specimen=False)
    store = workspace.open_store()
    ledger = UsageService(store)
    with sqlite3.connect(workspace.store_path) as db:
        db.execute("CREATE TRIGGER no_usage BEFORE INSERT ON usage "
                   "BEGIN SELECT RAISE(ABORT, 'disk says no'); END")

    async def turn() -> None:
        ledger.record("engine:local:m", Usage(), 1.0, "ok", "a")
        ledger.record("engine:local:m", Usage(), 1.0, "ok", "b")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    try:
        with caplog.at_level("ERROR", logger="labfy_ref.workspace"):
            asyncio.run(turn())
        assert [r.getMessage() for r in caplog.records] == [
            "usage ledger: 2 record(s) not written: IntegrityError"]
    finally:
        store.close()


def _rows(path: Path) -> list[str]:
    """The ledger's callers as the file holds them (another connection), oldest first."""
    with sqlite3.connect(path) as db:
        return [caller for (caller,) in db.execute("SELECT caller FROM usage ORDER BY usage_id")]


@pytest.mark.req("BR-14")
def test_a_page_without_a_limit_holds_fifty_and_a_cursor_to_the_rest(tmp_path: Path) -> None:
    """The usage answer's default page is 50 records (the documented default), newest first;
    its cursor leads to the rest."""
    workspace = init_workspace(tmp_path / "ws", specimen=False)
    store = workspace.open_store()
    try:
        ledger = UsageService(store)
        for number in range(51):
            ledger.record("engine:local:m", Usage(1, 1, None), 1.0, "ok", f"turn_{number}")
        first = ledger.report()
        assert [r["caller"] for r in first["usage"]] == [f"turn_{n}" for n in range(50, 0, -1)]
        rest = ledger.report(cursor=first["next_cursor"])
        assert ([r["caller"] for r in rest["usage"]], rest["next_cursor"]) == (["turn_0"], None)
    finally:
        store.close()


@pytest.mark.req("BR-14")
@pytest.mark.parametrize(("cursor", "taken"), [
    ("9223372036854775807", True),  # the largest rowid SQLite gives: 19 digits
    ("0999999999999999999", True),  # 19 digits, well within a rowid
    ("9223372036854775808", False),  # one past it
    ("09223372036854775807", False),  # 20 digits
    ("1e3", False), ("-1", False), ("١٢", False)])
def test_a_cursor_is_any_rowid_sqlite_can_give_and_nothing_else(
        tmp_path: Path, cursor: str, taken: bool) -> None:
    workspace = init_workspace(tmp_path / "ws", specimen=False)
    store = workspace.open_store()
    try:
        ledger = UsageService(store)
        ledger.record("engine:local:m", Usage(1, 1, None), 1.0, "ok", "turn_0")
        if taken:
            assert [r["caller"] for r in ledger.report(cursor=cursor)["usage"]] == ["turn_0"]
        else:
            with pytest.raises(RuntimeRefused) as caught:
                ledger.report(cursor=cursor)
            assert caught.value.code is ErrorCode.VALIDATION_FAILED
    finally:
        store.close()
