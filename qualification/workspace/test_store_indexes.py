"""WS-02, RT-08: the store's hot reads use an index, never a scan of the table or a sort.

``grants_for`` runs on every resume of a turn waiting for a grant and every
``GET …/grants``; ``list_objects`` is the agent's most frequent tool. Each
statement the store really runs is captured and its query plan read from SQLite.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from labfy_ref.workspace import WorkspaceStore, open_workspace

READS: dict[str, Callable[[WorkspaceStore], object]] = {
    "grants_for": lambda store: store.grants_for("camp_01M8P8GDJFJ7DTTYGAXEDXY12G"),
    "list_objects": lambda store: store.list_objects(),
    "list_objects of a kind": lambda store: store.list_objects(kind="note"),
}


def _plans(store: WorkspaceStore, read: Callable[[WorkspaceStore], object]) -> list[str]:
    """The query plan of every statement ``read`` runs, one line per step."""
    statements: list[str] = []
    db = store._conn.connection.driver_connection  # the store's own: its statements, verbatim
    assert isinstance(db, sqlite3.Connection)
    db.set_trace_callback(statements.append)
    try:
        read(store)
    finally:
        db.set_trace_callback(None)
    assert statements, "the read ran a statement"
    return [f"{statement} -> {row[3]}" for statement in statements
            if statement.lstrip().upper().startswith("SELECT")
            for row in db.execute(f"EXPLAIN QUERY PLAN {statement}")]


@pytest.mark.req("WS-02", "RT-08")
@pytest.mark.parametrize("read", sorted(READS))
def test_hot_reads_search_an_index_in_order(specimen: Path, read: str) -> None:
    store = open_workspace(specimen).open_store()
    try:
        plans = _plans(store, READS[read])
    finally:
        store.close()
    assert not [plan for plan in plans if "TEMP B-TREE" in plan], plans
    scans = [plan for plan in plans if "-> SCAN" in plan and "USING" not in plan]
    assert scans == [], plans
    if read == "grants_for":
        assert any("SEARCH grants USING INDEX" in plan for plan in plans), plans
