"""The tool catalog (GW-02): closed schemas, loaded once from package data.

Each entry states everything a client needs so that none ever infers it: id,
version, description, input and output schema, effect, network contact and
whether it requires a human authorization. The schemas read here are the very
objects used for validation and the very ones published over HTTP.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
from collections.abc import Iterator, Mapping
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

CATALOG_RESOURCE = "catalog.v1.json"


class Effect(enum.StrEnum):
    """What calling a tool may change."""

    READ = "read"
    WRITE = "write"
    RESEARCH = "research"


@dataclasses.dataclass(frozen=True, slots=True)
class ToolSpec:
    """One catalog entry; ``input_schema`` is closed at every level."""

    tool_id: str
    version: str
    description: str
    effect: Effect
    network_contact: bool
    requires_authorization: bool
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any]
    #: The compiled validator of ``input_schema`` (built once, never compared).
    input_validator: Draft202012Validator = dataclasses.field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_validator", Draft202012Validator(self.input_schema))

    def describe(self, *, available: bool = True, reason: str | None = None) -> dict[str, Any]:
        """The published wire shape of this entry (SPEC §15)."""
        entry: dict[str, Any] = {
            "tool_id": self.tool_id,
            "version": self.version,
            "description": self.description,
            "effect": self.effect.value,
            "network_contact": self.network_contact,
            "requires_authorization": self.requires_authorization,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "available": available,
        }
        if not available:
            entry["unavailable_reason"] = reason
        return entry


class ToolCatalog(Mapping[str, ToolSpec]):
    """An immutable mapping ``tool_id -> ToolSpec``."""

    def __init__(self, specs: list[ToolSpec]) -> None:
        self._specs = {spec.tool_id: spec for spec in specs}
        if len(self._specs) != len(specs):
            raise ValueError("duplicate tool_id in catalog")

    def __getitem__(self, tool_id: str) -> ToolSpec:
        return self._specs[tool_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._specs)

    def __len__(self) -> int:
        return len(self._specs)


def _spec_from(entry: dict[str, Any]) -> ToolSpec:
    for key in ("input_schema", "output_schema"):
        Draft202012Validator.check_schema(entry[key])
    # SPEC.md §15 names the flag "available"; it is runtime state, not catalog data.
    return ToolSpec(
        tool_id=entry["tool_id"],
        version=entry["version"],
        description=entry["description"],
        effect=Effect(entry["effect"]),
        network_contact=bool(entry["network_contact"]),
        requires_authorization=bool(entry["requires_authorization"]),
        input_schema=entry["input_schema"],
        output_schema=entry["output_schema"],
    )


@functools.cache
def default_catalog() -> ToolCatalog:
    """The catalog shipped with the package."""
    text = resources.files(__package__).joinpath("schemas", CATALOG_RESOURCE).read_text("utf-8")
    document = json.loads(text)
    return ToolCatalog([_spec_from(entry) for entry in document["tools"]])
