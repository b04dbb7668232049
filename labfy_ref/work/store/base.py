"""What every part of the Work store shares: its engine, its clock, fencing and events.

Lock order, the same in every write so two PostgreSQL transactions never wait on
each other in a circle: approvals, then runs, then tasks (events are appended last,
through the task row).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any

from sqlalchemy import Connection, Select, insert, update

from labfy_ref.clock import iso
from labfy_ref.errors import ErrorCode, RuntimeRefused
from labfy_ref.work.store import fields
from labfy_ref.work.store.engine import WorkEngine
from labfy_ref.work.store.model import Claim, Event, State
from labfy_ref.work.store.schema import events, runs, tasks

Clock = Callable[[], datetime.datetime]


class StoreBase:
    """The engine and clock of one open store, and the helpers its writes share."""

    def __init__(self, engine: WorkEngine, clock: Clock) -> None:
        self._db = engine
        self._clock = clock

    def _now(self) -> str:
        return iso(self._clock())

    def _my_task_ids(self) -> Select[tuple[str]]:
        """The ids of the tasks this store sees (its workspace's; WK-11)."""
        raise NotImplementedError

    def _fence(self, conn: Connection, claim: Claim, **values: Any) -> None:
        """Refuse ``LEASE_NOT_HELD`` unless ``claim`` still holds its run; lock the run row.

        The UPDATE is the check and the lock at once: on PostgreSQL it holds the run's
        row until commit, so a concurrent claim cannot take the run mid-write.
        """
        values.setdefault("updated_at", self._now())
        held = conn.execute(update(runs).where(
            runs.c.id == claim.run_id, runs.c.worker == claim.worker,
            runs.c.attempt == claim.attempt, runs.c.state == State.RUNNING.value,
        ).values(**values))
        if held.rowcount != 1:
            raise RuntimeRefused(
                ErrorCode.LEASE_NOT_HELD,
                f"run {claim.run_id} is not held by worker {claim.worker!r} "
                f"(attempt {claim.attempt}): taken over, released, finished or cancelled")

    def _event(self, conn: Connection, task_id: str, kind: str, data: Any,
               run_id: str | None = None) -> Event:
        """Append one event to ``task_id``'s log inside ``conn``'s transaction."""
        kind = fields.name(kind, "event type")
        stored = fields.dump_json(data, "event data")
        # the counter's UPDATE also serialises two appends to one task on PostgreSQL
        seq = conn.execute(update(tasks).where(tasks.c.id == task_id).values(
            event_seq=tasks.c.event_seq + 1).returning(tasks.c.event_seq)).scalar_one_or_none()
        if seq is None:
            raise RuntimeRefused(ErrorCode.TASK_NOT_FOUND, f"no task {task_id}")
        at = self._now()
        conn.execute(insert(events).values(task_id=task_id, seq=seq, run_id=run_id, type=kind,
                                           data=stored, at=at))
        return Event(task_id, seq, run_id, kind, fields.load_json(stored), at)
