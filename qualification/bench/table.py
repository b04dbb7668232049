"""The bench's one table: figure, ours, baseline, ratio, goal, met.

Every goal is a ratio to a baseline measured in the same run (absolute
figures are for orientation only), so a slower or faster machine moves both
sides together. A row without a goal is informational (the micro-benchmarks).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from typing import Any

#: How each goal compares the ratio with its bound.
_OPS = {"<=": lambda ratio, bound: ratio <= bound, ">=": lambda ratio, bound: ratio >= bound}


@dataclasses.dataclass(frozen=True, slots=True)
class Goal:
    """``ratio <= bound`` (or ``>=``), as the issue's table states it."""

    op: str
    bound: float

    def met(self, ratio: float) -> bool:
        """Does ``ratio`` meet the goal? (NaN never does.)"""
        return not math.isnan(ratio) and _OPS[self.op](ratio, self.bound)

    def __str__(self) -> str:
        return f"{'≤' if self.op == '<=' else '≥'} {self.bound:g}"


def at_most(bound: float) -> Goal:
    """The goal ``ratio <= bound``."""
    return Goal("<=", bound)


@dataclasses.dataclass(frozen=True, slots=True)
class Row:
    """One line of the table: our figure, its baseline, their ratio and the goal."""

    section: str
    figure: str
    ours: float
    baseline: float
    unit: str
    goal: Goal | None = None
    #: Overrides ours / baseline (e.g. a loss count, whose goal is zero lost).
    ratio_value: float | None = None
    note: str = ""
    detail: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """ours / baseline unless the row says otherwise."""
        if self.ratio_value is not None:
            return self.ratio_value
        return self.ours / self.baseline if self.baseline else math.nan

    @property
    def met(self) -> bool | None:
        """None for an informational row."""
        return None if self.goal is None else self.goal.met(self.ratio)

    def as_json(self) -> dict[str, Any]:
        """The row as ``bench.json`` holds it."""
        return {"section": self.section, "figure": self.figure, "ours": _finite(self.ours),
                "baseline": _finite(self.baseline), "unit": self.unit,
                "ratio": _finite(self.ratio),
                "goal": None if self.goal is None else {"op": self.goal.op,
                                                        "bound": self.goal.bound,
                                                        "text": str(self.goal)},
                "met": self.met, "note": self.note, "detail": self.detail}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def median(values: Sequence[float]) -> float:
    """The median (NaN for no values)."""
    return statistics.median(values) if values else math.nan


def percentile(values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of ``values`` (``fraction`` 0..1; NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def _amount(value: float, unit: str) -> str:
    if math.isnan(value):
        return "—"
    if unit in ("", "count"):
        return f"{value:,.0f}"
    if value >= 100:
        return f"{value:,.0f} {unit}"
    return f"{value:.3g} {unit}"


def render(rows: Sequence[Row]) -> str:
    """The table as text: one line per row, sections in order, the misses counted below."""
    header = ("figure", "ours", "baseline", "ratio", "goal", "met")
    lines = [header]
    for row in rows:
        met = "—" if row.met is None else ("yes" if row.met else "NO")
        ratio = "—" if math.isnan(row.ratio) else f"{row.ratio:.3g}"
        lines.append((f"[{row.section}] {row.figure}", _amount(row.ours, row.unit),
                      _amount(row.baseline, row.unit), ratio,
                      "—" if row.goal is None else str(row.goal), met))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for index, line in enumerate(lines):
        out.append("  ".join(cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
                             for i, cell in enumerate(line)).rstrip())
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    goals = [row for row in rows if row.met is not None]
    missed = [row for row in goals if not row.met]
    out.append(f"{len(goals) - len(missed)} of {len(goals)} goals met"
               + (": missed " + "; ".join(row.figure for row in missed) if missed else ""))
    notes = [f"  {row.figure}: {row.note}" for row in rows if row.note]
    if notes:
        out += ["notes:", *notes]
    return "\n".join(out)
