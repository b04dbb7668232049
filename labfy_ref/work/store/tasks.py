"""The Work store: tasks and their runs in SQL, claimed by any number of workers (WK-02, WK-04).

One class, one code path for SQLite and PostgreSQL (SQLAlchemy Core)::

    store = WorkStore.open(resolve_database_url(workspace))
    submitted = store.submit("summarise notes.md")         # task + run, QUEUED
    claim = store.claim("worker-1", lease_seconds=30)      # RUNNING under a lease
    store.heartbeat(claim, 30)                             # only the holder extends it
    store.finish(claim, State.COMPLETED, final_text="…")   # or release(claim) on SIGTERM

A run is claimable while ``QUEUED``, or ``RUNNING`` with its lease expired (its worker
died); claiming takes the oldest such run. On PostgreSQL the candidate row is locked
``FOR UPDATE SKIP LOCKED``, so concurrent workers each take a different run without
waiting; on SQLite the claim is one ``BEGIN IMMEDIATE`` transaction, which writers
take one at a time. Lease expiry is judged by the store's clock (``clock.utcnow`` by
default), so the workers sharing a database are assumed to share the time of day.

A store is opened for one workspace (WK-11): ``workspace_id`` is its manifest's id.
Every task it submits records that id, and it sees, claims, cancels, answers and
prunes only that workspace's tasks -- another workspace's task is ``TASK_NOT_FOUND``,
its approval ``APPROVAL_NOT_FOUND``, its runs are never claimed -- so any number of
workspaces share one database without reaching each other's work. Opened with
``workspace_id=ALL_WORKSPACES`` (the database admin's ``--all-workspaces``) it sees
every task but neither submits nor claims. Tasks stored before migration 2 belong to
no workspace: opening the database as the workspace whose own ``work.sqlite`` it is
(``adopt=True``) gives them to that workspace; on a shared database they stay
unowned, seen only with ``ALL_WORKSPACES``.
"""

from __future__ import annotations

import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, delete, insert, or_, select, true, update

from labfy_ref.clock import iso, utcnow
from labfy_ref.errors import ErrorCode, ProtocolRefused, RuntimeRefused
from labfy_ref.ids import new_id
from labfy_ref.protocol.strict_json import loads_strict
from labfy_ref.sqlcore import Migration
from labfy_ref.work.store import fields
from labfy_ref.work.store.base import Clock
from labfy_ref.work.store.engine import WorkEngine
from labfy_ref.work.store.migrations import MIGRATIONS, migrate
from labfy_ref.work.store.model import FINISHED, Claim, Run, State, Submission, Task
from labfy_ref.work.store.records import RecordsMixin
from labfy_ref.work.store.schema import (
    approvals,
    effects,
    events,
    messages,
    replies,
    runs,
    tasks,
)
from labfy_ref.work.store.url import DatabaseUrl

#: Default and largest page of ``list_tasks``.
DEFAULT_LIMIT = 50
MAX_LIMIT = 200
#: Tasks deleted per transaction by ``prune``.
PRUNE_BATCH = 500
_FINISHED = tuple(state.value for state in FINISHED)
#: ``workspace_id`` of a store that sees every workspace's tasks (the admin's view).
ALL_WORKSPACES = None


class WorkStore(RecordsMixin):
    """Tasks, runs, messages, provider replies, effects, events and approvals in SQL."""

    def __init__(self, engine: WorkEngine, *, workspace_id: str | None,
                 clock: Clock = utcnow) -> None:
        super().__init__(engine, clock)
        self.url = engine.url
        self.workspace_id = (workspace_id if workspace_id is ALL_WORKSPACES
                             else fields.name(workspace_id, "workspace_id"))

    @classmethod
    def open(cls, url: DatabaseUrl, *, workspace_id: str | None, adopt: bool = False,
             migrations: tuple[Migration, ...] = MIGRATIONS,
             clock: Clock = utcnow) -> WorkStore:
        """Open the database at ``url`` for the workspace ``workspace_id`` (or, with
        :data:`ALL_WORKSPACES`, for every one), migrating it forward first.

        ``adopt``: the database is this workspace's own ``work.sqlite``, so the tasks
        stored before tasks recorded their workspace are its own. ``WORK_DB_TOO_NEW``
        when its schema is newer than this build's, ``WORK_DB_UNAVAILABLE`` when it
        cannot be reached.
        """
        engine = WorkEngine(url)
        try:
            migrate(engine, migrations)
            store = cls(engine, workspace_id=workspace_id, clock=clock)
            if adopt:
                store._adopt()
        except BaseException:
            engine.close()
            raise
        return store

    def _adopt(self) -> None:
        if self.workspace_id is ALL_WORKSPACES:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 "only one workspace adopts the tasks of its own database")
        with self._db.transaction(write=True) as conn:
            conn.execute(update(tasks).where(tasks.c.workspace_id.is_(None))
                         .values(workspace_id=self.workspace_id))

    def _mine(self) -> ColumnElement[bool]:
        """The tasks this store sees: its workspace's (every task with ALL_WORKSPACES)."""
        if self.workspace_id is ALL_WORKSPACES:
            return true()
        return tasks.c.workspace_id == self.workspace_id

    def _my_task_ids(self) -> Select[tuple[str]]:
        return select(tasks.c.id).where(self._mine())

    def _one_workspace(self, doing: str) -> str:
        if self.workspace_id is ALL_WORKSPACES:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 f"{doing} is done for one workspace, not for all of them")
        return self.workspace_id

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self._db.dialect

    def close(self) -> None:
        """Release the database connections (idempotent)."""
        self._db.close()

    # -- tasks ---------------------------------------------------------------------------------

    def submit(self, message: str) -> Submission:
        """Store a new task and its first run, both ``QUEUED``; the message opens the run."""
        workspace_id = self._one_workspace("submitting a task")
        message = fields.text(message, "message")
        task_id, run_id = new_id("task"), new_id("run")
        queued = State.QUEUED.value
        with self._db.transaction(write=True) as conn:
            now = self._now()
            conn.execute(insert(tasks).values(id=task_id, state=queued, message=message,
                                              event_seq=0, created_at=now, updated_at=now,
                                              workspace_id=workspace_id))
            conn.execute(insert(runs).values(id=run_id, task_id=task_id, state=queued,
                                             attempt=0, message_count=1, created_at=now,
                                             updated_at=now))
            conn.execute(insert(messages).values(run_id=run_id, position=1, role="user",
                                                 content=message, at=now))
            self._event(conn, task_id, "task.submitted", {"run_id": run_id}, run_id)
            task = Task.of(conn.execute(select(tasks).where(tasks.c.id == task_id)).one())
            run = Run.of(conn.execute(select(runs).where(runs.c.id == run_id)).one())
        return Submission(task, run)

    def get_task(self, task_id: str) -> Task:
        """One task, or ``TASK_NOT_FOUND``."""
        with self._db.transaction(write=False) as conn:
            row = conn.execute(select(tasks).where(tasks.c.id == task_id, self._mine())).first()
        if row is None:
            raise RuntimeRefused(ErrorCode.TASK_NOT_FOUND, f"no task {task_id}")
        return Task.of(row)

    def list_tasks(self, *, state: str | None = None, limit: int = DEFAULT_LIMIT,
                   before: str | None = None) -> list[Task]:
        """Tasks newest first, optionally in one ``state``, after the cursor ``before``
        (the id of the last task of the previous page)."""
        limit = fields.count(limit, "limit", minimum=1)
        if limit > MAX_LIMIT:
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, f"limit must be 1-{MAX_LIMIT}")
        query = select(tasks).where(self._mine())
        if state is not None:
            if state not in State.__members__:
                raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                     f"state must be one of {', '.join(State)}")
            query = query.where(tasks.c.state == state)
        with self._db.transaction(write=False) as conn:
            if before is not None:
                mark = conn.execute(select(tasks.c.created_at).where(
                    tasks.c.id == before, self._mine())).scalar_one_or_none()
                if mark is None:
                    raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "unknown cursor")
                query = query.where(or_(tasks.c.created_at < mark,
                                        and_(tasks.c.created_at == mark, tasks.c.id < before)))
            rows = conn.execute(query.order_by(tasks.c.created_at.desc(), tasks.c.id.desc())
                                .limit(limit)).all()
        return [Task.of(row) for row in rows]

    def list_runs(self, task_id: str) -> list[Run]:
        """The task's runs, oldest first (none for another workspace's task)."""
        with self._db.transaction(write=False) as conn:
            rows = conn.execute(select(runs).where(runs.c.task_id == task_id,
                                                   runs.c.task_id.in_(self._my_task_ids()))
                                .order_by(runs.c.created_at, runs.c.id)).all()
        return [Run.of(row) for row in rows]

    def cancel(self, task_id: str) -> Task:
        """Cancel a task and its unfinished runs; a cancelled one is returned as it is.

        ``TASK_FINISHED`` for a completed or failed task. A worker running it finds
        out at its next write or heartbeat (``LEASE_NOT_HELD``).
        """
        cancelled = State.CANCELLED.value
        with self._db.transaction(write=True) as conn:
            now = self._now()
            mine = conn.execute(select(tasks.c.id).where(tasks.c.id == task_id, self._mine())
                                ).first()
            if mine is None:  # unknown, or another workspace's: never touched
                raise RuntimeRefused(ErrorCode.TASK_NOT_FOUND, f"no task {task_id}")
            conn.execute(update(runs).where(runs.c.task_id == task_id,
                                            runs.c.state.not_in(_FINISHED))
                         .values(state=cancelled, lease_expires_at=None, updated_at=now))
            done = conn.execute(update(tasks).where(tasks.c.id == task_id,
                                                    tasks.c.state.not_in(_FINISHED))
                                .values(state=cancelled, updated_at=now))
            row = conn.execute(select(tasks).where(tasks.c.id == task_id)).one()
            if done.rowcount == 1:
                self._event(conn, task_id, "task.cancelled", {})
            elif row.state != cancelled:
                raise RuntimeRefused(ErrorCode.TASK_FINISHED,
                                     f"task {task_id} is {row.state}: it cannot be cancelled")
            return Task.of(row)

    def show(self, task_id: str) -> dict[str, Any]:
        """The pinned Work shape of SPEC §15: task, runs, events, effects, approvals.

        Events are the task's first :data:`~labfy_ref.work.store.records.MAX_EVENTS_PAGE`;
        ``list_events`` pages through the rest.
        """
        task = self.get_task(task_id)
        task_runs = self.list_runs(task_id)
        return {"task": task.as_dict(),
                "runs": [run.as_dict() for run in task_runs],
                "events": [event.as_dict() for event in self.list_events(task_id)],
                "effects": [effect.as_dict() for run in task_runs
                            for effect in self.list_effects(run.id)],
                "approvals": [{**approval.as_dict(),
                               "arguments": self._asked(approval.run_id, approval.step)}
                              for approval in self.list_approvals(task_id)]}

    def _asked(self, run_id: str, step: int) -> dict[str, Any] | None:
        """The arguments of the call an approval is about, as the model gave them
        (the step's stored reply), so whoever answers sees what would run, content too."""
        reply = self.get_reply(run_id, step)
        if reply is None:
            return None
        try:
            action = loads_strict(str(reply.response.get("content", "")))
        except (ProtocolRefused, ValueError):
            return None
        arguments = action.get("arguments") if isinstance(action, dict) else None
        return arguments if isinstance(arguments, dict) else None

    # -- claims --------------------------------------------------------------------------------

    def claim(self, worker: str, lease_seconds: float) -> Claim | None:
        """Take the oldest runnable run of this workspace for ``worker`` under a lease, or
        None if there is none.

        Runnable: ``QUEUED``, or ``RUNNING`` with an expired lease (taken over; its
        ``attempt`` grows, which fences the previous holder out).
        """
        self._one_workspace("claiming a run")
        worker = fields.name(worker, "worker")
        lease = datetime.timedelta(seconds=fields.seconds(lease_seconds, "lease_seconds"))
        running = State.RUNNING.value
        with self._db.transaction(write=True) as conn:
            moment = self._clock()
            now, expires = iso(moment), iso(moment + lease)
            runnable = and_(or_(runs.c.state == State.QUEUED.value,
                                and_(runs.c.state == running, runs.c.lease_expires_at < now)),
                            runs.c.task_id.in_(self._my_task_ids()))
            row = conn.execute(select(runs.c.id, runs.c.task_id, runs.c.attempt, runs.c.state)
                               .where(runnable).order_by(runs.c.created_at, runs.c.id)
                               .limit(1).with_for_update(skip_locked=True)).first()
            if row is None:
                return None
            attempt = row.attempt + 1
            conn.execute(update(runs).where(runs.c.id == row.id).values(
                state=running, worker=worker, attempt=attempt, lease_expires_at=expires,
                updated_at=now))
            conn.execute(update(tasks).where(tasks.c.id == row.task_id)
                         .values(state=running, updated_at=now))
            kind = "run.taken_over" if row.state == running else "run.claimed"
            self._event(conn, row.task_id, kind, {"worker": worker, "attempt": attempt},
                        row.id)
        return Claim(row.id, row.task_id, worker, attempt, expires)

    def heartbeat(self, claim: Claim, lease_seconds: float) -> Claim:
        """Extend the lease from now; ``LEASE_NOT_HELD`` unless ``claim`` still holds the run."""
        lease = datetime.timedelta(seconds=fields.seconds(lease_seconds, "lease_seconds"))
        with self._db.transaction(write=True) as conn:
            moment = self._clock()
            expires = iso(moment + lease)
            self._fence(conn, claim, lease_expires_at=expires, updated_at=iso(moment))
        return Claim(claim.run_id, claim.task_id, claim.worker, claim.attempt, expires)

    def release(self, claim: Claim) -> None:
        """Give the run back unfinished (a worker stopping on SIGTERM): ``QUEUED`` again."""
        queued = State.QUEUED.value
        with self._db.transaction(write=True) as conn:
            now = self._now()
            self._fence(conn, claim, state=queued, worker=None, lease_expires_at=None,
                        updated_at=now)
            conn.execute(update(tasks).where(tasks.c.id == claim.task_id)
                         .values(state=queued, updated_at=now))
            self._event(conn, claim.task_id, "run.released", {"worker": claim.worker},
                        claim.run_id)

    def finish(self, claim: Claim, state: State, *, final_text: str | None = None,
               error: dict[str, str] | None = None) -> Task:
        """End the run and its task ``COMPLETED`` or ``FAILED`` (``error``: code, message)."""
        if state not in (State.COMPLETED, State.FAILED):
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED,
                                 "a run finishes COMPLETED or FAILED")
        if final_text is not None:
            final_text = fields.text(final_text, "final_text", allow_empty=True)
        data: dict[str, Any] = {"state": state.value, "error": error}
        fields.dump_json(data, "error")
        with self._db.transaction(write=True) as conn:
            now = self._now()
            self._fence(conn, claim, state=state.value, lease_expires_at=None, updated_at=now)
            conn.execute(update(tasks).where(tasks.c.id == claim.task_id).values(
                state=state.value, final_text=final_text, updated_at=now))
            self._event(conn, claim.task_id, "run.finished", data, claim.run_id)
            return Task.of(conn.execute(select(tasks).where(tasks.c.id == claim.task_id)).one())

    def get_run(self, run_id: str) -> Run | None:
        """One run, or None."""
        with self._db.transaction(write=False) as conn:
            row = conn.execute(select(runs).where(runs.c.id == run_id)).first()
        return None if row is None else Run.of(row)

    # -- pruning -------------------------------------------------------------------------------

    def prune(self, older_than: datetime.timedelta, *, batch: int = PRUNE_BATCH) -> int:
        """Delete finished tasks last updated more than ``older_than`` ago, with everything
        they hold (runs, messages, stored model replies, effects, events, approvals).
        Returns how many tasks went; ``batch`` tasks go per transaction."""
        batch = fields.count(batch, "batch", minimum=1)
        if older_than < datetime.timedelta(0):
            raise RuntimeRefused(ErrorCode.VALIDATION_FAILED, "older_than must not be negative")
        cutoff = iso(self._clock() - older_than)
        old = (select(tasks.c.id).where(tasks.c.state.in_(_FINISHED), tasks.c.updated_at < cutoff,
                                        self._mine())
               .order_by(tasks.c.updated_at).limit(batch))
        pruned = 0
        while True:  # bounded batches: a short lock each, and no statement over SQLite's limits
            with self._db.transaction(write=True) as conn:
                doomed = [row.id for row in conn.execute(old.with_for_update())]
                if not doomed:
                    return pruned
                their_runs = select(runs.c.id).where(runs.c.task_id.in_(doomed))
                for table in (effects, replies, messages):
                    conn.execute(delete(table).where(table.c.run_id.in_(their_runs)))
                for table in (approvals, events):
                    conn.execute(delete(table).where(table.c.task_id.in_(doomed)))
                conn.execute(delete(runs).where(runs.c.task_id.in_(doomed)))
                conn.execute(delete(tasks).where(tasks.c.id.in_(doomed)))
            pruned += len(doomed)
