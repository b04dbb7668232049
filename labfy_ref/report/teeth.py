"""Teeth per requirement (QR-06): deliberate faults and operator mutants, by ID.

Two records feed it. ``python -m qualification.mutants --record DIR`` writes
``DIR/faults.json`` (``faults.schema.json``): each hand-written fault with the IDs
it is attributed to (those it names, and each ID whose declared code holds the
function it replaces), whether it was killed, and the IDs of the test that killed
it. ``python -m qualification.mutation.widened`` writes one record per module
(``mutation-module.schema.json``, committed under ``qualification/mutation/modules``)
keyed by that module's own SHA-256: each operator mutant of an ID's declared code,
with the IDs whose own tests killed it. A mutation counts as killed *for an ID*
only through that ID's own tests; a record whose module changed since is *stale*:
listed with its IDs, never counted. An ID whose own tests kill less than
:data:`WEAK_BELOW` of what is attributed to it (equivalent mutants excepted) is
*weak*.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Collection
from pathlib import Path
from typing import Any

from labfy_ref.report.validate import check, load_json

FAULTS_RECORD = "faults.json"
#: The committed per-module records of the attributed mutation run, read under the
#: current directory (a checkout), with the modules they name.
MODULE_RECORDS = Path("qualification/mutation/modules")
#: Below this share of its faults killed by its own tests, an ID is weak (QR-06).
WEAK_BELOW = 0.8


@dataclasses.dataclass(frozen=True, slots=True)
class Tooth:
    """One ID: the faults attributed to it, those its own tests killed, the others."""

    req: str
    attributed: int
    killed: int
    survivors: tuple[str, ...]
    #: Operator mutants of its declared code (fresh records only, equivalents excepted).
    mutants: int = 0
    mutants_killed: int = 0
    #: Each surviving mutant: where, what changed, and each ID's verdict.
    mutant_survivors: tuple[str, ...] = ()

    @property
    def weak(self) -> bool:
        """Its own tests kill less than :data:`WEAK_BELOW` of what is attributed to it."""
        total = self.attributed + self.mutants
        return total > 0 and self.killed + self.mutants_killed < WEAK_BELOW * total

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"id": self.req, "attributed": self.attributed, "killed": self.killed,
                "weak": self.weak, "survivors": list(self.survivors),
                "mutants": self.mutants, "mutants_killed": self.mutants_killed,
                "mutant_survivors": list(self.mutant_survivors)}


@dataclasses.dataclass(frozen=True, slots=True)
class TeethRecord:
    """The last fault run: when, how long, and one row per ID that a fault names."""

    at: str | None  # of the fault run; None: no faults.json
    wall_seconds: float | None
    faults: int
    killed: int
    rows: tuple[Tooth, ...]
    #: Module records counted (their module unchanged since they were measured).
    modules: tuple[str, ...] = ()
    #: Module records whose module changed since: (module, its IDs), never counted.
    stale: tuple[tuple[str, tuple[str, ...]], ...] = ()

    @property
    def weak(self) -> tuple[str, ...]:
        """The weak IDs, sorted."""
        return tuple(row.req for row in self.rows if row.weak)

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"at": self.at, "wall_seconds": self.wall_seconds, "faults": self.faults,
                "killed": self.killed, "weak_below": WEAK_BELOW, "weak": list(self.weak),
                "modules": list(self.modules),
                "stale": [{"module": module, "ids": list(ids)} for module, ids in self.stale],
                "requirements": [row.as_json() for row in self.rows]}


def _mutant_rows(records: list[dict[str, Any]]) -> dict[str, tuple[int, int, list[str]]]:
    """ID -> (attributed, killed by its own tests, survivors) over fresh module records."""
    rows: dict[str, tuple[int, int, list[str]]] = {}
    for record in records:
        for mutant in record["mutants"]:
            if mutant["justification"] is not None:
                continue  # equivalent: no test could tell it apart (its reason says why)
            for req in mutant["ids"]:
                total, killed, survivors = rows.get(req, (0, 0, []))
                if req in mutant["killed_for"]:
                    killed += 1
                else:
                    survivors = [*survivors, f"{record['module']}:{mutant['line']} "
                                 f"{mutant['mutation']} ({mutant['verdicts'].get(req, '?')})"]
                rows[req] = (total + 1, killed, survivors)
    return rows


def _ids(record: dict[str, Any]) -> set[str]:
    return {req for mutant in record["mutants"] for req in mutant["ids"]}


def teeth(document: dict[str, Any] | None,
          records: list[dict[str, Any]] | None = None,
          stale: list[dict[str, Any]] | None = None,
          known: Collection[str] | None = None) -> TeethRecord:
    """The per-ID rows of a checked faults.json document and of fresh module records; with
    ``known`` (the IDs of the requirements file in use), module records of none of them are
    left out, as are rows of other IDs."""
    faults = [] if document is None else document["faults"]
    if known is not None:
        records = [r for r in records or [] if _ids(r) & set(known)]
        stale = [r for r in stale or [] if _ids(r) & set(known)]
    mutants = _mutant_rows(records or [])
    every = {req for fault in faults for req in fault["ids"]} | set(mutants)
    reqs = sorted(every if known is None else every & set(known))
    rows = []
    for req in reqs:
        mine = [fault for fault in faults if req in fault["ids"]]
        killed = [fault for fault in mine
                  if fault["status"] == "killed" and req in fault["killer_reqs"]]
        attributed, mutants_killed, survivors = mutants.get(req, (0, 0, []))
        rows.append(Tooth(req, len(mine), len(killed), tuple(sorted(
            fault["name"] for fault in mine if fault not in killed)),
            attributed, mutants_killed, tuple(survivors)))
    return TeethRecord(
        None if document is None else document["at"],
        None if document is None else document["wall_seconds"], len(faults),
        sum(fault["status"] == "killed" for fault in faults), tuple(rows),
        tuple(sorted(record["module"] for record in records or [])),
        tuple(sorted((record["module"], tuple(sorted(_ids(record))))
                     for record in stale or [])))


def read_module_records(folder: Path = MODULE_RECORDS, root: Path = Path(".")
                        ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The checked module records under ``folder``: (fresh, stale). A record is stale when
    its module's bytes under ``root`` no longer hash to its ``sha256`` (or it is gone)."""
    fresh: list[dict[str, Any]] = []
    stale: list[dict[str, Any]] = []
    if not folder.is_dir():
        return fresh, stale
    for path in sorted(folder.glob("*.json")):
        document = load_json(path, "module mutation record")
        check(document, "mutation-module", f"module mutation record {path}")
        assert isinstance(document, dict)  # the schema says it is an object
        module = root / document["module"]
        current = module.is_file() and hashlib.sha256(
            module.read_bytes()).hexdigest() == document["sha256"]
        (fresh if current else stale).append(document)
    return fresh, stale


def read_teeth(results_dir: Path, known: Collection[str] | None = None,
               modules: Path = MODULE_RECORDS, root: Path = Path(".")) -> TeethRecord | None:
    """faults.json of the last fault run and the module records, checked, if present."""
    path = results_dir / FAULTS_RECORD
    document: dict[str, Any] | None = None
    if os.path.lexists(path):  # present but not a plain file: refused when read
        loaded = load_json(path, "faults record")
        check(loaded, "faults", f"faults record {path}")
        assert isinstance(loaded, dict)  # the schema says it is an object
        document = loaded
    fresh, stale = read_module_records(modules, root)
    found = teeth(document, fresh, stale, known)
    if document is None and not found.modules and not found.stale:
        return None
    return found
