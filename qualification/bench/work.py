"""Work claims: four ``labfy-ref work worker`` processes on PostgreSQL against one on SQLite.

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

Where PostgreSQL is absent the PostgreSQL figures are rows that say why, without a goal.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
import json
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
    final = json.dumps({"type": "final", "text": answer("{nonce}")})
    scenario.write_text(json.dumps({"name": "work-bench", "models": [FAKE_MODEL],
                                    "answers": [], "keyed": {_KEY: [{"content": final}]}}),
                        "utf-8")
    child = Child([sys.executable, "-m", "fake_provider", "--scenario", str(scenario),
                   "--port", "0"], workdir, "fake-work")
    try:
        yield str(child.wait_ready()["url"]).rstrip("/")
    finally:
        child.stop()


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


def run(workdir: Path, *, quick: bool, tasks: int | None = None) -> list[Row]:
    """The work rows: throughput and claim p50/p99, PostgreSQL x4 against SQLite x1."""
    count = tasks if tasks is not None else (QUICK_TASKS if quick else TASKS)
    with fake_provider(workdir) as fake_url:
        sqlite = sqlite_url(workdir / "work-sqlite" / "work.sqlite")  # the workspace's default
        baseline = measure(workdir, fake_url, "sqlite", sqlite, workers=1, tasks=count)
        reason = absent_reason()
        if reason is not None:
            return rows(baseline, None, reason)
        cluster = PrivateCluster()
        try:
            cluster.start(durable=True)
            with cluster.database() as url:
                ours = measure(workdir, fake_url, "postgresql", url, workers=WORKERS,
                               tasks=count)
        finally:
            cluster.stop()
    return rows(baseline, ours, None)


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
        Row(SECTION, f"claim p50, {pair}", median(claims) if claims else nan,
            median(baseline.claim_ms), "ms", goal(at_most(CLAIM_P50_AT_MOST)),
            note=note(f"a claim is the same few statements and one synced commit on both "
                      f"engines: over a socket, one WAL flushed for four workers, it may cost "
                      f"a small factor (x{CLAIM_P50_AT_MOST:g}) of SQLite's in-process claim; "
                      f"more means the workers wait for each other{crowded}"),
            detail=detail),
        Row(SECTION, f"claim p99, {pair}", percentile(claims, 0.99) if claims else nan,
            percentile(baseline.claim_ms, 0.99), "ms", goal(at_most(CLAIM_P99_AT_MOST)),
            note=note(f"the tail: claims taken in turn would stack four workers' claims "
                      f"on the engine's own factor; x{CLAIM_P99_AT_MOST:g} leaves room for "
                      f"that factor, not for a queue"),
            detail=detail),
    ]
