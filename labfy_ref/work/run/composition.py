"""The isolated engine of one Work run (WK-01): an in-memory composition, built per run.

Each run gets its own :class:`~labfy_ref.host.Host` with four rows and no others:
``system_prompt`` (the contract and the run's catalog), ``llm`` (the worker's model
as an :data:`~labfy_ref.protocol.Ask`), ``tools`` (the catalog's descriptions only:
no tool body, no service, no path) and ``engine`` (what the driver asks for). No
file, shell or session-persistence plugin is ever a row: every tool call is
validated and executed by the driver through its gateway, and everything a run
keeps goes to the Work store. Stopping the host (the run ended, was cancelled or
parked) disposes every row.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from labfy_ref.host import Composition, Host, PluginContext, RowSpec
from labfy_ref.protocol import Ask, ChatModel, chat_asker, system_prompt
from labfy_ref.tools.catalog import ToolCatalog

#: The rows of every run's engine, in order (module:attr plugins of this module).
ROWS = ("system_prompt", "llm", "tools", "engine")
#: Plugins a run's engine never holds: files, shells and host persistence (sessions).
FORBIDDEN_PLUGINS = frozenset({"sessions", "session_projections", "files", "shell"})
MANDATORY = ("engine",)


@dataclasses.dataclass(frozen=True, slots=True)
class RunEngine:
    """What a run's driver takes from its composition: the prompt, the model, the tools."""

    system_prompt: str
    ask: Ask
    tool_ids: tuple[str, ...]


class _Plugin:
    provides: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()


class PromptPlugin(_Plugin):
    """``system_prompt``: the action contract and the run's catalog."""

    provides = ("system_prompt",)
    requires = ("catalog",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the prompt text."""
        context.provide("system_prompt", system_prompt(context.get("catalog")))


class LlmPlugin(_Plugin):
    """``llm``: the worker's model, asked for whole replies."""

    provides = ("llm",)
    requires = ("model",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the asker (the model's connections are the worker's to close)."""
        model: ChatModel = context.get("model")
        context.provide("llm", chat_asker(model))


class ToolsPlugin(_Plugin):
    """``tools``: which tools the run's model is told about; descriptions only, no bodies."""

    provides = ("tools",)
    requires = ("catalog",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the tool ids (their execution is the driver's, through its gateway)."""
        catalog: ToolCatalog = context.get("catalog")
        context.provide("tools", tuple(catalog))


class EnginePlugin(_Plugin):
    """``engine``: the run's engine, once prompt, model and tools are ready."""

    provides = ("engine",)
    requires = ("system_prompt", "llm", "tools")

    async def activate(self, context: PluginContext) -> None:
        """Publish the engine."""
        context.provide("engine", RunEngine(context.get("system_prompt"), context.get("llm"),
                                            context.get("tools")))


def run_composition() -> Composition:
    """The rows of a run's engine; refused if any names a forbidden plugin."""
    composition = Composition(tuple(RowSpec(row, f"{__name__}:{_PLUGINS[row]}", {})
                                    for row in ROWS))
    check_isolated(composition)
    return composition


def check_isolated(composition: Composition) -> None:
    """Raise ValueError when a row would give the run files, a shell or host persistence."""
    for row in composition.rows:
        name = row.plugin.rpartition(":")[2].lower()
        if row.plugin in FORBIDDEN_PLUGINS or row.id in FORBIDDEN_PLUGINS or any(
                word in name for word in ("session", "file", "shell")):
            raise ValueError(f"row {row.id} ({row.plugin}) is not allowed in a Work run")


async def start_run_engine(catalog: ToolCatalog, model: ChatModel) -> tuple[Host, RunEngine]:
    """Compose and start one run's engine; the caller stops the host when the run ends."""
    seed: dict[str, Any] = {"catalog": catalog, "model": model}
    host = Host(run_composition(), mandatory=MANDATORY, seed=seed)
    try:
        await host.start()
    except BaseException:
        await host.stop()
        raise
    engine: RunEngine = host.service("engine")
    return host, engine


_PLUGINS = {"system_prompt": PromptPlugin.__name__, "llm": LlmPlugin.__name__,
            "tools": ToolsPlugin.__name__, "engine": EnginePlugin.__name__}
