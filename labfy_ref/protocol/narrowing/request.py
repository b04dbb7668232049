"""What the user's message asks for, in the catalog's own words (guidance, PR-07).

The words a search may take (:func:`request_words`), the effect a request asks for
(:func:`asked_for`), the reads it speaks of (:func:`spoken_reads`) and the names it
says (:func:`names_in`). No word list decides: the catalog's descriptions do.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from labfy_ref.protocol.narrowing.observations import Observations
from labfy_ref.protocol.narrowing.rules import EFFECT_TASK
from labfy_ref.protocol.relevance import WORD
from labfy_ref.protocol.text_shape import compiled
from labfy_ref.tools.catalog import Effect, ToolCatalog, ToolSpec

ALL = frozenset({EFFECT_TASK})


def asked_for(catalog: ToolCatalog, spec: ToolSpec, seen: Observations,
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
    said = [word.casefold() for word in TOKEN.findall(request)]
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


def spoken_reads(catalog: ToolCatalog, usable: Iterable[str], seen: Observations,
                 rules: frozenset[str] = ALL) -> frozenset[str]:
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
    asked = {word for tool_id in tools if asked_for(catalog, catalog[tool_id], seen, rules)
             for word in _distinctive_words(catalog, tool_id)}
    said = {word for word in TOKEN.findall(seen.query.casefold())
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
TOKEN = re.compile(r"[^\W_]+")


def names_in(name: str, request: str) -> bool:
    """Is ``name`` (a title) said in ``request``: every token of it, casefolded, a token of
    the request, and at least :data:`NAME_TOKENS` of them ("the note called Field plan")?"""
    tokens = set(TOKEN.findall(name.casefold()))
    return len(tokens) >= NAME_TOKENS and tokens <= set(TOKEN.findall(request.casefold()))


def named(pattern: str, request: str) -> list[str]:
    """The references of a catalog pattern the user named in the request, first named first."""
    return list(dict.fromkeys(match.group() for match in compiled(pattern).finditer(request)))
