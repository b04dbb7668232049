"""Readable tables for ``work list`` and ``work show`` on a terminal.

JSON stays the default whenever stdout is not a terminal (scripts, pipes, the
bench) and with ``--json``; a table is only ever shown to a person. Every cell
passes :func:`~labfy_ref.text.terminal` (a task's text is anyone's: its
controls are spelled out, never obeyed) and is cut to its column.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labfy_ref.text import terminal

#: The widest a free-text cell (a message, a final answer) is shown.
TEXT_CELL = 60


def _cell(value: Any, limit: int = TEXT_CELL) -> str:
    if value is None:
        return "-"
    return terminal(" ".join(str(value).split()), limit=limit) or "-"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell, two spaces apart."""
    widths = [max([len(name)] + [len(row[i]) for row in rows]) for i, name in enumerate(header)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(cells)).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)])


def task_list(page: Mapping[str, Any]) -> str:
    """``work list`` as a table; the next page's cursor said under it."""
    tasks = page["tasks"]
    if not tasks:
        return "no tasks"
    body = table(("TASK", "STATE", "UPDATED", "MESSAGE"),
                 [(_cell(t["id"], 40), _cell(t["state"], 20), _cell(t["updated_at"], 32),
                   _cell(t["message"])) for t in tasks])
    cursor = page.get("next_cursor")
    return body + (f"\nmore: --cursor {_cell(cursor, 40)}" if cursor else "")


def task_detail(shown: Mapping[str, Any]) -> str:
    """``work show`` as a person reads it: the task, then its runs, approvals and effects."""
    task = shown["task"]
    lines = [f"task     {_cell(task['id'], 40)}  {_cell(task['state'], 20)}",
             f"message  {_cell(task['message'], 2000)}",
             f"answer   {_cell(task['final_text'], 2000)}",
             f"created  {_cell(task['created_at'], 32)}   updated {_cell(task['updated_at'], 32)}"]
    runs = shown["runs"]
    if runs:
        lines += ["", table(("RUN", "STATE", "ATTEMPT", "WORKER"),
                            [(_cell(r["id"], 40), _cell(r["state"], 20), _cell(r["attempt"], 8),
                              _cell(r["worker"], 40)) for r in runs])]
    approvals = shown["approvals"]
    if approvals:
        lines += ["", table(("APPROVAL", "DECISION", "TOOL", "SUMMARY"),
                            [(_cell(a["id"], 40), _cell(a["decision"], 20),
                              _cell(a["tool_id"], 40), _cell(a["summary"]))
                             for a in approvals])]
    effects = shown["effects"]
    if effects:
        lines += ["", table(("EFFECT", "STATUS", "TOOL", "ARGUMENTS"),
                            [(_cell(e["id"], 40), _cell(e["status"], 20), _cell(e["tool_id"], 40),
                              _cell(e["arguments"])) for e in effects])]
    lines += ["", f"{len(shown['events'])} event(s); --json prints them all"]
    return "\n".join(lines)
