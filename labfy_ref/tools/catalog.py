"""The tool catalog (GW-02): closed schemas, loaded once from package data.

Each entry states everything a client needs so that none ever infers it: id,
version, description, input and output schema, effect, network contact and
whether it requires a human authorization. The schemas read here are the very
objects used for validation and the very ones published over HTTP.

Each entry also carries its *traits* (PR-07): what the narrowing, the driver,
the gateway and Work need to know about a tool — whether it is an idempotent
read, which references its results produce and its arguments consume, what
counts as progress, whether a success pauses the turn, which service method
runs it, what a write stores and how Work resolves a call a crash interrupted —
so that none of them spells a tool id: a new tool is one entry here plus one
service method. The traits are internal: the published wire shape (SPEC §15)
is unchanged.
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

from labfy_ref.errors import ToolError

CATALOG_RESOURCE = "catalog.v1.json"


class Effect(enum.StrEnum):
    """What calling a tool may change."""

    READ = "read"
    WRITE = "write"
    RESEARCH = "research"


class Recovery(enum.StrEnum):
    """How Work resolves a call that an earlier attempt started and never finished (WK-06)."""

    #: It changes nothing: run it again.
    REPEAT = "repeat"
    #: A write: compare its target file with the content written and with what the
    #: file held before (recorded before the write ran).
    CONTENT = "content"
    #: It makes something: look for what such a call made since it started (its
    #: service has ``<method>_made_since(since, **arguments)``: what such calls returned).
    MADE = "made"


#: Traits every catalog entry must state (a missing one is a packaging bug).
REQUIRED_TRAITS = ("service", "recovery")


@dataclasses.dataclass(frozen=True, slots=True)
class Produces:
    """Where a tool's result shows references (PR-07).

    ``items`` names the result's array of entries (None: the result itself is
    the one entry); ``id`` the entry's field holding the reference; the
    reference kind is ``ref``, or the value of the entry's ``ref_from`` field
    (a listing of files and directories); ``prefix`` names a result field that
    is joined before the id with ``/`` (a directory's path); ``label`` the
    entry's fields that say what the reference is (for relevance); ``content``
    the entry's fields that hold what the reference *says* (a body, a file's
    text): the passages an answer may quote.
    """

    id: str
    ref: str | None = None
    ref_from: str | None = None
    items: str | None = None
    prefix: str | None = None
    label: tuple[str, ...] = ()
    content: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class Traits:
    """What a tool is, for the code that drives it (PR-07); none of it is wire shape."""

    #: The same call answers the same within a turn (asking again adds nothing).
    idempotent: bool = False
    #: A successful call brings content the turn can use (not only references).
    progress: bool = False
    #: Offered only once the turn made progress (a listing alone is not enough).
    needs_progress: bool = False
    #: A successful call pauses the turn for a human (research).
    pauses_turn: bool = False
    #: Still offered when the turn must conclude.
    concluding: bool = False
    #: Offered only while the turn holds no reference of this kind.
    once_per_turn: str | None = None
    #: Optional arguments that narrow the call: the call without them answers a superset.
    filters: tuple[str, ...] = ()
    #: Argument name -> the reference kind it takes (a string, or an array of them).
    consumes: Mapping[str, str] = dataclasses.field(default_factory=dict)
    produces: tuple[Produces, ...] = ()
    #: References known before any result (the workspace root of a file listing).
    known_refs: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: Arguments that are natural-language text (bounded in shape, not only length).
    free_text: tuple[str, ...] = ()
    #: Reference kind -> the regular expression of such a reference a user may name in
    #: the request ("read notes/visitor.txt"): offered as if a result had shown it.
    requested: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Arguments that take a word of the user's request (a search term).
    request_words: tuple[str, ...] = ()
    #: Argument name -> the reference kind it creates (a path to write): the user may name it.
    targets: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The gateway service method that runs the tool: ``<service>.<method>``.
    service: str = ""
    #: How Work resolves the call after a crash.
    recovery: Recovery = Recovery.REPEAT
    #: The argument holding the text a write stores (its target is in ``targets``): an
    #: approval quotes it and counts its UTF-8 bytes, Work hashes it.
    written: str | None = None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> Traits:
        """Traits from the catalog file (unknown keys are a packaging bug: KeyError)."""
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = set(document) - known
        if unknown:
            raise KeyError(f"unknown tool traits: {sorted(unknown)}")
        missing = [name for name in REQUIRED_TRAITS if name not in document]
        if missing:
            raise KeyError(f"missing tool traits: {missing}")
        produces = tuple(Produces(**{**entry, "label": tuple(entry.get("label", ())),
                                      "content": tuple(entry.get("content", ()))})
                         for entry in document.get("produces", ()))
        return cls(**{**document, "produces": produces,
                      "recovery": Recovery(document["recovery"]),
                      "filters": tuple(document.get("filters", ())),
                      "free_text": tuple(document.get("free_text", ())),
                      "request_words": tuple(document.get("request_words", ())),
                      "consumes": dict(document.get("consumes", {})),
                      "requested": dict(document.get("requested", {})),
                      "targets": dict(document.get("targets", {})),
                      "known_refs": {kind: tuple(values) for kind, values
                                     in document.get("known_refs", {}).items()}})


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
    traits: Traits = dataclasses.field(default_factory=Traits, compare=False)
    #: The compiled validator of ``input_schema`` (built once, never compared).
    input_validator: Draft202012Validator = dataclasses.field(
        init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "input_validator", Draft202012Validator(self.input_schema))
        traits = self.traits
        if self.effect is Effect.READ and traits.recovery is not Recovery.REPEAT:
            raise ValueError(f"{self.tool_id}: a read is recovered by running it again")
        if self.effect is not Effect.READ and traits.recovery is Recovery.REPEAT:
            raise ValueError(f"{self.tool_id}: an effect cannot be recovered by repeating it")
        if traits.recovery is Recovery.CONTENT and (
                len(traits.targets) != 1 or traits.written is None):
            raise ValueError(f"{self.tool_id}: a write names one target and what it writes")

    @property
    def target(self) -> str | None:
        """The argument naming what the call writes (traits ``targets``), if it writes one."""
        return next(iter(self.traits.targets), None)

    def produced(self, data: Mapping[str, Any]) -> list[str]:
        """The references a result's data shows (its traits say where), in order."""
        found: list[str] = []
        for produces in self.traits.produces:
            entries = data.get(produces.items) if produces.items else [data]
            base = data.get(produces.prefix) if produces.prefix else ""
            for entry in entries if isinstance(entries, list) else ():
                value = entry.get(produces.id) if isinstance(entry, Mapping) else None
                if isinstance(value, str):
                    found.append(f"{base}/{value}" if isinstance(base, str) and base else value)
        return found

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

    def resume_call(self, reference: str) -> tuple[str, dict[str, str]]:
        """The call that reads what a paused turn waits on (``reference``, e.g. a granted
        campaign): the progress tool that takes the reference kind a tool whose success
        pauses the turn produces (traits ``pauses_turn``, ``produces``, ``consumes``)."""
        kinds = {produces.ref for spec in self.values() if spec.traits.pauses_turn
                 for produces in spec.traits.produces if produces.ref}
        for spec in self.values():
            for name, kind in spec.traits.consumes.items():
                if spec.traits.progress and kind in kinds:
                    return spec.tool_id, {name: reference}
        raise ToolError("no tool of this catalog reads what a paused turn waits on")


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
        traits=Traits.from_json(entry.get("traits", {})),
    )


@functools.cache
def default_catalog() -> ToolCatalog:
    """The catalog shipped with the package."""
    text = resources.files(__package__).joinpath("schemas", CATALOG_RESOURCE).read_text("utf-8")
    document = json.loads(text)
    return ToolCatalog([_spec_from(entry) for entry in document["tools"]])
