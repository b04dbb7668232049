"""A workspace exactly as the previous release (store schema version 1) left it on disk.

The store comes from ``fixtures/workspaces/v1/labfy.sql``, dumped from a store
that labfy-ref ``cf0bdbe`` wrote; it is restored as that release left it (WAL
journal). Helpers read a store back without changing it, to compare before and after.
"""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from qualification.conftest import REPO

V1 = REPO / "fixtures" / "workspaces" / "v1"
TABLES = ("meta", "objects", "campaigns", "grants", "specimen_evidence")


def restore_v1_workspace(path: Path) -> Path:
    """Make ``path`` (absent) the previous release's workspace; return it."""
    path.mkdir()
    (path / "files").mkdir()
    (path / "sessions").mkdir()
    shutil.copyfile(V1 / "labfy-workspace.toml", path / "labfy-workspace.toml")
    db = sqlite3.connect(path / "labfy.sqlite")
    try:
        db.executescript((V1 / "labfy.sql").read_text("utf-8"))
        db.execute("PRAGMA journal_mode = WAL")  # as every labfy-ref store is kept
    finally:
        db.close()
    return path


def _read_only(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)


def dump(path: Path) -> list[str]:
    """The whole store as SQL text (schema and rows), read without writing."""
    db = _read_only(path)
    try:
        return list(db.iterdump())
    finally:
        db.close()


def rows(path: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every row of every table of the version 1 schema, in primary-key order."""
    db = _read_only(path)
    try:
        return {table: db.execute(f"SELECT * FROM {table} ORDER BY 1").fetchall()
                for table in TABLES}
    finally:
        db.close()


def schema(path: Path) -> set[tuple[str, str, str | None]]:
    """The store's schema objects: (type, name, SQL), SQLite's own indexes included."""
    db = _read_only(path)
    try:
        return set(db.execute("SELECT type, name, sql FROM sqlite_master").fetchall())
    finally:
        db.close()


def indexes(path: Path, table: str) -> dict[str, list[str]]:
    """The named indexes of ``table`` and their columns, as ``PRAGMA index_list`` says."""
    db = _read_only(path)
    try:
        listed = db.execute(f"PRAGMA index_list({table})").fetchall()
        return {row[1]: [info[2] for info in db.execute(f"PRAGMA index_info({row[1]})")]
                for row in listed if not row[1].startswith("sqlite_autoindex")}
    finally:
        db.close()
