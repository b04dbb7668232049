"""``labfy-ref work worker``: claim runs under a lease, keep the lease alive, drive, finish (WK-04).

A worker takes the oldest runnable run of its database (:meth:`WorkStore.claim`),
extends the lease from a heartbeat thread while the run is driven (so a slow step
on the event loop never lets the lease lapse), and prints one JSON line per run:
``{"run_id", "task_id", "attempt", "claim_ms", "outcome", "detail"}`` (``claim_ms``: how long
the claim took, from asking the store to holding the run, which shows the contention of the
workers sharing the database). When the heartbeat finds the run fenced off (cancelled,
or taken over after the lease lapsed) the drive is stopped and its engine released.
SIGTERM (or SIGINT) stops the worker gracefully: the current run is released — queued
again for any worker, not lost — and the worker exits 0. ``--once`` takes at most one
run (none waiting: exit at once); ``--max-runs N`` stops after N runs; otherwise it waits
for work until stopped.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any

from labfy_ref.assemble import open_agent_model
from labfy_ref.config import DEFAULT_HEARTBEAT_SECONDS, DEFAULT_LEASE_SECONDS, WorkerConfig
from labfy_ref.errors import ErrorCode, LabfyError
from labfy_ref.logs import incident
from labfy_ref.model.route import model_route
from labfy_ref.protocol import ChatModel
from labfy_ref.runtime import RuntimeLimits
from labfy_ref.work.run.crash import CrashPoints
from labfy_ref.work.run.driver import (
    FAILED,
    LOST,
    RELEASED,
    RunControl,
    RunOutcome,
    RunServices,
    drive_run,
)
from labfy_ref.work.store.model import Claim, State
from labfy_ref.work.store.tasks import WorkStore
from labfy_ref.work.store.url import work_database
from labfy_ref.workspace.layout import open_workspace

log = logging.getLogger("labfy_ref.work")
#: Longest wait between two looks for runnable work when there was none.
MAX_IDLE_POLL_SECONDS = 1.0


@dataclasses.dataclass(frozen=True, slots=True)
class WorkerSettings:
    """A worker's validated settings."""

    name: str
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    heartbeat_seconds: float = DEFAULT_HEARTBEAT_SECONDS
    once: bool = False
    max_runs: int | None = None

    @property
    def idle_poll_seconds(self) -> float:
        """How long an idle worker waits before it looks for work again."""
        return min(MAX_IDLE_POLL_SECONDS, self.heartbeat_seconds)


def default_name() -> str:
    """``host:pid`` — unique among the live workers of one database."""
    return f"{socket.gethostname()[:200]}:{os.getpid()}"


class _Heartbeat(threading.Thread):
    """Extends a claim's lease every ``heartbeat_seconds`` until stopped or fenced off."""

    def __init__(self, store: WorkStore, claim: Claim, settings: WorkerSettings,
                 control: RunControl, on_lost: Any) -> None:
        super().__init__(name=f"heartbeat-{claim.run_id}", daemon=True)
        self._store = store
        self._claim = claim
        self._settings = settings
        self._control = control
        self._on_lost = on_lost
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self._settings.heartbeat_seconds):
            try:
                self._store.heartbeat(self._claim, self._settings.lease_seconds)
            except LabfyError as exc:
                if exc.code is ErrorCode.LEASE_NOT_HELD:
                    self._control.lost = True
                    self._on_lost()
                    return
                # the database is unreachable for now: try again; the lease may lapse,
                # then another worker takes the run over and this one is fenced out
                log.warning("heartbeat of run %s failed: %s", self._claim.run_id, exc.code.value)


class _Idle:
    """The log's note that a worker found nothing to take: once per idle spell, not per
    look (CLI-03)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.said = False

    def looked(self) -> None:
        """The queue was empty: say so, unless this spell already did."""
        if not self.said:
            log.info("worker %s waiting for queued runs", self.name)
            self.said = True

    def over(self) -> None:
        """A run was taken: the next empty look starts a new spell."""
        self.said = False


def _stopped_why(signalled: bool, once: bool, done: int) -> str:
    """Why the worker stopped, as its last log line says it (CLI-03)."""
    if signalled:
        return "stopped by a signal"
    if once and done == 0:
        return "no run waiting"
    return f"{done} run(s) done"


class Worker:
    """Claims and drives runs of one database until stopped or out of runs to take."""

    def __init__(self, store: WorkStore, services: RunServices, settings: WorkerSettings) -> None:
        self.store = store
        self.services = services
        self.settings = settings
        self._stopping = asyncio.Event()
        self._current: tuple[asyncio.Task[RunOutcome], RunControl] | None = None

    def stop(self) -> None:
        """Stop after giving the current run back (SIGTERM)."""
        self._stopping.set()
        if self._current is not None:
            task, control = self._current
            control.stopping = True
            task.cancel()

    async def serve(self) -> int:
        """Claim, drive and report runs; 0 when done or stopped."""
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.stop)
        done = 0
        settings = self.settings
        idle = _Idle(settings.name)
        while not self._stopping.is_set() and (settings.max_runs is None
                                               or done < settings.max_runs):
            asked = time.perf_counter()
            claim = self.store.claim(settings.name, settings.lease_seconds)
            claim_ms = round((time.perf_counter() - asked) * 1000, 3)
            if claim is None:
                if settings.once:
                    break
                idle.looked()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), settings.idle_poll_seconds)
                continue
            idle.over()
            log.info("worker %s took run %s of task %s (attempt %d)", settings.name,
                     claim.run_id, claim.task_id, claim.attempt)
            started = time.perf_counter()
            outcome = await self.run(claim)
            log.info("worker %s: run %s of task %s %s%s in %.1f s", settings.name, claim.run_id,
                     claim.task_id, outcome.outcome,
                     f" ({outcome.detail})" if outcome.detail else "",
                     time.perf_counter() - started)
            print(json.dumps({"run_id": claim.run_id, "task_id": claim.task_id,
                              "attempt": claim.attempt, "claim_ms": claim_ms,
                              **outcome.as_dict()}), flush=True)
            done += 1
            if settings.once:
                break
        log.info("worker %s stopped: %s; %d run(s) taken", settings.name,
                 _stopped_why(self._stopping.is_set(), settings.once, done), done)
        return 0

    async def run(self, claim: Claim) -> RunOutcome:
        """Drive one claimed run under a heartbeat; release it if the worker is stopping."""
        loop = asyncio.get_running_loop()
        control = RunControl()
        task = asyncio.create_task(drive_run(self.store, claim, self.services, control))
        self._current = (task, control)
        beat = _Heartbeat(self.store, claim, self.settings, control,
                          lambda: loop.call_soon_threadsafe(task.cancel))
        beat.start()
        try:
            outcome = await task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            outcome = RunOutcome(LOST if control.lost else RELEASED)
        except LabfyError as exc:  # the database failed us: the lease lapses, another takes over
            outcome = RunOutcome(LOST, exc.code.value)
        except Exception as exc:  # a bug ends this run FAILED, never the worker
            incident_id = incident(log, exc, f"run {claim.run_id}")
            outcome = self._fail(claim, incident_id)
        finally:
            self._current = None
            beat.done.set()
            await asyncio.to_thread(beat.join)
        if outcome.outcome == RELEASED:
            try:
                self.store.release(claim)
            except LabfyError as exc:
                return RunOutcome(LOST, exc.code.value)
        return outcome

    def _fail(self, claim: Claim, incident_id: str) -> RunOutcome:
        try:
            self.store.finish(claim, State.FAILED, error={
                "code": ErrorCode.INTERNAL_ERROR.value,
                "message": f"internal error (incident {incident_id})"})
        except LabfyError as exc:
            return RunOutcome(LOST, exc.code.value)
        return RunOutcome(FAILED, ErrorCode.INTERNAL_ERROR.value)


def run_worker(config: WorkerConfig, environ: Mapping[str, str] | None = None) -> int:
    """The body of ``labfy-ref work worker`` (SPEC §14) for its resolved configuration;
    refusals raise with their code."""
    environ = os.environ if environ is None else environ
    settings = WorkerSettings(default_name(), config.lease_seconds, config.heartbeat_seconds,
                              config.once, config.max_runs)
    limits = RuntimeLimits(conclude_after=config.conclude_after, guidance=config.guidance)
    crash = CrashPoints.from_env(environ)
    workspace = open_workspace(config.workspace)
    database = work_database(workspace.root, config.work_db)
    opened = open_agent_model(config.agent)
    model = opened.model
    workspace_store = workspace.open_store()
    try:
        store = WorkStore.open(database.url, workspace_id=workspace.workspace_id,
                               adopt=database.adopt)
        try:
            services = RunServices(workspace, workspace_store, model, str(model_route(model)),
                                   config.permission_mode, limits, crash)
            log.info("worker %s started: workspace %r, database %s, agent %s, %s, lease %g s",
                     settings.name, workspace.name, database.url.redacted(), opened.label,
                     config.permission_mode.value, settings.lease_seconds)
            return asyncio.run(_serve(store, services, settings, model))
        finally:
            store.close()
    finally:
        workspace_store.close()


async def _serve(store: WorkStore, services: RunServices, settings: WorkerSettings,
                 model: ChatModel) -> int:
    try:
        return await Worker(store, services, settings).serve()
    finally:
        closer = getattr(model, "aclose", None)
        if closer is not None:
            await closer()
