"""What the workspace server owns: one workspace, its gateway, its runtime, its sessions,
and its Work store."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any

from labfy_ref.bridge.service import Bridge, BridgeState
from labfy_ref.config import ServeConfig
from labfy_ref.gateway import AgentGateway
from labfy_ref.model import LocalModelClient
from labfy_ref.model.supervised import SupervisedLlama
from labfy_ref.modes import AgentMode
from labfy_ref.runtime import AgentRuntime
from labfy_ref.server.auth import Authenticator
from labfy_ref.server.refusals import Refusals
from labfy_ref.server.work_access import WorkAccess
from labfy_ref.workspace import Workspace, WorkspaceStore

PROBE_INTERVAL_SECONDS = 5.0


@dataclasses.dataclass(slots=True)
class ServerState:
    """Everything the routes need; built and closed by the server's lifespan."""

    config: ServeConfig
    workspace: Workspace
    store: WorkspaceStore
    gateway: AgentGateway
    runtime: AgentRuntime
    auth: Authenticator
    port: int
    bridge: Bridge
    #: The Work store (WK-05): tasks submitted, shown, cancelled and answered here.
    work: WorkAccess
    client: LocalModelClient | SupervisedLlama | None = None
    #: Our own llama-server (SM-07), started in the background by :meth:`start`.
    supervised: SupervisedLlama | None = None
    #: Whether this server starts and stops ``supervised`` (False: a caller that
    #: serves many workspaces on one model, the eval, owns it).
    owns_model: bool = True
    #: The clients of ``--providers`` (BR-19): the server's, shared with the bridge's host;
    #: a supervised one is started with the server and stopped at its close.
    provider_clients: tuple[LocalModelClient | SupervisedLlama, ...] = ()
    #: Requests refused since start, per code (BR-20): the admin's status shows them.
    refusals: Refusals = dataclasses.field(default_factory=Refusals)
    _availability: tuple[float, bool, str] = (0.0, True, "ready")
    _model_task: asyncio.Task[None] | None = None
    _provider_tasks: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)
    _closing: asyncio.Future[None] | None = None

    async def availability(self) -> tuple[bool, str]:
        """Is the agent's model reachable? (Probed at most every few seconds.)"""
        if self.client is None:
            return True, "ready"
        if self.supervised is not None and self.supervised.state != "ready":
            return self.supervised.condition()  # loading, or why it is gone: no probe needed
        checked, available, diagnostic = self._availability
        if time.monotonic() - checked > PROBE_INTERVAL_SECONDS:
            probe = await self.client.probe()
            available, diagnostic = probe.available, probe.diagnostic
            self._availability = (time.monotonic(), available, diagnostic)
        return available, diagnostic

    async def status(self, *, admin: bool = False) -> dict[str, Any]:
        """The body of ``GET /api/v1/agent-runtime/status`` (``admin``: with the refusals per
        code, which only the admin sees)."""
        available, diagnostic = await self.availability()
        agent = self.config.agent
        return {
            "mode": agent.mode.value,
            "model": agent.model_id if agent.mode is AgentMode.LOCAL_MODEL else None,
            "available": available,
            "diagnostic": diagnostic,
            "workspace": {"name": self.workspace.name, "kind": self.workspace.kind.value},
            **({"llama_server": self.supervised.describe()} if self.supervised else {}),
            **self.runtime.status(),
            # what a launch profile set (QR-07): a conformance kit checks it before it runs
            "bridge": {"enabled": self.bridge.state is not BridgeState.DISABLED,
                       "state": self.bridge.state.value,
                       "toggle": "locked" if self.bridge.toggle_locked else "unlocked",
                       "session_titles": self.config.session_titles.value,
                       # BR-19: the engine's providers, the runtime's own first
                       "providers": ["local" if agent.mode is AgentMode.LOCAL_MODEL else "demo",
                                     *(p.name for p in self.config.providers)],
                       "approval_timeout_seconds": self.config.approval_seconds},
            "session": {"idle_seconds": self.config.session_idle_seconds,
                        "max_seconds": self.config.session_max_seconds},
            **({"refusals": self.refusals.counts()} if admin else {}),
        }

    async def start(self) -> None:
        """Start our llama-server (in the background), the runtime's worker, the bridge."""
        if self.supervised is not None and self.owns_model:
            self._model_task = asyncio.create_task(self.supervised.run(), name="llama-server")
        self._provider_tasks = [asyncio.create_task(client.run(), name=f"llama-server {i}")
                                for i, client in enumerate(self.provider_clients, 1)
                                if isinstance(client, SupervisedLlama)]
        self.runtime.start()
        # the bridge settles in the background (HO-07): the server answers at once, the
        # engine routes say CORDIS_STARTING until it has
        self.bridge.begin()

    async def settled(self) -> None:
        """Wait until the bridge has settled (ready, failed, or never started: HO-07)."""
        await self.bridge.settled()

    async def interrupt(self) -> None:
        """A stop signal (SV-13): every turn cancelled, every stream ended — at once, before
        the server waits for its connections; :meth:`close` follows."""
        await self.runtime.close()
        await self.bridge.stop()  # a bridge still settling stops settling, then is released

    async def close(self) -> None:
        """Stop the bridge and the runtime, then close the model client and the stores
        (once: a second call waits for the first)."""
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._close())
        await asyncio.shield(self._closing)

    async def _close(self) -> None:
        await self.bridge.stop()
        await self.runtime.close()
        self.work.close()
        if self.client is not None and self.owns_model:
            await self.client.aclose()  # a supervised one stops its child too (terminate, kill)
        for client in self.provider_clients:
            await client.aclose()  # a supervised one stops its child too
        for task in [self._model_task, *self._provider_tasks]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.store.close()
