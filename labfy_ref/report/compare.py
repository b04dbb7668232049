"""What changed since an earlier status.json, and the gate a pipeline sets on it (QR-05).

``labfy-ref report --compare OLD --fail-on regression,fail,not-run,weak``: a
*regression* is a requirement that was ``CURRENT`` and is not any more, or a
stage that passed (``PASS`` or ``PASS_LOCAL_SPECIMEN``) and does not now. An ID
or stage that disappeared counts as not passing: deleting a requirement must not
open a gate silently. A requirement that became ``CURRENT (weak)`` (QR-06) is a
change, not a regression; ``--fail-on weak`` fails on every weak ID.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from labfy_ref.errors import ConfigRefused
from labfy_ref.report.model import Change, Changes, Line, Status, StatusReport, shown
from labfy_ref.report.validate import read_status

#: The statuses a stage passes with.
PASSING = frozenset({Status.PASS.value, Status.PASS_LOCAL_SPECIMEN.value})
#: What ``--fail-on`` accepts.
GATES = ("regression", "fail", "not-run", "weak")
REQUIREMENT, STAGE = "requirement", "stage"


@dataclasses.dataclass(frozen=True, slots=True)
class OldReport:
    """An earlier status.json, read and validated: shown status of every line by kind."""

    since: str
    source: str
    version: int
    shown: Mapping[str, Mapping[str, tuple[str, str]]]  # kind -> id -> (status, shown)

    @classmethod
    def read(cls, path: Path) -> OldReport:
        """Read any status.json version this labfy-ref knows; REPORT_INVALID otherwise."""
        version, document = read_status(path)

        def lines(key: str) -> dict[str, tuple[str, str]]:
            return {line["id"]: (line["status"], shown(line["status"], line.get("ran_on", ()),
                                                       weak=line.get("weak", False)))
                    for line in document[key]}

        return cls(since=document["generated_at"], source=str(path), version=version,
                   shown={REQUIREMENT: lines("requirements"), STAGE: lines("stages")})


def _regression(kind: str, old: str | None, new: str | None) -> bool:
    if kind == REQUIREMENT:
        return old == Status.CURRENT.value and new != Status.CURRENT.value
    return old in PASSING and new not in PASSING


def compare(old: OldReport, requirements: Sequence[Line], stages: Sequence[Line]) -> Changes:
    """Every line whose shown status changed since ``old``, stages first, in report order."""
    items: list[Change] = []
    for kind, lines in ((STAGE, stages), (REQUIREMENT, requirements)):
        before = old.shown[kind]
        for line in lines:
            was = before.get(line.name)
            if was is None or was[1] != line.shown_status:
                items.append(Change(kind, line.name, was[1] if was else None, line.shown_status,
                                    _regression(kind, was[0] if was else None,
                                                line.status.value)))
        now = {line.name for line in lines}
        items.extend(Change(kind, name, shown, None, _regression(kind, status, None))
                     for name, (status, shown) in before.items() if name not in now)
    return Changes(old.since, old.source, old.version, tuple(items))


def parse_gates(text: str) -> frozenset[str]:
    """``--fail-on``'s comma list; CONFIG_INVALID for an unknown word or an empty list."""
    chosen = frozenset(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(chosen - set(GATES))
    if not chosen or unknown:
        raise ConfigRefused(f"--fail-on takes a comma list of {', '.join(GATES)}"
                            + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    return chosen


def tripped(report: StatusReport, gates: frozenset[str]) -> list[str]:
    """What each chosen gate found, one phrase each; empty when the report passes them all."""
    lines = (*report.stages, *report.requirements)
    found = []
    if "regression" in gates and report.changes is not None and report.changes.regressions:
        found.append("regression: " + ", ".join(c.id for c in report.changes.regressions))
    for gate, status in (("fail", Status.FAIL), ("not-run", Status.NOT_RUN)):
        named = [line.name for line in lines if line.status is status]
        if gate in gates and named:
            found.append(f"{gate}: " + ", ".join(named))
    weak = [line.name for line in report.requirements if line.weak]
    if "weak" in gates and weak:
        found.append("weak: " + ", ".join(weak))
    return found
