"""``GET /api/cordis/sessions?limit=50`` with 10, 1,000 and 10,000 sessions.

One real demo turn through ``serve --bridge`` gives a session log as the
engine writes it; the other sessions are copies of it written directly with
the JSONL store (header, then each record appended) into three workspaces,
while no server runs. Then ``serve --bridge`` starts on each and the page is
fetched over HTTP: once cold (the first listing after start, which may rebuild
an index), then timed round-robin across the three servers, median of the
repetitions. A page at 1,000 and at 10,000 is held against a page at 10.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.ids import new_id
from labfy_ref.workspace import open_workspace
from qualification.bench.memory import bridge_message, new_session
from qualification.bench.procs import Served, new_workspace, serving
from qualification.bench.table import Row, at_most, median

SECTION = "sessions"
PATH = "/api/cordis/sessions?limit=50"


def _template(workspace: Path, workdir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and records of one real demo turn's session log."""
    with serving(workspace, workdir, "sessions-template", "--bridge") as server:
        session = new_session(server)
        bridge_message(server, session, "What is in this workspace?")
    store = JsonlSessionStore(open_workspace(workspace).sessions_dir)
    try:
        return store.read(session)
    finally:
        store.close()


def _top_up(workspace: Path, template: tuple[dict[str, Any], list[dict[str, Any]]],
            count: int) -> None:
    """Add copies of the template until the workspace holds ``count`` sessions."""
    store = JsonlSessionStore(open_workspace(workspace).sessions_dir)
    header, events = template
    try:
        for _ in range(count - len(store.list_ids())):
            session_id = new_id("ses")
            store.create(session_id, header)
            for event in events:
                store.append(session_id, event)
    finally:
        store.close()


def _page(server: Served) -> tuple[float, int, int]:
    """(seconds, sessions listed, answer bytes) of one page."""
    start = time.perf_counter()
    reply = server.api.get(PATH)
    elapsed = time.perf_counter() - start
    if reply.status_code != 200:
        raise RuntimeError(f"{PATH} answered {reply.status_code}: {reply.text[:300]}")
    return elapsed, len(reply.json()["sessions"]), len(reply.content)


def run(workdir: Path, *, quick: bool) -> list[Row]:
    """Listing rows: 1,000 and 10,000 sessions against 10."""
    reps = 25 if quick else 50  # a page takes about a millisecond: many, for a stable median
    counts = (10, 1000, 10000)
    template = _template(new_workspace(workdir, "sessions-template"), workdir)
    detail: dict[str, Any] = {"repetitions": reps, "records_per_session": len(template[1])}
    workspaces = {}
    for count in counts:
        started = time.perf_counter()
        workspaces[count] = new_workspace(workdir, f"sessions-{count}")
        _top_up(workspaces[count], template, count)
        detail[f"write_{count}_s"] = round(time.perf_counter() - started, 2)
    timings: dict[int, list[float]] = {count: [] for count in counts}
    with contextlib.ExitStack() as stack:
        servers = {count: stack.enter_context(serving(workspaces[count], workdir,
                                                      f"sessions-{count}", "--bridge"))
                   for count in counts}
        for count in counts:
            cold, listed, size = _page(servers[count])
            detail[str(count)] = {"cold_ms": round(cold * 1e3, 3), "listed": listed,
                                  "answer_bytes": size}
        for _ in range(reps):  # round-robin: a busy moment touches every size alike
            for count in counts:
                timings[count].append(_page(servers[count])[0])
    for count in counts:
        detail[str(count)]["ms"] = round(median(timings[count]) * 1e3, 3)
    base = median(timings[counts[0]])
    return [Row(SECTION, f"GET /api/cordis/sessions?limit=50 at {count:,} sessions / at "
                f"{counts[0]}", median(timings[count]) * 1e3, base * 1e3, "ms", at_most(1.5),
                detail=detail)
            for count in counts[1:]]
