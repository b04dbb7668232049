"""The eval's control agent: uniformly at random within each round's narrowed schema.

It answers every round like a model that honours ``response_format`` and
knows nothing: one branch of the narrowed action schema drawn uniformly, every
enum value drawn uniformly, optional fields present or not by a coin, strings
made of random lower-case words that fit the field's pattern. Its pass rate is
the narrowing's own share of a pass: what a model earns above it is the
model's. It is seeded (by the eval, per task and run), so it repeats.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
from collections.abc import Mapping, Sequence
from typing import Any

from labfy_ref.protocol import Usage

CONTROL_AGENT = "random-control"
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclasses.dataclass(frozen=True, slots=True)
class ControlReply:
    """The control's reply: action JSON text (it costs no tokens)."""

    content: str
    usage: Usage = dataclasses.field(default_factory=Usage)


class RandomControl:
    """A :class:`~labfy_ref.protocol.ChatModel` drawing uniformly within the schema."""

    label = "Random control (uniform within the narrowed schema)"
    model = CONTROL_AGENT

    def __init__(self, seed: str) -> None:
        self._rng = random.Random(seed)  # noqa: S311  # a repeatable draw, never a secret

    async def chat(self, messages: Sequence[Mapping[str, Any]], *,
                   response_format: Mapping[str, Any] | None = None,
                   max_tokens: int | None = None) -> ControlReply:
        """One action drawn from the round's schema (the wide one's final when none is sent)."""
        schema = (response_format or {}).get("json_schema", {}).get("schema")
        if not isinstance(schema, Mapping):
            return ControlReply(json.dumps({"type": "final", "text": "No schema was sent."}))
        return ControlReply(json.dumps(self.draw(schema), ensure_ascii=False))

    def draw(self, schema: Mapping[str, Any]) -> Any:
        """A value of ``schema`` (the keywords the narrowing uses)."""
        rng = self._rng
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return rng.choice(list(schema["enum"]))
        if "oneOf" in schema:
            return self.draw(rng.choice(list(schema["oneOf"])))
        kind = schema.get("type")
        if kind == "object":
            required = set(schema.get("required", []))
            return {name: self.draw(field) for name, field in schema.get("properties", {}).items()
                    if name in required or rng.random() < 0.5}
        if kind == "array":
            low, high = int(schema.get("minItems", 0)), int(schema.get("maxItems", 1))
            items = [self.draw(schema["items"]) for _ in range(rng.randint(low, max(low, high)))]
            return list(dict.fromkeys(items)) if schema.get("uniqueItems") else items
        if kind == "integer":
            return rng.randint(int(schema.get("minimum", 0)), int(schema.get("maximum", 100)))
        if kind == "boolean":
            return rng.random() < 0.5
        return self._text(schema)

    def _text(self, schema: Mapping[str, Any]) -> str:
        """Random lower-case words that fit the field's pattern and bounds."""
        rng = self._rng
        low, high = int(schema.get("minLength", 1)), int(schema.get("maxLength", 80))
        pattern = re.compile(schema["pattern"]) if "pattern" in schema else None
        for _ in range(100):
            words = ["".join(rng.choice(_LETTERS) for _ in range(rng.randint(2, 8)))
                     for _ in range(rng.randint(2, 6))]
            text = " ".join(words)
            if pattern is not None and not pattern.fullmatch(text) and "/" in schema["pattern"]:
                text = "-".join(words) + ".txt"  # a path
            if low <= len(text) <= high and (pattern is None or pattern.fullmatch(text)):
                return text
        return "no answer"[:high]
