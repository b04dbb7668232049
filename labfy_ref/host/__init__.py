"""The composition host: rows, services, scopes (SPEC §9)."""

from labfy_ref.errors import HostStartupError
from labfy_ref.host.composition import (
    Composition,
    RowSpec,
    default_composition,
    load_composition,
    parse_composition,
)
from labfy_ref.host.host import (
    ENTRY_POINT_GROUP,
    Host,
    Plugin,
    PluginContext,
    RowState,
    ServiceState,
    resolve_plugin,
)
from labfy_ref.host.scope import Scope, ScopeClosed

__all__ = [
    "ENTRY_POINT_GROUP",
    "Composition",
    "Host",
    "HostStartupError",
    "Plugin",
    "PluginContext",
    "RowSpec",
    "RowState",
    "Scope",
    "ScopeClosed",
    "ServiceState",
    "default_composition",
    "load_composition",
    "parse_composition",
    "resolve_plugin",
]
