"""The provider usage ledger's rows and queries (BR-14), on the store's connection.

One row per model call: when it ended, the qualified model (BR-10), the tokens
the provider reported (NULL where it reported none: never estimated), the
latency, the outcome (``ok`` or an error code) and the caller (a session id,
``transient`` or a turn id).

Retention is bounded: a write keeps the newest :data:`USAGE_RETENTION` rows and
deletes older ones in the same transaction. ``usage_id`` is an ``INTEGER
PRIMARY KEY`` written only here: SQLite gives a new row the largest id plus
one and only the oldest rows are ever deleted, so ids are consecutive and
"the newest N" is ``usage_id > last - N`` — an index range, not a count.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import ColumnElement, Connection, bindparam, cast, delete, func, insert, select
from sqlalchemy.types import Integer

from labfy_ref.errors import ErrorCode
from labfy_ref.workspace.schema import usage

#: How many usage records a workspace keeps (the newest; older ones are deleted on write).
USAGE_RETENTION = 10_000

#: The outcome of a call its caller cancelled (a user's Stop): counted apart, not an error.
CANCELLED = ErrorCode.CANCELLED.value
_TOTALS: tuple[ColumnElement[Any], ...] = (
    func.count(), func.sum(usage.c.prompt_tokens), func.sum(usage.c.completion_tokens),
    func.sum(usage.c.cached_tokens),
    func.sum(cast(usage.c.outcome.not_in(("ok", CANCELLED)), Integer)),
    func.sum(cast(usage.c.outcome == CANCELLED, Integer)))
# built once: every model call of every surface writes one row
_INSERT = insert(usage)
_PRUNE = delete(usage).where(usage.c.usage_id <= bindparam("below"))


@dataclasses.dataclass(frozen=True, slots=True)
class UsageRecord:
    """One model call as the ledger holds it."""

    usage_id: int
    at: str
    model: str
    prompt_tokens: int | None
    completion_tokens: int | None
    cached_tokens: int | None
    latency_ms: float
    outcome: str
    caller: str

    def as_json(self) -> dict[str, Any]:
        """The wire shape of one record in ``GET /api/cordis/usage``."""
        return {"at": self.at, "model": self.model, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cached_tokens": self.cached_tokens, "latency_ms": self.latency_ms,
                "outcome": self.outcome, "caller": self.caller}


def add(db: Connection, record: UsageRecord, keep: int) -> int:
    """Add ``record`` (its ``usage_id`` is ignored), keep the newest ``keep`` rows; its id."""
    result = db.execute(_INSERT, {
        "at": record.at, "model": record.model, "prompt_tokens": record.prompt_tokens,
        "completion_tokens": record.completion_tokens, "cached_tokens": record.cached_tokens,
        "latency_ms": record.latency_ms, "outcome": record.outcome, "caller": record.caller})
    usage_id = result.lastrowid
    assert isinstance(usage_id, int)
    db.execute(_PRUNE, {"below": usage_id - keep})
    return usage_id


def page(db: Connection, since: str, limit: int,
         before: int | None) -> tuple[list[UsageRecord], int | None]:
    """Records at or after ``since``, newest first, older than id ``before`` when given.

    Returns at most ``limit`` records and the id to continue below (None: no more).
    """
    rows = db.execute(select(usage).where(
        usage.c.at >= since, usage.c.usage_id < (before if before is not None else 2**63 - 1))
        .order_by(usage.c.usage_id.desc()).limit(limit + 1)).all()
    records = [UsageRecord(*row) for row in rows[:limit]]
    return records, records[-1].usage_id if len(rows) > limit else None


def totals(db: Connection, since: str) -> dict[str, list[dict[str, Any]]]:
    """Calls, tokens, errors and cancelled calls of the records at or after ``since``: per
    model, per UTC day (a call its caller cancelled is no error: ``cancelled``, apart).

    A token sum adds what was reported; it is null when no record of the group
    reported that count.
    """
    by_model = db.execute(select(usage.c.model, *_TOTALS).where(usage.c.at >= since)
                          .group_by(usage.c.model).order_by(usage.c.model)).all()
    day = func.substr(usage.c.at, 1, 10).label("day")
    by_day = db.execute(select(day, *_TOTALS).where(usage.c.at >= since)
                        .group_by(day).order_by(day.desc())).all()
    return {"by_model": [{"model": row[0], **_counts(tuple(row[1:]))} for row in by_model],
            "by_day": [{"day": row[0], **_counts(tuple(row[1:]))} for row in by_day]}
def _counts(row: tuple[Any, ...]) -> dict[str, Any]:
    calls, prompt, completion, cached, errors, cancelled = row
    return {"calls": calls, "prompt_tokens": prompt, "completion_tokens": completion,
            "cached_tokens": cached, "errors": errors, "cancelled": cancelled}
