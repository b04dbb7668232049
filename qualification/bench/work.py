"""Work: real ``labfy-ref work worker`` processes, with an instant model and a slow one.

**Instant model** — four workers on PostgreSQL against one on SQLite.

The same tasks (200; 40 with ``--quick``) are submitted to a Work database on each
engine, and real worker processes run them until every task is done: four sharing a
private PostgreSQL cluster (:mod:`qualification.work.postgres`, started durable: fsync
and synchronous commit on, as a team runs it, since SQLite syncs every commit too), and
the baseline, one worker alone on the workspace's SQLite file. Each task's agent gets a
one-step final answer from the fake provider (its own process), so what is timed is the
claim machinery and the store, not a model.

* Throughput: tasks / (last ``run.finished`` - start), from the store's events. On
  PostgreSQL the bench locks the runs table until all four workers wait on it in
  their first claim, so they start together and process start-up is not counted (start:
  the lock's release); on SQLite start is the first ``run.claimed``.
* Claim latency: the ``claim_ms`` of each worker's per-run line (asking the store to
  holding a run, timed in the worker), each worker's first claim left out (it waited at
  the start).
* Exactly once — a correctness check, not a goal: every task ``COMPLETED`` with its own
  conversation's answer, one run, attempt 1, claimed once, never taken over or released;
  one worker line per run; one model request per task in the fake provider's log.
  A violation raises :class:`ExactlyOnceViolated`, so the bench exits 1.

**Latency-bound** — a worker spends its life waiting for a model. The fake provider
answers each call after 200 ms (and 1 s; ``--quick``: 200 ms only) with any number of
calls at once, and each engine runs 1, 2, 4 and 8 workers (``--quick``: 1 and 4), each
started on an empty queue before the tasks are submitted. Throughput is counted in the
window in which every worker is busy (:func:`measure_bound`); the goal is N workers
finishing at least 0.8 x N times one worker's runs. A row with one slot (the provider
answers one call at a time, as one llama-server slot does) shows what no number of
workers can change, without a goal. The claim p50/p99 goals hold PostgreSQL x4's claims
against SQLite x1's here, where the workers wait for a model, not for the CPU; with the
instant model the claim figures are shown without a goal (on a machine with fewer cores
than workers + backends they measure the queue for the CPU). Every latency-bound run is
checked exactly once like the others.

Where PostgreSQL is absent the PostgreSQL figures are rows that say why, without a goal.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import json
import math
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import create_engine, text

from labfy_ref.clock import parse_iso, utcnow
from labfy_ref.work import ENV_VAR as WORK_DB_ENV
from labfy_ref.work import DatabaseUrl, State, WorkStore, sqlite_url
from labfy_ref.work.store.schema import runs
from labfy_ref.workspace.layout import open_workspace
from qualification.bench.procs import FAKE_MODEL, Child, new_workspace
from qualification.bench.table import Goal, Row, at_most, median, percentile
from qualification.harness import wait_until
from qualification.work.postgres import PrivateCluster, absent_reason

SECTION = "work"
WORKERS = 4
TASKS, QUICK_TASKS = 200, 40
_KEY = "bench"
_MARKER = re.compile(r"\[\[kit:" + _KEY + r":([A-Za-z0-9]+)\]\]")
_REPO = Path(__file__).resolve().parents[2]
#: Goals, as ratios of PostgreSQL x4 to SQLite x1 (see the notes of the rows for why).
THROUGHPUT_AT_LEAST = 1.0
CLAIM_P50_AT_MOST = 3.0
CLAIM_P99_AT_MOST = 5.0
#: Latency-bound rows: the model's seconds per call, the worker counts held against one
#: worker, and the goal: N workers finish at least this share of N times one worker's runs.
LATENCIES, QUICK_LATENCIES = (0.2, 1.0), (0.2,)
SCALED, QUICK_SCALED = (2, 4, 8), (4,)
SCALING_AT_LEAST = 0.8
#: Each worker's share of the runs is long enough for a window in which all are busy
#: (the workers find the queue within an idle poll of each other, up to a second): at least
#: this many seconds and this many runs, so the window holds several calls of each worker.
BUSY_SECONDS = 3.0
BUSY_RUNS = 8
#: One slot serves the calls one after the other: a few runs per worker show it.
SLOT_RUNS_PER_WORKER = 4
_WAITING = "waiting for queued runs"  # a worker's log line once it found the queue empty


class ExactlyOnceViolated(RuntimeError):
    """A run was executed twice, or not at all: the bench fails (exit 1)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Measured:
    """What one engine's workers did with the tasks."""

    engine: str
    workers: int
    tasks: int
    seconds: float
    claim_ms: list[float]
    facts: dict[str, Any]

    @property
    def throughput(self) -> float:
        """Runs finished per second."""
        return self.tasks / self.seconds if self.seconds > 0 else float("nan")


def message(nonce: str) -> str:
    """A task message the fake provider answers from the bench's script for ``nonce``."""
    return f"[[kit:{_KEY}:{nonce}]] answer at once"


def answer(nonce: str) -> str:
    """The final text the task of ``nonce`` ends with."""
    return f"done {nonce}"


@contextlib.contextmanager
def fake_provider(workdir: Path) -> Iterator[str]:
    """The fake provider in its own process, one final answer per conversation; its URL."""
    scenario = workdir / "fake-work.json"
    scenario.write_text(json.dumps(_scenario(0.0, 0)), "utf-8")
    child = Child([sys.executable, "-m", "fake_provider", "--scenario", str(scenario),
                   "--port", "0"], workdir, "fake-work")
    try:
        yield str(child.wait_ready()["url"]).rstrip("/")
    finally:
        child.stop()


def _scenario(latency: float, slots: int) -> dict[str, Any]:
    """One final answer per conversation after ``latency`` seconds, ``slots`` at once (0:
    any number)."""
    final = json.dumps({"type": "final", "text": answer("{nonce}")})
    return {"name": "work-bench", "models": [FAKE_MODEL], "answers": [], "slots": slots,
            "keyed": {_KEY: [{"content": final, "delay": latency}]}}


def _script(fake_url: str, latency: float, slots: int) -> None:
    """Serve the scenario of ``latency`` and ``slots`` from now (and rewind it)."""
    with httpx.Client(base_url=fake_url, trust_env=False, timeout=30) as client:
        assert client.post("/_fake/scenario",
                           json=_scenario(latency, slots)).status_code == 200


def _asked(fake_url: str) -> collections.Counter[str]:
    """Chat requests per conversation since the last reset ("" for one without a marker)."""
    with httpx.Client(base_url=fake_url, trust_env=False, timeout=30) as client:
        log = client.get("/_fake/requests").json()["requests"]
        assert client.post("/_fake/reset").status_code == 200
    asked: collections.Counter[str] = collections.Counter()
    for request in log:
        if request["method"] == "POST" and request["path"] == "/v1/chat/completions":
            found = set(_MARKER.findall(request["body"]))
            asked[found.pop() if len(found) == 1 else ""] += 1
    return asked


class _Gate:
    """PostgreSQL: the runs table held in EXCLUSIVE mode, so every claim waits until release."""

    def __init__(self, url: DatabaseUrl) -> None:
        self._engine = create_engine(url.url)
        try:
            self._holder = self._engine.connect()
            self._holder.begin()
            self._holder.execute(text(f"LOCK TABLE {runs.name} IN EXCLUSIVE MODE"))
            self._watcher = self._engine.connect().execution_options(
                isolation_level="AUTOCOMMIT")
        except BaseException:
            self._engine.dispose()
            raise

    def waiting(self) -> int:
        """How many transactions wait for the runs table (workers in their first claim)."""
        return int(self._watcher.execute(text(
            "SELECT count(*) FROM pg_locks WHERE relation = CAST(:name AS regclass) "
            "AND NOT granted"), {"name": runs.name}).scalar_one())

    def release(self) -> datetime.datetime:
        """Let the claims through (idempotent); the moment they were let through."""
        if not self._holder.closed and self._holder.in_transaction():
            self._holder.commit()
        moment = utcnow()
        self._holder.close()
        self._watcher.close()
        self._engine.dispose()
        return moment


def _start_workers(workspace: Path, url: DatabaseUrl, fake_url: str, count: int,
                   workdir: Path, engine: str) -> list[tuple[subprocess.Popen[bytes], Path]]:
    """``count`` real ``labfy-ref work worker`` processes; stdout (their run lines) to a file."""
    argv = [sys.executable, "-m", "labfy_ref.cli.main", "work", "worker",
            "--workspace", str(workspace), "--permission-mode", "workspace-write",
            "--agent-mode", "local-model", "--agent-endpoint", fake_url,
            "--agent-model", FAKE_MODEL, "--agent-timeout", "60"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LABFY_")}
    env[WORK_DB_ENV] = url.url.render_as_string(hide_password=False)  # as a team would
    started = []
    for index in range(count):
        out = workdir / f"work-{engine}-{index}.out"
        # stderr in a .log, so a crashed bench prints its tail (__main__._dump_logs)
        with out.open("wb") as sink, (workdir / f"work-{engine}-{index}.log").open("wb") as err:
            started.append((subprocess.Popen(argv, cwd=_REPO, env=env, stdout=sink, stderr=err,
                                             stdin=subprocess.DEVNULL), out))
    return started


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text("utf-8").splitlines() if line.strip()]


def _printed(out: Path) -> int:
    return out.read_bytes().count(b"\n")


def _stop(workers: list[tuple[subprocess.Popen[bytes], Path]]) -> list[int | None]:
    """SIGTERM every worker (an idle one exits 0), SIGKILL one that outlives 30 s."""
    for process, _ in workers:
        if process.poll() is None:
            process.terminate()
    codes: list[int | None] = []
    for process, _ in workers:
        try:
            codes.append(process.wait(timeout=30))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
            codes.append(None)
    return codes


def _dead(workers: list[tuple[subprocess.Popen[bytes], Path]]) -> bool:
    return any(process.poll() is not None for process, _ in workers)


def measure(workdir: Path, fake_url: str, engine: str, url: DatabaseUrl, *, workers: int,
            tasks: int) -> Measured:
    """Submit ``tasks`` tasks, run ``workers`` workers on ``url`` until all are done,
    check each ran exactly once, and return the figures."""
    workspace = new_workspace(workdir, f"work-{engine}", specimen=False)
    store = WorkStore.open(url, workspace_id=open_workspace(workspace).workspace_id)
    try:
        nonces = {store.submit(message(f"{engine}{i:04d}")).task.id: f"{engine}{i:04d}"
                  for i in range(tasks)}
        _asked(fake_url)  # a clean request log
        gate = _Gate(url) if url.dialect == "postgresql" else None
        started: datetime.datetime | None = None
        try:
            running = _start_workers(workspace, url, fake_url, workers, workdir, engine)
            try:
                if gate is not None:
                    wait_until(lambda: gate.waiting() >= workers or _dead(running),
                               timeout=120, interval=0.05)
                    started = gate.release()
                wait_until(lambda: sum(_printed(out) for _, out in running) >= tasks
                           or _dead(running), timeout=120 + 2 * tasks, interval=0.05)
            finally:
                codes = _stop(running)
        finally:
            if gate is not None:
                gate.release()  # idempotent: a bench that failed first lets go of the table
        if codes != [0] * workers:
            raise RuntimeError(f"work workers exited {codes} on {engine} (see work-{engine}-*.log)")
        printed = [_lines(out) for _, out in running]
        check_exactly_once(store, nonces, [line for lines in printed for line in lines],
                           _asked(fake_url))
        window = _window(store, list(nonces), started)
        claim_ms = [float(line["claim_ms"]) for lines in printed for line in lines[1:]]
        return Measured(engine, workers, tasks, window, claim_ms,
                        {**durability(url), "first_claims_left_out": workers,
                         "runs_per_worker": [len(lines) for lines in printed],
                         "start": "lock released" if started is not None else "first claim"})
    finally:
        store.close()


def measure_bound(workdir: Path, fake_url: str, engine: str, url: DatabaseUrl | None, *,
                  workers: int, latency: float, slots: int = 0,
                  runs_per_worker: int | None = None) -> Measured:
    """Latency-bound: ``workers`` workers on ``url`` while each model call takes ``latency``
    seconds (``slots`` at once, 0: any number); their steady throughput and claims.

    The workers start on an empty queue; once each has said it waits for queued runs,
    the tasks are submitted. Throughput is counted in the window in which every worker
    is busy: from the last worker's first claim to the first worker's last finish (its
    runs finished in it / its length), so neither the start-up nor the ragged end counts.
    """
    per_worker = runs_per_worker or max(BUSY_RUNS, math.ceil(BUSY_SECONDS / latency))
    label = f"{engine[:2]}{round(latency * 1000)}n{workers}s{slots}"
    workspace = new_workspace(workdir, f"work-{label}", specimen=False)
    if url is None:  # SQLite: the workspace's own work.sqlite
        url = sqlite_url(workspace / "work.sqlite")
    store = WorkStore.open(url, workspace_id=open_workspace(workspace).workspace_id)
    try:
        _script(fake_url, latency, slots)
        _asked(fake_url)  # a clean request log
        running = _start_workers(workspace, url, fake_url, workers, workdir, label)
        logs = [workdir / f"work-{label}-{index}.log" for index in range(workers)]
        try:
            wait_until(lambda: all(_WAITING in log.read_text("utf-8", "replace")
                                   for log in logs) or _dead(running),
                       timeout=120, interval=0.05)
            nonces = {store.submit(message(f"{label}x{i:04d}")).task.id: f"{label}x{i:04d}"
                      for i in range(workers * per_worker)}
            budget = 120 + 2 * len(nonces) * latency
            wait_until(lambda: sum(_printed(out) for _, out in running) >= len(nonces)
                       or _dead(running), timeout=budget, interval=0.05)
        finally:
            codes = _stop(running)
        if codes != [0] * workers:
            raise RuntimeError(f"work workers exited {codes} on {engine} (see work-{label}-*.log)")
        printed = [_lines(out) for _, out in running]
        check_exactly_once(store, nonces, [line for lines in printed for line in lines],
                           _asked(fake_url))
        finished, window = _busy_window(store, printed)
        return Measured(engine, workers, finished, window,
                        [float(line["claim_ms"]) for lines in printed for line in lines],
                        {"latency_s": latency, "slots": slots, "runs": len(nonces),
                         "runs_per_worker": [len(lines) for lines in printed],
                         "window_s": round(window, 3), "runs_in_window": finished})
    finally:
        store.close()


def _busy_window(store: WorkStore, printed: list[list[dict[str, Any]]]) -> tuple[int, float]:
    """(runs finished in the window where every worker is busy, its seconds)."""
    claimed: dict[str, datetime.datetime] = {}
    finished: dict[str, datetime.datetime] = {}
    for line in (line for lines in printed for line in lines):
        for event in store.list_events(line["task_id"]):
            if event.run_id == line["run_id"] and event.type == "run.claimed":
                claimed[line["run_id"]] = parse_iso(event.at)
            elif event.run_id == line["run_id"] and event.type == "run.finished":
                finished[line["run_id"]] = parse_iso(event.at)
    busy = [lines for lines in printed if lines]
    start = max(min(claimed[line["run_id"]] for line in lines) for lines in busy)
    end = min(max(finished[line["run_id"]] for line in lines) for lines in busy)
    count = sum(1 for moment in finished.values() if start < moment <= end)
    seconds = (end - start).total_seconds()
    return (count, seconds) if seconds > 0 and count else (0, math.nan)


def check_exactly_once(store: WorkStore, nonces: dict[str, str], lines: list[dict[str, Any]],
                       asked: collections.Counter[str]) -> None:
    """Every task ran once, on one run, with one model request; ExactlyOnceViolated if not."""
    problems: list[str] = []
    runs: set[str] = set()
    for task_id, nonce in nonces.items():
        task = store.get_task(task_id)
        if (task.state, task.final_text) != (State.COMPLETED, answer(nonce)):
            problems.append(f"task {task_id} is {task.state.value} with {task.final_text!r}")
        task_runs = store.list_runs(task_id)
        runs.update(run.id for run in task_runs)
        if [(run.state, run.attempt) for run in task_runs] != [(State.COMPLETED, 1)]:
            problems.append(f"task {task_id} has runs "
                            f"{[(run.state.value, run.attempt) for run in task_runs]}")
        kinds = collections.Counter(event.type for event in store.list_events(task_id))
        seen = {kind: kinds[kind] for kind in ("run.claimed", "run.taken_over", "run.released",
                                               "run.finished")}
        if seen != {"run.claimed": 1, "run.taken_over": 0, "run.released": 0,
                    "run.finished": 1}:
            problems.append(f"task {task_id} has events {seen}")
        if asked[nonce] != 1:
            problems.append(f"task {task_id} asked the model {asked[nonce]} times")
    strays = sum(count for nonce, count in asked.items() if nonce not in nonces.values())
    if strays:
        problems.append(f"{strays} model requests of no task of this run")
    by_run = collections.Counter(line["run_id"] for line in lines)
    if set(by_run) != runs or set(by_run.values()) != {1}:
        problems.append(f"workers reported {len(lines)} runs of {len(runs)}, "
                        f"{sum(n > 1 for n in by_run.values())} more than once")
    bad = [line for line in lines if (line["outcome"], line["attempt"]) != ("COMPLETED", 1)]
    if bad:
        problems.append(f"{len(bad)} worker lines not COMPLETED at attempt 1, e.g. {bad[0]}")
    if problems:
        raise ExactlyOnceViolated(f"{len(problems)} violations of exactly-once: "
                                  + "; ".join(problems[:5]))


def _window(store: WorkStore, task_ids: list[str], started: datetime.datetime | None) -> float:
    """Seconds from the start (the gate's release, or the first claim) to the last finish."""
    claimed, finished = [], []
    for task_id in task_ids:
        for event in store.list_events(task_id):
            if event.type == "run.claimed":
                claimed.append(parse_iso(event.at))
            elif event.type == "run.finished":
                finished.append(parse_iso(event.at))
    start = started if started is not None else min(claimed)
    return (max(finished) - start).total_seconds()


def durability(url: DatabaseUrl) -> dict[str, Any]:
    """How each engine syncs a commit: the figures compare like with like."""
    if url.dialect == "sqlite":
        path = url.sqlite_path
        assert path is not None
        with contextlib.closing(sqlite3.connect(path)) as conn:
            mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
            sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        return {"journal_mode": mode, "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL",
                                                      3: "EXTRA"}.get(sync, sync)}
    engine = create_engine(url.url)
    try:
        with engine.connect() as conn:
            return {name: conn.execute(text(f"SHOW {name}")).scalar_one()
                    for name in ("server_version", "fsync", "synchronous_commit")}
    finally:
        engine.dispose()


def run(workdir: Path, *, quick: bool, tasks: int | None = None,
        runs_per_worker: int | None = None) -> list[Row]:
    """The work rows: an instant model (throughput and claims, PostgreSQL x4 against SQLite
    x1), then a latency-bound one (each engine's N workers against its one, the claims)."""
    count = tasks if tasks is not None else (QUICK_TASKS if quick else TASKS)
    with fake_provider(workdir) as fake_url:
        sqlite = sqlite_url(workdir / "work-sqlite" / "work.sqlite")  # the workspace's default
        baseline = measure(workdir, fake_url, "sqlite", sqlite, workers=1, tasks=count)
        reason = absent_reason()
        if reason is not None:
            return [*rows(baseline, None, reason),
                    *bound_rows(workdir, fake_url, None, reason, quick=quick,
                                runs_per_worker=runs_per_worker)]
        cluster = PrivateCluster()
        try:
            cluster.start(durable=True)
            with cluster.database() as url:
                ours = measure(workdir, fake_url, "postgresql", url, workers=WORKERS,
                               tasks=count)
                _script(fake_url, 0.0, 0)
                bound = bound_rows(workdir, fake_url, url, None, quick=quick,
                                   runs_per_worker=runs_per_worker)
        finally:
            cluster.stop()
    return [*rows(baseline, ours, None), *bound]


def bound_rows(workdir: Path, fake_url: str, postgres: DatabaseUrl | None,
               not_run: str | None, *, quick: bool,
               runs_per_worker: int | None = None) -> list[Row]:
    """Latency-bound rows: per engine and latency, N workers' throughput against one
    worker's (goal: at least ``SCALING_AT_LEAST`` x N), four workers against one llama-server
    slot (no goal: nothing can help), and PostgreSQL x4's claims against SQLite x1's."""
    latencies = QUICK_LATENCIES if quick else LATENCIES
    scaled = QUICK_SCALED if quick else SCALED
    engines: list[tuple[str, DatabaseUrl | None]] = [("sqlite", None)]
    if postgres is not None:
        engines.append(("postgresql", postgres))
    result: list[Row] = []
    once = 0
    claims: dict[str, list[float]] = {}

    def measured(engine: str, url: DatabaseUrl | None, workers: int, latency: float,
                 slots: int = 0) -> Measured:
        nonlocal once
        figures = measure_bound(workdir, fake_url, engine, url, workers=workers,
                                latency=latency, slots=slots, runs_per_worker=runs_per_worker
                                or (SLOT_RUNS_PER_WORKER if slots else None))
        once += figures.facts["runs"]
        return figures

    for latency in latencies:
        ms = f"{latency * 1000:g} ms"
        for engine, url in engines:
            one = measured(engine, url, 1, latency)
            if latency == latencies[0]:
                claims[f"{engine}1"] = one.claim_ms
            for workers in scaled:
                many = measured(engine, url, workers, latency)
                if latency == latencies[0] and workers == WORKERS:
                    claims[f"{engine}{WORKERS}"] = many.claim_ms
                result.append(Row(
                    SECTION, f"throughput, {engine} x{workers} / x1, model {ms} per call",
                    many.throughput, one.throughput, "runs/s",
                    Goal(">=", SCALING_AT_LEAST * workers),
                    note=f"a worker spends its life waiting for the model: {workers} workers "
                         f"must finish at least {SCALING_AT_LEAST:g} x {workers} times one "
                         f"worker's runs (the window in which all are busy)",
                    detail={"one": one.facts, "many": many.facts}))
            if latency == latencies[0] and (engine == "postgresql" or postgres is None):
                slot = measured(engine, url, WORKERS, latency, slots=1)
                result.append(Row(
                    SECTION, f"throughput, {engine} x{WORKERS} / x1, model {ms} per call, "
                             f"one slot", slot.throughput, one.throughput, "runs/s",
                    note="one llama-server slot serves one call at a time: no number of "
                         "workers can help (a ratio near 1 is right, far below 1 is a cost)",
                    detail={"one": one.facts, "many": slot.facts}))
    result.insert(0, Row(SECTION, f"runs executed exactly once, latency-bound ({once} runs)",
                         once, once, "count", note="checked, not a goal: as above, every "
                         "latency-bound run of every row", detail={"runs": once}))
    pg = claims.get(f"postgresql{WORKERS}")
    pair = f"PostgreSQL x{WORKERS} / SQLite x1, model {latencies[0] * 1000:g} ms per call"
    nan = float("nan")
    for label, pick, bound in (("p50", median, CLAIM_P50_AT_MOST),
                               ("p99", lambda v: percentile(v, 0.99), CLAIM_P99_AT_MOST)):
        result.append(Row(
            SECTION, f"claim {label}, {pair}", pick(pg) if pg else nan,
            pick(claims["sqlite1"]), "ms", at_most(bound) if pg else None,
            note=(f"NOT RUN: {not_run}" if pg is None else
                  f"a claim is a few statements and one synced commit on both engines: over "
                  f"a socket it may cost a small factor (x{bound:g}) of SQLite's in-process "
                  f"claim; more means the workers wait for each other"),
            detail={"sqlite_x1_claims": len(claims["sqlite1"]),
                    "postgresql_claims": len(pg or [])}))
    return result


def rows(baseline: Measured, ours: Measured | None, not_run: str | None) -> list[Row]:
    """The section's rows; without ``ours`` (no PostgreSQL) they say why and have no goal."""
    def goal(value: Goal) -> Goal | None:
        return None if ours is None else value

    def note(why: str) -> str:
        return f"NOT RUN: {not_run}" if ours is None else why

    nan = float("nan")
    claims = [] if ours is None else ours.claim_ms
    cpus = os.cpu_count() or 1
    # fewer cores than workers: the figures then include the workers' wait for a CPU
    crowded = (f" ({cpus} CPUs here for {WORKERS} workers, PostgreSQL and the fake provider)"
               if cpus < WORKERS else "")
    detail = {"tasks": baseline.tasks, "workers": WORKERS, "cpus": cpus, "not_run": not_run,
              "postgresql": None if ours is None else {**ours.facts, "seconds": ours.seconds},
              "sqlite": {**baseline.facts, "seconds": baseline.seconds}}
    pair = f"PostgreSQL x{WORKERS} / SQLite x1"
    return [
        Row(SECTION, f"runs executed exactly once, {pair}", nan if ours is None else ours.tasks,
            baseline.tasks, "count",
            note=note("checked, not a goal: one run per task, attempt 1, claimed once, one "
                      "worker line, one model request (a violation fails the bench)"),
            detail=detail),
        Row(SECTION, f"throughput, {pair}, {baseline.tasks} runs",
            nan if ours is None else ours.throughput, baseline.throughput, "runs/s",
            goal(Goal(">=", THROUGHPUT_AT_LEAST)),
            note=note("four workers claiming with SKIP LOCKED must not be slower than one "
                      f"worker alone; slower means claims serialise the workers{crowded}"),
            detail=detail),
        Row(SECTION, f"claim p50, {pair}, instant model", median(claims) if claims else nan,
            median(baseline.claim_ms), "ms",
            note=note(f"no goal here: with an instant model the workers do nothing but claim, "
                      f"so {WORKERS} workers, their PostgreSQL backends and the fake provider "
                      f"queue for the CPUs{crowded}; the goal is held where a worker waits for "
                      f"its model (the latency-bound claim rows)"),
            detail=detail),
        Row(SECTION, f"claim p99, {pair}, instant model",
            percentile(claims, 0.99) if claims else nan,
            percentile(baseline.claim_ms, 0.99), "ms",
            note=note("the tail of the same claims (no goal, as above)"),
            detail=detail),
    ]
