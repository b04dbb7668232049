"""``labfy-ref eval`` (EV-01): a set of SPECIMEN tasks on one supervised model.

One llama-server is started (verified and governed as by ``smoke``); each
task then runs on its own fresh SPECIMEN workspace, made with repeatable ids
(:func:`labfy_ref.ids.repeatable`, seeded by the task and the run number), so
a run repeats at temperature 0 and run *k* of every task sees the same ids.
Each task is driven over the real HTTP API as a user's client does: log in,
start a turn, wait; a research pause is granted by a human and resumed, as
in the smoke. The turn record is judged by the task's predicate.

It is a benchmark: it prints a table and a pass rate and writes
``eval-record.json``; it never fails on a low figure (exit 0 once it ran).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from labfy_ref.config import SupervisedModel
from labfy_ref.eval.baseline import agent_name, run_baseline_async, smolagents_module, tool_template
from labfy_ref.eval.control import CONTROL_AGENT, RandomControl
from labfy_ref.eval.record import EvalEntry, write_entry
from labfy_ref.eval.tasks import Observed, Task, judge
from labfy_ref.ids import repeatable
from labfy_ref.model.binary import identify
from labfy_ref.model.gguf import PinnedGguf, open_gguf
from labfy_ref.model.supervised import (
    CTX_SIZE,
    REPEAT_PENALTY,
    SEED,
    TEMPERATURE,
    SupervisedLlama,
    govern,
    supervised_llama,
)
from labfy_ref.protocol import system_prompt
from labfy_ref.protocol.narrowing import AUTO, DEFAULT_CONCLUDE_AFTER, DEFAULT_GUIDANCE, Guidance
from labfy_ref.report.evidence import PROFILE_VARIANT
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.smoke.run import (
    ENDED,
    MODEL_TIMEOUT_SECONDS,
    ApiClient,
    SmokeFailed,
    serve_config,
    serve_workspace,
)
from labfy_ref.tools import default_catalog
from labfy_ref.workspace import init_workspace, open_workspace

_API = "/api/v1/agent-runtime"
AGENT = "labfy-ref"

Say = Callable[[str], None]


@dataclasses.dataclass(frozen=True, slots=True)
class EvalOptions:
    """What ``labfy-ref eval`` was asked to run."""

    model: SupervisedModel
    record_dir: Path
    tasks: Sequence[Task]
    runs: int = 1
    conclude_after: int = DEFAULT_CONCLUDE_AFTER
    #: The guidance profile measured (PR-08): ``--guidance``, as every surface.
    guidance: Guidance = DEFAULT_GUIDANCE
    #: A guidance rule of the profile switched off (an ablation), or None.
    ablate: str | None = None
    #: Guidance rules the profile lacks switched on (a measurement).
    add: tuple[str, ...] = ()
    #: Run the random control (:mod:`labfy_ref.eval.control`) instead of the model.
    control: bool = False
    #: A framework baseline (:data:`labfy_ref.eval.baseline.BASELINES`) instead of labfy-ref.
    baseline: str | None = None


async def run_eval(options: EvalOptions, say: Say) -> EvalEntry:
    """Run every task ``runs`` times on one llama-server; write and return the entry."""
    wanted = options.model
    profile = options.guidance.profile
    if options.ablate:
        profile = profile.without(options.ablate)
    if options.add:
        profile = profile.plus(sorted(options.add))
    guidance = dataclasses.replace(options.guidance, profile=profile)
    options = dataclasses.replace(options, guidance=guidance)
    rules = profile.names
    # the entry's variant: "RULE" for one rule off, "+RULE" for a rule added, and
    # "guidance:NAME" for a profile named instead of auto (PR-08's profile table)
    variant = options.ablate or ("".join(f"+{rule}" for rule in sorted(options.add))
                                 if options.add else None)
    if options.guidance.asked != AUTO:
        variant = PROFILE_VARIANT + options.guidance.asked + (
            f"-{variant}" if options.ablate else variant or "")
    if options.baseline:
        smolagents_module()  # refused before any model starts when it is absent
        agent = agent_name(options.baseline)
    else:
        agent = CONTROL_AGENT if options.control else AGENT
    entry = EvalEntry.begin(
        agent=agent, ablate=variant, runs=options.runs,
        model={"file": wanted.model_file.name, "bytes": wanted.model_file.stat().st_size,
               "sha256": wanted.model_sha256},
        settings={"temperature": TEMPERATURE, "seed": SEED, "ctx_size": CTX_SIZE,
                  "repeat_penalty": REPEAT_PENALTY, "conclude_after": options.conclude_after,
                  "rules": sorted(rules), "guidance": guidance.as_json()})
    with tempfile.TemporaryDirectory(prefix="labfy-eval-") as scratch:
        root = Path(scratch)
        if options.control:  # no model runs: the control draws every action
            say(f"random control in the narrowed schema; rules {', '.join(sorted(rules))}")
            await _run_all(entry, None, root, options=options, say=say)
        else:
            await _run_model(entry, root, options=options, say=say)
    entry.finish()
    path = write_entry(options.record_dir, entry)
    say(f"{entry.passed} of {entry.total} passed ({entry.pass_rate:.0%}) — record: {path}")
    return entry


async def _run_model(entry: EvalEntry, root: Path, *, options: EvalOptions,
                     say: Say) -> None:
    """Start the verified, governed model (with a tool template for a baseline) and run."""
    wanted = options.model
    with open_gguf(wanted.model_file) as pinned:  # SM-09: what is checked is what runs
        govern(pinned, wanted.llama_server, root)
        pinned.hash(wanted.model_sha256, None)
        await _run_pinned(entry, pinned, root, options=options, say=say)


async def _run_pinned(entry: EvalEntry, pinned: PinnedGguf, root: Path, *,
                      options: EvalOptions, say: Say) -> None:
    wanted = options.model
    identity = identify(wanted.llama_server)
    entry.llama_server = {"version": identity.version, "package": identity.package}
    template = None
    if options.baseline == "smolagents":  # native tool calls need a tool template
        template = await _tool_template(wanted, pinned, root)
        entry.notes.append(f"llama-server --jinja --chat-template-file {template.name} "
                           "(shipped in labfy_ref/eval/templates)")
    model = supervised_llama(wanted.llama_server, pinned, wanted.model_file.stem,
                             cpu_variant=wanted.cpu_variant,
                             timeout_seconds=MODEL_TIMEOUT_SECONDS, log_dir=root / "llama",
                             chat_template_file=template)
    try:
        await model.start()
        entry.prompt_tokens = await _count_tokens(model, system_prompt(default_catalog()))
        say(f"model {wanted.model_file.name} ready; system prompt "
            f"{entry.prompt_tokens} tokens; rules "
            f"{', '.join(sorted(options.guidance.profile.names))}")
        await _run_all(entry, model, root, options=options, say=say)
    finally:
        await model.aclose()


async def _run_all(entry: EvalEntry, model: SupervisedLlama | None, root: Path, *,
                   options: EvalOptions, say: Say) -> None:
    for run in range(1, options.runs + 1):
        for task in options.tasks:
            result = await _run_task(task, run, model, root, options=options)
            entry.tasks.append(result)
            say(_row(result))


def _row(result: dict[str, Any]) -> str:
    mark = "PASS" if result["passed"] else "FAIL"
    calls = " ".join(call["tool_id"].split(".")[-1]
                     + (f"({call['title'][:18]})" if "title" in call else "")
                     for call in result["tool_calls"])
    why = f" — {'; '.join(result['reasons'])}" if result["reasons"] else ""
    return (f"{mark} {result['task']:<22} run {result['run']} rounds {result['rounds']:>2} "
            f"calls {len(result['tool_calls']):>2} tokens {result['tokens']:>6} "
            f"{result['wall_ms'] / 1000:6.1f} s [{calls}]{why}")


async def _tool_template(wanted: SupervisedModel, pinned: PinnedGguf, root: Path) -> Path:
    """The shipped tool template for this model's chat format (read from a first start)."""
    probe = supervised_llama(wanted.llama_server, pinned, wanted.model_file.stem,
                             cpu_variant=wanted.cpu_variant,
                             timeout_seconds=MODEL_TIMEOUT_SECONDS, log_dir=root / "probe")
    try:
        await probe.start()
        supervisor = probe.supervisor
        return await tool_template(supervisor.endpoint.base_url, supervisor.api_key)
    finally:
        await probe.aclose()


async def _count_tokens(model: SupervisedLlama, text: str) -> int | None:
    """The token count of ``text`` in this model (our own llama-server's /tokenize)."""
    supervisor = model.supervisor
    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TypeError):
        async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
            response = await http.post(
                f"{supervisor.endpoint.base_url}/tokenize", json={"content": text},
                headers={"Authorization": f"Bearer {supervisor.api_key}"})
            return len(response.json()["tokens"])
    return None


async def _run_task(task: Task, run: int, model: SupervisedLlama | None, root: Path, *,
                    options: EvalOptions) -> dict[str, Any]:
    started = time.monotonic()
    directory = root / f"{task.id}-{run}"
    with repeatable(f"{task.id}:{run}"):
        workspace = init_workspace(directory, specimen=True)
        for relative, text in task.files.items():
            target = workspace.files_dir / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        titles = _titles(directory)
        before = _files(workspace.files_dir)
        limits = RuntimeLimits(conclude_after=options.conclude_after, guidance=options.guidance)
        turn, error = await _turn(task, run, model, directory, options=options, limits=limits)
    after = _files(workspace.files_dir)
    written = {path: text for path, text in after.items() if before.get(path) != text}
    seen = _observed(turn, titles, written)
    reasons = [error] if error else judge(task, seen, system_prompt(default_catalog()))
    rounds = turn.get("rounds", 0)
    return {
        "task": task.id, "kind": task.kind, "run": run, "passed": not reasons,
        "reasons": reasons, "state": seen.state, "rounds": rounds,
        "tool_calls": [{"tool_id": c["tool_id"], "arguments": c["arguments"],
                        "status": c["status"],
                        **({"title": titles[c["arguments"]["object_id"]]}
                           if c["arguments"].get("object_id") in titles else {})}
                       for c in turn.get("tool_calls", [])],
        "final_text": seen.final_text, "tokens": turn.get("_tokens", 0),
        "wall_ms": round((time.monotonic() - started) * 1000.0, 1),
        # figures only (issue 45's point 6): each round's wall time and prompt tokens
        "round_ms": [r.get("ms") for r in turn.get("_rounds", [])],
        "round_prompt_tokens": [r.get("prompt_tokens") for r in turn.get("_rounds", [])],
        "facts": list(turn.get("facts") or [])}


async def _turn(task: Task, run: int, model: SupervisedLlama | None, directory: Path, *,
                options: EvalOptions, limits: RuntimeLimits) -> tuple[dict[str, Any], str | None]:
    """Drive one task's turn: labfy-ref (or the control) over HTTP, or a framework baseline."""
    if options.baseline and model is not None:
        done = await run_baseline_async(
            options.baseline, base_url=model.supervisor.endpoint.base_url,
            api_key=model.supervisor.api_key, model_id=model.model, directory=directory,
            mode=task.permission_mode, message=task.message, limits=limits)
        return done.as_turn(), done.error
    config = serve_config(directory, model.model if model else CONTROL_AGENT, options.model,
                          mode=task.permission_mode, conclude_after=options.conclude_after,
                          origin="eval", guidance=options.guidance)
    agent = RandomControl(f"{task.id}:{run}") if model is None else None
    try:
        async with serve_workspace(config, model, limits=limits, owns_model=False,
                                   agent=agent) as (base_url, code):
            return await _drive(base_url, code, task.message), None
    except SmokeFailed as exc:
        return {}, str(exc)


def _titles(directory: Path) -> dict[str, str]:
    store = open_workspace(directory).open_store()
    try:
        return {obj.object_id: obj.title for obj in store.list_objects()}
    finally:
        store.close()


def _files(root: Path) -> dict[str, str]:
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            found[path.relative_to(root).as_posix()] = path.read_text("utf-8", "replace")
    return found


async def _drive(base_url: str, code: str, message: str) -> dict[str, Any]:
    """One turn as a user drives it; a research pause is granted and resumed once."""
    client = ApiClient(base_url)
    try:
        await client.login(code)
        turn = (await client.post(f"{_API}/turns", {"message": message}, 202))["turn"]
        turn = await client.wait(turn["id"], {"AUTHORIZATION_REQUIRED"} | ENDED)
        if turn["state"] == "AUTHORIZATION_REQUIRED":
            campaign = turn["authorization"]["campaign_id"]
            await client.post("/api/v1/grants", {"campaign_id": campaign}, 201)
            await client.post(f"{_API}/turns/{turn['id']}/resume", None, 202)
            turn = await client.wait(turn["id"], ENDED)
        events = (await client.get(f"{_API}/events?limit=500"))["events"]
        rounds = [e["data"] for e in events
                  if e["turn_id"] == turn["id"] and e["type"] == "turn.round"]
        turn["_tokens"] = sum(int(r.get("prompt_tokens") or 0)
                              + int(r.get("completion_tokens") or 0) for r in rounds)
        turn["_rounds"] = rounds
        return turn
    finally:
        await client.http.aclose()


def _observed(turn: dict[str, Any], titles: dict[str, str],
              written: dict[str, str]) -> Observed:
    objects: set[str] = set()
    files: set[str] = set()
    texts: list[str] = []
    tools: list[str] = []
    topic: str | None = None
    questions: tuple[str, ...] = ()
    for call in turn.get("tool_calls", []):
        tools.append(call["tool_id"])
        if call["status"] != "ok":
            continue
        data = (call.get("result") or {}).get("data") or {}
        arguments = call["arguments"]
        if call["tool_id"] == "workspace.read_object":
            objects.add(titles.get(arguments.get("object_id", ""), "?"))
            texts.append(f"{data.get('title', '')} {data.get('body', '')}")
        elif call["tool_id"] == "files.read":
            files.add(str(arguments.get("path", "")))
            texts.append(str(data.get("content", "")))
        elif call["tool_id"] == "research.prepare":
            topic = str(arguments.get("topic", ""))
            questions = tuple(str(q) for q in arguments.get("questions", []))
    return Observed(state=str(turn.get("state", "NONE")),
                    final_text=str(turn.get("final_text") or ""),
                    read_objects=frozenset(objects), read_files=frozenset(files),
                    read_texts=tuple(texts), tools=tuple(tools), topic=topic,
                    questions=questions, written=written)


def run(options: EvalOptions, say: Say) -> EvalEntry:
    """Run :func:`run_eval` in a fresh event loop."""
    return asyncio.run(run_eval(options, say))

