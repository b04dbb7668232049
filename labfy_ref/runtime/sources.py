"""What a turn read and was told: the sources a final's facts are checked against (PR-09).

The driver keeps, for every successful call, the text of its result (its string values,
in order: titles, bodies, a file's lines, names) under the call's id, and the user's
own messages of the conversation (this turn's and a session's earlier ones). Both are
bounded; the newest results are kept. The check itself is
:func:`labfy_ref.protocol.facts.check_facts`: the answer is never rewritten.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from labfy_ref.protocol.facts import Fact, check_facts
from labfy_ref.protocol.prompt import ChatMessage

#: The results a turn keeps the text of (the newest), and the characters kept of each.
READ_RESULTS = 32
READ_CHARS = 8000
#: The user's messages kept (the newest), and the characters kept of each.
SAID_MESSAGES = 16
SAID_CHARS = 4000
#: How deep a result's JSON is walked, and how many strings of it are taken.
_DEPTH = 6
_STRINGS = 2000


@dataclasses.dataclass(slots=True)
class FactSources:
    """The texts a turn's facts are checked against: results read and messages said."""

    said: tuple[str, ...] = ()
    read: dict[str, str] = dataclasses.field(default_factory=dict)

    @classmethod
    def told(cls, messages: Sequence[ChatMessage]) -> FactSources:
        """The user's messages of a conversation at its start (what the user said)."""
        said = [str(m.get("content", ""))[:SAID_CHARS] for m in messages
                if m.get("role") == "user" and isinstance(m.get("content"), str)]
        return cls(said=tuple(said[-SAID_MESSAGES:]))

    def remember(self, call_id: str, result: Mapping[str, Any]) -> None:
        """Keep the text of one successful call's result (``data``), under its call id."""
        if result.get("ok") is not True:
            return
        text = "\n".join(_strings(result.get("data"), _DEPTH))[:READ_CHARS]
        if not text:
            return
        self.read.pop(call_id, None)
        self.read[call_id] = text
        while len(self.read) > READ_RESULTS:
            del self.read[next(iter(self.read))]

    def check(self, answer: str, read_refs: int) -> tuple[Fact, ...]:
        """The facts of ``answer``, each found, derived or not found (PR-09)."""
        return check_facts(answer, self.read, self.said, read_refs=read_refs)


def _strings(value: Any, depth: int) -> Iterator[str]:
    """The string values of a JSON value, in order, at most :data:`_STRINGS` of them."""
    stack: list[tuple[Any, int]] = [(value, depth)]
    taken = 0
    while stack and taken < _STRINGS:
        item, left = stack.pop()
        if isinstance(item, str):
            taken += 1
            yield item
        elif left > 0 and isinstance(item, Mapping):
            stack.extend((child, left - 1) for child in reversed(list(item.values())))
        elif left > 0 and isinstance(item, list):
            stack.extend((child, left - 1) for child in reversed(item))
