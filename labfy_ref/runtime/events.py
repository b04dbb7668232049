"""The append-only, bounded, cursor-paged event log (RT-06)."""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

from labfy_ref.clock import iso, utcnow


@dataclasses.dataclass(frozen=True, slots=True)
class Event:
    """One event; ``seq`` increases by one from 1."""

    seq: int
    turn_id: str
    type: str
    data: dict[str, Any]
    at: str

    def as_json(self) -> dict[str, Any]:
        """Wire shape ``{seq, turn_id, type, data, at}``."""
        return dataclasses.asdict(self)


class EventLog:
    """Keeps the newest ``capacity`` events (FIFO eviction)."""

    def __init__(self, capacity: int) -> None:
        self._events: collections.deque[Event] = collections.deque(maxlen=capacity)
        self._seq = 0

    def append(self, turn_id: str, type_: str, data: dict[str, Any]) -> Event:
        """Append one event."""
        self._seq += 1
        event = Event(self._seq, turn_id, type_, data, iso(utcnow()))
        self._events.append(event)
        return event

    @property
    def oldest_cursor(self) -> int:
        """A cursor below this one has missed evicted events."""
        return self._events[0].seq - 1 if self._events else self._seq

    def page(self, cursor: int, limit: int = 100) -> dict[str, Any]:
        """Events after ``cursor``; ``missed`` says the client fell behind."""
        events = [e for e in self._events if e.seq > cursor][:limit]
        return {
            "events": [e.as_json() for e in events],
            "next_cursor": events[-1].seq if events else max(cursor, self.oldest_cursor),
            "oldest_cursor": self.oldest_cursor,
            "missed": cursor < self.oldest_cursor,
        }
