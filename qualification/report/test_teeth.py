"""QR-06: teeth per requirement — the deliberate faults by ID, a kill counted for an ID only
when the test that killed the fault names that ID, and an ID under 80 % marked weak."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.report import regenerate
from labfy_ref.report.teeth import FAULTS_RECORD, WEAK_BELOW
from qualification.mutants.__main__ import write_faults
from qualification.report.projects import REQUIREMENTS, cli, valid_status


def _fault(name: str, ids: list[str], status: str, reqs: list[str]) -> dict[str, Any]:
    return {"mutant": name, "ids": ids, "served": True, "status": status,
            "killed_by": f"t.py::test_{name}" if status == "killed" else None,
            "killer_reqs": reqs}


def _report(tmp_path: Path, faults: list[dict[str, Any]]) -> Path:
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    (report / "results" / "qualify.json").write_text(json.dumps({
        "name": "qualify", "generated_at": "2026-12-04T00:00:00+00:00",
        "tests": [{"nodeid": "t.py::test_one", "outcome": "passed", "reqs": ["AA-01"],
                   "reason": None, "duration": 0.01}]}))
    write_faults(report, faults, 12.5)
    (tmp_path / "requirements.toml").write_text(REQUIREMENTS)
    regenerate(report, tmp_path / "requirements.toml", ("md", "json", "html"))
    return report


@pytest.mark.req("QR-06")
def test_a_kill_counts_for_an_id_only_through_a_test_that_names_it(tmp_path: Path) -> None:
    """AA-01: four faults, all killed, but one by a test of AA-02 only: 3 of 4 (75 %) is
    weak. AA-02: its one fault killed by its own test. AA-03: its fault survived."""
    report = _report(tmp_path, [
        _fault("a", ["AA-01"], "killed", ["AA-01"]),
        _fault("b", ["AA-01"], "killed", ["AA-01", "AA-03"]),
        _fault("c", ["AA-01"], "killed", ["AA-01"]),
        _fault("d", ["AA-01", "AA-02"], "killed", ["AA-02"]),
        _fault("e", ["AA-03"], "survived", []),
    ])
    status = valid_status(report / "status.json")
    teeth = status["teeth"]
    assert (teeth["faults"], teeth["killed"], teeth["weak_below"]) == (5, 4, WEAK_BELOW)
    rows = {row["id"]: row for row in teeth["requirements"]}
    assert {key: (row["attributed"], row["killed"], row["weak"], row["survivors"])
            for key, row in rows.items()} == {
        "AA-01": (4, 3, True, ["d"]), "AA-02": (1, 1, False, []), "AA-03": (1, 0, True, ["e"])}
    assert teeth["weak"] == ["AA-01", "AA-03"]
    markdown = (report / "STATUS.md").read_text("utf-8")
    assert "## Teeth per requirement" in markdown
    assert "| AA-01 | 4 | 3 | weak | d |" in markdown
    assert "| AA-02 | 1 | 1 | ok | — |" in markdown
    html = (report / "status.html").read_text("utf-8")
    assert 'id="teeth-h"' in html and "Teeth per requirement" in html


@pytest.mark.req("QR-06")
def test_every_id_at_or_over_the_bound_is_not_weak(tmp_path: Path) -> None:
    """Four of five (80 %) is not weak: the bound is inclusive."""
    faults = [_fault(f"f{n}", ["AA-01"], "killed", ["AA-01"]) for n in range(4)]
    report = _report(tmp_path, [*faults, _fault("f4", ["AA-01"], "survived", [])])
    (row,) = valid_status(report / "status.json")["teeth"]["requirements"]
    assert (row["attributed"], row["killed"], row["weak"]) == (5, 4, False)


@pytest.mark.req("QR-06", "QR-05")
@pytest.mark.parametrize("broken", [
    {"schema": "labfy.faults.v1", "at": "x", "wall_seconds": 1, "faults": [
        {"name": "a", "ids": [], "served": True, "status": "killed", "killed_by": None,
         "killer_reqs": []}]},
    {"schema": "labfy.faults.v1", "at": "x", "wall_seconds": 1, "faults": [
        {"name": "a", "ids": ["AA-01"], "served": True, "status": "exploded",
         "killed_by": None, "killer_reqs": []}]},
    {"schema": "labfy.faults.v0", "at": "x", "wall_seconds": 1, "faults": []},
])
def test_a_malformed_faults_record_is_one_line_and_exit_2(tmp_path: Path,
                                                          broken: dict[str, Any]) -> None:
    report = _report(tmp_path, [])
    (report / FAULTS_RECORD).write_text(json.dumps(broken), "utf-8")
    done = cli("report", "--results", str(report), "--requirements",
               str(tmp_path / "requirements.toml"))
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("REPORT_INVALID: malformed faults record ")
    assert done.stderr.count("\n") == 1


@pytest.mark.req("QR-06", "QR-05")
def test_a_weak_current_id_reads_current_weak_changes_and_trips_fail_on_weak(
        tmp_path: Path) -> None:
    """AA-01 passes its test but its own tests kill 1 of its 2 faults: status.json keeps
    ``CURRENT`` with ``"weak": true``, STATUS.md says ``CURRENT (weak)``; compared with the
    report from before the fault run it is a change, not a regression; ``--fail-on weak``
    exits 1 and names it, and passes once the fault is killed by AA-01's own test."""
    report = _report(tmp_path, [])
    before = tmp_path / "before.json"
    before.write_bytes((report / "status.json").read_bytes())
    write_faults(report, [_fault("a", ["AA-01"], "killed", ["AA-01"]),
                          _fault("b", ["AA-01", "AA-02"], "killed", ["AA-02"])], 3.0)
    requirements = str(tmp_path / "requirements.toml")
    done = cli("report", "--results", str(report), "--requirements", requirements,
               "--compare", str(before), "--fail-on", "weak,regression")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "changed: requirement AA-01 CURRENT -> CURRENT (weak)" in lines
    assert lines[-1] == "gate --fail-on regression,weak: FAILED: weak: AA-01"
    status = valid_status(report / "status.json")
    line = next(line for line in status["requirements"] if line["id"] == "AA-01")
    assert (line["status"], line["weak"]) == ("CURRENT", True)
    assert line["reason"] == "weak: its own tests kill 1 of the 2 faults naming it (not: b)"
    assert status["summary"]["CURRENT"] == 1, "weak is still CURRENT"
    assert "| AA-01 | CURRENT (weak) |" in (report / "STATUS.md").read_text("utf-8")
    assert status["changes"]["items"] == [{"kind": "requirement", "id": "AA-01",
                                          "old": "CURRENT", "new": "CURRENT (weak)",
                                          "regression": False}]
    write_faults(report, [_fault("a", ["AA-01"], "killed", ["AA-01"]),
                          _fault("b", ["AA-01", "AA-02"], "killed", ["AA-01", "AA-02"])], 3.0)
    fixed = cli("report", "--results", str(report), "--requirements", requirements,
                "--fail-on", "weak")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "weak" not in next(line for line in valid_status(report / "status.json")[
        "requirements"] if line["id"] == "AA-01")
