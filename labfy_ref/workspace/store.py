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

import asyncio
import dataclasses
import datetime
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Integer, bindparam, insert, select, update
from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from labfy_ref.clock import iso, parse_iso, utcnow
from labfy_ref.errors import ErrorCode, RuntimeRefused, WorkspaceError
from labfy_ref.ids import new_id
from labfy_ref.sqlcore import transaction
from labfy_ref.text import find_surrogate, has_surrogate, scrub
from labfy_ref.workspace import usage
from labfy_ref.workspace.engine import store_engine
from labfy_ref.workspace.migrations import check_version, create_schema
from labfy_ref.workspace.schema import campaigns, grants, objects, specimen_evidence
from labfy_ref.workspace.usage import USAGE_RETENTION, UsageRecord

_LOG = logging.getLogger("labfy_ref.workspace")

OBJECT_KINDS = ("fact", "observation", "source", "note")
_OBJECT = (objects.c.object_id, objects.c.kind, objects.c.title, objects.c.body)
_CAMPAIGN = (campaigns.c.campaign_id, campaigns.c.workspace_id, campaigns.c.topic,
             campaigns.c.questions, campaigns.c.object_refs, campaigns.c.status,
             campaigns.c.evidence, campaigns.c.created_at)
# The statements, built once with their parameters named: the agent's reads run on every
# round, and building a statement costs more than SQLite takes to answer it.
_OBJECTS_IN_ORDER = (objects.c.created_at, objects.c.object_id)
_LIMIT = bindparam("limit", type_=Integer)
_LIST_OBJECTS = select(*_OBJECT).order_by(*_OBJECTS_IN_ORDER).limit(_LIMIT)
_LIST_OBJECTS_OF_KIND = (select(*_OBJECT).where(objects.c.kind == bindparam("kind"))
                         .order_by(*_OBJECTS_IN_ORDER).limit(_LIMIT))
_GET_OBJECT = select(*_OBJECT).where(objects.c.object_id == bindparam("object_id"))
_EXISTING_OBJECTS = select(objects.c.object_id).where(
    objects.c.object_id.in_(bindparam("object_ids", expanding=True)))
_GET_CAMPAIGN = select(*_CAMPAIGN).where(campaigns.c.campaign_id == bindparam("campaign_id"),
                                         campaigns.c.workspace_id == bindparam("workspace_id"))
_GRANTS_FOR = (select(grants).where(grants.c.campaign_id == bindparam("campaign_id"))
               .order_by(grants.c.created_at, grants.c.grant_id))
_GET_GRANT = select(grants).where(grants.c.grant_id == bindparam("grant_id"))


def _valid(**fields: Any) -> None:
    """Refuse text holding a lone surrogate before it is bound: SQLite stores UTF-8 only.

    Without this a write (or a lookup) would fail inside the driver with a raw
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
    """A thread-safe handle on ``labfy.sqlite`` (one connection, one lock around it)."""

    def __init__(self, path: Path, *, create: bool = False) -> None:
        if not create and not path.is_file():
            raise WorkspaceError(f"store {path.name} is missing", code=ErrorCode.WORKSPACE_INVALID)
        self._lock = threading.RLock()
        #: usage records not written yet (each with its bound), and whether a write is due
        self._usage_pending: list[tuple[UsageRecord, int]] = []
        self._usage_due = False
        self._engine = store_engine(path)
        try:
            self._conn = self._engine.connect()
            if create:
                create_schema(self._conn)
            with transaction(self._conn, write=False):
                check_version(self._conn, path)
            driver = self._conn.connection.driver_connection
            assert driver is not None
            #: the connection's own setting, restored after an unsynced commit
            self._synchronous = int(driver.execute("PRAGMA synchronous").fetchone()[0])
        except DBAPIError as exc:
            self._engine.dispose()
            raise WorkspaceError(f"store {path.name} is unreadable: {exc.orig}") from None
        except BaseException:
            self._engine.dispose()
            raise

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """One atomic write transaction (serialised across threads)."""
        with self._lock, transaction(self._conn, write=True):
            yield self._conn

    @contextmanager
    def _unsynced(self) -> Iterator[Connection]:
        """A write transaction committed without waiting for the disk (``synchronous=NORMAL``
        for this commit only).

        In WAL mode it is as atomic as any other, and durable against a crash of the
        process (the frames are in the WAL); the next synced commit or checkpoint syncs
        it to the disk too, so only a power loss before then can undo it. For records
        written on every model call (the usage ledger), where a sync per call would be
        most of a tool round's own time.
        """
        with self._lock:
            driver = self._conn.connection.driver_connection
            assert driver is not None
            driver.execute("PRAGMA synchronous = NORMAL")
            try:
                with transaction(self._conn, write=True):
                    yield self._conn
            finally:
                driver.execute(f"PRAGMA synchronous = {self._synchronous}")

    @contextmanager
    def _read(self, *, snapshot: bool = False) -> Iterator[Connection]:
        """One read (serialised across threads): one statement, or several on one snapshot."""
        with self._lock, transaction(self._conn, write=False, snapshot=snapshot):
            yield self._conn

    def close(self) -> None:
        """Write the pending usage records, close the connection; idempotent."""
        with self._lock:
            if not self._conn.closed:
                self.flush_usage()
            self._conn.close()
            self._engine.dispose()

    # -- objects ----------------------------------------------------------------

    def add_object(self, kind: str, title: str, body: str) -> StoredObject:
        """Insert an object with a fresh opaque id."""
        _valid(kind=kind, title=title, body=body)
        obj = StoredObject(new_id("obj"), kind, title, body)
        with self.transaction() as db:
            db.execute(insert(objects), {"object_id": obj.object_id, "kind": kind,
                                         "title": title, "body": body,
                                         "created_at": iso(utcnow())})
        return obj

    def list_objects(self, kind: str | None = None, limit: int = 100) -> list[StoredObject]:
        """Objects in creation order, optionally of one kind."""
        _valid(kind=kind)
        with self._read() as db:
            rows = (db.execute(_LIST_OBJECTS, {"limit": limit}) if kind is None else
                    db.execute(_LIST_OBJECTS_OF_KIND, {"kind": kind, "limit": limit})).all()
        return [StoredObject(*row) for row in rows]

    def get_object(self, object_id: str) -> StoredObject | None:
        """One object, or None."""
        _valid(object_id=object_id)
        with self._read() as db:
            row = db.execute(_GET_OBJECT, {"object_id": object_id}).first()
        return StoredObject(*row) if row else None

    def existing_objects(self, object_ids: Sequence[str]) -> set[str]:
        """The subset of ``object_ids`` that exist."""
        _valid(object_ids=list(object_ids))
        if not object_ids:
            return set()
        with self._read() as db:
            rows = db.execute(_EXISTING_OBJECTS, {"object_ids": list(object_ids)}).all()
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
            db.execute(insert(campaigns), {
                "campaign_id": campaign.campaign_id, "workspace_id": workspace_id,
                "topic": topic, "questions": _dumps(list(questions)),
                "object_refs": _dumps(list(object_refs)), "status": "PREPARED",
                "evidence": "[]", "created_at": now, "updated_at": now})
        return campaign

    def get_campaign(self, campaign_id: str, workspace_id: str) -> Campaign | None:
        """A campaign of this workspace, or None (other workspaces' are invisible)."""
        _valid(campaign_id=campaign_id, workspace_id=workspace_id)
        with self._read() as db:
            row = db.execute(_GET_CAMPAIGN, {"campaign_id": campaign_id,
                                             "workspace_id": workspace_id}).first()
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
        with self._read() as db:
            rows = db.execute(select(campaigns.c.campaign_id).where(
                campaigns.c.workspace_id == workspace_id, campaigns.c.topic == topic,
                campaigns.c.questions == _dumps(list(questions)),
                campaigns.c.object_refs == _dumps(list(object_refs)),
                campaigns.c.created_at >= since).order_by(campaigns.c.campaign_id)).all()
        return [row[0] for row in rows]

    def complete_campaign(self, campaign_id: str, evidence: Sequence[dict[str, str]]) -> None:
        """Store the evidence and mark the campaign COMPLETED."""
        _valid(campaign_id=campaign_id, evidence=list(evidence))
        with self.transaction() as db:
            db.execute(update(campaigns).where(campaigns.c.campaign_id == campaign_id).values(
                status="COMPLETED", evidence=_dumps(list(evidence)), updated_at=iso(utcnow())))

    # -- grants -------------------------------------------------------------------

    def add_grant(self, campaign_id: str, workspace_id: str,
                  expires_at: datetime.datetime | None) -> Grant:
        """Record a human grant."""
        _valid(campaign_id=campaign_id, workspace_id=workspace_id)
        grant = Grant(new_id("grant"), campaign_id, workspace_id, iso(utcnow()),
                      iso(expires_at) if expires_at else None, None)
        with self.transaction() as db:
            db.execute(insert(grants), {
                "grant_id": grant.grant_id, "campaign_id": campaign_id,
                "workspace_id": workspace_id, "created_at": grant.created_at,
                "expires_at": grant.expires_at, "revoked_at": None})
        return grant

    def grants_for(self, campaign_id: str) -> list[Grant]:
        """Every grant ever made for ``campaign_id`` (history included)."""
        _valid(campaign_id=campaign_id)
        with self._read() as db:
            rows = db.execute(_GRANTS_FOR, {"campaign_id": campaign_id}).all()
        return [Grant(*row) for row in rows]

    def get_grant(self, grant_id: str) -> Grant | None:
        """One grant, or None."""
        _valid(grant_id=grant_id)
        with self._read() as db:
            row = db.execute(_GET_GRANT, {"grant_id": grant_id}).first()
        return Grant(*row) if row else None

    def revoke_grant(self, grant_id: str) -> None:
        """Stamp ``revoked_at`` (the row stays, as history)."""
        _valid(grant_id=grant_id)
        with self.transaction() as db:
            db.execute(update(grants).where(grants.c.grant_id == grant_id,
                                            grants.c.revoked_at.is_(None))
                       .values(revoked_at=iso(utcnow())))

    # -- specimen evidence ------------------------------------------------------

    def add_evidence(self, keywords: Sequence[str], source: str, excerpt: str) -> None:
        """Add one canned evidence entry (SPECIMEN workspaces)."""
        _valid(keywords=list(keywords), source=source, excerpt=excerpt)
        with self.transaction() as db:
            db.execute(insert(specimen_evidence).values(
                keywords=_dumps(list(keywords)), source=source, excerpt=excerpt))

    def all_evidence(self) -> list[tuple[tuple[str, ...], str, str]]:
        """Every canned evidence entry: (keywords, source, excerpt)."""
        with self._read() as db:
            rows = db.execute(select(specimen_evidence.c.keywords, specimen_evidence.c.source,
                                     specimen_evidence.c.excerpt)
                              .order_by(specimen_evidence.c.evidence_id)).all()
        return [(tuple(_loads(k)), s, e) for k, s, e in rows]

    # -- provider usage (BR-14) ---------------------------------------------------

    def add_usage(self, record: UsageRecord, *, keep: int = USAGE_RETENTION) -> None:
        """Record one model call and prune to the newest ``keep`` records.

        Called in a running event loop, the write waits for the loop's next pass:
        by then the turn that made the call is waiting for the model again, so
        the ledger costs a tool round nothing, and calls recorded meanwhile share
        one commit. Every read of the ledger and :meth:`close` write what is
        pending first, so nothing reads around it. Outside a loop (a worker
        thread, a script) it is written at once.
        """
        _valid(at=record.at, model=record.model, outcome=record.outcome, caller=record.caller)
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            self._usage_pending.append((record, keep))
            if loop is None:
                self.flush_usage()
                return
            if self._usage_due:
                return
            self._usage_due = True
        loop.call_soon(self._flush_usage_later)

    def flush_usage(self) -> None:
        """Write the pending usage records now, in one commit (unsynced: one per model call
        would be most of a tool round's own time)."""
        with self._lock:
            pending, self._usage_pending = self._usage_pending, []
            self._usage_due = False
            if pending:
                with self._unsynced() as db:
                    for record, keep in pending:
                        usage.add(db, record, keep)

    def _flush_usage_later(self) -> None:
        """:meth:`flush_usage` from the event loop: a failure is logged, never raised into
        the loop (the records it held are named by count)."""
        with self._lock:
            count = len(self._usage_pending)
            if self._conn.closed:
                return  # close() wrote them
            try:
                self.flush_usage()
            except (SQLAlchemyError, OSError) as exc:
                _LOG.error("usage ledger: %d record(s) not written: %s", count,
                           type(exc).__name__)

    def usage_report(self, since: str, limit: int, before: int | None = None
                     ) -> tuple[list[UsageRecord], int | None, dict[str, list[dict[str, Any]]]]:
        """One consistent read: records at or after ``since`` (ISO text), newest first and
        below id ``before``; the id to go on from (None: no more); the totals since then."""
        self.flush_usage()
        with self._read(snapshot=True) as db:
            records, next_before = usage.page(db, since, limit, before)
            return records, next_before, usage.totals(db, since)
