"""The narrowed arguments of one tool (PR-06, PR-07): references the turn saw, filters
after the broadest call, free text shaped, what the user named first."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from labfy_ref.protocol.narrowing.answers import (
    FINAL_TEXT_CHARS,
    QUESTION_CHARS,
    QUESTIONS,
    TOPIC_CHARS,
    WRITE_CONTENT_CHARS,
    WRITE_PATH_CHARS,
    free_text,
    grounded_figures,
    grounded_words,
    said_of,
)
from labfy_ref.protocol.narrowing.bounds import admitted
from labfy_ref.protocol.narrowing.observations import (
    OBJECT_REFS,
    Budget,
    Observations,
    call_key,
)
from labfy_ref.protocol.narrowing.request import (
    SEARCH_WORDS,
    asked_for,
    catalog_vocabulary,
    named,
    names_in,
    request_words,
)
from labfy_ref.protocol.narrowing.rules import (
    GROUNDED_CONTENT,
    GROUNDING,
    INFORMATION_GAIN,
    RELEVANCE,
    REQUESTED,
    SEARCH,
    TEXT_SHAPE,
)
from labfy_ref.protocol.relevance import ranked
from labfy_ref.protocol.text_shape import (
    ALL_SCRIPTS,
    CONTENT,
    FINAL,
    PATH_CHARS,
    PATH_PATTERN,
    QUESTION,
    TOPIC,
    Shape,
)
from labfy_ref.tools.catalog import ToolCatalog, ToolSpec, default_catalog

#: The shape and PR-06 bound of each free-text argument, by its role.
_TEXTS: dict[str, tuple[Shape, int]] = {
    "topic": (TOPIC, TOPIC_CHARS), "questions": (QUESTION, QUESTION_CHARS),
    "content": (CONTENT, WRITE_CONTENT_CHARS)}


def arguments_of(spec: ToolSpec, seen: Observations, budget: Budget,
               scripts: frozenset[str] = ALL_SCRIPTS,
               only: frozenset[str] | None = None, *,
               catalog: ToolCatalog | None = None) -> dict[str, Any] | None:
    """The narrowed arguments schema of one tool, or None when it has nothing to offer now.

    Built from the tool's input schema and its traits: a consumed reference is
    an enum of the values this turn saw (fresh ones for an idempotent tool,
    most relevant first); a filter is dropped while the broadest call is
    unanswered; free text is shaped; anything else is bounded as published.
    """
    traits, wide, rules = spec.traits, spec.input_schema, budget.rules
    tool_id = spec.tool_id
    required = list(wide.get("required", []))
    properties: dict[str, Any] = {}
    if traits.filters:
        broadest = call_key(tool_id, {})
        if broadest in seen.answered and (INFORMATION_GAIN not in rules
                                          or tool_id in seen.complete):
            return None  # everything was listed; a filtered listing shows nothing new
    for name, field in wide["properties"].items():
        consumed = traits.consumes.get(name)
        if consumed is not None:
            narrowed = _reference(spec, name, field, consumed, seen=seen, budget=budget,
                                  only=only)
            if narrowed is None:
                if name in required:
                    return None  # its required reference has no known (fresh) value
                continue
            properties[name] = narrowed
        elif name in traits.request_words:
            if SEARCH not in rules or tool_id in seen.fruitless:
                continue  # a search found nothing: the broadest listing holds what there is
            words = request_words(seen.query, catalog_vocabulary(catalog or default_catalog()))
            fresh = [w for w in admitted(field, words)
                     if call_key(tool_id, {name: w}) not in seen.answered]
            if not fresh:
                continue
            properties[name] = {"type": "string", "enum": fresh[:SEARCH_WORDS]}
            searched = len(fresh) < len(words)
            if not searched and call_key(tool_id, {}) not in seen.answered:
                required.append(name)  # search first: a word of the request, then the rest
        elif name in traits.filters:
            if INFORMATION_GAIN in rules and call_key(tool_id, {}) not in seen.answered:
                continue  # the broadest call first: its answer holds every filtered one
            values = [value for value in field.get("enum", [])
                      if call_key(tool_id, {name: value}) not in seen.answered]
            if values:
                properties[name] = {"type": field["type"], "enum": values}
        elif name in traits.free_text:
            shape, chars = _TEXTS.get(name, (FINAL, FINAL_TEXT_CHARS))
            # research text is grounded by one rule, a file's content (a write) by another
            grounded = (GROUNDED_CONTENT if traits.targets else GROUNDING) in rules
            if grounded and TEXT_SHAPE in rules:
                shape = shape.using(grounded_words(seen), grounded_figures(seen))
            said = (said_of(field, seen, rules, named=not traits.targets)
                    if grounded else None)
            if said is not None:
                properties[name] = said
            elif field.get("type") == "array":
                properties[name] = {
                    "type": "array", "minItems": max(1, int(field.get("minItems", 0))),
                    "maxItems": min(QUESTIONS, int(field["maxItems"])),
                    "items": free_text(field["items"], shape, chars, rules, scripts)}
            else:
                properties[name] = free_text(field, shape, chars, rules, scripts)
        elif (name in traits.targets and REQUESTED in rules
              and (targets := _targets(spec, name, seen))):
            properties[name] = {"type": "string", "enum": targets}
        elif name in required:
            properties[name] = _bounded(field, rules)
    if traits.filters and not properties and call_key(tool_id, {}) in seen.answered:
        return None  # every filtered listing was answered too
    return {"type": "object", "additionalProperties": False,
            "required": [name for name in required if name in properties],
            "properties": properties}


def _reference(spec: ToolSpec, name: str, field: Mapping[str, Any], kind: str, *,
               seen: Observations, budget: Budget,
               only: frozenset[str] | None = None) -> dict[str, Any] | None:
    """An enum of the known references of ``kind`` this field admits (of ``only``), or None."""
    items = field.get("items") if field.get("type") == "array" else None
    pool = list(seen.known(kind)) + [value for value in spec.traits.known_refs.get(kind, ())
                                     if value not in seen.known(kind)]
    if REQUESTED in budget.rules and kind in spec.traits.requested:
        pool += [value for value in named(spec.traits.requested[kind], seen.query)
                 if value not in pool]
    if REQUESTED in budget.rules and spec.traits.progress:  # a read may follow what was read
        pool += [value for value in seen.pointed.get(kind, ()) if value not in pool]
    values = admitted(items if items is not None else field, pool)
    if only is not None:
        values = [value for value in values if value in only]
    if items is None:
        values = [value for value in values
                  if call_key(spec.tool_id, {name: value}) not in seen.answered]
    if RELEVANCE in budget.rules and seen.query:
        values = ranked(seen.query, values, seen.labels)
    if not values:
        return None
    if items is not None:
        return {"type": "array", "maxItems": min(OBJECT_REFS, int(field.get("maxItems", 1))),
                "items": {"type": "string", "enum": values}}
    return {"type": "string", "enum": values}


def searched_unread(spec: ToolSpec, seen: Observations) -> bool:
    """Did a search of ``spec`` find references the turn has not read yet?

    Then nothing more is listed: what the search found is read first (its
    reads are on offer), so the ids a small model picks from are the ones the
    search found, and a listing cannot crowd them out.
    """
    if not spec.traits.request_words:
        return False
    kinds = {produces.ref for produces in spec.traits.produces if produces.ref}
    found = [ref for kind in kinds for ref in seen.known(kind) if ref in seen.found]
    return any(ref not in seen.read for ref in found)


def named_reads(catalog: ToolCatalog, usable: Iterable[str], seen: Observations,
                budget: Budget) -> dict[str, frozenset[str]]:
    """The references the user named that a read on offer has not read yet, by tool.

    Named: spelled out in the request (the catalog trait ``requested``: a
    path, an id), or a reference whose name a result showed (an object's
    title) is in the request word for word (:func:`names_in`). While any is
    unread, reading them is all a round offers (requested rule).
    """
    found: dict[str, frozenset[str]] = {}
    written = {value for tool_id in usable if asked_for(catalog, catalog[tool_id], seen,
                                                         budget.rules)
               for name in catalog[tool_id].traits.targets
               for value in _targets(catalog[tool_id], name, seen)}
    for tool_id in usable:
        spec = catalog[tool_id]
        if not spec.traits.progress:
            continue
        values: set[str] = set()
        for name, kind in spec.traits.consumes.items():
            if spec.input_schema["properties"][name].get("type") == "array":
                continue
            pattern = spec.traits.requested.get(kind)
            spelled = named(pattern, seen.query) if pattern else []
            titled = [ref for ref in seen.known(kind) if names_in(seen.names.get(ref, ""),
                                                                    seen.query)]
            values.update(value for value in [*spelled, *titled] if value not in seen.read
                          and value not in written
                          and call_key(tool_id, {name: value}) not in seen.answered)
        if values and arguments_of(spec, seen, budget, only=frozenset(values),
                                 catalog=catalog) is not None:
            found[tool_id] = frozenset(values)
    return found


def _targets(spec: ToolSpec, name: str, seen: Observations) -> list[str]:
    """The references the user named that ``name`` may create (trait ``targets``): those
    the request spells (trait ``requested``) that the turn has not seen exist — a write
    goes where the user said, and never over a file named only to be read."""
    kind = spec.traits.targets[name]
    pattern = spec.traits.requested.get(kind)
    if not pattern:
        return []
    field = spec.input_schema["properties"][name]
    return admitted(field, [value for value in named(pattern, seen.query)
                             if value not in seen.known(kind) and value not in seen.read])


def _bounded(field: Mapping[str, Any], rules: frozenset[str]) -> dict[str, Any]:
    """A required string that is no reference and no prose (a path to write): bounded."""
    wide_max = int(field.get("maxLength", PATH_CHARS))
    if TEXT_SHAPE in rules and field.get("type") == "string" and wide_max >= PATH_CHARS:
        return {"type": "string", "minLength": 1, "maxLength": PATH_CHARS,
                "pattern": PATH_PATTERN}
    return {"type": "string", "minLength": 1, "maxLength": min(WRITE_PATH_CHARS, wide_max)}
