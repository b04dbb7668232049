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


def carried_over(previous: Mapping[str, Any] | None, scopes: Sequence[ModuleScope] = MODULES,
                 ) -> dict[str, dict[str, Any]]:
    """The modules of ``previous`` (an earlier record) still measured on today's source.

    A module scored with its own ``sha256`` whose file is unchanged keeps its score, its
    IDs and its survivors, so rerunning one module does not need every other session on
    disk; a changed module, or one scored before modules said what they measured, is
    dropped (its IDs are then not backed until it is run again).
    """
    kept: dict[str, dict[str, Any]] = {}
    if previous is None:
        return kept
    paths = {scope.path for scope in scopes}
    for score in previous.get("modules", []):
        name = score.get("name")
        if (name in paths and score.get("sha256") is not None
                and score["sha256"] == files_sha256([name])):
            kept[name] = {"score": dict(score), "survivors": [
                dict(s) for s in previous.get("survivors", []) if s.get("module") == name]}
    return kept


def build(results: Mapping[str, Sequence[Mutant]], *, at: str | None = None,
          triage: Mapping[str, tuple[str, str]] | None = None,
          scopes: Sequence[ModuleScope] = MODULES,
          carried: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """The record of ``results`` (module path -> its complete session's mutants), with the
    ``carried`` modules of an earlier record (:func:`carried_over`) where no session ran."""
    triage = load_triage() if triage is None else triage
    carried = carried or {}
    modules: list[dict[str, Any]] = []
    per_req: dict[str, list[int]] = {}
    survivors: list[dict[str, Any]] = []
    for scope in scopes:
        if scope.path in results:
            done = [m for m in results[scope.path] if m.done]
            killed = sum(m.killed for m in done)
            equivalent = sum(not m.killed and triage.get(key(m), ("",))[0] == EQUIVALENT
                             for m in done)
            reqs = scope.reqs()
            total = len(done) - equivalent
            module_survivors = []
            for mutant in done:
                if mutant.killed:
                    continue
                verdict, reason = triage.get(key(mutant), (None, None))
                module_survivors.append({
                    "module": scope.path, "location": f"{mutant.module}:{mutant.line}",
                    "mutation": describe(mutant), "reqs": list(reqs),
                    "justification": f"{verdict}: {reason}" if verdict == EQUIVALENT else None})
        elif scope.path in carried:
            # the score stands (the source is unchanged); the IDs it backs are those its
            # test files name today (a test tagged since runs with them and only adds kills)
            score = carried[scope.path]["score"]
            killed, total, reqs = score["killed"], score["total"], scope.reqs()
            module_survivors = [{**s, "reqs": list(reqs)} if "reqs" in s else dict(s)
                                for s in carried[scope.path]["survivors"]]
        else:
            continue
        # what this score measured: a change to this module makes only these IDs stale
        modules.append({"name": scope.path, "killed": killed, "total": total,
                        "sha256": files_sha256([scope.path]), "reqs": list(reqs)})
        for req in reqs:
            tally = per_req.setdefault(req, [0, 0])
            tally[0] += killed
            tally[1] += total
        survivors += module_survivors
    complete = {scope.path for scope in scopes} <= {module["name"] for module in modules}
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
