"""Memory that grows with turns, and a session that slows with its length.

Each RSS figure is one ``serve`` process on a fresh SPECIMEN workspace with
the demo agent, driven over HTTP, its resident set read from ``/proc`` after
the last turn; a run of many turns is held against a run of 10 in another
process. A runtime turn is started, reaches ``AUTHORIZATION_REQUIRED`` (the
demo prepares research) and is cancelled, as a user who declines would. A
bridge turn is a new session with one message, its NDJSON read to ``done``.
The 10-turn bridge server then runs one session of 200 turns; its turns
191-200 (each timed from its POST to its ``done``) alternate with turns 1-10 of
a second session, and the medians of the two are compared.
"""

from __future__ import annotations

import time
from pathlib import Path

from qualification.bench.procs import Served, new_workspace, rss_bytes, serving
from qualification.bench.table import Row, at_most, median

SECTION = "memory"
FEW = 10
_PAUSED = {"AUTHORIZATION_REQUIRED"}
_ENDED = {"COMPLETED", "FAILED", "CANCELLED", "MODEL_UNAVAILABLE", "MODEL_PROTOCOL_ERROR",
          "BUDGET_EXHAUSTED"}


def runtime_turn(server: Served, index: int) -> None:
    """Start a demo turn, wait for its pause, cancel it."""
    turn = server.api.start_turn(f"Check whether the early ivy bee record is real. ({index})")
    seen = server.api.wait_state(turn["id"], _PAUSED | _ENDED, timeout=60, interval=0.002)
    if seen["state"] not in _PAUSED:
        raise RuntimeError(f"runtime turn ended {seen['state']}: {seen.get('error')}")
    cancelled = server.api.post(f"/api/v1/agent-runtime/turns/{turn['id']}/cancel")
    if cancelled.status_code != 200:
        raise RuntimeError(f"cancel answered {cancelled.status_code}")


def bridge_message(server: Served, session_id: str, text: str) -> None:
    """One bridge turn: the message's NDJSON read to a completed ``done``."""
    api = server.api
    reply = api.post(f"/api/cordis/sessions/{session_id}/messages", {"text": text})
    lines = reply.text.splitlines()
    if reply.status_code != 200 or not lines or '"reason":"completed"' not in lines[-1]:
        raise RuntimeError(f"bridge turn answered {reply.status_code}: {reply.text[-300:]}")


def new_session(server: Served) -> str:
    """A new read-only bridge session."""
    created = server.api.post("/api/cordis/sessions", {"permission_mode": "read-only"})
    if created.status_code != 201:
        raise RuntimeError(f"session create answered {created.status_code}")
    session_id: str = created.json()["session"]["id"]
    return session_id


def _runtime_rss(workdir: Path, turns: int) -> int:
    name = f"runtime-{turns}"
    with serving(new_workspace(workdir, name), workdir, name) as server:
        for index in range(turns):
            runtime_turn(server, index)
        return rss_bytes(server.pid)


def _bridge_rss(workdir: Path, turns: int, session_turns: int) -> tuple[int, list[float]]:
    """RSS after ``turns`` one-message sessions; then, if asked, the long-session timings."""
    name = f"bridge-{turns}"
    with serving(new_workspace(workdir, name), workdir, name, "--bridge") as server:
        for index in range(turns):
            bridge_message(server, new_session(server), f"What is in this workspace? ({index})")
        rss = rss_bytes(server.pid)
        return rss, _long_session(server, session_turns) if session_turns else []


def _long_session(server: Served, turns: int) -> list[float]:
    """Seconds of turns ``turns - 9 .. turns`` of one session, then of turns 1..10 of another.

    The last ten of the long session alternate with the ten of the short one, so
    both are timed in the same moments of a machine that others may be using.
    """
    long_session, short_session = new_session(server), new_session(server)
    for index in range(turns - 10):
        bridge_message(server, long_session, f"What is in this workspace? ({index})")
    late: list[float] = []
    early: list[float] = []
    for index in range(10):
        for session, times in ((long_session, late), (short_session, early)):
            start = time.perf_counter()
            bridge_message(server, session, f"What is in this workspace? ({index})")
            times.append(time.perf_counter() - start)
    return late + early
def run(workdir: Path, *, quick: bool) -> list[Row]:
    """RSS ratios (runtime, bridge) and the long-session ratio."""
    del quick  # turns are cheap (a few ms): the sizes either way
    many, session_turns = 2000, 200
    runtime_few, runtime_many = _runtime_rss(workdir, FEW), _runtime_rss(workdir, many)
    (bridge_few, timings), (bridge_many, _) = (_bridge_rss(workdir, FEW, session_turns),
                                               _bridge_rss(workdir, many, 0))
    last, first = median(timings[:10]), median(timings[10:])  # one slow turn is noise
    mib = 1024 * 1024
    return [
        Row(SECTION, f"runtime RSS after {many:,} turns / after {FEW}", runtime_many / mib,
            runtime_few / mib, "MiB", at_most(1.1),
            detail={"per_turn_kib": (runtime_many - runtime_few) / (many - FEW) / 1024}),
        Row(SECTION, f"bridge RSS after {many:,} turns (one session each) / after {FEW}",
            bridge_many / mib, bridge_few / mib, "MiB", at_most(1.1),
            detail={"per_turn_kib": (bridge_many - bridge_few) / (many - FEW) / 1024}),
        Row(SECTION, f"one bridge session: turns {session_turns - 9}–{session_turns} / 1–10",
            last * 1e3, first * 1e3, "ms", at_most(1.2),
            detail={"last_ten_ms": [round(t * 1e3, 3) for t in timings[:10]],
                    "first_ten_ms": [round(t * 1e3, 3) for t in timings[10:]]}),
    ]
