"""The Work tables, in SQLAlchemy Core, one definition for SQLite and PostgreSQL (WK-02).

:func:`declare_v1` declares the tables as migration 1 creates them; :data:`METADATA`
is the current shape the store queries. A later migration changes the database with
its own DDL (:mod:`labfy_ref.work.store.migrations`) and this module with the same change
applied to :data:`METADATA` (``append_column`` and the like: :func:`declare_v2`) after
``declare_v1``; a test
compares a migrated database with :data:`METADATA` on both engines, so the two
cannot drift.

Every table is prefixed ``work_`` so a team may point Work at a database that
holds other tables. Timestamps are :func:`labfy_ref.clock.iso` text (fixed
width, UTC, so text order is time order on both engines); JSON is text written
by :func:`labfy_ref.work.store.fields.dump_json`, so a value reads back exactly as
stored (PostgreSQL's ``jsonb`` would reorder keys and refuse ``\\u0000``).
"""

from __future__ import annotations

from sqlalchemy import (
    CheckConstraint,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    Table,
    Text,
    UniqueConstraint,
)

from labfy_ref.modes import APPROVALS

TASK_STATES = ("QUEUED", "RUNNING", "WAITING_APPROVAL", "COMPLETED", "FAILED", "CANCELLED")
EFFECT_STATES = ("started", "completed", "refused")
#: An approval row's decision before a human answers; then one of :data:`APPROVALS`.
PENDING = "pending"
DECISIONS = (PENDING, *APPROVALS)
ROLES = ("system", "user", "assistant", "tool")


def _one_of(column: str, values: tuple[str, ...]) -> CheckConstraint:
    listed = ", ".join(f"'{value}'" for value in values)
    return CheckConstraint(f"{column} IN ({listed})", name=f"{column}_known")


def declare_v1(metadata: MetaData) -> None:
    """Declare the version 1 tables on ``metadata`` (migration 1 creates exactly these)."""
    Table("work_schema_version", metadata,
          Column("version", Integer, primary_key=True, autoincrement=False),
          Column("summary", Text, nullable=False),
          Column("applied_at", Text, nullable=False))
    Table("work_tasks", metadata,
          Column("id", Text, primary_key=True),
          Column("state", Text, nullable=False),
          Column("message", Text, nullable=False),
          Column("final_text", Text),
          # the last event's seq: appending an event increments it, which also serialises
          # concurrent appends to one task on PostgreSQL (the row lock of the UPDATE)
          Column("event_seq", Integer, nullable=False),
          Column("created_at", Text, nullable=False),
          Column("updated_at", Text, nullable=False),
          _one_of("state", TASK_STATES),
          Index("work_tasks_by_creation", "created_at", "id"),
          Index("work_tasks_by_state", "state", "created_at", "id"))
    Table("work_runs", metadata,
          Column("id", Text, primary_key=True),
          Column("task_id", Text, ForeignKey("work_tasks.id"), nullable=False),
          Column("state", Text, nullable=False),
          # how many times the run was claimed; a claim is fenced by (worker, attempt)
          Column("attempt", Integer, nullable=False),
          Column("worker", Text),
          Column("lease_expires_at", Text),
          Column("message_count", Integer, nullable=False),
          Column("created_at", Text, nullable=False),
          Column("updated_at", Text, nullable=False),
          _one_of("state", TASK_STATES),
          Index("work_runs_by_task", "task_id", "created_at"),
          Index("work_runs_runnable", "state", "lease_expires_at", "created_at"))
    Table("work_messages", metadata,
          Column("run_id", Text, ForeignKey("work_runs.id"), nullable=False),
          Column("position", Integer, nullable=False),
          Column("role", Text, nullable=False),
          Column("content", Text, nullable=False),
          Column("at", Text, nullable=False),
          PrimaryKeyConstraint("run_id", "position"),
          _one_of("role", ROLES))
    Table("work_events", metadata,
          Column("task_id", Text, ForeignKey("work_tasks.id"), nullable=False),
          Column("seq", Integer, nullable=False),
          Column("run_id", Text, ForeignKey("work_runs.id")),
          Column("type", Text, nullable=False),
          Column("data", Text, nullable=False),
          Column("at", Text, nullable=False),
          PrimaryKeyConstraint("task_id", "seq"))
    Table("work_approvals", metadata,
          Column("id", Text, primary_key=True),
          Column("task_id", Text, ForeignKey("work_tasks.id"), nullable=False),
          Column("run_id", Text, ForeignKey("work_runs.id"), nullable=False),
          Column("step", Integer, nullable=False),
          Column("call", Integer, nullable=False),
          Column("tool_id", Text, nullable=False),
          Column("summary", Text, nullable=False),
          Column("decision", Text, nullable=False),
          Column("created_at", Text, nullable=False),
          Column("answered_at", Text),
          _one_of("decision", DECISIONS),
          Index("work_approvals_by_task", "task_id", "created_at"),
          Index("work_approvals_by_run", "run_id", "decision"))
    Table("work_replies", metadata,
          Column("run_id", Text, ForeignKey("work_runs.id"), nullable=False),
          Column("step", Integer, nullable=False),
          Column("request", Text, nullable=False),
          Column("response", Text, nullable=False),
          Column("at", Text, nullable=False),
          PrimaryKeyConstraint("run_id", "step"))
    Table("work_effects", metadata,
          Column("id", Text, primary_key=True),
          Column("run_id", Text, ForeignKey("work_runs.id"), nullable=False),
          Column("step", Integer, nullable=False),
          Column("call", Integer, nullable=False),
          Column("attempt", Integer, nullable=False),  # the run attempt that started it
          Column("tool_id", Text, nullable=False),
          Column("arguments", Text, nullable=False),
          Column("status", Text, nullable=False),
          Column("result", Text),
          Column("started_at", Text, nullable=False),
          Column("completed_at", Text),
          UniqueConstraint("run_id", "step", "call", name="work_effects_key"),
          _one_of("status", EFFECT_STATES))


#: Migration 2 (WK-11): the workspace a task was submitted for (its manifest's
#: ``workspace_id``). Null only for a task stored before it on a shared database.
TASK_WORKSPACE = "workspace_id"
TASKS_BY_WORKSPACE = "work_tasks_by_workspace"


def task_workspace_column() -> Column[str]:
    """The column migration 2 adds to ``work_tasks``."""
    return Column(TASK_WORKSPACE, Text)


def declare_v2(metadata: MetaData) -> None:
    """Apply migration 2 to tables declared by :func:`declare_v1` on ``metadata``."""
    table = metadata.tables["work_tasks"]
    table.append_column(task_workspace_column())
    Index(TASKS_BY_WORKSPACE, table.c.workspace_id, table.c.created_at, table.c.id)


#: The current schema, which the store queries.
METADATA = MetaData()
declare_v1(METADATA)
declare_v2(METADATA)

schema_version = METADATA.tables["work_schema_version"]
tasks = METADATA.tables["work_tasks"]
runs = METADATA.tables["work_runs"]
messages = METADATA.tables["work_messages"]
events = METADATA.tables["work_events"]
approvals = METADATA.tables["work_approvals"]
replies = METADATA.tables["work_replies"]
effects = METADATA.tables["work_effects"]
