"""The composition document (HO-01): rows naming plugins, in YAML.

::

    rows:
      - id: tools
        plugin: tools                      # entry point in group labfy_ref.plugins
        config: {}
      - id: custom
        plugin: my_package.plugins:Thing   # or module:attr
        disabled: true
"""

from __future__ import annotations

import dataclasses
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from labfy_ref.errors import ConfigRefused

_ROW_KEYS = {"id", "plugin", "config", "disabled"}
_ROW_ID = re.compile(r"[a-z][a-z0-9_-]{0,63}", re.ASCII)
_PLUGIN = re.compile(r"[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?", re.ASCII)
MAX_DOCUMENT_BYTES = 256 * 1024


@dataclasses.dataclass(frozen=True, slots=True)
class RowSpec:
    """One row as written."""

    id: str
    plugin: str
    config: dict[str, Any]
    disabled: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Composition:
    """The rows, in order."""

    rows: tuple[RowSpec, ...]


def parse_composition(text: str, source: str = "composition") -> Composition:
    """Parse and check a composition document; refuse anything unexpected."""
    if len(text.encode("utf-8")) > MAX_DOCUMENT_BYTES:
        raise ConfigRefused(f"{source}: larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigRefused(f"{source}: not YAML ({type(exc).__name__})") from exc
    if not isinstance(document, dict) or set(document) != {"rows"} \
            or not isinstance(document["rows"], list):
        raise ConfigRefused(f"{source}: the document must be a mapping with only 'rows' (a list)")
    rows: list[RowSpec] = []
    for index, row in enumerate(document["rows"]):
        where = f"{source}: row {index + 1}"
        if not isinstance(row, dict) or not {"id", "plugin"} <= set(row) <= _ROW_KEYS:
            raise ConfigRefused(f"{where}: needs id and plugin, may have config and disabled")
        row_id, plugin = row["id"], row["plugin"]
        if not isinstance(row_id, str) or not _ROW_ID.fullmatch(row_id):
            raise ConfigRefused(f"{where}: id must match [a-z][a-z0-9_-]*")
        if not isinstance(plugin, str) or not _PLUGIN.fullmatch(plugin):
            raise ConfigRefused(f"{where}: plugin must be an entry point name or module:attr")
        config = row.get("config") or {}
        disabled = row.get("disabled", False)
        if not isinstance(config, dict) or not isinstance(disabled, bool):
            raise ConfigRefused(f"{where}: config must be a mapping, disabled a boolean")
        if any(r.id == row_id for r in rows):
            raise ConfigRefused(f"{where}: duplicate id {row_id}")
        rows.append(RowSpec(row_id, plugin, config, disabled))
    return Composition(tuple(rows))


def load_composition(path: Path) -> Composition:
    """Read a composition file."""
    try:
        text = path.read_text("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigRefused(f"--composition: unreadable ({type(exc).__name__})") from exc
    return parse_composition(text, path.name)


def default_composition() -> Composition:
    """The reference engine's composition shipped with the package."""
    text = resources.files(__package__).joinpath("default-composition.yaml").read_text("utf-8")
    return parse_composition(text, "default-composition.yaml")
