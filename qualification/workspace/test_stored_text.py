"""AV-02, WS-02: the workspace store holds valid Unicode and reads back whatever it holds.

A write of text holding a lone surrogate is a clear VALIDATION_FAILED, never a
raw ``UnicodeEncodeError`` from sqlite3 (and never an escape stored in a JSON
column). Rows written by other tools or older builds may hold bytes that are not
UTF-8, or ``\\ud800`` escapes in JSON columns: they read back with U+FFFD, through
the store and through the HTTP API, instead of failing every read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.errors import RuntimeRefused
from labfy_ref.ids import new_id
from labfy_ref.text import has_surrogate
from labfy_ref.workspace import init_workspace, open_workspace
from labfy_ref.workspace.store import WorkspaceStore
from qualification.conftest import ServerFactory

TEXT = st.text(st.one_of(st.characters(codec=None, categories=["Cs"]),
                         st.characters(codec=None, exclude_characters="\x00")), max_size=40)
RAW = st.binary(max_size=40)
PROPERTY = settings(deadline=None, max_examples=100,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
NOW = "2026-01-01T00:00:00Z"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[WorkspaceStore]:
    opened = WorkspaceStore(tmp_path / "labfy.sqlite", create=True)
    yield opened
    opened.close()


def _tables(store: WorkspaceStore) -> dict[str, list[tuple[Any, ...]]]:
    with store.transaction() as db:
        return {table: [tuple(row) for row in db.exec_driver_sql(f"SELECT * FROM {table}")]
                for table in ("objects", "campaigns", "grants", "specimen_evidence")}


def _plant_object(path: Path, title: bytes, body: bytes) -> str:
    """An object row whose text is stored byte for byte, as another tool could."""
    object_id = new_id("obj")
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO objects VALUES (?, 'note', CAST(? AS TEXT), CAST(? AS TEXT), ?)",
                   (object_id, title, body, NOW))
    return object_id


def _plant_campaign(path: Path, workspace_id: str, topic: bytes, questions: bytes,
                    evidence: bytes) -> str:
    campaign_id = new_id("camp")
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO campaigns VALUES (?, ?, CAST(? AS TEXT), CAST(? AS TEXT), '[]', "
                   "'COMPLETED', CAST(? AS TEXT), ?, ?)",
                   (campaign_id, workspace_id, topic, questions, evidence, NOW, NOW))
    return campaign_id


CALLS: dict[str, Callable[[WorkspaceStore, str], object]] = {
    "object title": lambda s, bad: s.add_object("note", bad, "body"),
    "object body": lambda s, bad: s.add_object("note", "title", bad),
    "campaign topic": lambda s, bad: s.add_campaign("ws", bad, ["q"], []),
    "campaign question": lambda s, bad: s.add_campaign("ws", "topic", ["q", bad], []),
    "evidence": lambda s, bad: s.complete_campaign(
        s.add_campaign("ws", "topic", ["q"], []).campaign_id, [{"excerpt": bad}]),
    "grant workspace": lambda s, bad: s.add_grant(
        s.add_campaign("ws", "topic", ["q"], []).campaign_id, bad, None),
    "specimen keywords": lambda s, bad: s.add_evidence([bad], "source", "excerpt"),
    "specimen excerpt": lambda s, bad: s.add_evidence(["k"], "source", bad),
    "object lookup": lambda s, bad: s.get_object(bad),
    "campaign lookup": lambda s, bad: s.get_campaign(bad, "ws"),
}


@pytest.mark.req("AV-02", "WS-02")
@pytest.mark.parametrize("call", list(CALLS))
def test_text_with_a_lone_surrogate_is_refused_clearly_and_nothing_is_stored(
        store: WorkspaceStore, call: str) -> None:
    before = _tables(store)
    with pytest.raises(RuntimeRefused) as caught:
        CALLS[call](store, "bad \ud800 text")
    assert (caught.value.code.value, caught.value.status) == ("VALIDATION_FAILED", 422)
    assert "lone surrogate" in caught.value.message
    after = _tables(store)
    # Helpers may have made a campaign to attach to; the refused value is stored nowhere.
    assert after["objects"] == before["objects"]
    assert after["specimen_evidence"] == before["specimen_evidence"]
    assert not any("\ufffd" in str(row) or "\\ud800" in str(row)
                   for rows in after.values() for row in rows)


@pytest.mark.req("AV-02", "WS-02")
@PROPERTY
@given(text=TEXT)
def test_any_text_is_stored_exactly_or_refused(store: WorkspaceStore, text: str) -> None:
    if has_surrogate(text):
        with pytest.raises(RuntimeRefused):
            store.add_object("note", text, text)
        with pytest.raises(RuntimeRefused):
            store.add_campaign("ws", "topic", [text], [])
        return
    stored = store.add_object("note", text, text)
    assert store.get_object(stored.object_id) == stored
    campaign = store.add_campaign("ws", text, [text], [])
    assert store.get_campaign(campaign.campaign_id, "ws") == campaign


@pytest.mark.req("AV-02", "WS-02")
def test_rows_that_are_not_utf8_and_surrogate_escapes_read_back_with_replacement(
        store: WorkspaceStore, tmp_path: Path) -> None:
    path = tmp_path / "labfy.sqlite"
    object_id = _plant_object(path, b"caf\xe9 \xed\xa0\x80", b"body \xff")
    campaign_id = _plant_campaign(path, "ws", b"topic \xc0\xaf",
                                  rb'["lone \ud800", "pair \ud83d\ude00", "' + b'\xfe"]',
                                  rb'[{"excerpt": "\udfff"}]')
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO specimen_evidence (keywords, source, excerpt) "
                   "VALUES (CAST(? AS TEXT), 'src', CAST(? AS TEXT))",
                   (rb'["k\udc00"]', b"excerpt \x80"))
    found = store.get_object(object_id)
    assert found is not None
    assert (found.title, found.body) == ("caf\ufffd \ufffd\ufffd\ufffd", "body \ufffd")
    assert [o.title for o in store.list_objects()] == ["caf\ufffd \ufffd\ufffd\ufffd"]
    campaign = store.get_campaign(campaign_id, "ws")
    assert campaign is not None
    assert campaign.topic == "topic \ufffd\ufffd"
    assert campaign.questions == ("lone \ufffd", "pair \U0001f600", "\ufffd")
    assert campaign.evidence == ({"excerpt": "\ufffd"},)
    assert store.all_evidence() == [(("k\ufffd",), "src", "excerpt \ufffd")]


@pytest.mark.req("AV-02", "WS-02")
@PROPERTY
@given(raw=RAW)
def test_any_stored_bytes_read_back_as_valid_text(store: WorkspaceStore, tmp_path: Path,
                                                  raw: bytes) -> None:
    object_id = _plant_object(tmp_path / "labfy.sqlite", raw, raw)
    found = store.get_object(object_id)
    assert found is not None
    assert found.title == found.body == raw.decode("utf-8", errors="replace")


@pytest.mark.req("AV-02", "WS-02", "SV-06")
def test_objects_and_campaigns_holding_invalid_text_are_served_over_http(
        tmp_path: Path, server_factory: ServerFactory) -> None:
    root = tmp_path / "ws"
    init_workspace(root, specimen=False)
    workspace = open_workspace(root)
    object_id = _plant_object(workspace.store_path, b"caf\xe9", b"body")
    campaign_id = _plant_campaign(workspace.store_path, workspace.workspace_id,
                                  b"topic \xff", rb'["lone \ud800"]', b"[]")
    client = server_factory(root).client()
    objects = client.get("/api/v1/objects")
    assert objects.status_code == 200, objects.text
    assert objects.json()["objects"] == [
        {"object_id": object_id, "kind": "note", "title": "caf\ufffd"}]
    campaign = client.get(f"/api/v1/research/campaigns/{campaign_id}")
    assert campaign.status_code == 200, campaign.text
    body = campaign.json()["campaign"]
    assert (body["topic"], body["questions"]) == ("topic \ufffd", ["lone \ufffd"])
