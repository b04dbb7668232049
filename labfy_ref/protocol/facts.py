"""The checkable facts of a final answer, each checked against the turn (PR-09).

:func:`check_facts` reads a final's numbers, dates, names and quoted phrases and says of
each whether the turn *read* it (``found``, with the source's key), the user *said* it
(``found``, ``where="said"``), it is one step from numbers read or said (``derived``: a
sum, difference, product, quotient or per-cent comparison of two, or the count of
references read; operands named), or neither (``not_found``). The answer is never
rewritten. Matching ignores case and accents (a character folds to one, so offsets hold
and a fact's ``text`` is the answer's own slice). Rules, decided once here:

* **Digits.** A comma, dot or space (no-break, thin) before exactly three digits, after
  a head of 1-3 digits not starting with 0, separates thousands (``1,200``, ``1.200``,
  ``1 200``: 1200; ``1.200,5``: 1200.5); another comma or dot between digits is the
  decimal mark (``3,5``, ``0.500``), so ``3.141`` is 3141 — the same reader runs on what
  was read. Letters may follow (``12km``); digits in a word (``obj_12``, ``v1.2``) are none.
* **Number words** (English, French, Romanian): 0-100 and round hundreds to 900,
  hyphened or spaced (``forty-two``, ``vingt et un``, ``douăzeci și trei``). ``a``,
  ``an``, ``one``, ``un``, ``une``, ``o``, ``una`` (articles too) count only inside a
  compound (``twenty-one``, ``o sută``); ``unu`` always. ``pour cent``/``per cent`` is a
  per-cent sign, ``opt in``/``out`` English; ``neuf``, ``nouă`` ("new") count.
* **Dates**: ISO; day month [year] in the three languages (``1er mai``, ``12 iulie
  2024``); English month day [year] (``July 12, 2024``). Value ``YYYY-MM-DD`` or
  ``--MM-DD`` (found in a dated source too). Lower-case ``may`` needs a year; ``mai
  mult``/``puțin``/``mare``/``mic`` is "more". An answer's date holds its numbers; a
  source's day and year count as stated.
* **Names**: runs of capitalised words of two letters or more, one space apart, less a
  sentence's first word (the answer's, or after ``.!?…:`` or a line break); no month.
  **Quotes**: "…", “…”, «…», „…“ of 3-200 characters, holding what is inside. Both are
  found as runs of whole words. Each (kind, value) is reported once, where first seen.

Bounds (``MAX_*`` below): the answer scanned, facts, sources and characters read, said
characters, and derivations (distinct numbers, said ones first, of few digits).
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import itertools
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal, NamedTuple

MAX_ANSWER_CHARS, MAX_FACTS = 4_000, 32
MAX_SOURCES, MAX_READ_CHARS, MAX_SAID_CHARS = 64, 100_000, 20_000
MAX_OPERANDS, MAX_SAID_OPERANDS, MAX_DIGITS = 64, 16, 30

Kind = Literal["number", "date", "name", "quote"]
Status = Literal["found", "derived", "not_found"]


@dataclasses.dataclass(frozen=True, slots=True)
class Fact:
    """One checkable fact of an answer and where, if anywhere, it comes from."""

    text: str
    kind: Kind
    value: str
    status: Status
    where: str | None = None
    operands: tuple[str, ...] = ()
    operation: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The fact as a JSON object (turn record, NDJSON ``facts``, ``labfy_facts``)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                } | {"operands": list(self.operands)}


class _FoldTable(dict[int, str]):
    """``str.translate`` table folding one character to one: offsets survive."""

    def __missing__(self, code: int) -> str:
        marks = unicodedata.normalize("NFD", chr(code))
        base = "".join(c for c in marks if not unicodedata.combining(c))
        self[code] = next(c for c in (base.casefold(), base.lower(), chr(code)) if len(c) == 1)
        return self[code]


_FOLD = _FoldTable()


def _fold(text: str) -> str:
    return text.translate(_FOLD)


#: Per language: units 0-19, tens 20-90, the word joining tens and units (and one), one
#: hundred, hundreds. ``/`` separates variants, ``_`` the words of one variant.
_LANGUAGES = (
    ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
     "fifteen sixteen seventeen eighteen nineteen",
     "twenty thirty forty fifty sixty seventy eighty ninety", "", "",
     "hundred/a_hundred/one_hundred", "hundred"),
    ("zero un/une deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze "
     "quinze seize dix-sept dix-huit dix-neuf",  # septante... : Belgium and Switzerland
     "vingt trente quarante cinquante soixante septante huitante/octante nonante", "", "et",
     "cent", "cent/cents"),
    ("zero unu/una/un doi/doua trei patru cinci sase sapte opt noua zece unsprezece "
     "doisprezece/douasprezece treisprezece paisprezece/patrusprezece cincisprezece "
     "saisprezece/sasesprezece saptesprezece optsprezece nouasprezece",
     "douazeci treizeci patruzeci cincizeci saizeci/sasezeci saptezeci optzeci nouazeci",
     "si", "si", "o_suta/una_suta", "sute"))


def _phrases() -> Iterator[tuple[str, int]]:
    for units, tens, join, join_one, hundred, hundreds in _LANGUAGES:
        small = [word.split("/") for word in units.split()]
        yield from ((word, n) for n, words in enumerate(small) for word in words)
        for i, words in enumerate(tens.split()):
            for ten in words.split("/"):
                yield ten, 20 + 10 * i
                yield from ((f"{ten} {join_one if u == 1 else join} {word}", 20 + 10 * i + u)
                            for u in range(1, 10) for word in small[u])
        yield from ((word, 100) for word in hundred.split("/"))
        yield from ((f"{word} {many}", 100 * k) for k in range(2, 10)
                    for word in small[k] for many in hundreds.split("/"))
    french = [word.split("/") for word in _LANGUAGES[1][0].split()]
    yield from (("soixante et onze", 71), ("quatre vingts", 80), ("quatre vingt", 80))
    for u in range(1, 20):
        yield from ((f"quatre vingt {word}", 80 + u) for word in french[u])
        yield from ((f"soixante {word}", 60 + u) for word in french[u] if u >= 10)


_NUMBER_WORDS = {" ".join(re.split(r"[\s_-]+", phrase.strip())): value
                 for phrase, value in _phrases()}
_STARTERS = frozenset(phrase.split()[0] for phrase in _NUMBER_WORDS)
_LONGEST = max(len(phrase.split()) for phrase in _NUMBER_WORDS)
_ARTICLES = frozenset({"a", "an", "one", "un", "une", "o", "una"})  # numbers in compounds only
_NOT_AFTER = {"cent": frozenset({"pour", "per"})}  # word: words before it making it no number
_NOT_BEFORE = {"opt": frozenset({"in", "out"})}  # word: words after it making it no number

_MONTH_GROUPS = (
    "january jan", "february feb", "march mar", "april apr", "may", "june jun", "july jul",
    "august aug", "september sept sep", "october oct", "november nov", "december dec",
    "janvier", "fevrier", "mars", "avril", "mai", "juin", "juillet", "aout", "septembre",
    "octobre", "novembre", "decembre",
    "ianuarie", "februarie", "martie", "aprilie", "mai", "iunie", "iulie", "august",
    "septembrie", "octombrie", "noiembrie", "decembrie")
_MONTHS = {name: i % 12 + 1 for i, group in enumerate(_MONTH_GROUPS) for name in group.split()}
_ENGLISH_MONTHS = [name for group in _MONTH_GROUPS[:12] for name in group.split()]
_MONTH_RE = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ENGLISH_RE = "|".join(sorted(_ENGLISH_MONTHS, key=len, reverse=True))

_ISO = re.compile(r"(?<![\w.,-])(?P<year>[0-9]{4})-(?P<month>[0-9]{2})-(?P<day>[0-9]{2})(?![0-9])")
_DAY_MONTH = re.compile(
    r"(?<![\w.,])(?P<day>[0-9]{1,2})(?:er|st|nd|rd|th)?\s+(?:of\s+|de\s+)?"
    rf"(?P<month>{_MONTH_RE})(?![^\W\d_])\.?"
    r"(?:,?\s+(?P<year>[0-9]{4})(?![0-9]))?")
_MONTH_DAY = re.compile(
    rf"(?<![^\W\d_])(?P<month>{_ENGLISH_RE})(?![^\W\d_])\.?\s+"
    r"(?P<day>[0-9]{1,2})(?:st|nd|rd|th)?(?![0-9]|[.,][0-9])"
    r"(?:,?\s+(?P<year>[0-9]{4})(?![0-9]))?")
_MAI_MORE = re.compile(r"\s+(?:mult|putin|mare|mari|mic)")
_NUMBER = re.compile(
    r"(?<![\w.,])(?P<sign>[-+\u2212])?"
    r"(?:(?P<head>[1-9][0-9]{0,2})(?P<sep>[,. \u00a0\u202f\u2009])"
    r"(?P<groups>[0-9]{3}(?:(?P=sep)[0-9]{3})*)(?![0-9])|(?P<int>[0-9]+))"
    r"(?:(?!(?P=sep))[.,](?P<frac>[0-9]+))?(?![0-9]|[.,][0-9])")
_WORD = re.compile(r"[^\W\d_]+")
_JOINER = re.compile(r"[\s\-\u2010\u2011]+")
_NAME_WORD = re.compile(r"(?<!\w)[^\W\d_]+(?:[-\u2010][^\W\d_]+)*(?!\w)")
_OPENS_SENTENCE = re.compile(r"[.!?\u2026:](?!\w)|\n")
_NAME_GAP = re.compile(r"[ \t\u00a0]+")
_QUOTE = re.compile(r'"(\S[^"\n]{1,198}\S)"' + "".join(  # 3-200 characters inside
    rf"|{o}\s*(\S[^{c}\n]{{1,198}}\S)\s*[{c}]"
    for o, c in (("\u201c", "\u201d"), ("\u00ab", "\u00bb"), ("\u201e", "\u201c\u201d"))))


class _Hit(NamedTuple):
    start: int
    end: int
    kind: Kind
    value: str
    parts: tuple[str, ...] = ()  # a date's day and year, as numbers a source states


def _take(taken: bytearray, hits: list[_Hit]) -> list[_Hit]:
    for hit in hits:  # what a fact holds is its own, never a second fact
        taken[hit.start:hit.end] = b"\x01" * (hit.end - hit.start)
    return hits


def _dates(original: str, folded: str, taken: bytearray) -> list[_Hit]:
    hits: list[_Hit] = []
    for pattern in (_ISO, _DAY_MONTH, _MONTH_DAY):
        for match in pattern.finditer(folded):
            name, year = match["month"], match["year"]
            if (taken.find(1, *match.span()) >= 0 or (name == "mai" and _MAI_MORE.match(
                    folded, match.end())) or (name == "may" and year is None
                                              and original[match.start("month")] != "M")):
                continue
            month = int(name) if name.isdigit() else _MONTHS[name]
            try:
                datetime.date(int(year or 2000), month, int(match["day"]))
            except ValueError:
                continue
            day = f"{int(match['day']):02d}"
            value = f"{year}-{month:02d}-{day}" if year else f"--{month:02d}-{day}"
            parts = (str(int(day)),) + ((year.lstrip("0"),) if year else ())
            hits.append(_take(taken, [_Hit(*match.span(), "date", value, parts)])[0])
    return hits


def _numbers(folded: str, taken: bytearray) -> list[_Hit]:
    hits = []
    for match in _NUMBER.finditer(folded):
        if taken.find(1, *match.span()) >= 0:
            continue
        whole = (match["head"] + match["groups"].replace(match["sep"], "")
                 if match["head"] else match["int"]).lstrip("0") or "0"
        frac = (match["frac"] or "").rstrip("0")
        value = whole + ("." + frac if frac else "")
        negative = match["sign"] in ("-", "\u2212") and value != "0"
        hits.append(_Hit(*match.span(), "number", ("-" if negative else "") + value))
    words = [m for m in _WORD.finditer(folded) if taken.find(1, *m.span()) < 0]
    i = 0
    while i < len(words):
        size, value = _number_word(folded, words, i)
        if size:
            hits.append(_Hit(words[i].start(), words[i + size - 1].end(), "number", str(value)))
        i += max(size, 1)
    return _take(taken, hits)


def _number_word(folded: str, words: list[re.Match[str]], i: int) -> tuple[int, int]:
    """The longest number phrase at ``words[i]``: ``(words used, value)``, or ``(0, 0)``."""
    if words[i].group() not in _STARTERS:
        return 0, 0
    size = 1
    while (size < _LONGEST and i + size < len(words)
           and _JOINER.fullmatch(folded, words[i + size - 1].end(), words[i + size].start())):
        size += 1
    for n in range(size, 0, -1):
        phrase = " ".join(w.group() for w in words[i:i + n])
        if phrase not in _NUMBER_WORDS or phrase in _ARTICLES:
            continue
        before = words[i - 1].group() if i else ""
        after = words[i + n].group() if i + n < len(words) else ""
        if before in _NOT_AFTER.get(phrase, ()) or after in _NOT_BEFORE.get(phrase, ()):
            return 0, 0
        return n, _NUMBER_WORDS[phrase]
    return 0, 0


def _names(text: str, taken: bytearray) -> list[_Hit]:
    runs: list[list[re.Match[str]]] = []
    end, joined = -1, False
    for match in _NAME_WORD.finditer(text):
        gap = text[max(end, 0):match.start()]
        opens = end < 0 or _OPENS_SENTENCE.search(gap) is not None
        end, word = match.end(), match.group()
        capital = (not opens and word[0].isupper() and len(word) > 1
                   and _fold(word) not in _MONTHS and taken.find(1, *match.span()) < 0)
        if capital and joined and _NAME_GAP.fullmatch(gap):
            runs[-1].append(match)
        elif capital:
            runs.append([match])
        joined = capital
    return [_Hit(run[0].start(), run[-1].end(), "name",
                 " ".join(text[run[0].start():run[-1].end()].split()).casefold()) for run in runs]


def _answer_facts(text: str) -> list[_Hit]:
    folded = _fold(text)
    taken = bytearray(len(text))
    hits = _take(taken, [
        _Hit(*match.span(), "quote", " ".join(next(g for g in match.groups() if g).split()))
        for match in _QUOTE.finditer(text)])
    hits += _dates(text, folded, taken) + _numbers(folded, taken) + _names(text, taken)
    unique: dict[tuple[str, str], _Hit] = {}
    for hit in sorted(hits, key=lambda h: h.start):
        unique.setdefault((hit.kind, hit.value), hit)
    return list(unique.values())[:MAX_FACTS]


def _words_pattern(phrase: str) -> re.Pattern[str]:
    words = _fold("".join(c for c in phrase if not unicodedata.combining(c))).split()
    head = r"(?<!\w)" if re.match(r"\w", words[0]) else ""
    tail = r"(?!\w)" if re.search(r"\w$", words[-1]) else ""
    return re.compile(head + r"\s+".join(re.escape(word) for word in words) + tail)


def _within(texts: Iterable[str], budget: int) -> Iterator[str]:
    for text in texts:
        if budget <= 0:
            return
        yield text[:budget]
        budget -= len(text) + 1


def _sources(read: Mapping[str, str], said: Sequence[str]) -> list[tuple[str, str, str]]:
    """``(key, text, folded)`` of each source read, within the bounds, and last ``"said"``."""
    keys = list(itertools.islice(read, MAX_SOURCES))
    sources = list(zip(keys, _within((read[key] for key in keys), MAX_READ_CHARS), strict=False))
    sources.append(("said", "\n".join(_within(said, MAX_SAID_CHARS))))
    composed = [(key, unicodedata.normalize("NFC", text)) for key, text in sources]
    return [(key, text, _fold(text)) for key, text in composed]


_Operand = tuple[decimal.Decimal, str]
_Step = Callable[[decimal.Decimal, decimal.Decimal], list[decimal.Decimal]]


def _index(sources: list[tuple[str, str, str]],
           ) -> tuple[dict[str, str], dict[str, str], list[_Operand]]:
    """``number -> where``, ``date -> where`` (a dated source states its ``--MM-DD`` too;
    a date's day and year count as numbers stated), and the operands of derivations."""
    numbers, dates = dict[str, str](), dict[str, str]()
    read, said = list[str](), list[str]()
    for i, (key, text, folded) in enumerate(sources):
        taken = bytearray(len(folded))
        stated = _dates(text, folded, taken)
        found = [hit.value for hit in _numbers(folded, taken)]
        found += [part for hit in stated for part in hit.parts]
        values = [hit.value for hit in stated]
        numbers = dict.fromkeys(found, key) | numbers  # the first source to state it wins
        dates = dict.fromkeys(values + [f"--{v[5:]}" for v in values if v[0] != "-"], key) | dates
        said = list(dict.fromkeys(found))[:MAX_SAID_OPERANDS] if i == len(sources) - 1 else []
        read += found
    pool = dict.fromkeys(said + read)
    operands = [(decimal.Decimal(v), v) for v in pool if sum(map(str.isdigit, v)) <= MAX_DIGITS]
    return numbers, dates, operands[:MAX_OPERANDS]


def _canonical(number: decimal.Decimal) -> str:
    text = format(number, "f")
    text = text.rstrip("0").rstrip(".") if "." in text else text
    return "0" if text in ("-0", "") else text


def _derivations(values: list[_Operand], refs: int) -> dict[str, tuple[str, tuple[str, ...]]]:
    """``result -> (operation, operands)``: the count of references read, else the first
    operation that gives it."""
    context = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP, traps=[])
    one, hundred, cent = decimal.Decimal(1), decimal.Decimal(100), decimal.Decimal("0.01")

    def ratio(top: decimal.Decimal, bottom: decimal.Decimal,
              scale: decimal.Decimal) -> list[decimal.Decimal]:
        if not bottom:
            return []
        context.clear_flags()
        result = context.multiply(context.divide(top, bottom), scale)
        exact = not context.flags[decimal.Inexact]
        return [result, context.quantize(result, cent)][0 if exact else 1:]

    def change(a: decimal.Decimal, b: decimal.Decimal) -> list[decimal.Decimal]:
        return ratio(a, b, hundred) + ratio(context.abs(context.subtract(a, b)), b, hundred)

    pairs = list(itertools.combinations(values, 2))
    ordered = list(itertools.permutations(values, 2))
    operations: tuple[tuple[str, list[tuple[_Operand, _Operand]], _Step], ...] = (
        ("sum", pairs, lambda a, b: [context.add(a, b)]),
        ("difference", ordered, lambda a, b: [context.subtract(a, b)] if a > b else []),
        ("product", pairs, lambda a, b: [context.multiply(a, b)]),
        ("quotient", ordered, lambda a, b: ratio(a, b, one)),
        ("compare", ordered, change))  # a share or a change, in per cent
    table: dict[str, tuple[str, tuple[str, ...]]] = {str(refs): ("count", (str(refs),))
                                                     } if refs > 0 else {}
    for operation, candidates, step in operations:
        for (a, x), (b, y) in candidates:
            for result in step(a, b):
                if result.is_finite():
                    table.setdefault(_canonical(result), (operation, (x, y)))
    return table


def check_facts(answer: str, read: Mapping[str, str], said: Sequence[str],
                read_refs: int = 0) -> tuple[Fact, ...]:
    """Each checkable fact of ``answer`` (in order, at most :data:`MAX_FACTS`), checked
    against ``read`` (source key -> text the turn read), ``said`` (the user's messages of
    the session) and ``read_refs`` (how many distinct references the turn read)."""
    text = answer[:MAX_ANSWER_CHARS]
    hits = _answer_facts(text)
    if not hits:
        return ()
    sources = _sources(read, said)
    numbers, dates, operands = _index(sources)
    derived: dict[str, tuple[str, tuple[str, ...]]] | None = None
    facts = []
    for hit in hits:
        fact = Fact(text[hit.start:hit.end], hit.kind, hit.value, "not_found")
        if hit.kind in ("name", "quote"):
            pattern = _words_pattern(hit.value)
            where = next((key for key, _, folded in sources if pattern.search(folded)), None)
        else:
            where = (numbers if hit.kind == "number" else dates).get(hit.value)
        if where is not None:
            fact = dataclasses.replace(fact, status="found", where=where)
        elif hit.kind == "number":
            derived = _derivations(operands, read_refs) if derived is None else derived
            if hit.value in derived:
                operation, used = derived[hit.value]
                fact = dataclasses.replace(fact, status="derived", operands=used,
                                           operation=operation)
        facts.append(fact)
    return tuple(facts)
