"""QR-06: teeth per requirement — the deliberate faults by ID, a kill counted for an ID only
when the test that killed the fault names that ID, and an ID under 80 % marked weak."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.errors import ReportInvalid
from labfy_ref.report import regenerate
from labfy_ref.report.teeth import FAULTS_RECORD, WEAK_BELOW, read_teeth, teeth
from qualification.mutants.__main__ import write_faults
from qualification.report.projects import REQUIREMENTS, cli, valid_status


def _fault(name: str, ids: list[str], status: str, reqs: list[str]) -> dict[str, Any]:
    return {"mutant": name, "ids": ids, "served": True, "status": status,
            "killed_by": f"t.py::test_{name}" if status == "killed" else None,
            "killer_reqs": reqs}


def _report(tmp_path: Path, faults: list[dict[str, Any]],
            passing: tuple[str, ...] = ("AA-01",)) -> Path:
    """A report of one passing test naming ``passing`` and of the fault run ``faults``."""
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    (report / "results" / "qualify.json").write_text(json.dumps({
        "name": "qualify", "generated_at": "2026-12-04T00:00:00+00:00",
        "tests": [{"nodeid": "t.py::test_one", "outcome": "passed", "reqs": list(passing),
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
    assert "| AA-01 | 3/4 | 0/0 | weak | d |" in markdown
    assert "| AA-02 | 1/1 | 0/0 | ok | — |" in markdown
    html = (report / "status.html").read_text("utf-8")
    assert 'id="teeth-h"' in html and "Teeth per requirement" in html


@pytest.mark.req("QR-06")
def test_a_weak_ids_reason_counts_its_own_row_not_the_first(tmp_path: Path) -> None:
    """AA-01 (first in the table) has teeth; AA-02 after it is weak: its reason is its own."""
    report = _report(tmp_path, [_fault("a", ["AA-01"], "killed", ["AA-01"]),
                                _fault("b", ["AA-02"], "killed", ["AA-02"]),
                                _fault("c", ["AA-02"], "survived", [])], ("AA-01", "AA-02"))
    lines = {line["id"]: line for line in valid_status(report / "status.json")["requirements"]}
    assert (lines["AA-01"]["status"], lines["AA-01"].get("weak", False)) == ("CURRENT", False)
    assert (lines["AA-02"]["status"], lines["AA-02"]["weak"]) == ("CURRENT", True)
    assert lines["AA-02"]["reason"] == ("weak: its own tests kill 1 of the 2 faults and "
                                        "mutants attributed to it (not: c)")


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
    (beside the other gates) exits 1 and names it, and passes once the fault is killed by
    AA-01's own test."""
    report = _report(tmp_path, [])
    before = tmp_path / "before.json"
    before.write_bytes((report / "status.json").read_bytes())
    write_faults(report, [_fault("a", ["AA-01"], "killed", ["AA-01"]),
                          _fault("b", ["AA-01", "AA-02"], "killed", ["AA-02"])], 3.0)
    requirements = str(tmp_path / "requirements.toml")
    done = cli("report", "--results", str(report), "--requirements", requirements,
               "--compare", str(before), "--fail-on", "weak,regression,fail,not-run")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert "changed: requirement AA-01 CURRENT -> CURRENT (weak)" in lines
    assert lines[-1] == ("gate --fail-on fail,not-run,regression,weak: FAILED: "
                         "not-run: SECURITY_SUITES; weak: AA-01"), "weak beside the other gates"
    status = valid_status(report / "status.json")
    line = next(line for line in status["requirements"] if line["id"] == "AA-01")
    assert (line["status"], line["weak"]) == ("CURRENT", True)
    assert line["reason"] == ("weak: its own tests kill 1 of the 2 faults and mutants "
                              "attributed to it (not: b)")
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


def _module(root: Path, name: str, body: str, mutants: list[dict[str, Any]]) -> Path:
    """A module under ``root`` and its attributed mutation record beside it."""
    module = root / "pkg" / f"{name}.py"
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text(body, "utf-8")
    record = {"schema": "labfy.mutation-module.v1", "module": f"pkg/{name}.py",
              "sha256": hashlib.sha256(body.encode()).hexdigest(), "at": "2026-12-05T00:00:00Z",
              "wall_seconds": 9.5, "scope": "all 3 mutants in the declared code",
              "in_scope": len(mutants), "baseline": {}, "mutants": mutants}
    folder = root / "records"
    folder.mkdir(exist_ok=True)
    (folder / f"pkg.{name}.json").write_text(json.dumps(record), "utf-8")
    return module


def _mutant(line: int, ids: list[str], killed_for: list[str],
            justification: str | None = None) -> dict[str, Any]:
    return {"line": line, "operator": "core/ReplaceComparisonOperator_Eq_NotEq",
            "occurrence": 0, "mutation": "`a == b` -> `a != b`", "ids": ids,
            "killed_for": killed_for,
            "verdicts": {req: ("killed" if req in killed_for else "survived") for req in ids},
            "justification": justification}


@pytest.mark.req("QR-06")
def test_operator_mutants_count_per_id_only_fresh_and_never_equivalent(tmp_path: Path) -> None:
    """AA-01's declared code has three mutants: one killed by its own tests, one killed only
    by AA-02's, one equivalent (not counted): 1 of 2 is weak. A record whose module changed
    since it was measured is stale: listed with its IDs, never counted."""
    _module(tmp_path, "fresh", "x = 1\n", [
        _mutant(1, ["AA-01"], ["AA-01"]), _mutant(1, ["AA-01", "AA-02"], ["AA-02"]),
        _mutant(1, ["AA-01"], [], "equivalent: the value is never read")])
    changed = _module(tmp_path, "changed", "y = 2\n", [_mutant(1, ["AA-03"], [])])
    changed.write_text("y = 3\n", "utf-8")
    record = read_teeth(tmp_path / "no-faults-here", {"AA-01", "AA-02", "AA-03"},
                        tmp_path / "records", tmp_path)
    assert record is not None and record.at is None and record.faults == 0
    rows = {row.req: row for row in record.rows}
    assert set(rows) == {"AA-01", "AA-02"}, "the stale AA-03 record is not counted"
    assert (rows["AA-01"].mutants, rows["AA-01"].mutants_killed, rows["AA-01"].weak) == \
        (2, 1, True)
    assert rows["AA-01"].mutant_survivors == (
        "pkg/fresh.py:1 `a == b` -> `a != b` (survived)",)
    assert (rows["AA-02"].mutants, rows["AA-02"].mutants_killed, rows["AA-02"].weak) == \
        (1, 1, False)
    assert record.modules == ("pkg/fresh.py",)
    assert record.stale == (("pkg/changed.py", ("AA-03",)),)
    assert read_teeth(tmp_path / "x", {"ZZ-01"}, tmp_path / "records", tmp_path) is None, \
        "records of no ID of the requirements in use are left out"


@pytest.mark.req("QR-06")
def test_faults_and_mutants_add_up_to_one_share_per_id(tmp_path: Path) -> None:
    """Four faults all killed and one mutant survived: 4 of 5 (80 %) is not weak; a second
    surviving mutant makes it 4 of 6, weak."""
    faults = {"schema": "labfy.faults.v1", "at": "t", "wall_seconds": 1.0, "faults": [
        {"name": f"f{n}", "ids": ["AA-01"], "served": False, "status": "killed",
         "killed_by": "t.py::test", "killer_reqs": ["AA-01"]} for n in range(4)]}
    one = teeth(faults, [{"module": "m.py", "mutants": [_mutant(1, ["AA-01"], [])]}])
    assert (one.rows[0].attributed, one.rows[0].mutants, one.rows[0].weak) == (4, 1, False)
    two = teeth(faults, [{"module": "m.py", "mutants": [_mutant(1, ["AA-01"], []),
                                                         _mutant(2, ["AA-01"], [])]}])
    assert two.weak == ("AA-01",)


@pytest.mark.req("QR-06")
def test_a_weak_reason_adds_faults_and_mutants(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """AA-01 has two faults (one killed by its own test) and three operator mutants (one
    killed by its own tests): its reason counts 2 of the 5, naming every survivor."""
    _module(tmp_path, "m", "x = 1\n", [
        _mutant(1, ["AA-01"], ["AA-01"]), _mutant(1, ["AA-01"], []), _mutant(1, ["AA-01"], [])])
    (tmp_path / "qualification" / "mutation").mkdir(parents=True)
    (tmp_path / "records").rename(tmp_path / "qualification" / "mutation" / "modules")
    monkeypatch.chdir(tmp_path)  # the report reads the records beside the tree it runs in
    report = _report(tmp_path, [_fault("a", ["AA-01"], "killed", ["AA-01"]),
                                _fault("b", ["AA-01"], "survived", [])])
    line = next(line for line in valid_status(report / "status.json")["requirements"]
                if line["id"] == "AA-01")
    survivor = "pkg/m.py:1 `a == b` -> `a != b` (survived)"
    assert (line["status"], line["weak"]) == ("CURRENT", True)
    assert line["reason"] == ("weak: its own tests kill 2 of the 5 faults and mutants "
                              f"attributed to it (not: b; {survivor}; {survivor})")


@pytest.mark.req("QR-06", "QR-05")
def test_a_malformed_module_record_is_refused(tmp_path: Path) -> None:
    module = _module(tmp_path, "m", "z = 0\n", [_mutant(1, ["AA-01"], ["AA-01"])])
    record = tmp_path / "records" / "pkg.m.json"
    document = json.loads(record.read_text("utf-8"))
    document["mutants"][0]["ids"] = []
    record.write_text(json.dumps(document), "utf-8")
    with pytest.raises(ReportInvalid, match="malformed module mutation record"):
        read_teeth(tmp_path / "x", None, tmp_path / "records", tmp_path)
    assert module.is_file()


@pytest.mark.req("QR-06")
def test_the_teeth_table_lists_eight_survivors_and_counts_the_rest(tmp_path: Path) -> None:
    report = _report(tmp_path, [_fault(f"s{n:02}", ["AA-01"], "survived", [])
                                for n in range(11)])
    row = next(line for line in (report / "STATUS.md").read_text("utf-8").splitlines()
               if line.startswith("| AA-01 | 0/11 |"))
    assert "s00; s01; s02; s03; s04; s05; s06; s07 … and 3 more" in row, row
    assert "s08" not in row, "status.json has them all; the table shows the first eight"
    status = valid_status(report / "status.json")
    assert len(next(r for r in status["teeth"]["requirements"]
                    if r["id"] == "AA-01")["survivors"]) == 11
