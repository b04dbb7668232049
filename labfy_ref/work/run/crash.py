"""Crash points: a worker that kills itself (SIGKILL) at a named step boundary, for recovery tests.

``LABFY_WORK_CRASH_AT=BOUNDARY:N[,BOUNDARY:N...]`` makes the worker process send
itself ``SIGKILL`` the N-th time it reaches ``BOUNDARY`` — the same death as
``kill -9`` from outside, but at a chosen boundary instead of a guessed moment.
Unset (always, outside the recovery suite), a crash point costs one dict lookup.

Boundaries: ``model.answered`` (a model reply is stored, nothing acted on it yet),
``effect.started`` (an effect is recorded started, not executed), ``effect.target`` (its
target is recorded under the fence, the very next thing is the effect), ``effect.applied``
(executed, not yet audited nor recorded complete), ``effect.audited`` (a write's audit
entry is stored, the effect not yet recorded complete), ``effect.completed`` (recorded
complete), ``approval.requested`` (an approval is stored and the run parked).

``BOUNDARY:N:stop`` sends ``SIGSTOP`` instead: the worker is paused there (as by a
debugger, a VM pause or a stall) until something sends it ``SIGCONT``; its heartbeat
stops with it, so its lease runs out and another worker may take the run over.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

from labfy_ref.errors import ConfigRefused

ENV_VAR = "LABFY_WORK_CRASH_AT"
BOUNDARIES = ("model.answered", "effect.started", "effect.target", "effect.applied",
              "effect.audited", "effect.completed", "approval.requested")


class CrashPoints:
    """Where this process dies, and how often each boundary was reached so far."""

    def __init__(self, plan: Mapping[str, int] | None = None,
                 pause: frozenset[str] = frozenset()) -> None:
        self.plan = dict(plan or {})
        self.pause = pause  # the boundaries that SIGSTOP rather than SIGKILL
        self.reached_count: dict[str, int] = {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> CrashPoints:
        """The plan in ``LABFY_WORK_CRASH_AT`` (``CONFIG_INVALID`` when malformed)."""
        text = environ.get(ENV_VAR, "")
        plan: dict[str, int] = {}
        pause: set[str] = set()
        for item in filter(None, (part.strip() for part in text.split(","))):
            boundary, _, rest = item.partition(":")
            count, _, how = rest.partition(":")
            if boundary not in BOUNDARIES or not count.isdecimal() or int(count) < 1 \
                    or how not in ("", "stop"):
                raise ConfigRefused(f"{ENV_VAR}: each item is BOUNDARY:N or BOUNDARY:N:stop "
                                    f"with N >= 1 and BOUNDARY one of {', '.join(BOUNDARIES)}")
            plan[boundary] = int(count)
            if how == "stop":
                pause.add(boundary)
        return cls(plan, frozenset(pause))

    def reached(self, boundary: str) -> None:
        """Count a boundary; die at once with SIGKILL if the plan says so."""
        if not self.plan:
            return
        count = self.reached_count.get(boundary, 0) + 1
        self.reached_count[boundary] = count
        if self.plan.get(boundary) == count:
            os.kill(os.getpid(), signal.SIGSTOP if boundary in self.pause else signal.SIGKILL)
