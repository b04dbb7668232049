"""``python -m qualification.mutation [--module PATH ...] [--jobs N] [--fresh|--survivors]``,
or ``python -m qualification.mutation widened ...``: the attributed run of QR-06 (widened.py).

Runs the listed modules (default: every module of the scope) two at a time,
then writes the record from every complete session on disk and, for a module with
no session here, its score in the committed record if that module's source is
unchanged — so a later run of other modules adds to it rather than replacing it,
and a fresh clone reruns only the modules that changed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import sys
import time
from typing import Any

from qualification.mutation import record, widened
from qualification.mutation.run import run_module, session_path
from qualification.mutation.scope import MODULES, ModuleScope, by_path
from qualification.mutation.sessions import Mutant, mutants


def _complete_sessions() -> dict[str, list[Mutant]]:
    found: dict[str, list[Mutant]] = {}
    for scope in MODULES:
        session = session_path(scope)
        if session.is_file():
            items = mutants(session)
            if all(m.skipped or m.outcome is not None for m in items):
                found[scope.path] = items
    return found


def _previous() -> dict[str, Any] | None:
    try:
        document: dict[str, Any] = json.loads(record.RECORD_PATH.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return document


def main(argv: list[str] | None = None) -> int:
    """Run, then write qualification/mutation/record.json; print the scores and wall time."""
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["widened"]:
        return widened.main(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m qualification.mutation")
    parser.add_argument("--module", action="append", default=[],
                        help="a module path of the scope (repeatable; default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="modules mutated at once")
    parser.add_argument("--fresh", action="store_true", help="discard the sessions and start over")
    parser.add_argument("--survivors", action="store_true",
                        help="run the survivors of the sessions again (after adding tests)")
    parser.add_argument("--record-only", action="store_true",
                        help="write the record from the sessions on disk; run nothing")
    args = parser.parse_args(argv)
    scopes: list[ModuleScope] = [by_path(path) for path in args.module] or list(MODULES)
    started = time.monotonic()
    if not args.record_only:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for done in [pool.submit(run_module, scope, fresh=args.fresh,
                                                 survivors=args.survivors) for scope in scopes]:
                done.result()
    sessions = _complete_sessions()
    # "at" is when the newest result was written, not when this record was: --record-only
    # rewrites the record without measuring anything.
    newest = max((session_path(by_path(path)).stat().st_mtime for path in sessions), default=None)
    at = None if newest is None else datetime.datetime.fromtimestamp(
        newest, datetime.UTC).replace(microsecond=0).isoformat()
    previous = _previous()
    if at is None and previous is not None:
        at = previous.get("at")  # nothing measured here: the kept scores' time stands
    carried = {path: entry for path, entry in record.carried_over(previous).items()
               if path not in sessions}
    document = record.build(sessions, at=at, carried=carried)
    record.write(document)
    for score in document["modules"]:
        kept = " (kept from the record: source unchanged)" if score["name"] in carried else ""
        print(f"{score['name']}: {score['killed']}/{score['total']} killed "
              f"({by_path(score['name']).describe()}){kept}")
    equivalent = sum(s["justification"] is not None for s in document["survivors"])
    print(f"{len(document['survivors'])} surviving ({equivalent} equivalent, counted in no "
          f"score); record: {record.RECORD_PATH}; wall time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
