"""The reference engine's pieces as plugins (HO-01): registered like third-party ones.

Entry points of group ``labfy_ref.plugins`` (see pyproject.toml) name these
classes; ``labfy_ref/host/default-composition.yaml`` lists one row each. The
host seeds services from the server: ``workspace``, ``gateway``,
``agent_config``, ``model_client`` and ``runtime_limits`` (the one
``--conclude-after`` and narrowing of every surface). Removing a row leaves
its dependants PENDING, and health says which service they wait for.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from labfy_ref.bridge.engine import ReferenceEngine
from labfy_ref.bridge.llm import LocalProvider, Providers, provider_for
from labfy_ref.bridge.loop import AGENT_ID, AgentLoop
from labfy_ref.bridge.store.index import INDEX_NAME, SessionIndex
from labfy_ref.bridge.store.logs import JsonlSessionStore
from labfy_ref.bridge.store.projection import project_messages
from labfy_ref.gateway import AgentGateway
from labfy_ref.host import PluginContext
from labfy_ref.modes import DEFAULT_APPROVAL_SECONDS, SessionTitles
from labfy_ref.protocol import system_prompt
from labfy_ref.runtime.limits import RuntimeLimits

#: What the bridge needs before it may publish an engine (HO-04).
MANDATORY = ("engine", "agent_loop", "agents", "sessions", "llm", "tools", "system_prompt",
             "session_projections")


def bridge_surface(gateway: AgentGateway) -> AgentGateway:
    """What bridge sessions may call: everything but ``research.*`` (a runtime grant flow)."""
    return gateway.surface(t for t in gateway.catalog if not t.startswith("research."))


class _Plugin:
    provides: ClassVar[tuple[str, ...]] = ()
    requires: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()


class SystemPromptPlugin(_Plugin):
    """``system_prompt``: the action contract and the catalog, as the model reads it."""

    provides = ("system_prompt",)
    requires = ("gateway",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the prompt text."""
        context.provide("system_prompt",
                        system_prompt(bridge_surface(context.get("gateway")).catalog))


class ToolsPlugin(_Plugin):
    """``tools``: the gateway the model's calls go through (needs the prompt that lists them)."""

    provides = ("tools",)
    requires = ("gateway", "system_prompt")

    async def activate(self, context: PluginContext) -> None:
        """Publish the bridge's surface of the gateway as the engine's tools."""
        context.provide("tools", bridge_surface(context.get("gateway")))


class SessionsPlugin(_Plugin):
    """``sessions``: the JSONL store under the workspace's ``sessions/``."""

    provides = ("sessions",)
    requires = ("workspace",)

    async def activate(self, context: PluginContext) -> None:
        """Open the store; its directory handle is owned by this row's scope."""
        store = JsonlSessionStore(context.get("workspace").sessions_dir)
        context.scope.defer(store.close, "file sessions/")
        context.provide("sessions", store)


class SessionProjectionsPlugin(_Plugin):
    """``session_projections``: events → visible messages."""

    provides = ("session_projections",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the projection function."""
        context.provide("session_projections", project_messages)


class LlmPlugin(_Plugin):
    """``llm``: the providers — the runtime's own first (local llama-server, or the demo
    policy), then those of ``serve --providers`` (BR-19)."""

    provides = ("llm",)
    requires = ("agent_config",)
    optional = ("model_client", "providers")

    async def activate(self, context: PluginContext) -> None:
        """Publish the providers; their connections close with the row.

        The server's own model clients (``model_client``, and each of ``providers``: a
        name, its configuration, its client — a pool, a supervised server's key) are
        shared; they stay the server's to close.
        """
        providers = Providers([
            provider_for(context.get("agent_config"), context.get("model_client")),
            *(LocalProvider(agent, client, name=name)
              for name, agent, client in context.get("providers") or ())])
        context.scope.defer(providers.aclose, "llm connections")
        context.provide("llm", providers)


class AgentsPlugin(_Plugin):
    """``agents``: the agents the engine may run (one root agent here)."""

    provides = ("agents",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the agent list."""
        context.provide("agents", (AGENT_ID,))


class AgentLoopPlugin(_Plugin):
    """``agent_loop``: runs turns; waits for every piece it needs."""

    provides = ("agent_loop",)
    requires = ("agents", "sessions", "llm", "tools", "system_prompt", "session_projections")
    #: The server's own limits (``--conclude-after`` and the narrowing rules are one value
    #: for every surface, PR-07) and its ``--approval-timeout`` (BR-12); a row's settings
    #: may still bound rounds, calls, context.
    optional = ("runtime_limits", "approval_seconds")

    async def activate(self, context: PluginContext) -> None:
        """Compose the loop."""
        settings = context.config
        defaults = context.get("runtime_limits") or RuntimeLimits()
        limits = dataclasses.replace(
            defaults,
            max_rounds=int(settings.get("max_rounds", defaults.max_rounds)),
            max_tool_calls=int(settings.get("max_tool_calls", defaults.max_tool_calls)),
            max_context_bytes=int(settings.get("max_context_bytes",
                                               defaults.max_context_bytes)))
        context.provide("agent_loop", AgentLoop(
            context.get("llm"), context.get("tools"), context.get("system_prompt"),
            approval_seconds=float(context.get("approval_seconds") or DEFAULT_APPROVAL_SECONDS),
            limits=limits))


class EnginePlugin(_Plugin):
    """``engine``: the contract consumers ask for by name."""

    provides = ("engine",)
    requires = ("agent_loop", "sessions")
    #: ``serve --session-titles`` (BR-18): ``model`` (the default) or ``preview``.
    optional = ("session_titles",)

    async def activate(self, context: PluginContext) -> None:
        """Publish the engine; its turns are tasks of this row's scope.

        The session index lives beside the logs when the store has a directory
        (``sessions/.index.sqlite``), else in memory; either way it is rebuilt from
        the logs where it differs from them.
        """
        store = context.get("sessions")
        root = store.root
        index = SessionIndex.beside(root) if root is not None else SessionIndex.in_memory()
        context.scope.defer(index.close, f"file sessions/{INDEX_NAME}")
        titles = (context.get("session_titles") or SessionTitles.MODEL.value) == "model"
        engine = ReferenceEngine(store, context.get("agent_loop"), context.scope.child("turns"),
                                 index=index, titles=titles)
        context.scope.defer(engine.close, "engine turns")
        context.provide("engine", engine)
