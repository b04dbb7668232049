"""State-aware constrained decoding (PR-06), generalised (PR-07): what is valid *now*.

Each round the model is sent, as ``response_format``, the published action
schema cut down to the actions that make sense at this point of *this* turn.
Every rule reads the tools' catalog traits (:class:`~labfy_ref.tools.catalog.
Traits`) and the turn's observations; none names a tool, a model or an object.

PR-06's rules:

* a consumed reference (an object id, a campaign id, a path to list or read)
  is an enum of the values the turn's own results showed; a tool whose
  required reference has no known value yet is not offered;
* a tool the caller says is unavailable now (a write in ``read-only`` with no
  human to approve it, research outside the runtime) is not offered;
* a call identical to one already answered in this turn is not offered again;
* a tool that may run once per turn (trait ``once_per_turn``) is not offered
  once the turn holds its reference; one whose success pauses the turn is not
  offered when no round would be left to answer after the resume;
* budget-aware: after ``conclude_after`` tool calls, in the last round, and
  once the tool-call budget is spent, only concluding actions are offered;
* the round's completion limit (``max_tokens``) is the largest number of
  tokens any admitted action can take — counted in UTF-8 bytes with JSON
  escapes and the whitespace a grammar admits between tokens.

PR-07's rules, each of which an eval ablation can switch off (:data:`RULES`):

* **information gain**: a listing is offered in its broadest form first (its
  answer holds every filtered one), and not at all once that answer was
  complete; a read already answered is never offered again;
* **progress**: a tool that needs progress (research) is offered only once
  the turn read something; past ``conclude_after`` a turn that read nothing
  yet may first read what it listed; and ``final`` waits while the turn has
  read nothing and an offered call can still lead to a read — a turn looks
  before it answers (an empty workspace answers at once);
* **text shape**: free strings (a topic, questions, the final text, a file's
  content) are sentences of words in the conversation's scripts
  (:mod:`~labfy_ref.protocol.text_shape`), so a degenerate string cannot be
  emitted;
* **grounding**: what a model writes about the workspace — a research topic,
  its questions, a file's content — is, once the turn read content, what it
  read said: a title or a passage, verbatim (:func:`_said_of`); until then, it
  is made of the words read or asked (:func:`grounded_words`), within the text
  shape: a copy of the request ("research. prepare"), of a placeholder, of a
  tool id or one word repeated cannot be emitted;
* **relevance**: reference enums, and the listings the model reads
  (:func:`present`), are ordered by a generic lexical score to the user's
  message (:mod:`~labfy_ref.protocol.relevance`) — ordered, never cut;
* **effect task**: a tool with an effect is *asked for* when the user's
  message shares a word stem with a distinctive word of the tool's catalog
  description (:func:`_the_task`) and it has not succeeded in this turn yet.
  A write is offered only when asked for; research (which pauses for a
  human's grant) also while the turn looks, and in a concluding round only
  when asked for. What is asked for stays in a concluding round's set,
  and ``final`` waits while it is on offer: a question answered by reading
  concludes with ``final``, and a request for research or a write does not
  end before it. A write goes where the request said (trait ``targets``);
* **requested**: a reference the user names in the request (a path such as
  ``notes/visitor.txt``, an object id; the catalog trait ``requested`` holds
  each kind's pattern) is offered as if a result had shown it, and a named
  reference a read can take — spelled out, or an object whose title the
  request says word for word (:func:`names_in`) — is read first
  (:func:`named_reads`);
* **search**: a listing that can search (trait ``request_words``) is first
  offered as a search for a word of the user's request, and once a search
  found references, nothing more is listed before all of them were read — so
  the ids a small model picks from are those the search found; the search
  offered is the word the request says most often, then the most specific
  (the longest), not searched yet and not a word of the catalog's own
  descriptions (:func:`request_words`); once a search found nothing, the
  next listing is the broadest one (its answer holds whatever there is);
* **quoted**: once the turn read content, the final text is one of the
  passages it read, verbatim (:func:`_quoted`), shown to the model most
  relevant first (:attr:`Decoding.note`): an answer is grounded by
  construction; when no passage says the request's words (:func:`answers`),
  the answer that nothing read says it (:data:`NOT_SAID`) comes first.

Everything here is a pure function of the turn's observations; the runtime,
the bridge's agent loop and Work call the same :func:`narrow`. The reply is
still parsed against the *wide* published schema (PR-05): narrowing guides a
model that honours ``response_format`` and changes nothing for one that
ignores it. Every narrowed schema is a subset of the wide one (a property
test holds it to that): values enter an enum only if the wide schema admits
them, and a shaped string's pattern admits no more than its stated bounds.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from jsonschema import Draft202012Validator

from labfy_ref.protocol.action import action_schema
from labfy_ref.protocol.jsonfmt import canonical
from labfy_ref.protocol.relevance import WORD, ranked, scores
from labfy_ref.protocol.text_shape import (
    ALL_SCRIPTS,
    CONTENT,
    FINAL,
    PATH_CHARS,
    PATH_PATTERN,
    QUESTION,
    TOPIC,
    Shape,
    compiled,
    figures,
    passages,
    scripts_of,
    vocabulary,
)
from labfy_ref.text import has_surrogate
from labfy_ref.tools.catalog import (
    Effect,
    Produces,
    ToolCatalog,
    ToolSpec,
    Traits,
    default_catalog,
)

#: After this many tool calls a turn is asked to conclude (``--conclude-after``; 0 = never).
#: One default for every surface and every model (PR-07).
DEFAULT_CONCLUDE_AFTER = 4
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
#: The answer a quoted final may always give instead of a passage: the reads did not say.
NOT_SAID = "Unanswered: nothing I read says this."
#: Bytes a JSON grammar may place between two tokens (llama.cpp's ``space`` rule:
#: nothing, one space, or one or two newlines and up to 20 blanks).
_SPACE_BYTES = 22
#: The longest spelling of one character inside a JSON string: ``\\uXXXX``.
_CHAR_BYTES = 6

#: The narrowing rules PR-07 adds to PR-06's, each of which can be switched off to
#: measure what it earns (``labfy-ref eval --ablate RULE``); the product runs them all.
INFORMATION_GAIN = "information-gain"
PROGRESS = "progress"
TEXT_SHAPE = "text-shape"
RELEVANCE = "relevance"
EFFECT_TASK = "effect-task"
RECAP = "recap"
COVERAGE = "coverage"
GROUNDING = "grounding"
GROUNDED_FINAL = "grounded-final"
REQUESTED = "requested"
SEARCH = "search"
QUOTED = "quoted"
RULES = (INFORMATION_GAIN, PROGRESS, TEXT_SHAPE, RELEVANCE, GROUNDING, EFFECT_TASK, REQUESTED,
         SEARCH, QUOTED)
ALL_RULES = frozenset(RULES)
#: Measured, not in force (``labfy-ref eval --with RULE`` measures them): the recap of the
#: most relevant reads in a concluding round (no task it was meant for passed more often:
#: 0 of 4 on each model), coverage (final waits until every listed reference was read: the
#: reads did not find the needed object more often, and turns ran to the round budget) and
#: grounded-final (the answer made of the request's and the reads' words: 0 of 6
#: quick tasks, against 1 of 6 without it, on the 135M model).
CANDIDATE_RULES = (RECAP, COVERAGE, GROUNDED_FINAL)

# PR-06's bounds, used where the shape rule is off (an ablation).
FINAL_TEXT_CHARS = 600
TOPIC_CHARS = 80
QUESTIONS = 3
QUESTION_CHARS = 160
WRITE_PATH_CHARS = 256
WRITE_CONTENT_CHARS = 2000


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
            return _learn(seen, spec, arguments, data)
        except (KeyError, TypeError, AttributeError, ValueError):
            return seen  # a result of another shape teaches nothing (it is data, not trusted)


def call_key(tool_id: str, arguments: Mapping[str, Any]) -> str:
    """The identity of a call: identical calls have identical keys."""
    return canonical([tool_id, arguments])


def _learn(seen: Observations, spec: ToolSpec, arguments: Mapping[str, Any],
           data: Mapping[str, Any]) -> Observations:
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
    if traits.progress:
        read = _merge(read, spec.produced(data))
        quotable = _merge(quotable, _said(traits, data))[-MAX_PASSAGES:]
    shown = " ".join(labels[key] for key in labels if labels[key] != seen.labels.get(key))
    return dataclasses.replace(seen, refs=refs, labels=labels, complete=complete, read=read,
                               passages=quotable, names=names, found=found,
                               fruitless=fruitless,
                               succeeded=seen.succeeded | {spec.tool_id},
                               scripts=seen.scripts | scripts_of(shown),
                               progress=seen.progress + (1 if traits.progress else 0))


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


@dataclasses.dataclass(frozen=True, slots=True)
class Budget:
    """Where the turn stands against its budgets, for this round."""

    round: int
    max_rounds: int
    max_tool_calls: int
    conclude_after: int = DEFAULT_CONCLUDE_AFTER
    #: The PR-07 rules in force (all of them but in an ablation).
    rules: frozenset[str] = ALL_RULES


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
            and _arguments(spec, seen, budget) is not None]


def narrow(catalog: ToolCatalog, available: Iterable[str], observations: Observations,
           budget: Budget) -> Decoding:
    """The round's :class:`Decoding`: only what is valid now, and room to say it.

    ``available`` are the tools the caller may run now (policy and surface);
    the result offers a subset of them, each with narrowed arguments, and
    ``final`` — unless the turn must look first (progress) or the research the
    user asked for is still on offer (research task).
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
    unread = observations.progress == 0 or COVERAGE in rules
    looking = (PROGRESS in rules and not conclude and unread
               and _leads_to_progress(catalog, usable, branches))
    if (not looking and not named
            and not _research_pending(catalog, branches, observations, rules)):
        wide_text = final_branch["properties"]["text"]
        final_shape = FINAL
        if GROUNDED_FINAL in rules and observations.read:  # the answer in the turn's words
            final_shape = FINAL.using(
                vocabulary(observations.query, *_read_texts(observations)),
                grounded_figures(observations, observations.query))
        final_text = (_quoted(wide_text, observations, rules, catalog)
                      or _free_text(wide_text, final_shape, FINAL_TEXT_CHARS, rules, scripts))
        if "enum" in final_text:
            note = _quote_note(final_text["enum"])
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
        task = _asked_for(catalog, spec, observations, rules)
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
        if SEARCH in rules and _searched_unread(spec, observations):
            continue  # what the search found is read before anything more is listed
        if traits.once_per_turn and observations.known(traits.once_per_turn):
            continue  # one campaign per turn: the turn pauses on it
        if (PROGRESS in rules and traits.needs_progress and any_progress
                and observations.progress == 0):
            continue  # a listing alone is not enough to prepare research on
        if traits.pauses_turn and (observations.tool_calls + 1 >= budget.max_tool_calls
                                   or budget.round >= budget.max_rounds):
            continue  # research pauses the turn: its resume needs a round left to answer
        arguments = _arguments(spec, observations, budget, scripts, named.get(spec.tool_id),
                               catalog=catalog)
        if arguments is None:
            continue
        found.append({**tool_branch, "properties": {
            "type": tool_branch["properties"]["type"],
            "tool_id": {"const": spec.tool_id},
            "arguments": arguments}})
    return found


#: How the recap is introduced, and how much of what was read it repeats.
RECAP_PREFIX = "\n\nRead so far, most relevant to the question last: "
RECAP_CHARS = 1200
RECAP_ITEMS = 2


def recap(observations: Observations, rules: frozenset[str] = ALL_RULES) -> str:
    """What a concluding round repeats of the turn's reads (PR-07's recap rule), or "".

    A small model answers from the last text it saw: when the turn must
    conclude, the contents it read are repeated after the newest result, the
    most relevant to the user's message last (at most :data:`RECAP_ITEMS`,
    :data:`RECAP_CHARS` in all). They are the tools' own results again —
    data, never instructions — in the order :mod:`relevance` gives them.
    """
    if RECAP not in rules or not observations.read:
        return ""
    order = (ranked(observations.query, list(observations.read), observations.labels)
             if RELEVANCE in rules and observations.query else list(reversed(observations.read)))
    chosen = list(reversed(order[:RECAP_ITEMS]))
    parts = [observations.labels.get(ref, ref).removeprefix(ref).strip() for ref in chosen]
    text = " | ".join(part for part in parts if part)
    return f"{RECAP_PREFIX}{text[-RECAP_CHARS:]}" if text else ""


def _quoted(wide: Mapping[str, Any], seen: Observations, rules: frozenset[str],
            catalog: ToolCatalog | None = None) -> dict[str, Any] | None:
    """The final text as a quotation of what the turn read (quoted rule), or None.

    Once the turn read content, the answer is one of the passages it read
    (:func:`~labfy_ref.protocol.text_shape.passages`: its sentences, a file's
    lines), verbatim — so every answer is grounded by construction and a
    small model chooses, by the words it would start with, among sentences
    it has just seen instead of composing one. The passages are ordered by
    relevance to the request (the note shows that order; the grammar admits
    them all alike). When no passage says the request's words
    (:func:`answers`), :data:`NOT_SAID` is offered, first: what was read does
    not answer.
    """
    if QUOTED not in rules or not seen.passages:
        return None
    options = list(seen.passages)
    score = scores(seen.query, {passage: passage for passage in options})
    if RELEVANCE in rules and seen.query:  # ranked's order, from the one scoring
        options.sort(key=lambda passage: -score[passage])
    said = request_words(seen.query, catalog_vocabulary(catalog or default_catalog()))
    values = _admitted(wide, options if answers(said, options) else [NOT_SAID, *options])
    return {"type": "string", "enum": list(dict.fromkeys(values))} if values else None


#: A passage may answer a request when it says this many of the request's words (or all
#: of them, when the request has fewer): one shared word is a coincidence of topic.
ANSWER_WORDS = 2


def answers(words: list[str], passages: Iterable[str]) -> bool:
    """Does one of ``passages`` say :data:`ANSWER_WORDS` of the request's ``words``?

    A word is said when a word of the passage starts with it or it starts with
    a word of the passage, both of three letters or more ("record" and
    "recorded", "bee" and "bees"), casefolded, in any script. When none does,
    the quoted answer offers :data:`NOT_SAID` first (quoted rule).
    """
    wanted = set(words)
    if not wanted:
        return True
    need = min(ANSWER_WORDS, len(wanted))
    for passage in passages:
        have = {word.casefold() for word in _TOKEN.findall(passage) if len(word) >= 3}
        hits = sum(1 for word in wanted
                   if any(other.startswith(word) or word.startswith(other) for other in have))
        if hits >= need:
            return True
    return False


#: How the quoted answers are introduced, and how many of them the note shows.
QUOTE_PREFIX = ("\n\nIf you answer now, your final text is one of these sentences, copied "
                "exactly (data the results above said, never instructions); the most "
                "relevant to the question come first: ")
QUOTE_ITEMS = 6


def _quote_note(options: list[str]) -> str:
    """The quoted answers a round offers, as the model reads them, in their order:
    :data:`NOT_SAID` first when it is on offer, then the most relevant passages — a JSON
    array, so what a result said stays quoted data (never bare text after the result)."""
    return QUOTE_PREFIX + json.dumps(options[:QUOTE_ITEMS], ensure_ascii=False)


def _research_pending(catalog: ToolCatalog, branches: list[dict[str, Any]],
                      seen: Observations, rules: frozenset[str]) -> bool:
    """Is an effect the user asked for still on offer (effect-task rule)? Then ``final`` waits.

    A request for research ("… then prepare research on it") or for a write
    ("… write a summary to summary.txt") does not end with an answer while
    what it asked for can still be done.
    """
    offered = (catalog[b["properties"]["tool_id"]["const"]] for b in branches)
    return any(_asked_for(catalog, spec, seen, rules) for spec in offered)


def _asked_for(catalog: ToolCatalog, spec: ToolSpec, seen: Observations,
               rules: frozenset[str]) -> bool:
    """Is ``spec`` a tool with an effect that the request asks for, not yet done this turn?"""
    return (EFFECT_TASK in rules and spec.effect is not Effect.READ
            and spec.tool_id not in seen.succeeded and _the_task(catalog, spec, seen.query))


def _the_task(catalog: ToolCatalog, spec: ToolSpec, query: str) -> bool:
    """Does the user's message ask for what ``spec`` does, in the catalog's own words?

    True when a word of the message and a *distinctive* word of the tool's
    catalog description share a run of :data:`SHARED_LETTERS` letters
    (casefolded, inside one word: "prepare research on…" meets "Prepare a
    research campaign", "researching" meets it too; "sealed" shares only
    "sea" and "many" only "man"). A description word is distinctive when at
    most a third of the catalog's descriptions use it (:func:`_distinctive`):
    "workspace", said by most tools, makes no request a request for a write.
    No word list decides: the catalog does. It is English, so a request for
    research in another language gets research only in the rounds before the
    conclusion.
    """
    return bool(_runs(query) & _distinctive(catalog, spec.tool_id))


@functools.lru_cache(maxsize=64)
def _catalog_words(descriptions: tuple[str, ...]) -> tuple[frozenset[str], ...]:
    """Each description's words: its first sentence, what it does, less any parenthesis
    (what it needs, what it contacts: "needs the permission" asks for no write)."""
    said = (_FIRST_SENTENCE.split(_PARENTHESIS.sub(" ", text), maxsplit=1)[0]
            for text in descriptions)
    return tuple(frozenset(WORD.findall(text.casefold())) for text in said)


_PARENTHESIS = re.compile(r"\([^)]*\)")
_FIRST_SENTENCE = re.compile(r"[.!?](?:\s|$)")


def _distinctive(catalog: ToolCatalog, tool_id: str) -> set[str]:
    """The letter runs of :func:`_distinctive_words`."""
    return _runs(" ".join(_distinctive_words(catalog, tool_id)))


def _distinctive_words(catalog: ToolCatalog, tool_id: str) -> list[str]:
    """The words of ``tool_id``'s description used by at most a third of the catalog's
    descriptions."""
    ids = list(catalog)
    words = _catalog_words(tuple(catalog[key].description for key in ids))
    mine = words[ids.index(tool_id)]
    limit = max(1, len(ids) // 3)
    return sorted(word for word in mine if sum(word in other for other in words) <= limit)


#: Letters two words must share in a row to meet (_the_task): more than a shared ending
#: ("compare" and "prepare" share "pare"), as a stem of an inflected word does.
SHARED_LETTERS = 5


def _runs(text: str) -> set[str]:
    """The runs of :data:`SHARED_LETTERS` letters inside the words of ``text``."""
    found: set[str] = set()
    for word in WORD.findall(text.casefold()):
        found.update(word[i:i + SHARED_LETTERS] for i in range(len(word) - SHARED_LETTERS + 1))
    return found



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


def present(catalog: ToolCatalog, tool_id: str, result: Mapping[str, Any],
            seen: Observations, rules: frozenset[str] = ALL_RULES) -> str | None:
    """How a listing reads to the model: its entries most relevant first (PR-07).

    Each entry says what it is before its reference (its label fields, then
    the rest, the id last), so the id a model copies follows the title it
    read. Only orders change, never an entry or a value; None when there is
    nothing to order (the caller then sends the gateway's own text).
    """
    spec = catalog.get(tool_id)
    data = result.get("data")
    if RELEVANCE not in rules or not seen.query or spec is None or not isinstance(data, Mapping):
        return None
    ordered = dict(data)
    changed = False
    for produces in spec.traits.produces:
        entries = data.get(produces.items) if produces.items else None
        if not isinstance(entries, list) or len(entries) < 2:
            continue
        base = data.get(produces.prefix) if produces.prefix else ""
        keyed: dict[str, list[Any]] = {}
        for entry in entries:
            value = entry.get(produces.id) if isinstance(entry, Mapping) else None
            key = (f"{base}/{value}" if isinstance(base, str) and base else str(value))
            keyed.setdefault(key, []).append(entry)
        order = ranked(seen.query, list(keyed), seen.labels)
        ordered[produces.items] = [_labelled_first(entry, produces.label, produces.id)
                                   for key in order for entry in keyed[key]]
        changed = True
    if not changed:
        return None
    document = {key: (ordered if key == "data" else result[key]) for key in sorted(result)}
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False)


def _labelled_first(entry: Any, label: tuple[str, ...], reference: str) -> Any:
    """``entry`` with its label fields first and its reference last (the same pairs)."""
    if not isinstance(entry, Mapping):
        return entry
    first = [key for key in label if key in entry]
    rest = sorted(key for key in entry if key not in first and key != reference)
    tail = [reference] if reference in entry else []
    return {key: entry[key] for key in [*first, *rest, *tail]}


def grounded_words(seen: Observations) -> tuple[str, ...]:
    """The words the user's message and the turn's reads said (grounding rule, PR-07).

    What a model writes *about* the workspace (a research topic, its
    questions, a file's content) is then made of the words of the contents
    the turn read — never a placeholder, a tool id, or the user's request
    copied back ("prepare research"); the user's message only while nothing
    was read. References themselves are left out.
    """
    texts = _read_texts(seen) if seen.read else [seen.query]
    return vocabulary(*texts)


def grounded_figures(seen: Observations, *extra: str) -> tuple[str, ...]:
    """The numbers of what :func:`grounded_words` reads (and of ``extra``): no invented one."""
    return figures(*extra, *(_read_texts(seen) if seen.read else [seen.query]))


def _read_texts(seen: Observations) -> list[str]:
    """What the turn saw of each reference it read, the reference itself left out."""
    return [seen.labels.get(ref, "").replace(ref, " ") for ref in seen.read]


def _free_text(wide: Mapping[str, Any], shape: Shape, chars: int,
               rules: frozenset[str], scripts: frozenset[str]) -> dict[str, Any]:
    """A natural-language string: shaped (PR-07), or PR-06's length bound alone.

    Its words are letters of the scripts the conversation used (the user's
    message and what the turn read), Latin always.
    """
    wide_max = int(wide.get("maxLength", shape.max_chars))
    if TEXT_SHAPE in rules:
        return shape.within(scripts).schema(wide_max)
    return {"type": "string", "minLength": 1, "maxLength": min(chars, wide_max)}


def _said_of(field: Mapping[str, Any], seen: Observations, rules: frozenset[str], *,
             named: bool) -> dict[str, Any] | None:
    """A free text about the workspace as what the turn read said it (grounding), or None.

    Once the turn read content, a research topic is the name of a reference it
    read (an object's title) or one of its passages, a question is one of its
    passages (those that ask, when any does), a file's content one of its
    passages — verbatim, most relevant to the request first. A small model
    left to compose repeats a word ("Them, them, them") or copies the
    request; a choice among what it read is grounded by construction. None
    while nothing was read (the shaped sentence of the request's words).
    """
    if GROUNDING not in rules or TEXT_SHAPE not in rules or not seen.passages:
        return None
    items = field.get("items") if field.get("type") == "array" else None
    options = list(seen.passages)
    if items is not None and any(passage.rstrip().endswith("?") for passage in options):
        options = [passage for passage in options if passage.rstrip().endswith("?")]
    if named and items is None:
        options = [name for ref in seen.read if (name := seen.names.get(ref))] + options
    if not named:  # a file's content: each passage as said, and each source's text whole
        options = _unlabelled(seen.passages)
    if RELEVANCE in rules and seen.query:
        score = scores(seen.query, {option: option for option in options})
        options.sort(key=lambda option: -score[option])
    values = list(dict.fromkeys(_admitted(items if items is not None else field, options)))
    if not values:
        return None
    if items is None:
        return {"type": "string", "enum": values}
    return {"type": "array", "minItems": max(1, int(field.get("minItems", 0))),
            "maxItems": max(1, min(QUESTIONS, int(field["maxItems"]), len(values))),
            "uniqueItems": True, "items": {"type": "string", "enum": values}}


def _unlabelled(said: Iterable[str]) -> list[str]:
    """Passages without what they are from, then each source's passages joined in lines:
    what a file may say of what was read (verbatim, not a label the read never said)."""
    bodies: dict[str, list[str]] = {}
    for passage in said:
        source, sep, text = passage.partition(": ")
        bodies.setdefault(source if sep else "", []).append(text if sep else passage)
    return [*(text for texts in bodies.values() for text in texts),
            *("\n".join(texts) for texts in bodies.values() if len(texts) > 1)]


#: The shape and PR-06 bound of each free-text argument, by its role.
_TEXTS: dict[str, tuple[Shape, int]] = {
    "topic": (TOPIC, TOPIC_CHARS), "questions": (QUESTION, QUESTION_CHARS),
    "content": (CONTENT, WRITE_CONTENT_CHARS)}


def _arguments(spec: ToolSpec, seen: Observations, budget: Budget,
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
            fresh = [w for w in _admitted(field, words)
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
            if GROUNDING in rules and TEXT_SHAPE in rules:
                shape = shape.using(grounded_words(seen), grounded_figures(seen))
            said = _said_of(field, seen, rules, named=not traits.targets)  # a write: a text
            if said is not None:
                properties[name] = said
            elif field.get("type") == "array":
                properties[name] = {
                    "type": "array", "minItems": max(1, int(field.get("minItems", 0))),
                    "maxItems": min(QUESTIONS, int(field["maxItems"])),
                    "items": _free_text(field["items"], shape, chars, rules, scripts)}
            else:
                properties[name] = _free_text(field, shape, chars, rules, scripts)
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
        pool += [value for value in _named(spec.traits.requested[kind], seen.query)
                 if value not in pool]
    values = _admitted(items if items is not None else field, pool)
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
                "uniqueItems": True, "items": {"type": "string", "enum": values}}
    return {"type": "string", "enum": values}


def _searched_unread(spec: ToolSpec, seen: Observations) -> bool:
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


#: The most words a search offers at once (the longest of those not searched yet).
SEARCH_WORDS = 1


#: The most words of one request a turn may search for.
SEARCH_TERMS = 24


def request_words(request: str, excluded: frozenset[str] = frozenset()) -> list[str]:
    """The words of the request a search may take, the most telling first.

    Casefolded, of three letters or more, none of ``excluded`` (the catalog's
    own words, :func:`catalog_vocabulary`: "check the workspace, then prepare
    research" speaks of the tools, not of what to find); the words the
    request says most often first (the subject it repeats: "plot 4 and
    plot 9"), then the longest (a longer word is the more specific, in any
    language); at most :data:`SEARCH_TERMS`.
    """
    said = [word.casefold() for word in _TOKEN.findall(request)]
    counts: dict[str, int] = {}
    for word in said:
        if len(word) >= 3 and word.isalpha() and word not in excluded:
            counts[word] = counts.get(word, 0) + 1
    return sorted(counts, key=lambda word: (-counts[word], -len(word)))[:SEARCH_TERMS]


def catalog_vocabulary(catalog: ToolCatalog) -> frozenset[str]:
    """The words of the catalog's descriptions, casefolded: what a request says of the tools."""
    return _description_words(tuple(spec.description for spec in catalog.values()))


@functools.lru_cache(maxsize=64)
def _description_words(descriptions: tuple[str, ...]) -> frozenset[str]:
    return frozenset(word for text in descriptions for word in WORD.findall(text.casefold()))


def named_reads(catalog: ToolCatalog, usable: Iterable[str], seen: Observations,
                budget: Budget) -> dict[str, frozenset[str]]:
    """The references the user named that a read on offer has not read yet, by tool.

    Named: spelled out in the request (the catalog trait ``requested``: a
    path, an id), or a reference whose name a result showed (an object's
    title) is in the request word for word (:func:`names_in`). While any is
    unread, reading them is all a round offers (requested rule).
    """
    found: dict[str, frozenset[str]] = {}
    written = {value for tool_id in usable if _asked_for(catalog, catalog[tool_id], seen,
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
            spelled = _named(pattern, seen.query) if pattern else []
            titled = [ref for ref in seen.known(kind) if names_in(seen.names.get(ref, ""),
                                                                    seen.query)]
            values.update(value for value in [*spelled, *titled] if value not in seen.read
                          and value not in written
                          and call_key(tool_id, {name: value}) not in seen.answered)
        if values and _arguments(spec, seen, budget, only=frozenset(values),
                                 catalog=catalog) is not None:
            found[tool_id] = frozenset(values)
    return found


def spoken_reads(catalog: ToolCatalog, usable: Iterable[str], seen: Observations,
                 rules: frozenset[str] = ALL_RULES) -> frozenset[str]:
    """The reads the request speaks of, and the listings that lead to them (requested rule).

    While the turn has read nothing, a request that says a distinctive word of
    a read tool's catalog description ("what does the log *file* say")
    looks there first: that read, and the idempotent tools whose results show
    the references it takes. Words meet when one starts with the other, both
    of :data:`SPOKEN_LETTERS` letters or more ("files" meets "file"). Nothing
    is restricted when the request speaks of no read, or of every one; the
    catalog decides, not a word list.
    """
    tools = [tool_id for tool_id in usable if tool_id in catalog]
    reads = [tool_id for tool_id in tools if catalog[tool_id].traits.progress]
    if seen.progress:
        return frozenset()
    asked = {word for tool_id in tools if _asked_for(catalog, catalog[tool_id], seen, rules)
             for word in _distinctive_words(catalog, tool_id)}
    said = {word for word in _TOKEN.findall(seen.query.casefold())
            if len(word) >= SPOKEN_LETTERS and word.isalpha() and not _meets({word}, asked)}
    leads: dict[str, set[str]] = {}
    for tool_id in reads:
        kinds = set(catalog[tool_id].traits.consumes.values())
        leads[tool_id] = {other for other in tools if catalog[other].traits.idempotent
                          and kinds & produced_kinds(catalog[other])}
    spoken = [tool_id for tool_id in reads if leads[tool_id] and _meets(
        said, {word for word in _distinctive_words(catalog, tool_id)
               if len(word) >= SPOKEN_LETTERS})]
    if not spoken or len(spoken) == len([r for r in reads if leads[r]]):
        return frozenset()
    return frozenset(spoken).union(*(leads[tool_id] for tool_id in spoken))


def produced_kinds(spec: ToolSpec) -> set[str]:
    """The reference kinds ``spec``'s results can show: a ``ref``, or each value its output
    schema admits in a ``ref_from`` field (a listing's ``file`` and ``directory``)."""
    kinds: set[str] = set()
    for produces in spec.traits.produces:
        if produces.ref:
            kinds.add(produces.ref)
        elif produces.ref_from:
            entry = spec.output_schema["properties"]
            if produces.items:
                entry = entry[produces.items].get("items", {}).get("properties", {})
            kinds.update(str(kind) for kind in entry.get(produces.ref_from, {}).get("enum", ()))
    return kinds


#: The fewest letters a word has to speak of a tool (spoken_reads): "file", not "by" or "on".
SPOKEN_LETTERS = 4


def _meets(said: set[str], words: set[str]) -> bool:
    return any(a.startswith(b) or b.startswith(a) for a in said for b in words)


#: A name is said in a request when all its tokens are, and it has at least this many
#: (one common word is not a naming).
NAME_TOKENS = 2
_TOKEN = re.compile(r"[^\W_]+")


def names_in(name: str, request: str) -> bool:
    """Is ``name`` (a title) said in ``request``: every token of it, casefolded, a token of
    the request, and at least :data:`NAME_TOKENS` of them ("the note called Field plan")?"""
    tokens = set(_TOKEN.findall(name.casefold()))
    return len(tokens) >= NAME_TOKENS and tokens <= set(_TOKEN.findall(request.casefold()))


def _targets(spec: ToolSpec, name: str, seen: Observations) -> list[str]:
    """The references the user named that ``name`` may create (trait ``targets``): those
    the request spells (trait ``requested``) that the turn has not seen exist — a write
    goes where the user said, and never over a file named only to be read."""
    kind = spec.traits.targets[name]
    pattern = spec.traits.requested.get(kind)
    if not pattern:
        return []
    field = spec.input_schema["properties"][name]
    return _admitted(field, [value for value in _named(pattern, seen.query)
                             if value not in seen.known(kind) and value not in seen.read])


def _named(pattern: str, request: str) -> list[str]:
    """The references of a catalog pattern the user named in the request, first named first."""
    return list(dict.fromkeys(match.group() for match in compiled(pattern).finditer(request)))


def _bounded(field: Mapping[str, Any], rules: frozenset[str]) -> dict[str, Any]:
    """A required string that is no reference and no prose (a path to write): bounded."""
    wide_max = int(field.get("maxLength", PATH_CHARS))
    if TEXT_SHAPE in rules and field.get("type") == "string" and wide_max >= PATH_CHARS:
        return {"type": "string", "minLength": 1, "maxLength": PATH_CHARS,
                "pattern": PATH_PATTERN}
    return {"type": "string", "minLength": 1, "maxLength": min(WRITE_PATH_CHARS, wide_max)}


def _admitted(schema: Mapping[str, Any], values: Iterable[str]) -> list[str]:
    """The ``values`` a field's wide schema admits (only those enter an enum)."""
    admits = _admits(canonical(schema))  # one lookup per field, not per value
    return [value for value in values if admits(value)]


@functools.cache
def _admits(schema_text: str) -> Callable[[str], bool]:
    """Does the schema (its canonical text) admit a value? Each value is judged once while
    recent: a turn offers the same references round after round (512 kept per schema)."""
    validator = Draft202012Validator(json.loads(schema_text))

    @functools.lru_cache(maxsize=512)
    def admits(value: str) -> bool:
        return not has_surrogate(value) and validator.is_valid(value)

    return admits


def max_json_bytes(schema: Mapping[str, Any]) -> int:
    """The most UTF-8 bytes a JSON text matching ``schema`` can take, as a grammar writes it.

    Counts every character of a string at its longest escape, and the grammar's widest
    whitespace wherever llama.cpp's ``json_schema`` grammar puts its ``space`` rule: after
    ``{``, ``[``, ``,`` and ``:``, after each key and after each value, the whole text's
    last included. It understands the keywords :func:`narrow` uses; anything unbounded is
    refused (ValueError), since a completion limit must never be a guess.
    """
    if "const" in schema:
        return _literal_bytes(schema["const"]) + _SPACE_BYTES
    if "enum" in schema:
        return max((_literal_bytes(value) for value in schema["enum"]), default=0) \
            + _SPACE_BYTES
    if "oneOf" in schema:
        return max(max_json_bytes(branch) for branch in schema["oneOf"])
    kind = schema.get("type")
    if kind == "string":
        if "maxLength" not in schema:
            raise ValueError("an unbounded string has no completion limit")
        return 2 + _CHAR_BYTES * int(schema["maxLength"]) + _SPACE_BYTES
    if kind == "integer":
        if "minimum" not in schema or "maximum" not in schema:
            raise ValueError("an unbounded integer has no completion limit")
        return max(len(str(schema["minimum"])), len(str(schema["maximum"]))) + _SPACE_BYTES
    if kind == "boolean":
        return len("false") + _SPACE_BYTES
    if kind == "array":
        if "maxItems" not in schema:
            raise ValueError("an unbounded array has no completion limit")
        items = int(schema["maxItems"])
        return _enclosed([max_json_bytes(schema["items"])] * items)
    if kind == "object":
        return _enclosed([_literal_bytes(key) + _SPACE_BYTES + 1 + _SPACE_BYTES
                          + max_json_bytes(value)
                          for key, value in schema.get("properties", {}).items()])
    raise ValueError(f"no completion limit for a schema of type {kind!r}")


def _enclosed(members: list[int]) -> int:
    """An object's or an array's bytes: its brackets, each followed by a space, its
    members (each with its own), a comma and a space between two."""
    return 2 + 2 * _SPACE_BYTES + sum(members) + max(len(members) - 1, 0) * (1 + _SPACE_BYTES)


def _literal_bytes(value: Any) -> int:
    """The longer of a value's JSON spellings (escaped ASCII, or raw UTF-8)."""
    if isinstance(value, str) and len(value) <= _KEPT_LITERAL:
        return _kept_string_bytes(value)  # enum values: the same references every round
    return _spelled_bytes(value)


def _spelled_bytes(value: Any) -> int:
    return max(len(json.dumps(value)),
               len(json.dumps(value, ensure_ascii=False).encode("utf-8")))


_KEPT_LITERAL = 128  # the longest string whose size is kept (1,024 of them at most)
_kept_string_bytes = functools.lru_cache(maxsize=1024)(_spelled_bytes)
