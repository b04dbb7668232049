"""What a turn's own results showed so far: the input of the narrowing (PR-06, PR-07).

Which result fields are references, of which kind, and which are content is read
from each tool's catalog traits; nothing here spells a tool id.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from labfy_ref.protocol.jsonfmt import canonical
from labfy_ref.protocol.narrowing.rules import DEFAULT_PROFILE
from labfy_ref.protocol.text_shape import compiled, passages, scripts_of
from labfy_ref.tools.catalog import Produces, ToolCatalog, ToolSpec, Traits, default_catalog

#: The most reference values one enum offers (the newest are kept).
MAX_REFERENCES = 100
#: How many object references research may cite.
OBJECT_REFS = 4
#: Bound on what a turn remembers of one reference (for relevance), in characters.
LABEL_CHARS = 2000
#: How much of one read's content is split into passages, and how many passages a turn
#: keeps (the newest) for a quoted answer to choose from.
CONTENT_CHARS = 8000
MAX_PASSAGES = 40
#: A passage opens with what it is from (an object's title, a file's path), at most this long.
SOURCE_CHARS = 80


@dataclasses.dataclass(frozen=True, slots=True)
class Observations:
    """What a turn's own results showed so far (the input of :func:`narrow`).

    Which result fields are references, and of which kind, is read from each
    tool's catalog traits (:class:`~labfy_ref.tools.catalog.Produces`); this
    class spells no tool id.
    """

    #: The user's message this turn answers (the query of the relevance order).
    query: str = ""
    #: Reference kind -> the values the turn's results showed, first seen first.
    refs: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    #: Reference -> what the turn saw about it (title, kind, body, path), bounded.
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: Canonical ``[tool_id, arguments]`` of every call answered in this turn.
    answered: frozenset[str] = frozenset()
    tool_calls: int = 0
    #: Successful calls of tools whose trait is ``progress`` (content, not references).
    progress: int = 0
    #: Tools whose broadest call (no filter) was answered in full (nothing left out).
    complete: frozenset[str] = frozenset()
    #: References whose content a progress call brought, first read first.
    read: tuple[str, ...] = ()
    #: The scripts of everything the results showed (kept as they come, not rescanned).
    scripts: frozenset[str] = frozenset()
    #: The sentences the turn's reads said (trait ``content``), first read first: what a
    #: final answer may quote (quoted rule).
    passages: tuple[str, ...] = ()
    #: Reference -> its name as a result showed it (an object's title), when it has one.
    names: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: References a search (a call with a ``request_words`` argument) found, first found first.
    found: tuple[str, ...] = ()
    #: The tools that succeeded at least once in this turn.
    succeeded: frozenset[str] = frozenset()
    #: The tools a search of which (a ``request_words`` argument) found nothing.
    fruitless: frozenset[str] = frozenset()
    #: Reference kind -> the references the turn's *reads* spelled out (the catalog trait
    #: ``requested``: a path, an id), newest kept: a read may point to what to read next.
    pointed: Mapping[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)

    def known(self, kind: str) -> tuple[str, ...]:
        """The references of ``kind`` the turn has seen."""
        return self.refs.get(kind, ())

    @property
    def campaigns(self) -> tuple[str, ...]:
        """Campaign references seen (research)."""
        return self.known("campaign")

    def observe(self, tool_id: str, arguments: Mapping[str, Any],
                result: Mapping[str, Any], catalog: ToolCatalog | None = None) -> Observations:
        """These observations plus one answered call and its wrapped result."""
        seen = dataclasses.replace(self, tool_calls=self.tool_calls + 1,
                                   answered=self.answered | {call_key(tool_id, arguments)})
        data = result.get("data")
        spec = (catalog or default_catalog()).get(tool_id)
        if result.get("ok") is not True or not isinstance(data, Mapping) or spec is None:
            return seen
        try:
            return _learn(seen, spec, arguments, data, catalog or default_catalog())
        except (KeyError, TypeError, AttributeError, ValueError):
            return seen  # a result of another shape teaches nothing (it is data, not trusted)


def _pointed_by(seen: Observations, catalog: ToolCatalog,
                passages_read: Iterable[str]) -> Observations:
    """``seen`` plus the references the passages just read spell out, by the patterns of
    the catalog's ``requested`` traits; each remembers the passage that named it (its
    label, for the relevance order). Data, never an instruction: a pointed reference is
    only *offered* to the tools that read (never an effect's target)."""
    patterns = {kind: pattern for spec in catalog.values()
                for kind, pattern in spec.traits.requested.items()}
    pointed = dict(seen.pointed)
    labels = dict(seen.labels)
    for passage in passages_read:
        for kind, pattern in patterns.items():
            for match in compiled(pattern).finditer(passage):
                value = match.group()
                pointed[kind] = _merge(pointed.get(kind, ()), [value])
                if value not in labels:
                    labels[value] = passage[:LABEL_CHARS]
    if pointed == seen.pointed:
        return seen
    return dataclasses.replace(seen, pointed=pointed, labels=labels)


def call_key(tool_id: str, arguments: Mapping[str, Any]) -> str:
    """The identity of a call: identical calls have identical keys."""
    return canonical([tool_id, arguments])


def _learn(seen: Observations, spec: ToolSpec, arguments: Mapping[str, Any],
           data: Mapping[str, Any], catalog: ToolCatalog) -> Observations:
    traits = spec.traits
    refs = dict(seen.refs)
    labels = dict(seen.labels)
    names = dict(seen.names)
    complete = seen.complete
    for produces in traits.produces:
        entries = data[produces.items] if produces.items else [data]
        if not isinstance(entries, list):
            continue
        base = str(data[produces.prefix]) if produces.prefix else ""
        for entry in entries:
            if not isinstance(entry, Mapping):
                continue
            value = entry.get(produces.id)
            kind = produces.ref if produces.ref else entry.get(produces.ref_from or "")
            if not isinstance(value, str) or not isinstance(kind, str):
                continue
            value = f"{base}/{value}" if base else value
            refs[kind] = _merge(refs.get(kind, ()), [value])
            said = " ".join(str(entry[field]) for field in produces.label
                            if isinstance(entry.get(field), str))
            labels[value] = _label(labels.get(value, ""), f"{value} {said}")
            name = _source(produces, entry)
            if name and name != value:
                names[value] = name
        if produces.items and not (set(arguments) & set(traits.filters)):
            maximum = spec.output_schema["properties"][produces.items].get("maxItems")
            if maximum is None or len(entries) < int(maximum):
                complete = complete | {spec.tool_id}
    if len(labels) > MAX_REFERENCES * 4:
        labels = {key: labels[key] for key in list(labels)[-MAX_REFERENCES * 4:]}
    read, quotable, found, fruitless = seen.read, seen.passages, seen.found, seen.fruitless
    if set(arguments) & set(traits.request_words):
        found = _merge(found, spec.produced(data))
        if not spec.produced(data):
            fruitless = fruitless | {spec.tool_id}
    if len(names) > MAX_REFERENCES * 4:
        names = {key: names[key] for key in list(names)[-MAX_REFERENCES * 4:]}
    read_now: list[str] = []  # this read's passages: what it may point to (_pointed_by)
    if traits.progress:
        read = _merge(read, spec.produced(data))
        read_now = _said(traits, data)
        quotable = _merge(quotable, read_now)[-MAX_PASSAGES:]
    shown = " ".join(labels[key] for key in labels if labels[key] != seen.labels.get(key))
    learnt = dataclasses.replace(seen, refs=refs, labels=labels, complete=complete, read=read,
                                 passages=quotable, names=names, found=found,
                                 fruitless=fruitless,
                                 succeeded=seen.succeeded | {spec.tool_id},
                                 scripts=seen.scripts | scripts_of(shown),
                                 progress=seen.progress + (1 if traits.progress else 0))
    return _pointed_by(learnt, catalog, read_now) if read_now else learnt


def _said(traits: Traits, data: Mapping[str, Any]) -> list[str]:
    """The passages of a progress result's content fields (trait ``content``), in order."""
    found: list[str] = []
    for produces in traits.produces:
        entries = data.get(produces.items) if produces.items else [data]
        for entry in entries if isinstance(entries, list) else ():
            if not isinstance(entry, Mapping):
                continue
            source = _source(produces, entry) or str(entry.get(produces.id, ""))[:SOURCE_CHARS]
            for name in produces.content:
                if isinstance(entry.get(name), str):
                    found.extend(f"{source}: {passage}" if source else passage
                                 for passage in passages(entry[name][:CONTENT_CHARS]))
    return found


def _source(produces: Produces, entry: Mapping[str, Any]) -> str:
    """What an entry is called: its first label field that is no content (a title), or ""."""
    name = next((entry[field] for field in produces.label if field not in produces.content
                 and isinstance(entry.get(field), str) and entry[field].strip()), "")
    return " ".join(name.split())[:SOURCE_CHARS]


def _label(old: str, new: str) -> str:
    """What is known of a reference: the old text and the new, bounded."""
    text = new if not old or new.startswith(old) else f"{old} {new}"
    return text[:LABEL_CHARS]


def _merge(known: tuple[str, ...], new: Iterable[Any]) -> tuple[str, ...]:
    """``known`` plus the new strings, first-seen order, no repeats, the newest kept."""
    merged = dict.fromkeys(known)
    for value in new:
        if isinstance(value, str) and value not in merged:
            merged[value] = None
    values = tuple(merged)
    return values[-MAX_REFERENCES:] if len(values) > MAX_REFERENCES else values


#: After this many tool calls a turn is asked to conclude (``--conclude-after``; 0 = never).
#: One default for every surface and every model (PR-07).
DEFAULT_CONCLUDE_AFTER = 4


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """Where the turn stands against its budgets, for this round."""

    round: int
    max_rounds: int
    max_tool_calls: int
    conclude_after: int = DEFAULT_CONCLUDE_AFTER
    #: The rules in force: the guards and the profile's guidance (PR-08).
    rules: frozenset[str] = DEFAULT_PROFILE.names
