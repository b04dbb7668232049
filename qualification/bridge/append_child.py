"""Child process for the kill -9 tests: append numbered events, acknowledging each one.

Usage: python -m qualification.bridge.append_child SESSIONS_DIR SESSION_ID START
[LINE_BYTES [COUNT]]

It prints ``ready`` once the store is open, then ``acked N`` after event N is on
disk (append returned), flushing stdout each time. With LINE_BYTES each event's
line (newline included) is exactly that long, or the shortest an event can be;
its text is padded with four-byte emoji, like the long lines of real sessions.
Without COUNT it appends until killed; with it, it stops after COUNT events.
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path
from typing import Any

from labfy_ref.bridge.store.logs import JsonlSessionStore


def line_bytes(event: dict[str, Any]) -> int:
    """The length of ``event``'s line in a session log, newline included."""
    return len(json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode()) + 1


def event_of(number: int, size: int | None) -> dict[str, Any]:
    """Event ``number``, padded so its line is ``size`` bytes (if it can be that short)."""
    event: dict[str, Any] = {"kind": "message", "role": "user", "n": number, "text": ""}
    if size is None:
        event["text"] = "payload " * (number % 50)
        return event
    room = max(0, size - line_bytes(event))
    event["text"] = "\N{GRINNING FACE}" * (room // 4) + "x" * (room % 4)
    return event


def main() -> None:
    """Append numbered events until killed (or COUNT are acknowledged)."""
    root, session_id, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    size = int(sys.argv[4]) if len(sys.argv) > 4 else None
    count = int(sys.argv[5]) if len(sys.argv) > 5 else None
    store = JsonlSessionStore(root)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    numbers = itertools.count(start + 1)
    for number in numbers if count is None else itertools.islice(numbers, count):
        store.append(session_id, event_of(number, size))
        sys.stdout.write(f"acked {number}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
