"""Natural-language strings bounded in *shape* as well as length (PR-07).

A small model under a grammar that admits "any string of at most 80
characters" fills it with whatever is likeliest: a run of one digit
(``"1000…0"``), a copy of a placeholder (``"field_10"``, a tool id,
``"topic"``), a bracket (``"]["``). A :class:`Shape` is a regular expression
of *sentences*: words of letters (any script the ranges below cover — Latin
with every accent, so French and Romanian; Greek, Cyrillic, Armenian, Hebrew,
Arabic, Devanagari, Thai, Georgian, kana, CJK ideographs and Hangul) joined
by one space, or by a punctuation mark and a space; a few short numbers; no
underscore, dot or bracket inside a token; at least ``min_words`` words.

The pattern is written in the subset llama.cpp's ``json_schema`` grammar
accepts (measured on llama-server: character classes with non-ASCII ranges,
bounded repetition, groups, alternation; no look-around, no ``\\p{L}``).
llama.cpp ignores ``maxLength`` on a string that has a ``pattern``, so every
bound is in the pattern itself, and :attr:`Shape.max_chars` — the longest
string it admits — is the ``maxLength`` the narrowed schema states, checked
to fit the wide schema's bound. The wide published schema (PR-05) does not
enforce the shape: a reply that ignores ``response_format`` is parsed as
before, and the shape only guides a model that honours the grammar.

Limits, said plainly: a language written without spaces (Chinese, Japanese,
Thai) counts a run of up to :data:`WORD_LETTERS` letters as one word, so a
longer unbroken run must be broken by punctuation; a word of one repeated
letter up to that length is still a word.
"""

from __future__ import annotations

import dataclasses
import functools
import re

#: Letters, by script: Unicode block ranges (no digits, no punctuation, no symbols).
#: Each range is ``(script, low, high, case)``: ``upper``, ``lower``, or ``any`` where a block
#: mixes the two (Latin Extended alternates them) or the script has no case.
SCRIPTS: tuple[tuple[str, str, str, str], ...] = (
    ("latin", "A", "Z", "upper"), ("latin", "a", "z", "lower"),
    ("latin-1", "\u00c0", "\u00d6", "upper"), ("latin-1", "\u00d8", "\u00de", "upper"),
    ("latin-1", "\u00df", "\u00f6", "lower"), ("latin-1", "\u00f8", "\u00ff", "lower"),
    ("latin-1", "\u0100", "\u024f", "any"),       # Latin Extended-A/B (ă, ș, ț)
    ("latin-1", "\u1e00", "\u1eff", "any"),       # Latin Extended Additional
    ("greek", "\u0386", "\u03ab", "upper"), ("greek", "\u03ac", "\u03ff", "lower"),
    ("cyrillic", "\u0400", "\u042f", "upper"), ("cyrillic", "\u0430", "\u045f", "lower"),
    ("cyrillic", "\u0460", "\u052f", "any"),
    ("armenian", "\u0531", "\u0586", "any"), ("hebrew", "\u05d0", "\u05ea", "any"),
    ("arabic", "\u0620", "\u064a", "any"), ("devanagari", "\u0900", "\u0963", "any"),
    ("thai", "\u0e01", "\u0e4e", "any"), ("georgian", "\u10a0", "\u10ff", "any"),
    ("kana", "\u3041", "\u30ff", "any"), ("cjk", "\u4e00", "\u9fff", "any"),
    ("hangul", "\uac00", "\ud7a3", "any"))
#: Every script: what a shape admits when it is not told the conversation's scripts.
ALL_SCRIPTS = frozenset(name for name, _, _, _ in SCRIPTS)
#: One-letter words of the Latin scripts ("a", "I", French "à", Italian "è"…): any other
#: lone Latin letter is more often a run of noise ("ÿ ÿ ÿ") than a word. A lone letter of
#: another script the conversation uses is a word (Greek "η", one ideograph).
_LATIN = frozenset({"latin", "latin-1"})
_SINGLE = "A-Za-z\u00e0\u00e8\u00e9\u00c0\u00c8\u00c9"


def scripts_of(text: str) -> frozenset[str]:
    """The scripts of :data:`SCRIPTS` that ``text`` uses (Latin always)."""
    found = {"latin"}
    for char in set(text):
        if char.isalpha():
            found.update(name for name, low, high, _ in SCRIPTS if low <= char <= high)
    return frozenset(found)


def letters(scripts: frozenset[str], cases: tuple[str, ...] = ("upper", "lower", "any"),
            *, latin: bool = True) -> str:
    """The character-class body of the letters of ``scripts`` in ``cases`` (every Latin
    letter always: a name such as "Łódź" or "Brașov" is said in any conversation)."""
    return "".join(low if low == high else f"{low}-{high}"
                   for name, low, high, case in SCRIPTS
                   if name in (scripts | _LATIN if latin else scripts - _LATIN)
                   and case in cases)


LETTERS = letters(ALL_SCRIPTS)
#: The longest run of letters one word may have, and the part after one joiner (l'île, mi-août).
WORD_LETTERS = 16
#: An all-capitals word (an acronym) is at most this long.
ACRONYM_LETTERS = 6
JOINED_LETTERS = 8
#: A number: at most four digits, optionally a decimal part of two.
_NUMBER = "[0-9]{1,4}(?:[.,][0-9]{1,2})?"
_NUMBER_CHARS = 7
_WORD_CHARS = WORD_LETTERS + 1 + JOINED_LETTERS
#: Between two tokens: a space, or one punctuation mark and a space (a newline in a file).
_GAP = "(?:[,;:]? |[.?!] )"
_GAP_CHARS = 2
_END = "[.?!]?"
#: Prose (a final answer): a token may open with a quotation mark or a bracket and close
#: with one, a number may be a date, a time, a ratio or a percentage (2024-07-12, 12:30,
#: 3/4, 42%), and a dash may stand between two tokens -- so a count, a comparison, a
#: computation, a quotation or a date can be said; a run of one character still cannot.
#: No ASCII double quote, backslash or line break: JSON escapes them inside a string and
#: llama.cpp's grammar for a ``pattern`` emits them raw (invalid JSON, measured), so a
#: quotation is said with typographic marks (“…”, «…», „…“) or single quotes.
_OPEN = "['(\\[\u00ab\u201c\u201e\u2018]?"
_CLOSE = "[')\\]\u00bb\u201d\u2019]?"
_PROSE_NUMBER = "[0-9]{1,4}(?:[.,:/-][0-9]{1,4}){0,3}%?"
_PROSE_NUMBER_CHARS = 4 + 3 * 5 + 1
#: No gap is a line break: JSON writes one inside a string as the escape ``\\n``, and
#: llama.cpp's grammar for a ``pattern`` emits the raw character instead (invalid JSON,
#: measured), so no narrowed pattern offers one.
_PROSE_GAP = "(?:[,;:]? |[.?!\u2026] | [-\u2013\u2014] )"
_PROSE_GAP_CHARS = 3
_PROSE_END = "[.?!\u2026]?"


@dataclasses.dataclass(frozen=True, slots=True)
class Shape:
    """Sentences of ``min_words``..``max_words`` words with at most ``numbers`` numbers.

    A number may open the text and at most ``numbers`` more may follow, each
    opening a run of at most ``words_per_run`` words.
    """

    min_words: int
    words_per_run: int
    numbers: int = 0
    #: The scripts whose letters make words (the conversation's: PR-07 narrows to them).
    scripts: frozenset[str] = ALL_SCRIPTS
    #: When not empty, the only words the shape admits (:func:`vocabulary`): text made of
    #: what the conversation said. Empty: any word of ``scripts``.
    words: tuple[str, ...] = ()
    #: With ``words``: the only numbers the shape admits (those the conversation said).
    figures: tuple[str, ...] = ()
    #: Prose (a final answer): up to ``min_words``..``words_per_run`` tokens, each a word or
    #: a number (``numbers`` is then unused), quoted or bracketed, dates and dashes allowed.
    prose: bool = False

    def within(self, scripts: frozenset[str]) -> Shape:
        """This shape with words of ``scripts`` only (Latin always)."""
        return dataclasses.replace(self, scripts=frozenset(scripts) | {"latin"})

    def using(self, words: tuple[str, ...], figures: tuple[str, ...] = ()) -> Shape:
        """This shape with only ``words`` and ``figures`` (:func:`vocabulary`, :func:`figures`).

        Too few words (under :data:`MIN_VOCABULARY`) leave the shape as it was.
        """
        if len(words) < MIN_VOCABULARY:
            return self
        return dataclasses.replace(self, words=words, figures=figures)

    def __post_init__(self) -> None:
        if not 1 <= self.min_words <= self.words_per_run + 1 or self.numbers < 0:
            raise ValueError("a shape needs 1 <= min_words <= words_per_run + 1")

    @property
    def pattern(self) -> str:
        """The anchored regular expression (llama.cpp's grammar subset, and Python's)."""
        gap = _GAP
        upper = letters(self.scripts, ("upper",))
        lower = letters(self.scripts, ("lower", "any"))
        single = _SINGLE + letters(self.scripts, latin=False)
        # a word: capitalised ("On", "Il") or lower case, or a short acronym — never
        # case noise
        _WORD = (f"(?:[{single}]|[{upper}]{{2,{ACRONYM_LETTERS}}}"
                 f"|[{upper}][{lower}]{{1,{WORD_LETTERS - 1}}}"
                 f"|[{lower}]{{2,{WORD_LETTERS - 1}}})"
                 f"(?:['\u2019-][{lower}]{{1,{JOINED_LETTERS}}})?")
        if self.prose and not self.words:
            token = f"{_OPEN}(?:{_WORD}|{_PROSE_NUMBER}){_CLOSE}"
            return (f"^{token}(?:{_PROSE_GAP}{token}){{{self.min_words - 1},"
                    f"{self.words_per_run - 1}}}{_PROSE_END}$")
        number = _NUMBER
        if self.words:  # the conversation's own words (each as said, and capitalised)
            _WORD = f"(?:{'|'.join(self.words)})"
            number = f"(?:{'|'.join(re.escape(f) for f in self.figures)})" if self.figures else ""
        run = f"(?:{gap}{_WORD}){{0,{self.words_per_run}}}"
        first = f"(?:{gap}{_WORD}){{{self.min_words - 1},{self.words_per_run}}}"
        numbered = (f"(?:{gap}{number}{run}){{0,{self.numbers}}}"
                    if self.numbers and number else "")
        lead = f"(?:{number}{gap})?" if number else ""
        return f"^{lead}{_WORD}{first}{numbered}{_END}$"

    @property
    def max_chars(self) -> int:
        """The longest text the pattern admits, in characters."""
        if self.prose and not self.words:
            return self.words_per_run * (_PROSE_GAP_CHARS + 2 + max(
                _WORD_CHARS, _PROSE_NUMBER_CHARS)) + 1
        run = self.words_per_run * (_GAP_CHARS + _WORD_CHARS)
        return (_NUMBER_CHARS + _GAP_CHARS + _WORD_CHARS + run
                + self.numbers * (_GAP_CHARS + _NUMBER_CHARS + run) + 1)

    def schema(self, wide_max: int) -> dict[str, str | int]:
        """The narrowed string schema; ValueError if it could exceed the wide bound."""
        if self.max_chars > wide_max:
            raise ValueError(f"shape admits {self.max_chars} characters, the wide schema "
                             f"{wide_max}")
        return {"type": "string", "minLength": 1, "maxLength": self.max_chars,
                "pattern": self.pattern}

    def admits(self, text: str) -> bool:
        """Does ``text`` have this shape?"""
        return compiled(self.pattern).fullmatch(text) is not None


#: The most words a vocabulary holds, and the fewest worth narrowing to.
MAX_VOCABULARY = 400
MIN_VOCABULARY = 8
_VOCABULARY_WORD = re.compile(r"[^\W\d_]+(?:['\u2019-][^\W\d_]+)*")


def vocabulary(*texts: str) -> tuple[str, ...]:
    """The words of ``texts`` (any script), each as said and capitalised, first seen first.

    A word is a run of Unicode letters, joined by an apostrophe or a hyphen
    (l'île, mi-août); it is kept when it is no longer than the longest word a
    shape admits, so :attr:`Shape.max_chars` still bounds the text. At most
    :data:`MAX_VOCABULARY` entries. Every entry is letters and joiners only, so
    it is a literal in both Python's and llama.cpp's regular expressions.
    """
    found: dict[str, None] = {}
    for text in texts:
        for match in _VOCABULARY_WORD.finditer(text):
            word = match.group()
            if len(word) > _WORD_CHARS or not word.replace("-", "").replace("'", "").replace(
                    "\u2019", "").isalpha():
                continue  # \w also holds marks and numerals (¹, Ⅳ): only letters make words
            for form in (word, word[:1].upper() + word[1:]):
                found.setdefault(form, None)
            if len(found) >= MAX_VOCABULARY:
                return tuple(found)[:MAX_VOCABULARY]
    return tuple(found)


_FIGURE = re.compile(r"(?<![0-9])[0-9]{1,4}(?:[.,][0-9]{1,2})?(?![0-9])")


def figures(*texts: str) -> tuple[str, ...]:
    """The numbers of ``texts`` a shape's number admits (ASCII digits), first seen first."""
    found: dict[str, None] = {}
    for text in texts:
        for match in _FIGURE.finditer(text):
            found.setdefault(match.group(), None)
    return tuple(found)[:MAX_VOCABULARY]


@functools.cache
def compiled(pattern: str) -> re.Pattern[str]:
    """``pattern`` compiled once (shapes and catalog patterns are few and fixed)."""
    return re.compile(pattern)


#: A research topic: a short title of two to six words.
TOPIC = Shape(min_words=2, words_per_run=5)
#: A research question: a sentence of two to seventeen words, one number.
QUESTION = Shape(min_words=2, words_per_run=8, numbers=1)
#: A final answer: prose of two to sixty words and numbers (a few sentences): a count, a
#: comparison, a computation, a date, a quotation or a summary can be said (PR-08).
FINAL = Shape(min_words=2, words_per_run=60, prose=True)
#: The content of a file the model writes: prose of two to eighty words and numbers, as a
#: final answer's (one line: see :data:`_PROSE_GAP`).
CONTENT = Shape(min_words=2, words_per_run=80, prose=True)
#: A path the model names for a new file: segments of letters, digits, ``.``, ``_``, ``-``.
PATH_PATTERN = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}(?:/[A-Za-z0-9][A-Za-z0-9._-]{0,62}){0,3}$"
PATH_CHARS = 255


#: The longest passage an answer quotes, in characters (a longer sentence is cut at a word).
PASSAGE_CHARS = 300
#: A sentence ends at ``.``, ``!`` or ``?`` followed by blanks and a capital letter or a
#: digit (so "C. hederae" stays one sentence), or at a line break.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[0-9" + letters(ALL_SCRIPTS, ("upper",)) + r"])|\n+")


def passages(text: str) -> list[str]:
    """The sentences of ``text`` an answer may quote, in order (quoted rule, PR-07).

    Each is stripped, has at least one word of two letters, and is at most
    :data:`PASSAGE_CHARS` characters (a longer one is cut at a word and ends
    with an ellipsis). Line breaks always end a passage: a file's lines are
    its passages.
    """
    found: list[str] = []
    for part in _SENTENCE_END.split(text):
        sentence = " ".join(part.split())
        if not _VOCABULARY_WORD.search(sentence) or not any(
                len(match.group()) >= 2 for match in _VOCABULARY_WORD.finditer(sentence)):
            continue
        if len(sentence) > PASSAGE_CHARS:
            cut = sentence[:PASSAGE_CHARS - 1].rsplit(" ", 1)[0]
            sentence = f"{cut}\u2026"
        found.append(sentence)
    return found
