"""A real worker process for the claiming races (``python -m qualification.work.claimer``).

``URL WORKER``: opens the store, prints ``ready``, waits for a line on stdin (so every
process starts claiming at once), then claims runs until none is left; for each it
begins and completes one effect and finishes the run, printing one JSON line
``{"run_id", "attempt"}``. Exits 0 when no run is left.
"""

from __future__ import annotations

import json
import sys

from labfy_ref.work import State, WorkStore, parse_database_url
from qualification.work.wire import STORE_WORKSPACE

#: Long enough that no lease of the race expires: each run must be claimed exactly once.
LEASE_SECONDS = 600


def main(argv: list[str]) -> int:
    """Claim and finish runs as ``WORKER`` until the database has none left."""
    url, worker = argv
    store = WorkStore.open(parse_database_url(url), workspace_id=STORE_WORKSPACE)
    try:
        print("ready", flush=True)
        sys.stdin.readline()
        while (claim := store.claim(worker, LEASE_SECONDS)) is not None:
            effect = store.begin_effect(claim, 1, 0, "files.write", {"by": worker})
            store.complete_effect(claim, effect.id, {"ok": True})
            store.finish(claim, State.COMPLETED, final_text=worker)
            print(json.dumps({"run_id": claim.run_id, "attempt": claim.attempt}), flush=True)
    finally:
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
