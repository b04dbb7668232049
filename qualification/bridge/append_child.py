"""Child process for the kill -9 test: append events forever, acknowledging each one.

Usage: python -m qualification.bridge.append_child SESSIONS_DIR SESSION_ID START
It prints ``acked N`` after event N is on disk (append returned), flushing stdout.
"""

from __future__ import annotations

import sys
from pathlib import Path

from labfy_ref.bridge.sessions import JsonlSessionStore


def main() -> None:
    """Append numbered events until killed."""
    root, session_id, start = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    store = JsonlSessionStore(root)
    number = start
    while True:
        number += 1
        store.append(session_id, {"kind": "message", "role": "user", "n": number,
                                  "text": "payload " * (number % 50)})
        sys.stdout.write(f"acked {number}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
