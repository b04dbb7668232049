"""The composition host (HO-01..HO-05): rows, services, scopes, settle, status, stop.

Rows name plugins. A plugin declares the services it ``provides``, those it
``requires`` and those it may use if present (``optional``). The host
activates a row once its requirements are ready; a row still waiting when the
composition settles stays ``PENDING`` — not an error, but the host names what
it waits for. Mandatory services still missing after settling make
:meth:`Host.start` fail with :class:`HostStartupError`, which names them and
the rows that never activated: never an engine with empty lists.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import importlib
from collections.abc import Iterable
from importlib.metadata import entry_points
from typing import Any, ClassVar, Protocol

from labfy_ref.errors import HostStartupError, bounded
from labfy_ref.host.composition import Composition, RowSpec
from labfy_ref.host.scope import Scope

ENTRY_POINT_GROUP = "labfy_ref.plugins"


class RowState(enum.StrEnum):
    """Loader row states (HO-02)."""

    PENDING = "PENDING"
    LOADING = "LOADING"
    ACTIVE = "ACTIVE"
    FAILED = "FAILED"
    DISPOSED = "DISPOSED"


class ServiceState(enum.StrEnum):
    """Service availability (HO-03)."""

    PENDING = "pending"
    READY = "ready"
    FAILED = "failed"


class Plugin(Protocol):
    """What a row's plugin is: declared services and an async ``activate``."""

    provides: ClassVar[tuple[str, ...]]
    requires: ClassVar[tuple[str, ...]]
    optional: ClassVar[tuple[str, ...]]

    async def activate(self, context: PluginContext) -> None:
        """Register this plugin's services and effects through ``context``."""
        ...


class _Row:
    def __init__(self, spec: RowSpec) -> None:
        self.spec = spec
        self.state = RowState.PENDING
        self.detail: str | None = None
        self.plugin: Plugin | None = None
        self.scope: Scope | None = None


class PluginContext:
    """A row's view of the host: its config, its scope, and the services it declared."""

    def __init__(self, host: Host, row: _Row, scope: Scope) -> None:
        self._host = host
        self._row = row
        self.scope = scope
        self.config: dict[str, Any] = dict(row.spec.config)
        self.row_id = row.spec.id

    def get(self, name: str) -> Any:
        """A ready service this row declared (required or optional); None if optional absent."""
        assert self._row.plugin is not None
        declared = (*self._row.plugin.requires, *self._row.plugin.optional)
        if name not in declared:
            raise LookupError(f"row {self.row_id} did not declare service {name}")
        return self._host.service(name)

    def provide(self, name: str, value: Any) -> None:
        """Publish a declared service; it is retracted when the row's scope closes."""
        assert self._row.plugin is not None
        if name not in self._row.plugin.provides:
            raise LookupError(f"row {self.row_id} did not declare it provides {name}")
        self._host._register(name, value, self.row_id)
        self.scope.defer(lambda: self._host._retract(name), f"service {name}")



def resolve_plugin(reference: str) -> Plugin:
    """``module:attr`` or an entry point name of group ``labfy_ref.plugins`` → a plugin."""
    if ":" in reference:
        module_name, _, attr = reference.partition(":")
        factory = getattr(importlib.import_module(module_name), attr)
    else:
        found = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == reference]
        if not found:
            raise LookupError(f"no plugin named {reference} in group {ENTRY_POINT_GROUP}")
        factory = found[0].load()
    plugin: Plugin = factory()
    return plugin


class Host:
    """Composes rows into services, owned by one root scope."""

    def __init__(self, composition: Composition, *, mandatory: Iterable[str] = (),
                 seed: dict[str, Any] | None = None, row_seconds: float | None = None) -> None:
        self.root = Scope("root")
        #: HO-07: how long one row may take to activate (None: no deadline).
        self.row_seconds = row_seconds
        self._rows = [_Row(spec) for spec in composition.rows if not spec.disabled]
        self._disabled = [spec.id for spec in composition.rows if spec.disabled]
        self._services: dict[str, tuple[str, Any]] = {}
        self._failed: dict[str, tuple[str, str]] = {}
        self.mandatory = tuple(mandatory)
        self._stopped = False
        for name, value in (seed or {}).items():
            self._register(name, value, "host")
            self.root.defer(functools.partial(self._retract, name), f"service {name}")

    # -- services -----------------------------------------------------------------

    def _register(self, name: str, value: Any, row_id: str) -> None:
        self._services[name] = (row_id, value)
        self._failed.pop(name, None)

    def _retract(self, name: str) -> None:
        self._services.pop(name, None)

    def service(self, name: str) -> Any:
        """A ready service, or None."""
        entry = self._services.get(name)
        return None if entry is None else entry[1]

    def service_state(self, name: str) -> ServiceState:
        """pending / ready / failed."""
        if name in self._services:
            return ServiceState.READY
        return ServiceState.FAILED if name in self._failed else ServiceState.PENDING

    # -- lifecycle ----------------------------------------------------------------

    async def start(self) -> None:
        """Activate rows until nothing more can; fail if mandatory services are missing."""
        for row in self._rows:
            try:
                row.plugin = resolve_plugin(row.spec.plugin)
            except Exception as exc:
                row.state, row.detail = RowState.FAILED, _detail(exc)
        progress = True
        while progress:
            progress = False
            for row in self._rows:
                if row.state is RowState.PENDING and self._activatable(row):
                    await self._activate(row)
                    progress = True
        missing = [name for name in self.mandatory
                   if self.service_state(name) is not ServiceState.READY]
        if missing:
            waiting = [f"{row.spec.id} [{row.state.value}"
                       + (f": waits for {', '.join(self._missing(row))}]" if self._missing(row)
                          else f": {row.detail}]" if row.detail else "]")
                       for row in self._rows if row.state is not RowState.ACTIVE]
            raise HostStartupError(
                f"missing mandatory services: {', '.join(missing)}; rows never activated: "
                + (", ".join(waiting) or "none"))

    def _missing(self, row: _Row) -> list[str]:
        if row.plugin is None:
            return []
        return [name for name in row.plugin.requires
                if self.service_state(name) is not ServiceState.READY]

    def _activatable(self, row: _Row) -> bool:
        assert row.plugin is not None
        if self._missing(row):
            return False
        providers = {name: [r for r in self._rows if r.plugin and name in r.plugin.provides
                            and r.state in (RowState.PENDING, RowState.LOADING)]
                     for name in row.plugin.optional}
        # Wait for an optional service only while some other row may still provide it.
        return all(self.service_state(name) is ServiceState.READY
                   or not [r for r in rows if r is not row and not self._missing(r)]
                   for name, rows in providers.items())

    async def _activate(self, row: _Row) -> None:
        assert row.plugin is not None
        row.state = RowState.LOADING
        row.scope = self.root.child(row.spec.id)
        deadline = asyncio.timeout(self.row_seconds)
        try:
            async with deadline:
                await row.plugin.activate(PluginContext(self, row, row.scope))
        except Exception as exc:
            row.state = RowState.FAILED
            row.detail = (f"did not activate within {self.row_seconds:g} s (--bridge-row-timeout)"
                          if deadline.expired() else _detail(exc))  # a plugin's own: its words
            for name in row.plugin.provides:
                self._failed.setdefault(name, (row.spec.id, row.detail))
            await row.scope.aclose()
            return
        row.state = RowState.ACTIVE

    async def stop(self) -> list[str]:
        """Dispose the root scope (every row, service, task and file); idempotent (HO-05)."""
        if self._stopped:
            return []
        self._stopped = True
        errors = await self.root.aclose()
        for row in self._rows:
            row.state = RowState.DISPOSED
        return errors

    # -- status -------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Every row, every service and every missing requirement (HO-03)."""
        declared: dict[str, str] = {}
        for row in self._rows:
            for name in row.plugin.provides if row.plugin else ():
                declared.setdefault(name, row.spec.id)
        names = sorted(set(declared) | set(self._services) | set(self.mandatory))
        services = []
        for name in names:
            state = self.service_state(name)
            entry: dict[str, Any] = {"name": name, "state": state.value,
                                     "provider": self._services.get(name, (declared.get(name),))[0]}
            if state is ServiceState.FAILED:
                entry["detail"] = self._failed[name][1]
            services.append(entry)
        rows = [{"id": row.spec.id, "plugin": row.spec.plugin, "state": row.state.value,
                 "detail": row.detail,
                 "provides": list(row.plugin.provides) if row.plugin else [],
                 "requires": list(row.plugin.requires) if row.plugin else [],
                 "missing": self._missing(row) if row.state is RowState.PENDING else []}
                for row in self._rows]
        return {"rows": rows, "disabled_rows": self._disabled, "services": services,
                "missing_mandatory": [n for n in self.mandatory
                                      if self.service_state(n) is not ServiceState.READY]}


def _detail(exc: Exception) -> str:
    return bounded(f"{type(exc).__name__}: {exc}", 300)
