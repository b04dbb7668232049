"""One round's constrained decoding: what is valid now, and room to say it (PR-06..PR-08).

:func:`narrow` cuts the published action schema down to the actions that make sense
at this point of *this* turn, from the tools' catalog traits and the turn's
observations, under the guards and the profile's guidance (:mod:`.rules`); none of
it names a tool, a model or an object. docs/narrowing.md tells the whole design.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping
from typing import Any

from labfy_ref.protocol.action import action_schema
from labfy_ref.protocol.narrowing.answers import (
    FINAL_TEXT_CHARS,
    free_text,
    quote_note,
    quoted,
    recap,
)
from labfy_ref.protocol.narrowing.arguments import (
    arguments_of,
    named_reads,
    searched_unread,
)
from labfy_ref.protocol.narrowing.bounds import max_json_bytes
from labfy_ref.protocol.narrowing.observations import Budget, Observations
from labfy_ref.protocol.narrowing.request import asked_for, spoken_reads
from labfy_ref.protocol.narrowing.rules import (
    EFFECT_TASK,
    LOOK_FIRST,
    PROGRESS,
    REQUESTED,
    SEARCH,
)
from labfy_ref.protocol.text_shape import FINAL, scripts_of
from labfy_ref.tools.catalog import Effect, ToolCatalog, ToolSpec


@dataclasses.dataclass(frozen=True, slots=True)
class Decoding:
    """One round's constrained decoding: the narrowed schema and the completion limit."""

    response_format: dict[str, Any]
    max_tokens: int
    concluding: bool
    #: What this round adds after the newest result (the quoted answers on offer, or a
    #: recap): data the turn's own reads said, never an instruction from them.
    note: str = ""

    @property
    def schema(self) -> dict[str, Any]:
        """The narrowed action schema."""
        schema: dict[str, Any] = self.response_format["json_schema"]["schema"]
        return schema

    @property
    def offered(self) -> frozenset[str]:
        """The tools this round offers."""
        return offered_tools(self.response_format) or frozenset()


def offered_tools(response_format: Mapping[str, Any] | None) -> frozenset[str] | None:
    """The tool ids a ``response_format`` (an action schema) admits, if it says."""
    try:
        branches = response_format["json_schema"]["schema"]["oneOf"]  # type: ignore[index]
        return frozenset(branch["properties"]["tool_id"]["const"] for branch in branches
                         if "tool_id" in branch.get("properties", {}))
    except (KeyError, TypeError):
        return None


def concluding(observations: Observations, budget: Budget,
               catalog: ToolCatalog | None = None, available: Iterable[str] = ()) -> bool:
    """Must this round conclude (the budget rule of PR-06, with PR-07's progress rule)?

    After ``conclude_after`` calls a turn concludes — unless (progress rule) it
    has made no progress yet and a progress call is still on offer: then it
    may first use what it gathered. The last round and a spent tool-call
    budget conclude whatever the progress.
    """
    calls = observations.tool_calls
    if budget.round >= budget.max_rounds or calls >= budget.max_tool_calls:
        return True
    if budget.conclude_after <= 0 or calls < budget.conclude_after:
        return False
    if PROGRESS in budget.rules and observations.progress == 0 and catalog is not None:
        return not _progress_offers(catalog, available, observations, budget)
    return True


def _progress_offers(catalog: ToolCatalog, available: Iterable[str], seen: Observations,
                     budget: Budget) -> list[ToolSpec]:
    """The available progress tools that have something left to offer now."""
    usable = set(available)
    return [spec for spec in catalog.values()
            if spec.tool_id in usable and spec.traits.progress
            and arguments_of(spec, seen, budget) is not None]


def narrow(catalog: ToolCatalog, available: Iterable[str], observations: Observations,
           budget: Budget) -> Decoding:
    """The round's :class:`Decoding`: only what is valid now, and room to say it.

    ``available`` are the tools the caller may run now (policy and surface);
    the result offers a subset of them, each with narrowed arguments, and
    ``final`` — unless, under the profile's guidance, the turn must look first
    (look-first), read what the user named (requested) or do the effect the user
    asked for (effect-task). The guards alone never hold ``final`` back.
    """
    base = action_schema()
    final_branch = base["oneOf"][1]
    note = ""
    usable = [tool_id for tool_id in available if tool_id in catalog]
    conclude = concluding(observations, budget, catalog, usable)
    rules = budget.rules
    scripts = observations.scripts | scripts_of(observations.query)
    named = (named_reads(catalog, usable, observations, budget)
             if REQUESTED in rules and not conclude else {})
    spoken = (spoken_reads(catalog, usable, observations, rules)
              if REQUESTED in rules and not conclude and not named else frozenset())
    offers = functools.partial(_tool_offers, catalog, usable, observations, budget,
                               named=named, conclude=conclude, scripts=scripts)
    branches = offers(spoken=spoken)
    if spoken and not branches:
        branches = offers(spoken=frozenset())  # nothing of it left to look at: look elsewhere
    looking = (LOOK_FIRST in rules and not conclude and observations.progress == 0
               and _leads_to_progress(catalog, usable, branches))
    if (not looking and not named
            and not _research_pending(catalog, branches, observations, rules)):
        wide_text = final_branch["properties"]["text"]
        final_text = (quoted(wide_text, observations, rules)
                      or free_text(wide_text, FINAL, FINAL_TEXT_CHARS, rules, scripts))
        if "enum" in final_text:
            note = quote_note(final_text["enum"])
        branches.append({**final_branch, "properties": {
            "type": final_branch["properties"]["type"], "text": final_text}})
    schema = {"$schema": base["$schema"], "title": base["title"], "oneOf": branches}
    return Decoding(
        response_format={"type": "json_schema",
                         "json_schema": {"name": "labfy_agent_model_action_v1", "strict": True,
                                         "schema": schema}},
        max_tokens=max_json_bytes(schema), concluding=conclude,
        note=note or (recap(observations, rules) if conclude else ""))


def _tool_offers(catalog: ToolCatalog, usable: list[str], observations: Observations,
                 budget: Budget, *, named: Mapping[str, frozenset[str]],
                 spoken: frozenset[str], conclude: bool,
                 scripts: frozenset[str]) -> list[dict[str, Any]]:
    """The tool branches :func:`narrow` offers this round (each rule, in order)."""
    tool_branch = action_schema()["oneOf"][0]
    rules = budget.rules
    overdue = (PROGRESS in rules and budget.conclude_after > 0
               and observations.tool_calls >= budget.conclude_after and not conclude)
    any_progress = any(catalog[tool_id].traits.progress for tool_id in usable)
    found: list[dict[str, Any]] = []
    for spec in catalog.values():
        traits = spec.traits
        if spec.tool_id not in usable:
            continue
        if named and spec.tool_id not in named:
            continue  # what the user named is read before anything else
        if spoken and spec.tool_id not in spoken:
            continue  # the kind of content the request speaks of is looked at first
        task = asked_for(catalog, spec, observations, rules)
        if (EFFECT_TASK in rules and spec.effect is not Effect.READ and not traits.pauses_turn
                and not task):
            continue  # a write only when the user asked for it, once (research waits for
            # a human's grant: it is offered while looking, and concludes only when asked)
        if conclude and not traits.concluding and not task:
            continue  # concluding: final, research, and the effect the user asked for
        if conclude and EFFECT_TASK in rules and traits.pauses_turn and not task:
            continue  # research concludes a turn only when the request is for research
        if overdue and not traits.progress:
            continue  # past conclude_after with nothing used yet: use what was gathered
        if SEARCH in rules and searched_unread(spec, observations):
            continue  # what the search found is read before anything more is listed
        if traits.once_per_turn and observations.known(traits.once_per_turn):
            continue  # one campaign per turn: the turn pauses on it
        if (PROGRESS in rules and traits.needs_progress and any_progress
                and observations.progress == 0):
            continue  # a listing alone is not enough to prepare research on
        if traits.pauses_turn and (observations.tool_calls + 1 >= budget.max_tool_calls
                                   or budget.round >= budget.max_rounds):
            continue  # research pauses the turn: its resume needs a round left to answer
        arguments = arguments_of(spec, observations, budget, scripts, named.get(spec.tool_id),
                               catalog=catalog)
        if arguments is None:
            continue
        found.append({**tool_branch, "properties": {
            "type": tool_branch["properties"]["type"],
            "tool_id": {"const": spec.tool_id},
            "arguments": arguments}})
    return found


def _research_pending(catalog: ToolCatalog, branches: list[dict[str, Any]],
                      seen: Observations, rules: frozenset[str]) -> bool:
    """Is an effect the user asked for still on offer (effect-task rule)? Then ``final`` waits.

    A request for research ("… then prepare research on it") or for a write
    ("… write a summary to summary.txt") does not end with an answer while
    what it asked for can still be done.
    """
    offered = (catalog[b["properties"]["tool_id"]["const"]] for b in branches)
    return any(asked_for(catalog, spec, seen, rules) for spec in offered)


def _leads_to_progress(catalog: ToolCatalog, usable: Iterable[str],
                      branches: list[dict[str, Any]]) -> bool:
    """Does an offered call make progress, or produce what an available progress tool takes?

    While it does and the turn has made none, ``final`` waits (progress rule):
    a turn looks before it answers. Once nothing offered can lead to content
    (an empty workspace), ``final`` is offered at once.
    """
    offered = [catalog[b["properties"]["tool_id"]["const"]] for b in branches]
    wanted = {kind for tool_id in usable for kind in catalog[tool_id].traits.consumes.values()
              if catalog[tool_id].traits.progress}
    return any(spec.traits.progress or {p.ref for p in spec.traits.produces} & wanted
               or (any(p.ref_from for p in spec.traits.produces) and wanted)
               for spec in offered)
