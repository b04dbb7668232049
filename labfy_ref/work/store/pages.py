"""The page of tasks that ``work list`` prints and ``GET /api/v1/work/tasks`` answers (WK-05).

One function, so the command line and the HTTP API page alike: newest first, at most
``limit`` tasks after the cursor (the id of the previous page's last task), and
``next_cursor`` set only when another page follows.
"""

from __future__ import annotations

from typing import Any

from labfy_ref.work.store.tasks import DEFAULT_LIMIT, WorkStore


def task_page(store: WorkStore, *, state: str | None = None, limit: int = DEFAULT_LIMIT,
              cursor: str | None = None) -> dict[str, Any]:
    """``{"tasks": [...], "next_cursor": str | None}`` (SPEC §15); the bounds of ``limit``,
    the states and the cursor are the store's to check (``VALIDATION_FAILED``)."""
    tasks = store.list_tasks(state=state, limit=limit, before=cursor)
    last = tasks[-1].id if len(tasks) == limit else None
    # a full page has a successor only if a task lies beyond it: never an empty last page
    more = last is not None and bool(store.list_tasks(state=state, limit=1, before=last))
    return {"tasks": [task.as_dict() for task in tasks], "next_cursor": last if more else None}
