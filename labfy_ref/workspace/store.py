"""The workspace's SQLite store: objects, campaigns, grants, usage (WS-01, WS-02, RT-08, BR-14).

Only the gateway's services and the workspace tooling use this module; the
runtime never does. The schema is versioned in ``meta.schema_version`` and
lives in :mod:`labfy_ref.workspace.migrations`: a store written by a newer
labfy-ref is refused rather than guessed at, and an older one is refused with
``WORKSPACE_OUTDATED`` naming ``labfy-ref workspace upgrade``; it is never
migrated behind the user's back.
Grants are never deleted: revocation stamps ``revoked_at`` and keeps history.

Text is valid at every edge (AV-02): a write holding a lone surrogate is refused
(VALIDATION_FAILED) before it reaches SQLite; text stored earlier that is not
UTF-8 reads back with U+FFFD, and JSON columns are scrubbed of lone surrogate
escapes on read.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from labfy_ref.clock import iso, parse_iso, utcnow
from labfy_ref.errors import ErrorCode, RuntimeRefused, WorkspaceError
from labfy_ref.ids import new_id
from labfy_ref.text import find_surrogate, has_surrogate, scrub
from labfy_ref.workspace import usage
from labfy_ref.workspace.migrations import check_version, create_schema
from labfy_ref.workspace.usage import USAGE_RETENTION, UsageRecord

OBJECT_KINDS = ("fact", "observation", "source", "note")


def _decode(raw: bytes) -> str:
    """SQLite TEXT as str; bytes that are not UTF-8 read as U+FFFD instead of failing."""
    return raw.decode("utf-8", errors="replace")


def _valid(**fields: Any) -> None:
    """Refuse text holding a lone surrogate before it is bound: SQLite stores UTF-8 only.

    Without this a write (or a lookup) would fail inside sqlite3 with a raw
    ``UnicodeEncodeError``, or a JSON column would store an escape that reads back
    as text that is not Unicode.
    """
    for name, value in fields.items():
        if isinstance(value, str) and (index := find_surrogate(value)) is not None:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"{name} holds a lone surrogate U+{ord(value[index]):04X} "
                                 f"at index {index}; nothing was stored")
        if not isinstance(value, str) and has_surrogate(value):
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"{name} holds a lone surrogate; nothing was stored")


def _dumps(value: Any) -> str:
    """A JSON column (the value was checked by :func:`_valid`, so it is plain UTF-8)."""
    return json.dumps(value, ensure_ascii=False)


def _loads(text: str) -> Any:
    """A JSON column as stored; a lone surrogate escape from an older write reads as U+FFFD."""
    return scrub(json.loads(text))


@dataclasses.dataclass(frozen=True, slots=True)
class StoredObject:
    """One workspace object."""

    object_id: str
    kind: str
    title: str
    body: str


@dataclasses.dataclass(frozen=True, slots=True)
class Campaign:
    """One research campaign."""

    campaign_id: str
    workspace_id: str
    topic: str
    questions: tuple[str, ...]
    object_refs: tuple[str, ...]
    status: str
    evidence: tuple[dict[str, str], ...]
    created_at: str


@dataclasses.dataclass(frozen=True, slots=True)
class Grant:
    """A human's persistent authorization of one campaign in one workspace."""

    grant_id: str
    campaign_id: str
    workspace_id: str
    created_at: str
    expires_at: str | None
    revoked_at: str | None

    def active_for(self, workspace_id: str, now: datetime.datetime) -> bool:
        """Counts only in its own workspace, unrevoked and unexpired."""
        if self.workspace_id != workspace_id or self.revoked_at is not None:
            return False
        return self.expires_at is None or parse_iso(self.expires_at) > now

    def as_json(self, workspace_id: str, now: datetime.datetime) -> dict[str, Any]:
        """The wire shape of SPEC §15."""
        return {"id": self.grant_id, "campaign_id": self.campaign_id,
                "workspace": self.workspace_id, "active": self.active_for(workspace_id, now),
                "created_at": self.created_at, "expires_at": self.expires_at,
                "revoked_at": self.revoked_at}


class WorkspaceStore:
    """A thread-safe handle on ``labfy.sqlite``."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        if not create and not path.is_file():
            raise WorkspaceError(f"store {path.name} is missing", code=ErrorCode.WORKSPACE_INVALID)
        self._lock = threading.RLock()
        try:
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        except sqlite3.Error as exc:
            raise WorkspaceError(f"store {path.name} is unreadable: {exc}") from exc
        try:
            self._db.text_factory = _decode
            self._db.execute("PRAGMA foreign_keys = ON")
            self._db.execute("PRAGMA journal_mode = WAL")
            if create:
                create_schema(self._db)
            check_version(self._db, path)
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise WorkspaceError(f"store {path.name} is unreadable: {exc}") from exc
        except BaseException:
            self._db.close()
            raise

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic transaction (serialised across threads)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            self._db.close()

    # -- objects ----------------------------------------------------------------

    def add_object(self, kind: str, title: str, body: str) -> StoredObject:
        """Insert an object with a fresh opaque id."""
        _valid(kind=kind, title=title, body=body)
        obj = StoredObject(new_id("obj"), kind, title, body)
        with self.transaction() as db:
            db.execute("INSERT INTO objects VALUES (?, ?, ?, ?, ?)",
                       (obj.object_id, kind, title, body, iso(utcnow())))
        return obj

    def list_objects(self, kind: str | None = None, limit: int = 100) -> list[StoredObject]:
        """Objects in creation order, optionally of one kind."""
        _valid(kind=kind)
        query = "SELECT object_id, kind, title, body FROM objects"
        params: tuple[Any, ...] = ()
        if kind is not None:
            query, params = query + " WHERE kind = ?", (kind,)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY created_at, object_id LIMIT ?",
                                    (*params, limit)).fetchall()
        return [StoredObject(*row) for row in rows]

    def get_object(self, object_id: str) -> StoredObject | None:
        """One object, or None."""
        _valid(object_id=object_id)
        with self._lock:
            row = self._db.execute("SELECT object_id, kind, title, body FROM objects "
                                   "WHERE object_id = ?", (object_id,)).fetchone()
        return StoredObject(*row) if row else None

    def existing_objects(self, object_ids: Sequence[str]) -> set[str]:
        """The subset of ``object_ids`` that exist."""
        _valid(object_ids=list(object_ids))
        if not object_ids:
            return set()
        marks = ",".join("?" * len(object_ids))
        with self._lock:
            rows = self._db.execute(f"SELECT object_id FROM objects WHERE object_id IN ({marks})",  # noqa: S608
                                    tuple(object_ids)).fetchall()
        return {row[0] for row in rows}

    # -- campaigns ----------------------------------------------------------------

    def add_campaign(self, workspace_id: str, topic: str, questions: Sequence[str],
                     object_refs: Sequence[str]) -> Campaign:
        """Create a PREPARED campaign."""
        _valid(workspace_id=workspace_id, topic=topic, questions=list(questions),
               object_refs=list(object_refs))
        now = iso(utcnow())
        campaign = Campaign(new_id("camp"), workspace_id, topic, tuple(questions),
                            tuple(object_refs), "PREPARED", (), now)
        with self.transaction() as db:
            db.execute("INSERT INTO campaigns VALUES (?, ?, ?, ?, ?, 'PREPARED', '[]', ?, ?)",
                       (campaign.campaign_id, workspace_id, topic, _dumps(list(questions)),
                        _dumps(list(object_refs)), now, now))
        return campaign

    def get_campaign(self, campaign_id: str, workspace_id: str) -> Campaign | None:
        """A campaign of this workspace, or None (other workspaces' are invisible)."""
        _valid(campaign_id=campaign_id, workspace_id=workspace_id)
        with self._lock:
            row = self._db.execute(
                "SELECT campaign_id, workspace_id, topic, questions, object_refs, status, "
                "evidence, created_at FROM campaigns WHERE campaign_id = ? AND workspace_id = ?",
                (campaign_id, workspace_id)).fetchone()
        if row is None:
            return None
        return Campaign(row[0], row[1], row[2], tuple(_loads(row[3])),
                        tuple(_loads(row[4])), row[5], tuple(_loads(row[6])), row[7])

    def campaigns_like(self, workspace_id: str, topic: str, questions: Sequence[str],
                       object_refs: Sequence[str], since: str) -> list[str]:
        """Ids of this workspace's campaigns with exactly these fields, created at or after
        ``since`` (an ISO time): how a resumed Work run finds whether its crashed
        ``research.prepare`` already made its campaign (WK-03)."""
        _valid(workspace_id=workspace_id, topic=topic, questions=list(questions),
               object_refs=list(object_refs))
        with self._lock:
            rows = self._db.execute(
                "SELECT campaign_id FROM campaigns WHERE workspace_id = ? AND topic = ? AND "
                "questions = ? AND object_refs = ? AND created_at >= ? ORDER BY campaign_id",
                (workspace_id, topic, _dumps(list(questions)), _dumps(list(object_refs)),
                 since)).fetchall()
        return [row[0] for row in rows]

    def complete_campaign(self, campaign_id: str, evidence: Sequence[dict[str, str]]) -> None:
        """Store the evidence and mark the campaign COMPLETED."""
        _valid(campaign_id=campaign_id, evidence=list(evidence))
        with self.transaction() as db:
            db.execute("UPDATE campaigns SET status = 'COMPLETED', evidence = ?, updated_at = ? "
                       "WHERE campaign_id = ?", (_dumps(list(evidence)), iso(utcnow()),
                                                 campaign_id))

    # -- grants -------------------------------------------------------------------

    def add_grant(self, campaign_id: str, workspace_id: str,
                  expires_at: datetime.datetime | None) -> Grant:
        """Record a human grant."""
        _valid(campaign_id=campaign_id, workspace_id=workspace_id)
        grant = Grant(new_id("grant"), campaign_id, workspace_id, iso(utcnow()),
                      iso(expires_at) if expires_at else None, None)
        with self.transaction() as db:
            db.execute("INSERT INTO grants VALUES (?, ?, ?, ?, ?, NULL)",
                       (grant.grant_id, campaign_id, workspace_id, grant.created_at,
                        grant.expires_at))
        return grant

    def grants_for(self, campaign_id: str) -> list[Grant]:
        """Every grant ever made for ``campaign_id`` (history included)."""
        _valid(campaign_id=campaign_id)
        with self._lock:
            rows = self._db.execute("SELECT * FROM grants WHERE campaign_id = ? "
                                    "ORDER BY created_at, grant_id", (campaign_id,)).fetchall()
        return [Grant(*row) for row in rows]

    def get_grant(self, grant_id: str) -> Grant | None:
        """One grant, or None."""
        _valid(grant_id=grant_id)
        with self._lock:
            row = self._db.execute("SELECT * FROM grants WHERE grant_id = ?",
                                   (grant_id,)).fetchone()
        return Grant(*row) if row else None

    def revoke_grant(self, grant_id: str) -> None:
        """Stamp ``revoked_at`` (the row stays, as history)."""
        _valid(grant_id=grant_id)
        with self.transaction() as db:
            db.execute("UPDATE grants SET revoked_at = ? WHERE grant_id = ? AND revoked_at IS NULL",
                       (iso(utcnow()), grant_id))

    # -- specimen evidence ------------------------------------------------------

    def add_evidence(self, keywords: Sequence[str], source: str, excerpt: str) -> None:
        """Add one canned evidence entry (SPECIMEN workspaces)."""
        _valid(keywords=list(keywords), source=source, excerpt=excerpt)
        with self.transaction() as db:
            db.execute("INSERT INTO specimen_evidence (keywords, source, excerpt) "
                       "VALUES (?, ?, ?)", (_dumps(list(keywords)), source, excerpt))

    def all_evidence(self) -> list[tuple[tuple[str, ...], str, str]]:
        """Every canned evidence entry: (keywords, source, excerpt)."""
        with self._lock:
            rows = self._db.execute("SELECT keywords, source, excerpt FROM specimen_evidence "
                                    "ORDER BY evidence_id").fetchall()
        return [(tuple(_loads(k)), s, e) for k, s, e in rows]

    # -- provider usage (BR-14) ---------------------------------------------------

    def add_usage(self, record: UsageRecord, *, keep: int = USAGE_RETENTION) -> int:
        """Record one model call and prune to the newest ``keep`` records; the call's id."""
        _valid(at=record.at, model=record.model, outcome=record.outcome, caller=record.caller)
        with self.transaction() as db:
            return usage.insert(db, record, keep)

    def usage_report(self, since: str, limit: int, before: int | None = None
                     ) -> tuple[list[UsageRecord], int | None, dict[str, list[dict[str, Any]]]]:
        """One consistent read: records at or after ``since`` (ISO text), newest first and
        below id ``before``; the id to go on from (None: no more); the totals since then."""
        with self._lock:
            records, next_before = usage.page(self._db, since, limit, before)
            return records, next_before, usage.totals(self._db, since)
