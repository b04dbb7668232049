"""The runtime's tool round against a raw HTTP round trip and against smolagents.

One turn of the real :class:`~labfy_ref.runtime.AgentRuntime` (its worker,
the driver, the strict parser, the gateway, ``LocalModelClient``) runs 20
``workspace.list_objects`` rounds and a final answer against the fake
provider, an instant server in its own process. Its *overhead per round* is
the turn's time per round minus the time of a raw round trip: an httpx async
POST of the very bodies the runtime sent, to the same fake, answered the same.
smolagents' ``ToolCallingAgent`` runs the same 21 steps on the same fake
(OpenAI ``tool_calls``), its tool calling the same gateway; its overhead per
step is measured the same way against its own bodies. Repetitions alternate
the four measurements, so drift touches all of them alike.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from labfy_ref.gateway import AgentGateway
from labfy_ref.model import ClientLimits, LocalModelClient
from labfy_ref.model.endpoint import parse_endpoint
from labfy_ref.protocol import canonical
from labfy_ref.runtime import AgentRuntime, RuntimeLimits
from labfy_ref.runtime.states import TurnState
from labfy_ref.workspace import open_workspace
from qualification.bench import smol
from qualification.bench.procs import FAKE_MODEL, Fake, new_workspace
from qualification.bench.table import Row, at_most, median

SECTION = "rounds"
LISTINGS = 20
ROUNDS = LISTINGS + 1
TASK = "List the workspace objects."
_LISTING = canonical({"type": "tool_call", "tool_id": "workspace.list_objects", "arguments": {}})
_FINAL = canonical({"type": "final", "text": smol.FINAL})


def _runtime_script() -> list[dict[str, Any]]:
    return [*([{"content": _LISTING}] * LISTINGS), {"content": _FINAL}]


async def _start(runtime: AgentRuntime) -> None:
    runtime.start()


async def _turn(runtime: AgentRuntime) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one turn, start to COMPLETED."""
    cpu, start = time.process_time(), time.perf_counter()
    turn, _ = runtime.start_turn(TASK)
    name = f"turn-{turn.id}"
    task = None
    for _ in range(100_000):  # the worker picks the turn up within a few loop passes
        task = next((t for t in asyncio.all_tasks() if t.get_name() == name), None)
        if task is not None or turn.state.terminal:
            break
        await asyncio.sleep(0)
    if task is not None:
        await asyncio.wait({task})
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    if turn.state is not TurnState.COMPLETED or turn.final_text != smol.FINAL:
        raise RuntimeError(f"bench turn ended {turn.state.value}: {turn.error}")
    return wall, cpu


async def _replay(http: httpx.AsyncClient, url: str, bodies: list[bytes]) -> float:
    """Seconds for the raw POSTs of ``bodies``, one after the other, each body read whole."""
    start = time.perf_counter()
    for body in bodies:
        reply = await http.post(url, content=body, headers={"Content-Type": "application/json"})
        reply.read()
        if reply.status_code != 200:
            raise RuntimeError(f"raw round trip answered {reply.status_code}")
    return time.perf_counter() - start


def _bodies(fake: Fake) -> list[bytes]:
    bodies = [r["body"].encode("utf-8") for r in fake.requests()
              if r["path"] == "/v1/chat/completions"]
    if len(bodies) != ROUNDS:
        raise RuntimeError(f"expected {ROUNDS} model requests, the fake saw {len(bodies)}")
    return bodies


def run(workdir: Path, fake: Fake, *, quick: bool) -> list[Row]:
    """The two rows of this section (9 repetitions, 5 with ``quick``, after one warm-up)."""
    reps = 5 if quick else 9
    workspace = open_workspace(new_workspace(workdir, "rounds"))
    store = workspace.open_store()
    limits = RuntimeLimits(max_rounds=ROUNDS + 8)
    gateway = AgentGateway(workspace, store, max_result_bytes=limits.max_result_bytes)
    client = LocalModelClient(parse_endpoint(fake.url), FAKE_MODEL, limits=ClientLimits())
    runtime = AgentRuntime(client, gateway, label="bench", limits=limits)
    smol_run = smol.agent_runner(fake.url, FAKE_MODEL, gateway, max_steps=ROUNDS + 4)
    loop = asyncio.new_event_loop()
    raw_http = httpx.AsyncClient(trust_env=False, timeout=60)
    url = fake.url + "/v1/chat/completions"
    ours, ours_cpu, ours_raw, raw_cpus, theirs, theirs_raw = [], [], [], [], [], []
    sizes: dict[str, int] = {}
    try:
        loop.run_until_complete(_start(runtime))
        for rep in range(reps + 1):  # the first is a warm-up: connections, imports, caches
            fake.script(_runtime_script())
            wall, cpu = loop.run_until_complete(_turn(runtime))
            bodies = _bodies(fake)
            fake.script(_runtime_script())
            raw_cpu = time.process_time()
            raw = loop.run_until_complete(_replay(raw_http, url, bodies))
            raw_cpu = time.process_time() - raw_cpu
            fake.script(smol.script(LISTINGS))
            start = time.perf_counter()
            answer = smol_run(TASK)
            smol_wall = time.perf_counter() - start
            if answer != smol.FINAL:
                raise RuntimeError(f"smolagents answered {str(answer)[:80]!r}")
            smol_bodies = _bodies(fake)
            fake.script(smol.script(LISTINGS))
            smol_raw = loop.run_until_complete(_replay(raw_http, url, smol_bodies))
            sizes = {"ours_request_bytes": sum(map(len, bodies)) // ROUNDS,
                     "smolagents_request_bytes": sum(map(len, smol_bodies)) // ROUNDS}
            if rep:
                ours.append(wall / ROUNDS)
                ours_cpu.append(cpu / ROUNDS)
                ours_raw.append(raw / ROUNDS)
                raw_cpus.append(raw_cpu / ROUNDS)
                theirs.append(smol_wall / ROUNDS)
                theirs_raw.append(smol_raw / ROUNDS)
    finally:
        loop.run_until_complete(runtime.close())
        loop.run_until_complete(client.aclose())
        loop.run_until_complete(raw_http.aclose())
        loop.close()
        store.close()
    overhead = median(ours) - median(ours_raw)
    smol_overhead = median(theirs) - median(theirs_raw)
    detail = {"repetitions": reps, "rounds": ROUNDS, "smolagents": smol.version(), **sizes,
              "ours_round_ms": _ms(ours), "ours_cpu_per_round_ms": _ms(ours_cpu),
              "raw_round_trip_ms": _ms(ours_raw), "raw_cpu_per_round_ms": _ms(raw_cpus),
              "runtime_own_cpu_per_round_ms": (median(ours_cpu) - median(raw_cpus)) * 1e3,
              "smolagents_step_ms": _ms(theirs),
              "smolagents_raw_round_trip_ms": _ms(theirs_raw),
              "min_overhead_ms": (min(ours) - min(ours_raw)) * 1e3,
              "min_smolagents_overhead_ms": (min(theirs) - min(theirs_raw)) * 1e3}
    figure = f"runtime overhead per tool round ({LISTINGS} × list_objects + final) / raw POST"
    return [
        Row(SECTION, figure, overhead * 1e3, median(ours_raw) * 1e3, "ms", at_most(0.4),
            detail=detail),
        Row(SECTION, "runtime overhead per round / smolagents ToolCallingAgent's per step",
            overhead * 1e3, smol_overhead * 1e3, "ms", at_most(0.1), detail=detail),
    ]


def _ms(values: list[float]) -> list[float]:
    return [round(v * 1e3, 4) for v in values]
