"""Hypothesis strategies shared by suites."""

from __future__ import annotations

import random
import re
from typing import Any

from hypothesis import strategies as st

from labfy_ref.protocol.text_shape import PATH_PATTERN


def instances(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values matching ``schema`` (the keywords narrowing uses), strings of any character.

    Control characters are in the alphabet, so the longest JSON spellings
    (``\\u0001``) are drawn too: the completion limit must hold for them.
    """
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "oneOf" in schema:
        return st.one_of([instances(branch) for branch in schema["oneOf"]])
    kind = schema["type"]
    if kind == "string":
        if "pattern" in schema:  # a shaped string (PR-07): built to fit, then checked
            return _shaped(schema["pattern"], schema.get("minLength", 0), schema["maxLength"])
        return st.text(st.characters(codec="utf-8"), min_size=schema.get("minLength", 0),
                       max_size=schema["maxLength"])
    if kind == "array":
        return st.lists(instances(schema["items"]), min_size=schema.get("minItems", 0),
                        max_size=schema["maxItems"], unique=schema.get("uniqueItems", False))
    assert kind == "object", kind
    required = set(schema.get("required", []))
    return st.fixed_dictionaries(
        {key: instances(value) for key, value in schema["properties"].items()
         if key in required},
        optional={key: instances(value) for key, value in schema["properties"].items()
                  if key not in required})


def _shaped(source: str, low: int, high: int) -> st.SearchStrategy[str]:
    """Strings of a PR-07 pattern, built to fit rather than filtered out of noise.

    A path pattern gets slash-joined segments; a sentence pattern gets two to
    five words (every shape admits that many), optionally after a number, in
    the letters the pattern admits (accents only where the conversation's
    scripts bring Latin-1 in). The few draws still outside the pattern — a
    word it bounds more tightly — are filtered, a small fraction.
    """
    pattern = re.compile(source)
    if source == PATH_PATTERN:
        strings = st.lists(st.text("abz09_.-", min_size=1, max_size=12), min_size=1,
                           max_size=4).map(lambda parts: "/".join("a" + p for p in parts))
    else:
        alphabet = "abzy" + ("\u00e9" if pattern.fullmatch("Ab\u00e9 ab\u00e9") else "")
        lower = st.text(alphabet, min_size=2, max_size=14)
        joined = ["l'ab", "mi-ab"] + (["l'\u00eele", "mi-ao\u00fbt"] if "\u00e9" in alphabet
                                      else [])
        word = st.one_of(lower, lower.map(str.capitalize), st.just("ADN"),
                         st.sampled_from(["a", *joined]))
        words = st.lists(word, min_size=2, max_size=5)
        sentence = st.one_of(words.map(" ".join), words.map(lambda w: ", ".join(w) + "."))
        strings = st.builds(lambda number, text: f"{number} {text}" if number else text,
                            st.sampled_from(["", "42", "3.5"]), sentence)
    return strings.filter(lambda text: low <= len(text) <= high
                          and pattern.fullmatch(text) is not None)


def random_instance(schema: dict[str, Any], rng: random.Random) -> Any:
    """One value matching ``schema``, drawn with ``rng`` (for code Hypothesis cannot draw in).

    The same keywords as :func:`instances`; strings mix ASCII, accents, emoji
    and control characters, at any length the schema admits.
    """
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return rng.choice(schema["enum"])
    if "oneOf" in schema:
        return random_instance(rng.choice(schema["oneOf"]), rng)
    kind = schema["type"]
    if kind == "string":
        size = rng.randint(schema.get("minLength", 0), schema["maxLength"])
        return "".join(rng.choice("ab \u00e9\U0001f41d\x01\"\\") for _ in range(size))
    if kind == "array":
        items = [random_instance(schema["items"], rng)
                 for _ in range(rng.randint(schema.get("minItems", 0), schema["maxItems"]))]
        return list(dict.fromkeys(items)) if schema.get("uniqueItems") else items
    assert kind == "object", kind
    required = set(schema.get("required", []))
    return {key: random_instance(value, rng) for key, value in schema["properties"].items()
            if key in required or rng.random() < 0.5}
