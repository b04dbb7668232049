"""smolagents on the same fake provider: ``ToolCallingAgent`` + ``OpenAIServerModel``.

smolagents is installed only in the bench environment (the ``bench`` extra),
never as a product dependency, so it is imported here at run time. Its one
tool, ``list_objects``, calls the very gateway our runtime calls, so both
sides do the same tool work per step; the fake provider answers with OpenAI
``tool_calls`` (``list_objects`` N times, then ``final_answer``). Logging is
off (``LogLevel.OFF``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from labfy_ref.gateway import AgentGateway, CallContext
from labfy_ref.modes import PermissionMode

FINAL = "The workspace holds specimen notes."


def version() -> str:
    """The installed smolagents version."""
    return str(importlib.import_module("smolagents").__version__)


def script(listings: int) -> list[dict[str, Any]]:
    """The fake provider's answers: ``listings`` calls of ``list_objects``, then the answer."""
    listing = {"tool_calls": [{"name": "list_objects", "arguments": {}}]}
    final = {"tool_calls": [{"name": "final_answer", "arguments": {"answer": FINAL}}]}
    return [*([listing] * listings), final]


def agent_runner(base_url: str, model_id: str, gateway: AgentGateway,
                 max_steps: int) -> Callable[[str], Any]:
    """A function running one ``ToolCallingAgent`` task on the fake provider; returns its answer.

    The agent and its model (an OpenAI client with a kept-alive connection) are
    made once, like a long-lived agent; each call is ``agent.run(task)`` with
    fresh memory.
    """
    smolagents = importlib.import_module("smolagents")
    context = CallContext(PermissionMode.READ_ONLY)

    def forward(self: Any) -> Any:
        return gateway.call("workspace.list_objects", {}, context).result

    # A Tool subclass made at run time: smolagents is not importable where mypy runs.
    tool_class = type("ListObjects", (smolagents.Tool,), {
        "name": "list_objects",
        "description": "Lists the objects of the workspace (notes, files).",
        "inputs": {},
        "output_type": "object",
        "forward": forward,
    })
    model = smolagents.OpenAIServerModel(model_id=model_id, api_base=base_url + "/v1",
                                         api_key="unused",
                                         client_kwargs={"max_retries": 0})
    agent = smolagents.ToolCallingAgent(tools=[tool_class()], model=model,
                                        max_steps=max_steps,
                                        verbosity_level=smolagents.LogLevel.OFF)

    def run(task: str) -> Any:
        return agent.run(task, reset=True)

    return run
