"""Teeth per requirement (QR-06): the deliberate faults of ``qualification/mutants`` by ID.

``python -m qualification.mutants --record DIR`` writes ``DIR/faults.json``
(``faults.schema.json``): each fault with the IDs it breaks, whether it was killed,
and the requirement IDs of the test that killed it. A fault counts as killed *for
an ID* only when that test names the ID: a fault of two IDs killed by a test of one
of them has teeth for that one only. An ID whose own tests kill less than
:data:`WEAK_BELOW` of the faults attributed to it is *weak*.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from labfy_ref.report.validate import check, load_json

FAULTS_RECORD = "faults.json"
#: Below this share of its faults killed by its own tests, an ID is weak (QR-06).
WEAK_BELOW = 0.8


@dataclasses.dataclass(frozen=True, slots=True)
class Tooth:
    """One ID: the faults attributed to it, those its own tests killed, the others."""

    req: str
    attributed: int
    killed: int
    survivors: tuple[str, ...]

    @property
    def weak(self) -> bool:
        """Its own tests kill less than :data:`WEAK_BELOW` of its faults."""
        return self.attributed > 0 and self.killed < WEAK_BELOW * self.attributed

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"id": self.req, "attributed": self.attributed, "killed": self.killed,
                "weak": self.weak, "survivors": list(self.survivors)}


@dataclasses.dataclass(frozen=True, slots=True)
class TeethRecord:
    """The last fault run: when, how long, and one row per ID that a fault names."""

    at: str
    wall_seconds: float
    faults: int
    killed: int
    rows: tuple[Tooth, ...]

    @property
    def weak(self) -> tuple[str, ...]:
        """The weak IDs, sorted."""
        return tuple(row.req for row in self.rows if row.weak)

    def as_json(self) -> dict[str, Any]:
        """JSON form in status.json."""
        return {"at": self.at, "wall_seconds": self.wall_seconds, "faults": self.faults,
                "killed": self.killed, "weak_below": WEAK_BELOW, "weak": list(self.weak),
                "requirements": [row.as_json() for row in self.rows]}


def teeth(document: dict[str, Any]) -> TeethRecord:
    """The per-ID rows of a checked faults.json document."""
    faults = document["faults"]
    reqs = sorted({req for fault in faults for req in fault["ids"]})
    rows = []
    for req in reqs:
        mine = [fault for fault in faults if req in fault["ids"]]
        killed = [fault for fault in mine
                  if fault["status"] == "killed" and req in fault["killer_reqs"]]
        rows.append(Tooth(req, len(mine), len(killed), tuple(sorted(
            fault["name"] for fault in mine if fault not in killed))))
    return TeethRecord(document["at"], document["wall_seconds"], len(faults),
                       sum(fault["status"] == "killed" for fault in faults), tuple(rows))


def read_teeth(results_dir: Path) -> TeethRecord | None:
    """faults.json of the last fault run, checked against its schema, if present."""
    path = results_dir / FAULTS_RECORD
    if not os.path.lexists(path):  # present but not a plain file: refused when read
        return None
    document = load_json(path, "faults record")
    check(document, "faults", f"faults record {path}")
    assert isinstance(document, dict)  # the schema says it is an object
    return teeth(document)
