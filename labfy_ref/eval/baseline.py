"""The eval's framework baselines (EV-02): the same tasks through smolagents.

A user who would not pick labfy-ref would pick a general agent framework:
smolagents' ``ToolCallingAgent`` (native tool calls, over llama-server's
OpenAI-compatible face) and its ``CodeAgent`` (the model writes Python that
calls the tools). Both run here on the same supervised llama-server, the same
model and sampling, the same SPECIMEN workspace made with the same repeatable
ids, the same tools — the catalog's, each call passing the same
:class:`~labfy_ref.gateway.AgentGateway` in the task's permission mode — and
the same step limit (the runtime's round budget). The turn is judged by the
same predicate.

Neither small model's own chat template renders tools, so for native tool
calls llama-server is given a Hermes-style tool template shipped here
(``templates/``): ChatML turns for models whose own template uses
``<|im_start|>``, Gemma turns for ``<start_of_turn>``; a model with another
chat format is refused with the reason (no guess). ``CodeAgent`` needs no tool
template: it runs on the model's own.

smolagents is not a dependency of labfy-ref: ``tox -e eval`` installs it, and
without it ``--baseline`` fails with ``CONFIG_INVALID`` and the install line.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from labfy_ref.errors import ConfigRefused
from labfy_ref.gateway import AgentGateway
from labfy_ref.gateway.policy import CallContext
from labfy_ref.modes import PermissionMode
from labfy_ref.runtime.limits import RuntimeLimits
from labfy_ref.tools import default_catalog
from labfy_ref.tools.catalog import ToolSpec
from labfy_ref.workspace import open_workspace

#: ``--baseline`` values: the smolagents agent each one runs.
BASELINES = {"smolagents": "ToolCallingAgent", "smolagents-code": "CodeAgent"}
TEMPLATES = Path(__file__).parent / "templates"
#: A chat format's marker in a model's own template -> the tool template for it.
TOOL_TEMPLATES = (("<|im_start|>", "chatml-tools.jinja"),
                  ("<start_of_turn>", "gemma-tools.jinja"))
#: Completion tokens per step: a tool call or a short answer fits; prose before a call
#: (which llama.cpp's "required" grammar admits) is cut there.
STEP_TOKENS = 256
_JSON_TYPES = {"string", "boolean", "integer", "number", "array", "object"}


def agent_name(baseline: str) -> str:
    """The record's agent for ``baseline``: ``smolagents-ToolCallingAgent``…"""
    return f"smolagents-{BASELINES[baseline]}"


def smolagents_module() -> Any:
    """smolagents, or ConfigRefused saying how to install it."""
    try:
        return importlib.import_module("smolagents")
    except ImportError as exc:
        raise ConfigRefused("--baseline needs smolagents, which labfy-ref does not depend on: "
                            "python3 -m pip install 'smolagents[openai]'") from exc


async def tool_template(base_url: str, api_key: str) -> Path:
    """The tool template for the chat format of the model llama-server runs (its /props)."""
    async with httpx.AsyncClient(trust_env=False, timeout=30) as http:
        response = await http.get(f"{base_url}/props",
                                  headers={"Authorization": f"Bearer {api_key}"})
    own = str(response.json().get("chat_template", "")) if response.is_success else ""
    for marker, name in TOOL_TEMPLATES:
        if marker in own:
            return TEMPLATES / name
    raise ConfigRefused("--baseline smolagents: this model's chat template uses neither "
                        "ChatML (<|im_start|>) nor Gemma turns (<start_of_turn>); no tool "
                        "template is shipped for it")


@dataclasses.dataclass(slots=True)
class BaselineTurn:
    """What one baseline run did, in the shape the eval judges a labfy-ref turn by."""

    tool_calls: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    final_text: str = ""
    state: str = "NONE"
    rounds: int = 0
    tokens: int = 0
    error: str | None = None

    def as_turn(self) -> dict[str, Any]:
        """The turn dictionary :func:`labfy_ref.eval.run._observed` reads."""
        return {"tool_calls": self.tool_calls, "final_text": self.final_text,
                "state": self.state, "rounds": self.rounds, "_tokens": self.tokens}


def _inputs(spec: ToolSpec) -> dict[str, dict[str, Any]]:
    """smolagents ``inputs`` from a tool's closed input schema (optional fields nullable)."""
    schema = spec.input_schema
    required = set(schema.get("required", []))
    inputs = {}
    for name, prop in schema.get("properties", {}).items():
        kind = prop.get("type", "string")
        entry: dict[str, Any] = {"type": kind if kind in _JSON_TYPES else "any",
                                 "description": str(prop.get("description") or name)}
        if "enum" in prop:
            entry["description"] += f" (one of: {', '.join(map(str, prop['enum']))})"
        if name not in required:
            entry["nullable"] = True
        inputs[name] = entry
    return inputs


def _tools(smolagents: Any, gateway: AgentGateway, context: CallContext,
           turn: BaselineTurn) -> list[Any]:
    """One smolagents Tool per tool this permission mode offers, each through the gateway."""
    catalog = default_catalog()
    made = []
    for tool_id in gateway.offerable(context, approvals=False):
        spec = catalog[tool_id]

        def forward(self: Any, _tool_id: str = tool_id, **arguments: Any) -> str:
            given = {key: value for key, value in arguments.items() if value is not None}
            outcome = gateway.call(_tool_id, given, context)
            turn.tool_calls.append({"tool_id": _tool_id, "arguments": given,
                                    "status": outcome.status, "result": outcome.result})
            return outcome.result_text or json.dumps(outcome.result, ensure_ascii=False)

        cls = type(f"Labfy_{tool_id.replace('.', '_')}", (smolagents.Tool,), {
            "name": tool_id.replace(".", "_"), "description": spec.description,
            "inputs": _inputs(spec), "output_type": "string",
            "skip_forward_signature_validation": True, "forward": forward})
        made.append(cls())
    return made


def run_baseline(baseline: str, *, base_url: str, api_key: str, model_id: str,
                 directory: Path, mode: PermissionMode, message: str,
                 limits: RuntimeLimits) -> BaselineTurn:
    """One task through the smolagents agent of ``baseline`` (blocking: run it in a thread).

    The workspace at ``directory`` is opened here, so its store lives in the
    thread that calls it.
    """
    smolagents = smolagents_module()
    workspace = open_workspace(directory)
    store = workspace.open_store()
    try:
        return _run(smolagents, baseline, base_url=base_url, api_key=api_key,
                    model_id=model_id, gateway=AgentGateway(workspace, store),
                    context=CallContext(mode), message=message, limits=limits)
    finally:
        store.close()


def _run(smolagents: Any, baseline: str, *, base_url: str, api_key: str, model_id: str,
         gateway: AgentGateway, context: CallContext, message: str,
         limits: RuntimeLimits) -> BaselineTurn:
    turn = BaselineTurn()
    model = smolagents.OpenAIServerModel(
        model_id=model_id, api_base=f"{base_url}/v1", api_key=api_key,
        client_kwargs={"timeout": 600.0, "max_retries": 0},
        temperature=0.0, max_tokens=STEP_TOKENS)
    agent_class: Callable[..., Any] = getattr(smolagents, BASELINES[baseline])
    agent = agent_class(tools=_tools(smolagents, gateway, context, turn), model=model,
                        max_steps=limits.max_rounds, verbosity_level=0)
    try:
        answer = agent.run(message)
        turn.final_text = "" if answer is None else str(answer)
        turn.state = "COMPLETED"
    except Exception as exc:  # the framework's failure is the run's outcome
        turn.state, turn.error = "FAILED", f"{type(exc).__name__}: {str(exc)[:200]}"
    steps = [step for step in agent.memory.steps if hasattr(step, "token_usage")]
    turn.rounds = len(steps)
    turn.tokens = sum(getattr(step.token_usage, "total_tokens", 0) or 0
                      for step in steps if step.token_usage is not None)
    return turn


async def run_baseline_async(baseline: str, **kwargs: Any) -> BaselineTurn:
    """:func:`run_baseline` in a worker thread."""
    return await asyncio.to_thread(run_baseline, baseline, **kwargs)

