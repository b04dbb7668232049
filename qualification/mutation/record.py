"""The mutation record the report reads (``mutation.schema.json``), from the sessions.

Per module: mutants killed out of those run that can be killed — the mutation
score of the literature, killed / (mutants - equivalent mutants): a survivor
triaged ``equivalent`` (no test could tell it from the original, its reason
says why) is still listed among the survivors with that reason, but counts in
neither number. Per requirement ID: the sum over the
modules whose covering tests name that ID (a mutant counts toward every ID of
its module's tests: cosmic-ray tells whether the test command failed, not which
test). Each survivor carries the triage of ``triage.toml``: an ``equivalent``
verdict is its justification; ``needs a test`` leaves it unjustified (null).
"""

from __future__ import annotations

import datetime
import itertools
import json
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from labfy_ref.report.sources import files_sha256
from qualification.mutation.scope import MODULES, ModuleScope
from qualification.mutation.sessions import Mutant

#: Where the committed record lives; the report falls back to it (evidence.py).
RECORD_PATH = Path(__file__).resolve().parent / "record.json"
TRIAGE_PATH = Path(__file__).resolve().parent / "triage.toml"
EQUIVALENT = "equivalent"
VERDICTS = (EQUIVALENT, "needs a test")


def key(mutant: Mutant) -> str:
    """A survivor's stable name in triage.toml: location, operator, occurrence."""
    return f"{mutant.module}:{mutant.line} {mutant.operator}#{mutant.occurrence}"


def _common(a: str, b: str) -> int:
    """How many leading characters ``a`` and ``b`` share."""
    same = itertools.takewhile(lambda pair: pair[0] == pair[1], zip(a, b, strict=False))
    return sum(1 for _ in same)


def describe(mutant: Mutant) -> str:
    """What was changed, from the diff: ``old`` -> ``new`` (one line, bounded)."""
    lines = (mutant.diff or "").splitlines()
    old = next((line[1:].strip() for line in lines
                if line.startswith("-") and not line.startswith("---")), "")
    new = next((line[1:].strip() for line in lines
                if line.startswith("+") and not line.startswith("+++")), "")
    # Only the part that differs, with a little context: a long line would hide it.
    head = _common(old, new)
    tail = _common(old[head:][::-1], new[head:][::-1])
    start = max(0, head - 24)

    def cut(text: str) -> str:
        end = len(text) - max(0, tail - 24)
        return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")

    text = f"{mutant.operator}: `{cut(old)}` -> `{cut(new)}`"
    return text if len(text) <= 300 else text[:299] + "…"


def load_triage(path: Path = TRIAGE_PATH) -> dict[str, tuple[str, str]]:
    """key -> (verdict, reason) from triage.toml (``[[survivor]]`` tables)."""
    if not path.is_file():
        return {}
    document = tomllib.loads(path.read_text(encoding="utf-8"))
    triage: dict[str, tuple[str, str]] = {}
    for entry in document.get("survivor", []):
        if entry["verdict"] not in VERDICTS:
            raise ValueError(f"{path}: verdict {entry['verdict']!r} is not one of {VERDICTS}")
        triage[entry["key"]] = (entry["verdict"], entry["reason"])
    return triage


def build(results: Mapping[str, Sequence[Mutant]], *, at: str | None = None,
          triage: Mapping[str, tuple[str, str]] | None = None,
          scopes: Sequence[ModuleScope] = MODULES) -> dict[str, Any]:
    """The record of ``results`` (module path -> its complete session's mutants)."""
    triage = load_triage() if triage is None else triage
    modules: list[dict[str, Any]] = []
    per_req: dict[str, list[int]] = {}
    survivors: list[dict[str, Any]] = []
    for scope in scopes:
        if scope.path not in results:
            continue
        done = [m for m in results[scope.path] if m.done]
        killed = sum(m.killed for m in done)
        equivalent = sum(not m.killed and triage.get(key(m), ("",))[0] == EQUIVALENT
                         for m in done)
        modules.append({"name": scope.path, "killed": killed, "total": len(done) - equivalent})
        reqs = scope.reqs()
        for req in reqs:
            tally = per_req.setdefault(req, [0, 0])
            tally[0] += killed
            tally[1] += len(done) - equivalent
        for mutant in done:
            if mutant.killed:
                continue
            verdict, reason = triage.get(key(mutant), (None, None))
            survivors.append({"module": scope.path, "location": f"{mutant.module}:{mutant.line}",
                              "mutation": describe(mutant), "reqs": list(reqs),
                              "justification": f"{verdict}: {reason}"
                              if verdict == EQUIVALENT else None})
    complete = {scope.path for scope in scopes} <= set(results)
    mutated = sorted(scope.path for scope in scopes)
    return {
        "schema": "labfy.mutation.v1",
        "at": at or datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat(),
        # keyed by the modules it mutated: a change elsewhere leaves the scores current
        "sources_sha256": files_sha256(mutated),
        "mutated": mutated,
        # Only a run over every module may back IDs: a partial run must not make them CURRENT.
        "reqs": sorted(per_req) if complete else [],
        "modules": modules,
        "requirements": [{"name": req, "killed": k, "total": t}
                         for req, (k, t) in sorted(per_req.items())],
        "survivors": survivors,
    }


def write(record: Mapping[str, Any], path: Path = RECORD_PATH) -> None:
    """Write ``record`` atomically (a reader never sees half a file)."""
    temp = path.with_name(f".{path.name}.tmp")
    temp.write_text(json.dumps(record, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    temp.replace(path)
