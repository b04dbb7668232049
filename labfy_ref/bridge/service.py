"""The bridge as the workspace server sees it: off, starting, ready or failed (HO-06).

The server owns one :class:`Bridge`. When it is off, every bridge route answers
503 ``CORDIS_DISABLED``; while the host settles (in the background, HO-07),
``CORDIS_STARTING``; if startup failed, ``CORDIS_UNAVAILABLE`` with the detail
that names the missing services. Routes receive only the engine contract, never
the host or its plugins.

The admin may disable, enable and reload it while the server runs (BR-16):
disabling releases the host's root scope — every service, listener, timer, file
and agent handle it registered; open streams end ``interrupted`` — and enabling
or reloading builds a new host from the composition document, read again (HO-05:
the whole host anew, never one adapter swapped). What the server shares with the
host (the workspace, the gateway, the model client) is the server's: a host
releases only what it registered. One toggle at a time.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
from collections.abc import Callable
from typing import Any

from labfy_ref.bridge.contract import Engine
from labfy_ref.bridge.plugins import MANDATORY
from labfy_ref.errors import ErrorCode, RuntimeRefused, bounded
from labfy_ref.host import Composition, Host


class BridgeState(enum.StrEnum):
    """The bridge's lifecycle."""

    DISABLED = "disabled"
    STARTING = "starting"
    READY = "ready"
    FAILED = "failed"


_REFUSALS = {BridgeState.DISABLED: (ErrorCode.CORDIS_DISABLED,
                                    "the engine bridge is off; start serve with --bridge, or "
                                    "enable it as the admin (POST /api/cordis/admin/enable)"),
             BridgeState.STARTING: (ErrorCode.CORDIS_STARTING, "the engine bridge is starting")}


def _reason(exc: BaseException) -> str:
    return bounded(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}", 600)


class Bridge:
    """Owns the composition host and hands out the engine."""

    def __init__(self, load: Callable[[], Composition], seed: dict[str, Any], *,
                 enabled: bool, row_seconds: float | None = None,
                 toggle_locked: bool = False) -> None:
        """``load`` reads the composition document (again at each enable and reload)."""
        self._load = load
        self._seed = seed
        self._row_seconds = row_seconds
        self._enabled = enabled
        #: ``serve --bridge-toggle locked``: the admin's toggle is refused (BR-16).
        self.toggle_locked = toggle_locked
        self.state = BridgeState.STARTING if enabled else BridgeState.DISABLED
        self.detail: str | None = None
        self.host: Host | None = None
        self._engine: Engine | None = None
        self._settling: asyncio.Task[None] | None = None
        self._toggling: asyncio.Lock | None = None

    # -- the server's lifecycle ------------------------------------------------------------

    def begin(self) -> None:
        """At server start: settle the host in the background when the bridge is on."""
        if self._enabled:
            self._build()

    async def settled(self) -> None:
        """Wait until the host has settled (ready, failed; at once when off)."""
        task = self._settling
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.shield(task)

    async def start(self) -> None:
        """Begin and wait for the host to settle (for callers without a server)."""
        self.begin()
        await self.settled()

    async def stop(self) -> None:
        """Stop settling, then dispose the host (every row, service, task and file);
        idempotent. The state stays as it was: the server is going away."""
        self._engine = None
        task, self._settling = self._settling, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.host is not None:
            await self.host.stop()

    # -- the admin's toggle (BR-16) --------------------------------------------------------

    async def disable(self) -> dict[str, Any]:
        """Release the host: its routes answer ``CORDIS_DISABLED`` from now on."""
        async with self._toggle():
            self._enabled = False
            await self._release()
            self.state, self.detail = BridgeState.DISABLED, None
            return self.describe()

    async def enable(self) -> dict[str, Any]:
        """Build the host from its document, if off or failed (a running one stays)."""
        async with self._toggle():
            self._enabled = True
            if self.state in (BridgeState.DISABLED, BridgeState.FAILED):
                await self._release()
                self._build()
            return self.describe()

    async def reload(self) -> dict[str, Any]:
        """Release the host and build it again from its document (changes apply)."""
        async with self._toggle():
            self._enabled = True
            await self._release()
            self._build()
            return self.describe()

    def describe(self) -> dict[str, Any]:
        """``{"state", "reason"?}``: what each toggle answers."""
        described: dict[str, Any] = {"state": self.state.value}
        if self.detail is not None:
            described["reason"] = self.detail
        return described

    @contextlib.asynccontextmanager
    async def _toggle(self) -> Any:
        if self.toggle_locked:
            raise RuntimeRefused(ErrorCode.BRIDGE_TOGGLE_LOCKED,
                                 "serve runs with --bridge-toggle locked: restart it to change "
                                 "the bridge")
        if self._toggling is None:
            self._toggling = asyncio.Lock()
        async with self._toggling:
            yield

    async def _release(self) -> None:
        await self.stop()
        self.host = None

    def _build(self) -> None:
        """A new host from the document, settling in the background (HO-07)."""
        self.detail = None
        try:
            composition = self._load()
        except Exception as exc:  # a document that no longer reads: failed, with why
            self.state, self.detail = BridgeState.FAILED, _reason(exc)
            return
        self.host = Host(composition, mandatory=MANDATORY, seed=self._seed,
                         row_seconds=self._row_seconds)
        self.state = BridgeState.STARTING
        self._settling = asyncio.create_task(self._settle(self.host), name="bridge-start")

    async def _settle(self, host: Host) -> None:
        """Settle the composition; on failure keep the diagnosis for health."""
        try:
            await host.start()
            engine = host.service("engine")
            if not isinstance(engine, Engine):
                raise TypeError("service engine does not satisfy the engine contract")
        except Exception as exc:
            self.state, self.detail = BridgeState.FAILED, _reason(exc)
            return
        self._engine = engine
        self.state = BridgeState.READY

    # -- what the routes see ---------------------------------------------------------------

    def engine(self) -> Engine:
        """The engine, or 503 with the reason it cannot serve."""
        if self._engine is not None and self.state is BridgeState.READY:
            return self._engine
        if self.state is BridgeState.FAILED:
            raise RuntimeRefused(ErrorCode.CORDIS_UNAVAILABLE,
                                 self.detail or "the bridge failed")
        code, message = _REFUSALS.get(self.state, _REFUSALS[BridgeState.STARTING])
        raise RuntimeRefused(code, message)

    def health(self) -> dict[str, Any]:
        """``GET /api/cordis/health``: state, detail, whether the admin may toggle it, and
        the host's rows and services."""
        return {"state": self.state.value, "detail": self.detail,
                "toggle": "locked" if self.toggle_locked else "unlocked",
                "host": self.host.status() if self.host is not None else None}
