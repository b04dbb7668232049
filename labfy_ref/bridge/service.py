"""The bridge as the workspace server sees it: off, starting, ready or failed (HO-06).

The server owns one :class:`Bridge`. When the operator has not enabled it, every
bridge route answers 503 ``CORDIS_DISABLED``; while the host settles,
``CORDIS_STARTING``; if startup failed, ``CORDIS_UNAVAILABLE`` with the
detail that names the missing services. Routes receive only the engine
contract, never the host or its plugins.
"""

from __future__ import annotations

import enum
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
                                    "the engine bridge is off; start serve with --bridge"),
             BridgeState.STARTING: (ErrorCode.CORDIS_STARTING, "the engine bridge is starting")}


class Bridge:
    """Owns the composition host and hands out the engine."""

    def __init__(self, composition: Composition, seed: dict[str, Any], *, enabled: bool,
                 row_seconds: float | None = None) -> None:
        self.state = BridgeState.STARTING if enabled else BridgeState.DISABLED
        self.detail: str | None = None
        self.host = (Host(composition, mandatory=MANDATORY, seed=seed, row_seconds=row_seconds)
                     if enabled else None)
        self._engine: Engine | None = None

    async def start(self) -> None:
        """Settle the composition; on failure keep the diagnosis for health."""
        if self.host is None:
            return
        try:
            await self.host.start()
            engine = self.host.service("engine")
            if not isinstance(engine, Engine):
                raise TypeError("service engine does not satisfy the engine contract")
        except Exception as exc:
            self.state = BridgeState.FAILED
            self.detail = bounded(getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}",
                                  600)
            return
        self._engine = engine
        self.state = BridgeState.READY

    async def stop(self) -> None:
        """Dispose the host (every row, service, task and file); idempotent."""
        self._engine = None
        if self.host is not None:
            await self.host.stop()

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
        """``GET /api/cordis/health``: state, detail, and the host's rows and services."""
        return {"state": self.state.value, "detail": self.detail,
                "host": self.host.status() if self.host is not None else None}
