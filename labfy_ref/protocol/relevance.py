"""A generic lexical relevance score of a reference to the user's message (PR-07).

A small model handed a menu of opaque ids picks by position: it copies the
first ids it was shown. The narrowing therefore *orders* reference menus —
and the listings a model reads — by how much of the user's message the turn
has seen about each reference (its title, kind, body, path), most relevant
first. It only orders: no option is ever removed on this basis.

The score is Okapi BM25 (k1 = 1.2, b = 0.75) over character trigrams of the
casefolded words (``\\w`` runs without digits or ``_``, so any script), each
word padded with a space at both ends. Trigrams make inflections and
compounds meet without a stemmer or a word list in any language: ``bee`` and
``bees`` share `` be`` and ``bee``, ``albina`` and ``albinele`` share four.
Numbers count too, each as one whole term: "plot 4" is nearer to "Plot 4"
than to "Plot 9".
Documents are scored against each other only (the collection is the
references the turn knows), so the figure needs no corpus and no language.

A turn ranks the same labels against the same message round after round, so
the scores of the last few (message, documents) are kept: a small LRU of
collections of bounded size, released as new turns pass (the score is the same,
the round no longer recounts every label).
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence

#: A word: a run of letters (``\w`` without digits or ``_``), in any script.
WORD = re.compile(r"[^\W\d_]+")
#: A number: a run of decimal digits (any script's) standing alone, matched whole — not
#: the digits inside an id (``obj_01J4…``) or a word (``4th``).
NUMBER = re.compile(r"(?<!\w)\d+(?!\w)")
K1 = 1.2
B = 0.75


def grams(text: str) -> Counter[str]:
    """The character trigrams of ``text``'s words (casefolded, space-padded), and each
    number whole (``#4``: "plot 4" meets "Plot 4, 14 May", never "14")."""
    folded = text.casefold()
    counts: Counter[str] = Counter()
    for word in WORD.findall(folded):
        padded = f" {word} "
        counts.update(padded[i:i + 3] for i in range(len(padded) - 2))
    counts.update(f"#{number}" for number in NUMBER.findall(folded))
    return counts


def scores(query: str, documents: Mapping[str, str]) -> dict[str, float]:
    """BM25 of each document (key -> text) against ``query``; 0 when nothing is shared."""
    items = tuple(documents.items())
    if len(query) + sum(len(text) for _, text in items) > KEPT_CHARS:
        return _scored(query, items)
    return dict(_kept_scores(query, items))


def _scored(query: str, items: tuple[tuple[str, str], ...]) -> dict[str, float]:
    documents = dict(items)
    wanted = grams(query)
    bags = {key: _sized(grams(text)) for key, text in documents.items()}
    if not wanted or not bags:
        return dict.fromkeys(documents, 0.0)
    count = len(bags)
    average = sum(size for _, size in bags.values()) / count or 1.0
    frequency: Counter[str] = Counter()
    for bag, _ in bags.values():
        frequency.update(gram for gram in wanted if gram in bag)
    idf = {gram: math.log(1.0 + (count - frequency[gram] + 0.5) / (frequency[gram] + 0.5))
           for gram in wanted if frequency[gram]}  # the query's order, as summed before
    result: dict[str, float] = {}
    for key, (bag, size) in bags.items():
        total = 0.0
        norm = K1 * (1 - B + B * size / average)
        for gram, weight in idf.items():
            tf = bag.get(gram, 0)
            if tf:
                total += weight * tf * (K1 + 1) / (tf + norm)
        result[key] = total
    return result


def _sized(bag: Counter[str]) -> tuple[Counter[str], int]:
    """A bag and its number of trigrams (BM25's document length)."""
    return bag, sum(bag.values())


#: A turn ranks the same references against the same message round after round: the
#: scores of the last few (message, documents) are kept, for a message and documents of
#: at most ``KEPT_CHARS`` characters together (so at most ``SCORES_KEPT * KEPT_CHARS``
#: characters, and their scores, stay in memory).
SCORES_KEPT = 32
KEPT_CHARS = 16_384
_kept_scores = functools.lru_cache(maxsize=SCORES_KEPT)(_scored)


def ranked(query: str, keys: Sequence[str], documents: Mapping[str, str]) -> list[str]:
    """``keys`` most relevant first; ties keep their order (a stable sort, nothing removed)."""
    score = scores(query, {key: documents.get(key, "") for key in keys})
    return sorted(keys, key=lambda key: -score.get(key, 0.0))
