"""The Work API (WK-05, SPEC §15): submit, list, show and cancel tasks, answer approvals.

Every route sits behind the server's checklist like any other (session or bearer,
Origin, CSRF on mutations, strict JSON bodies) and is open to any session (role
``user``) but answering an approval, which is the admin's (WK-12: a ``user`` gets 403
``FORBIDDEN``, as on the bridge). Every route sees the server's workspace's tasks only
(WK-11). The server only records: workers (``labfy-ref work worker``) run the
tasks. The handlers are plain functions, so FastAPI runs their database calls in
its worker threads, off the event loop. Refusals are the store's codes:
``TASK_NOT_FOUND`` / ``APPROVAL_NOT_FOUND`` 404, ``TASK_FINISHED`` and a second
answer ``APPROVAL_NOT_PENDING`` 409, a bad value ``VALIDATION_FAILED`` 422, an
unreachable database ``WORK_DB_UNAVAILABLE`` 503.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from labfy_ref.server.routes import Strict
from labfy_ref.server.security import require_admin
from labfy_ref.server.state import ServerState
from labfy_ref.work import WorkStore
from labfy_ref.work.store.pages import task_page
from labfy_ref.work.store.tasks import DEFAULT_LIMIT


class TaskBody(Strict):
    """``POST /api/v1/work/tasks``: the task's message (its bounds are the store's)."""

    message: str


class DecisionBody(Strict):
    """``POST /api/v1/work/approvals/<id>``: ``allowed-once`` or ``rejected``."""

    decision: str


def work_store(request: Request) -> WorkStore:
    """The server's Work store, opened on first use (``WORK_DB_UNAVAILABLE`` if it cannot be)."""
    state: ServerState = request.app.state.server
    return state.work.store()


Store = Annotated[WorkStore, Depends(work_store)]
router = APIRouter(prefix="/api/v1/work")


@router.post("/tasks")
def submit(body: TaskBody, store: Store) -> JSONResponse:
    """Queue a task for the workers: 201 with the task (SPEC §15's ``task`` shape)."""
    submitted = store.submit(body.message)
    return JSONResponse({"task": submitted.task.as_dict()}, status_code=201)


@router.get("/tasks")
def list_tasks(store: Store, state: str | None = None, limit: int = DEFAULT_LIMIT,
               cursor: str | None = None) -> dict[str, Any]:
    """Tasks newest first, optionally in one ``state``; ``next_cursor`` pages on (null at the
    end). An empty ``state`` or ``cursor`` counts as not given."""
    return task_page(store, state=state or None, limit=limit, cursor=cursor or None)


@router.get("/tasks/{task_id}")
def show(task_id: str, store: Store) -> dict[str, Any]:
    """The Work shape: task, runs, events, effects, approvals."""
    return store.show(task_id)


@router.post("/tasks/{task_id}/cancel")
def cancel(task_id: str, store: Store) -> dict[str, Any]:
    """Cancel a task (a cancelled one is answered as it is; a finished one is 409)."""
    return {"task": store.cancel(task_id).as_dict()}


def admin_work_store(request: Request) -> WorkStore:
    """The Work store, for the admin's session only (WK-12: 403 for ``user``)."""
    require_admin(request.state, "answering a Work approval")
    return work_store(request)


@router.post("/approvals/{approval_id}")
def answer(approval_id: str, body: DecisionBody,
           store: Annotated[WorkStore, Depends(admin_work_store)]) -> dict[str, Any]:
    """Answer a pending approval once; a second answer is 409 ``APPROVAL_NOT_PENDING``."""
    return {"approval": store.answer_approval(approval_id, body.decision).as_dict()}
