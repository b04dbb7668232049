"""Isolated Work (SPEC §13): tasks and runs stored in SQL, shared by any number of workers.

The store (:class:`WorkStore`) keeps tasks, runs, messages, approvals, events,
provider replies and tool effects in SQLite (``<workspace>/work.sqlite``, the
default) or PostgreSQL (``postgresql://…``), through one SQLAlchemy Core code path.
"""

from labfy_ref.sqlcore import Migration
from labfy_ref.work.store.migrations import MIGRATIONS, SCHEMA_VERSION
from labfy_ref.work.store.model import (
    ApprovalRequest,
    Claim,
    Effect,
    EffectStatus,
    Event,
    Message,
    Reply,
    Run,
    State,
    Submission,
    Task,
)
from labfy_ref.work.store.tasks import WorkStore
from labfy_ref.work.store.url import (
    ENV_VAR,
    DatabaseUrl,
    parse_database_url,
    resolve_database_url,
    sqlite_url,
)

__all__ = [
    "ENV_VAR",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "ApprovalRequest",
    "Claim",
    "DatabaseUrl",
    "Effect",
    "EffectStatus",
    "Event",
    "Message",
    "Migration",
    "Reply",
    "Run",
    "State",
    "Submission",
    "Task",
    "WorkStore",
    "parse_database_url",
    "resolve_database_url",
    "sqlite_url",
]
