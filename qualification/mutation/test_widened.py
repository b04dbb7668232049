"""QR-06: the attributed mutation run -- which mutants of a module it runs, how it records
them, and that every committed record is well-formed and checked against its module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from labfy_ref.report.attribution import CodeMap
from labfy_ref.report.model import Requirements, Stage
from labfy_ref.report.teeth import read_module_records
from labfy_ref.report.validate import check
from qualification.mutation.scope import REPO
from qualification.mutation.widened import (
    RECORDS,
    Spec,
    applied,
    build_record,
    module_sha256,
    scope_of,
    slug,
    stale_modules,
    without_survivors,
)

SOURCE = ("from __future__ import annotations\n\n\ndef a(x: int) -> int:\n    return x + 1\n"
          "\n\ndef b(y):\n    return y * 2\n")


def _requirements(code: dict[str, list[str]]) -> Requirements:
    titles = dict.fromkeys(code, "t")
    return Requirements(titles, (Stage("S", "s"),), CodeMap.from_toml(code, {}, titles))


def _spec(n: int, line: int, column: int = 11, end: tuple[int, int] | None = None) -> Spec:
    return Spec(f"job{n}", "core/NumberReplacer", n, line, column,
                (line, column + 1) if end is None else end)


@pytest.mark.req("QR-06")
def test_only_mutants_of_declared_code_run_each_with_the_ids_it_is_attributed_to(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "m.py"
    module.write_text(SOURCE, "utf-8")
    monkeypatch.setattr("qualification.mutation.widened.REPO", tmp_path)
    requirements = _requirements({"AA-01": ["m.py:a"], "AA-02": ["m.py"]})
    specs = [_spec(0, 5), _spec(1, 9), _spec(2, 4, 9, (4, 12))]  # the last: `int` of `x: int`
    chosen, in_scope = scope_of("m.py", SOURCE, specs, 10, requirements)
    assert in_scope == 2, "the mutant inside an annotation is never run"
    assert sorted((spec.line, ids) for spec, ids in chosen) == [
        (5, ("AA-01", "AA-02")), (9, ("AA-02",))]
    only = _requirements({"AA-01": ["m.py:a"]})
    assert [spec.line for spec, _ in scope_of("m.py", SOURCE, specs, 10, only)[0]] == [5]


@pytest.mark.req("QR-06")
def test_the_sample_is_fixed_by_the_source_not_by_chance(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "m.py").write_text(SOURCE, "utf-8")
    monkeypatch.setattr("qualification.mutation.widened.REPO", tmp_path)
    requirements = _requirements({"AA-01": ["m.py"]})
    specs = [_spec(n, 5 if n % 2 else 9, n) for n in range(12)]
    first, total = scope_of("m.py", SOURCE, specs, 5, requirements)
    again, _ = scope_of("m.py", SOURCE, list(reversed(specs)), 5, requirements)
    assert total == 12 and len(first) == 5
    assert [s.job_id for s, _ in first] == [s.job_id for s, _ in again]


@pytest.mark.req("QR-06")
def test_a_record_counts_a_kill_for_an_id_only_through_its_own_tests() -> None:
    progress = {"key": ["k", 24], "seconds": 12.0,
                "baseline": {"AA-01": {"verdict": "survived", "seconds": 1.5}},
                "mutants": {
                    "j1": {"line": 2, "operator": "core/NumberReplacer", "occurrence": 0,
                           "ids": ["AA-01", "AA-02"], "mutation": "`x + 1` -> `x + 2`",
                           "verdicts": {"AA-01": "survived", "AA-02": "killed"}},
                    "j2": {"line": 6, "operator": "core/NumberReplacer", "occurrence": 1,
                           "ids": ["AA-01"], "mutation": "`y * 2` -> `y * 3`",
                           "verdicts": {"AA-01": "timeout"}},
                    "j3": {"line": 6, "operator": "core/X", "occurrence": 0, "ids": ["AA-01"],
                           "verdicts": {"AA-01": "not applied"}}}}
    record = build_record("labfy_ref/m.py", "0" * 64, progress, 30, 24)
    check(record, "mutation-module", "test")
    assert [(m["line"], m["killed_for"]) for m in record["mutants"]] == [
        (2, ["AA-02"]), (6, ["AA-01"])], "a hang counts as a kill; an unapplied one is dropped"
    assert record["scope"].startswith("a fixed sample of 24 of the 30 mutants")
    assert json.loads(json.dumps(record)) == record


@pytest.mark.req("QR-06")
def test_a_record_and_a_fault_run_can_name_every_id_of_the_requirements() -> None:
    # an ID with a suffix (QR-04-MAP) once made its modules' records fail their schema
    ids = sorted(Requirements.load(REPO / "qualification" / "requirements.toml").titles)
    chunks = [ids[start:start + 16] for start in range(0, len(ids), 16)]
    progress = {"key": ["k", 12], "seconds": 1.0,
                "baseline": {req: {"verdict": "survived", "seconds": 1.0} for req in ids},
                "mutants": {f"j{n}": {"line": n + 1, "operator": "core/NumberReplacer",
                                      "occurrence": 0, "ids": chunk, "mutation": "`1` -> `2`",
                                      "verdicts": dict.fromkeys(chunk, "killed")}
                            for n, chunk in enumerate(chunks)}}
    check(build_record("labfy_ref/m.py", "0" * 64, progress, 1, 12), "mutation-module", "test")
    check({"schema": "labfy.faults.v1", "at": "2026-01-01T00:00:00+00:00", "wall_seconds": 1.0,
           "faults": [{"name": f"fault-{n}", "ids": chunk, "served": False, "status": "killed",
                       "killed_by": "test_x", "killer_reqs": chunk}
                      for n, chunk in enumerate(chunks)]}, "faults", "test")


@pytest.mark.req("QR-06", "QR-05")
def test_every_committed_record_is_well_formed_and_names_a_module_with_declared_code() -> None:
    """What CI checks of the widened run (it is never rerun in CI): every record validates,
    names a module some ID declares code in, and is either current or reported stale."""
    fresh, stale = read_module_records(RECORDS, REPO)
    declared = set(Requirements.load(REPO / "qualification" / "requirements.toml")
                   .code.modules())
    for record in [*fresh, *stale]:
        assert record["module"] in declared, record["module"]
        assert (RECORDS / f"{slug(record['module'])}.json").is_file()
    assert sorted(r["module"] for r in stale) == stale_modules(RECORDS, REPO)
    for record in fresh:
        assert module_sha256(record["module"]) == record["sha256"]


@pytest.mark.req("QR-06")
def test_survivors_run_again_and_everything_else_is_kept() -> None:
    progress: dict[str, Any] = {"key": ["k", 12], "baseline": {}, "mutants": {
        "a": {"verdicts": {"AA-01": "killed", "AA-02": "survived"}, "mutation": "m"},
        "b": {"verdicts": {"AA-01": "killed"}, "mutation": "m"},
        "c": {"verdicts": {"AA-01": "timeout"}, "mutation": "m"},
        "d": {"verdicts": {"AA-01": "not applied"}},
        "e": {"verdicts": {"AA-01": "survived"}, "mutation": "m"},
        "f": {"verdicts": {"AA-01": "killed", "AA-02": "untested (killed unmutated)"},
              "mutation": "m"}}}
    progress["baseline"] = {"AA-02": {"verdict": "killed", "seconds": 1.0}}
    left = without_survivors(progress)
    assert sorted(left["mutants"]) == ["b", "c", "d"]
    assert left["baseline"] == {}, "the unmutated runs are measured again at this tree"
    assert left["key"] == ["k", 12]
    assert sorted(progress["mutants"]) == ["a", "b", "c", "d", "e", "f"]


@pytest.mark.req("QR-06")
def test_an_ids_unmutated_run_is_measured_once_per_tree_state(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from qualification.mutation import widened  # noqa: PLC0415

    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "m.py").write_text("x = 1\n", "utf-8")
    runs: list[str] = []

    def run_tests(_tree: Path, req: str, _files: list[str], _timeout: float) -> tuple[str, float]:
        runs.append(req)
        return "survived", 2.0

    monkeypatch.setattr(widened, "_run_tests", run_tests)
    cache = tmp_path / "baselines.json"
    state = widened.tree_digest(tree)
    first = widened.shared_baseline(cache, state, "AA-01", tree, [])
    assert widened.shared_baseline(cache, state, "AA-01", tree, []) == first
    assert runs == ["AA-01"], "the second module of the same tree state reuses the run"
    (tree / "pkg" / "m.py").write_text("x = 2\n", "utf-8")
    changed = widened.tree_digest(tree)
    assert changed != state, "any edit to the copied tree is a new state"
    widened.shared_baseline(cache, changed, "AA-01", tree, [])
    assert runs == ["AA-01", "AA-01"], "a new state measures again"
    (tree / "pkg" / "n.py").write_text("x = 2\n", "utf-8")
    grown = widened.tree_digest(tree)
    assert grown != changed, "a new file is a new state"
    records = tree / widened.RECORDS.relative_to(REPO)
    records.mkdir(parents=True)
    (records / "pkg.m.json").write_text("{}", "utf-8")
    assert widened.tree_digest(tree) == grown, "a record the run writes is no new state"


@pytest.mark.req("QR-06")
def test_what_a_mutants_tests_left_running_is_killed_when_they_end(tmp_path: Path) -> None:
    """A server a test started in a session of its own and never stopped (a mutant broke
    its shutdown) would hold its port for every later ID's run: it is killed by the
    folder its command line names, and the tests' own group with it."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    from qualification.mutation.widened import reap  # noqa: PLC0415

    marker = tmp_path / "left-running"
    left = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                             str(marker)], start_new_session=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                                 start_new_session=True)
    try:
        assert left.pid in reap(str(marker))
        assert left.wait(timeout=10) < 0
        assert bystander.poll() is None, "a process naming another folder is left alone"
    finally:
        for process in (left, bystander):
            process.kill()
            process.wait(timeout=10)


@pytest.mark.req("QR-06")
def test_a_mutant_cosmic_ray_fails_to_apply_is_not_applied_and_said(
        capsys: pytest.CaptureFixture[str]) -> None:
    """cosmic-ray's exception replacer raises on ``except (json.JSONDecodeError, ...)``:
    that mutant is recorded not applied (and said), never the end of the module's run."""
    def broken() -> str | None:
        raise AttributeError("'PythonNode' object has no attribute 'value'")

    assert applied(lambda: "mutated", "m.py:3") == "mutated"
    assert applied(lambda: None, "m.py:3") is None
    assert capsys.readouterr().err == ""
    assert applied(broken, "m.py:7") is None
    assert capsys.readouterr().err == ("m.py:7: cosmic-ray cannot apply this mutant ('PythonNode' "
                                       "object has no attribute 'value'); not applied\n")

    def failing() -> str | None:
        raise ValueError("a bug of ours")

    with pytest.raises(ValueError, match="a bug of ours"):
        applied(failing, "m.py:9")
