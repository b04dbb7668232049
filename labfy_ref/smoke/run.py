"""``labfy-ref smoke`` (SM-03): a real model through the SPECIMEN scenario, over HTTP.

Stages, each a line on the terminal as it passes: govern (file size, KV
cache, scratch disk) → verify (SHA-256, with a progress bar) → start our own
llama-server (SM-02/05/06) → a fresh temporary SPECIMEN workspace and server
on a free loopback port → the scenario driven over the real HTTP API exactly
as a user's client does: log in with the login code, start a turn, poll
it; the model must read an object and prepare research; the turn pauses
``AUTHORIZATION_REQUIRED`` with the campaign untouched (no contact); a human
grant; resume of the same turn; the SPECIMEN campaign ran; a final answer
that is the model's own (not a string of its system prompt).

The system prompt stays generic: nothing here hints the workspace's ids or
the expected calls. A model that does not get through is recorded ``FAIL``
with the stage reached and why; the scenario is never weakened.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import tempfile
from collections.abc import AsyncIterator, Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from labfy_ref.config import AgentConfig, ServeConfig, SupervisedModel
from labfy_ref.errors import ConfigRefused, LabfyError
from labfy_ref.eval.tasks import degenerate, grounded
from labfy_ref.ids import repeatable
from labfy_ref.model.binary import identify
from labfy_ref.model.endpoint import LoopbackHost
from labfy_ref.model.gguf import PinnedGguf, Progress, open_gguf
from labfy_ref.model.supervised import (
    CTX_SIZE,
    REPEAT_PENALTY,
    SEED,
    TEMPERATURE,
    SupervisedLlama,
    govern,
    supervised_llama,
)
from labfy_ref.modes import AgentMode, PermissionMode
from labfy_ref.protocol import ChatModel, system_prompt
from labfy_ref.protocol.narrowing import DEFAULT_CONCLUDE_AFTER, DEFAULT_GUIDANCE, Guidance
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.runtime.states import TurnState
from labfy_ref.server.app import create_app
from labfy_ref.server.auth import cookie_name, new_login_code
from labfy_ref.server.serve import bind_socket, build_state, uvicorn_config
from labfy_ref.smoke.record import SmokeRecord
from labfy_ref.tools import default_catalog
from labfy_ref.workspace import init_workspace, open_workspace

#: What a user asks in the README's tour.
QUESTION = "Is the early ivy bee record real? Check the workspace, then prepare research on it."
#: Bounds on the wait for each pause of the turn (a 135M model on 2 cores: seconds).
TURN_SECONDS = 600.0
POLL_SECONDS = 0.1
MODEL_TIMEOUT_SECONDS = 300.0
#: How long the served workspace's bridge may take to settle before the stage goes on.
BRIDGE_SETTLE_SECONDS = 60.0
_API = "/api/v1/agent-runtime"


class SmokeFailed(Exception):
    """The scenario stopped: the reason goes in the record."""


@dataclasses.dataclass(frozen=True, slots=True)
class SmokeOptions:
    """What ``labfy-ref smoke`` was asked to run."""

    model: SupervisedModel
    record_dir: Path
    #: As every surface (PR-07: one default, no per-model value).
    conclude_after: int = DEFAULT_CONCLUDE_AFTER
    #: The narrowing's guidance (PR-08), as every surface.
    guidance: Guidance = DEFAULT_GUIDANCE


Say = Callable[[str], None]


async def run_smoke(options: SmokeOptions, say: Say,
                    progress: Progress | None = None) -> SmokeRecord:
    """Run every stage; always return the record (written to ``options.record_dir``)."""
    model = options.model
    record = SmokeRecord(
        model={"file": model.model_file.name, "bytes": model.model_file.stat().st_size,
               "sha256": model.model_sha256},
        llama_server={"version": None, "package": None, "sha256": None, "cpu_variant": None},
        settings={"temperature": TEMPERATURE, "seed": SEED, "ctx_size": CTX_SIZE,
                  "repeat_penalty": REPEAT_PENALTY, "guidance": options.guidance.as_json()},
        conclude_after=options.conclude_after)
    with tempfile.TemporaryDirectory(prefix="labfy-smoke-") as scratch:
        try:
            await _stages(options, record, Path(scratch), say, progress)
        except LabfyError as exc:
            record.reason = f"{exc.code.value}: {exc.message}"
            record.refused = isinstance(exc, ConfigRefused) and record.reached in (None,
                                                                                   "governor")
        except SmokeFailed as exc:
            record.reason = str(exc)
    path = record.write(options.record_dir)
    say(f"{record.status} (reached: {record.reached}) — record: {path}")
    if record.reason:
        say(f"reason: {record.reason}")
    return record


async def _stages(options: SmokeOptions, record: SmokeRecord, scratch: Path, say: Say,
                  progress: Progress | None) -> None:
    wanted = options.model
    pinned = open_gguf(wanted.model_file)
    with pinned:  # SM-09: the file checked is the file that runs
        await _pinned_stages(options, record, pinned, scratch, say=say, progress=progress)


async def _pinned_stages(options: SmokeOptions, record: SmokeRecord, pinned: PinnedGguf,
                         scratch: Path, *, say: Say, progress: Progress | None) -> None:
    wanted = options.model
    with record.timed("governor"):
        report = govern(pinned, wanted.llama_server, scratch)
    record.passed("governor")
    say(f"governor: ok ({report.memory_text()})")
    with record.timed("verify"):
        pinned.hash(wanted.model_sha256, progress)
    record.passed("verify")
    say(f"verify: ok (sha256 {wanted.model_sha256[:12]}…)")
    identity = identify(wanted.llama_server)
    record.llama_server.update(version=identity.version, package=identity.package,
                               sha256=identity.sha256)
    model_id = wanted.model_file.stem
    model = supervised_llama(wanted.llama_server, pinned, model_id,
                             cpu_variant=wanted.cpu_variant,
                             timeout_seconds=MODEL_TIMEOUT_SECONDS, log_dir=scratch / "llama")
    try:
        with record.timed("start"):
            await model.start()
        record.llama_server["cpu_variant"] = model.supervisor.cpu_variant
        record.model["opened"] = model.supervisor.opened
        for note in model.supervisor.notes:
            say(f"start: {note}")
        record.passed("start")
        say(f"start: llama-server ready ({identity.version}; cpu variant "
            f"{model.supervisor.cpu_variant or 'built in'})")
        # repeatable ids, seeded by the model's digest: the same model sees the same
        # workspace and, at temperature 0, runs the same turn (as the eval's tasks do)
        with repeatable(f"smoke:{wanted.model_sha256}"):
            workspace = init_workspace(scratch / "workspace", specimen=True)
            config = serve_config(workspace.root, model_id, options.model,
                                  mode=PermissionMode.READ_ONLY,
                                  conclude_after=options.conclude_after,
                                  guidance=options.guidance, origin="smoke")
            async with serve_workspace(config, model) as (base_url, code):
                with record.timed("turn"):
                    await _scenario(base_url, code, record, say)
    finally:
        await model.aclose()


def serve_config(workspace: Path, model_id: str, supervised: SupervisedModel, *,
                 mode: PermissionMode, conclude_after: int, origin: str,
                 guidance: Guidance = DEFAULT_GUIDANCE) -> ServeConfig:
    """The configuration of a workspace server on a supervised model (smoke and eval)."""
    agent = AgentConfig(AgentMode.LOCAL_MODEL, None, model_id, MODEL_TIMEOUT_SECONDS,
                        supervised, {"mode": origin})
    return ServeConfig(workspace=workspace, host=LoopbackHost.IPV4, port=None, ready_file=None,
                       permission_mode=mode, bridge=False, composition=None,
                       accounts=None, agent=agent, log_level="warning", log_file=None,
                       debug=False, conclude_after=conclude_after, guidance=guidance)


@contextlib.asynccontextmanager
async def serve_workspace(config: ServeConfig, model: SupervisedLlama | None, *,
                          limits: RuntimeLimits | None = None, owns_model: bool = True,
                          agent: ChatModel | None = None) -> AsyncIterator[tuple[str, str]]:
    """The workspace server on a free loopback port, in this event loop (smoke and eval).

    ``owns_model=False`` leaves ``model`` running when the server stops (the
    eval serves one workspace per task on one model).
    """
    assert config.workspace is not None
    sock = bind_socket(config.host.value, None)
    port = int(sock.getsockname()[1])
    code = new_login_code()
    state = build_state(config, open_workspace(config.workspace), port, code, supervised=model,
                        limits=limits, owns_model=owns_model, agent=agent)
    server = uvicorn.Server(uvicorn_config(create_app(state)))
    task = asyncio.create_task(server.serve(sockets=[sock]), name="smoke-server")
    try:
        for _ in range(500):
            if server.started or task.done():
                break
            await asyncio.sleep(0.01)
        if not server.started:
            raise SmokeFailed("the workspace server did not start")
        with contextlib.suppress(TimeoutError):  # the bridge settles in the background (HO-07)
            await asyncio.wait_for(state.settled(), BRIDGE_SETTLE_SECONDS)
        yield f"http://127.0.0.1:{port}", code
    finally:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 30)
        sock.close()


class ApiClient:
    """What a browser does: the session cookie, and CSRF + Origin on every mutation."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.http = httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=30)
        self.headers: dict[str, str] = {}

    async def login(self, code: str) -> None:
        response = await self.http.post("/api/v1/session", json={"token": code})
        _expect(response, 200, "login")
        port = int(self.base_url.rsplit(":", 1)[1])
        cookie = response.cookies.get(cookie_name(port))
        self.headers = {"Cookie": f"{cookie_name(port)}={cookie}",
                        "X-CSRF-Token": response.json()["csrf_token"], "Origin": self.base_url}

    async def get(self, path: str) -> dict[str, Any]:
        response = await self.http.get(path, headers=self.headers)
        _expect(response, 200, f"GET {path}")
        body: dict[str, Any] = response.json()
        return body

    async def post(self, path: str, body: Any, status: int) -> dict[str, Any]:
        response = await self.http.post(path, json=body, headers=self.headers)
        _expect(response, status, f"POST {path}")
        document: dict[str, Any] = response.json()
        return document

    async def wait(self, turn_id: str, states: AbstractSet[str]) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + TURN_SECONDS
        while loop.time() < deadline:
            turn: dict[str, Any] = (await self.get(f"{_API}/turns/{turn_id}"))["turn"]
            if turn["state"] in states:
                return turn
            await asyncio.sleep(POLL_SECONDS)
        raise SmokeFailed(f"the turn did not reach {sorted(states)} in {TURN_SECONDS:.0f} s")


def _expect(response: httpx.Response, status: int, what: str) -> None:
    if response.status_code != status:
        raise SmokeFailed(f"{what} answered {response.status_code}: {response.text[:200]}")


ENDED = frozenset(state.value for state in TurnState if state.terminal)
#: What the model was told: its words are no evidence that an answer is grounded.
_INSTRUCTIONS = system_prompt(default_catalog())


async def _scenario(base_url: str, code: str, record: SmokeRecord, say: Say) -> None:
    client = ApiClient(base_url)
    try:
        await client.login(code)
        turn = (await client.post(f"{_API}/turns", {"message": QUESTION}, 202))["turn"]
        record.turn["id"] = turn["id"]
        record.passed("turn")
        say(f"turn: {turn['id']} started: {QUESTION!r}")
        try:
            paused = await client.wait(turn["id"], {"AUTHORIZATION_REQUIRED"} | ENDED)
            _calls(record, paused, say)
            _read_and_prepared(record, paused)
            campaign_id = str(paused["authorization"]["campaign_id"])
            campaign = (await client.get(f"/api/v1/research/campaigns/{campaign_id}"))["campaign"]
            if campaign["status"] != "PREPARED" or campaign["evidence"]:
                raise SmokeFailed("the campaign was contacted before the grant")
            record.passed("paused")
            say(f"paused: AUTHORIZATION_REQUIRED for {campaign_id}, no contact yet")
            await client.post("/api/v1/grants", {"campaign_id": campaign_id}, 201)
            record.passed("grant")
            say("grant: a human granted the campaign")
            await client.post(f"{_API}/turns/{turn['id']}/resume", None, 202)
            record.passed("resume")
            say("resume: the same turn continues")
            done = await client.wait(turn["id"], ENDED)
            _calls(record, done, say)
            campaign = (await client.get(f"/api/v1/research/campaigns/{campaign_id}"))["campaign"]
            if campaign["status"] != "COMPLETED" or not campaign["evidence"]:
                raise SmokeFailed(f"the SPECIMEN campaign did not run ({campaign['status']})")
            record.passed("campaign")
            say(f"campaign: COMPLETED with {len(campaign['evidence'])} evidence item(s)")
            _final(record, done)
            say(f"final: {done['final_text'][:200]!r}")
        finally:
            await _usage(client, record)
    finally:
        await client.http.aclose()


def _calls(record: SmokeRecord, turn: dict[str, Any], say: Say) -> None:
    known = len(record.turn.get("tool_calls", []))
    calls = [{"tool_id": c["tool_id"], "status": c["status"]} for c in turn["tool_calls"]]
    for call, raw in zip(calls[known:], turn["tool_calls"][known:], strict=True):
        say(f"  call: {call['tool_id']} {_short(raw['arguments'])} → {call['status']}")
    record.turn["tool_calls"] = calls


def _short(arguments: Any) -> str:
    text = json.dumps(arguments, ensure_ascii=False)
    return text if len(text) <= 120 else text[:117] + "…"


def _read_and_prepared(record: SmokeRecord, turn: dict[str, Any]) -> None:
    ok = [c for c in turn["tool_calls"] if c["status"] == "ok"]
    names = [c["tool_id"] for c in ok]
    if "workspace.read_object" not in names:
        raise SmokeFailed(f"the model read no object (turn {turn['state']}"
                          f"{_error(turn)}; calls: {', '.join(names) or 'none'})")
    record.passed("read")
    if turn["state"] != "AUTHORIZATION_REQUIRED" or "research.prepare" not in names:
        raise SmokeFailed(f"the model prepared no research (turn {turn['state']}{_error(turn)})")
    prepared = next(c for c in ok if c["tool_id"] == "research.prepare")["arguments"]
    topic = str(prepared.get("topic", ""))
    record.turn["topic"] = topic
    if not grounded(topic, read_texts(ok), _INSTRUCTIONS):
        raise SmokeFailed(f"the research topic {topic[:80]!r} is not grounded in what the turn "
                          "read (no content word in common, or a degenerate string)")
    record.passed("prepare")


def read_texts(calls: list[dict[str, Any]]) -> list[str]:
    """What the turn's successful progress calls brought (titles, bodies, file contents)."""
    texts = []
    for call in calls:
        data = (call.get("result") or {}).get("data") or {}
        texts.append(" ".join(str(data[field]) for field in ("title", "body", "content")
                              if isinstance(data.get(field), str)))
    return [text for text in texts if text]


def _final(record: SmokeRecord, turn: dict[str, Any]) -> None:
    record.turn["final_text"] = turn["final_text"]
    if turn["state"] != "COMPLETED":
        raise SmokeFailed(f"the resumed turn ended {turn['state']}{_error(turn)}")
    text = str(turn["final_text"] or "").strip()
    if not text:
        raise SmokeFailed("the final answer is empty")
    if text in _INSTRUCTIONS:
        raise SmokeFailed("the final answer is a string of the system prompt, not an answer")
    read = read_texts([c for c in turn["tool_calls"] if c["status"] == "ok"])
    if degenerate(text) or not grounded(text, read, _INSTRUCTIONS):
        raise SmokeFailed(f"the final answer {text[:80]!r} is not grounded in what the turn "
                          "read (no content word in common, or a degenerate string)")
    record.passed("final")


def _error(turn: dict[str, Any]) -> str:
    error = turn.get("error")
    return f" {error['code']}: {error['message']}" if error else ""


async def _usage(client: ApiClient, record: SmokeRecord) -> None:
    """States, per-round timings and tokens, from the runtime's event log."""
    with contextlib.suppress(SmokeFailed, httpx.HTTPError, KeyError):
        events = (await client.get(f"{_API}/events?limit=500"))["events"]
        mine = [e for e in events if e["turn_id"] == record.turn.get("id")]
        record.turn["states"] = [e["data"]["state"] for e in mine if e["type"] == "turn.state"]
        rounds = [e["data"] for e in mine if e["type"] == "turn.round"]
        record.timings_ms["rounds"] = [r["ms"] for r in rounds]
        record.turn["rounds"] = rounds
        for key, field in (("prompt", "prompt_tokens"), ("completion", "completion_tokens"),
                           ("cached", "cached_tokens")):
            record.tokens[key] = sum(int(r[field] or 0) for r in rounds)
        later = rounds[1:]  # from the second round on, the prompt cache can serve the prefix
        prompt = sum(int(r["prompt_tokens"] or 0) for r in later)
        record.tokens["cached_share_after_round_1"] = round(
            sum(int(r["cached_tokens"] or 0) for r in later) / prompt, 3) if prompt else 0
