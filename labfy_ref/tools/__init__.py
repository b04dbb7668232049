"""The tool catalog (SPEC §5); the gateway and services that run tools come later."""

from labfy_ref.tools.catalog import Effect, ToolCatalog, ToolSpec, default_catalog

__all__ = ["Effect", "ToolCatalog", "ToolSpec", "default_catalog"]
