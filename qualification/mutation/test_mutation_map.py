"""The mutation run's map and its committed record (QR-04-MAP), and what the record shows (QR-04).

The map and record tests prove the scope and the record's consistency. QR-04 is
the record's own scores: every listed module measured on the sources it holds
now, each killing at least 90 % of its killable mutants, every survivor listed
with its reason. A record measured on other sources of those modules is stale:
that test is then NOT_RUN (rerun ``tox -e mutation``), never a pass.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from labfy_ref.report.sources import files_sha256, sources_sha256
from labfy_ref.report.validate import schema
from qualification.mutation import record
from qualification.mutation.scope import MODULES, REPO, function_lines, req_ids
from qualification.report.projects import cli

#: The list of issue 13 item 4, as its text names them.
ISSUE_MODULES = {
    "labfy_ref/server/security.py", "labfy_ref/server/auth.py", "labfy_ref/model/endpoint.py",
    "labfy_ref/model/client.py", "labfy_ref/gateway/files.py", "labfy_ref/gateway/policy.py",
    "labfy_ref/protocol/strict_json.py", "labfy_ref/protocol/action.py",
    "labfy_ref/bridge/ndjson.py", "labfy_ref/workspace/store.py"}


def _committed() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(record.RECORD_PATH.read_text(encoding="utf-8"))
    return document


@pytest.mark.req("QR-04-MAP")
def test_the_map_covers_the_ten_modules_with_existing_tests_and_known_ids() -> None:
    assert {scope.path for scope in MODULES} == ISSUE_MODULES
    assert len(MODULES) == len(ISSUE_MODULES)  # no module twice
    known = set(tomllib.loads((REPO / "qualification" / "requirements.toml").read_text())
                ["requirements"])
    for scope in MODULES:
        assert (REPO / scope.path).is_file(), scope.path
        assert scope.tests, scope.path
        for test in scope.tests:
            assert (REPO / test).is_file() and Path(test).name.startswith("test_"), test
        reqs = scope.reqs()
        assert reqs and set(reqs) <= known, (scope.path, reqs)
    # store.py is mutated only in its grant functions: each named function exists
    store = next(scope for scope in MODULES if scope.path.endswith("workspace/store.py"))
    assert len(function_lines(REPO / store.path, store.functions)) == len(store.functions)


@pytest.mark.req("QR-04-MAP")
def test_req_ids_are_read_from_the_marks_themselves(tmp_path: Path) -> None:
    test = tmp_path / "test_x.py"
    test.write_text('import pytest\npytestmark = pytest.mark.req("AA-01")\n'
                    '@pytest.mark.req("AA-02", "AA-03")\ndef test_a(): pass\n'
                    'def helper(): return "AA-09"\n')
    assert req_ids(test) == {"AA-01", "AA-02", "AA-03"}


@pytest.mark.req("QR-04-MAP", "QR-05")
def test_the_committed_record_validates_and_is_consistent_with_the_map() -> None:
    document = _committed()
    jsonschema.Draft202012Validator(schema("mutation")).validate(document)
    scopes = {scope.path: scope for scope in MODULES}
    names = [score["name"] for score in document["modules"]]
    assert names and set(names) <= set(scopes) and len(set(names)) == len(names)
    assert re.fullmatch(r"[0-9a-f]{64}", document["sources_sha256"])
    expected: dict[str, list[int]] = {}
    for score in document["modules"]:
        assert 0 <= score["killed"] <= score["total"]
        for req in scopes[score["name"]].reqs():
            tally = expected.setdefault(req, [0, 0])
            tally[0] += score["killed"]
            tally[1] += score["total"]
    assert {s["name"]: [s["killed"], s["total"]] for s in document["requirements"]} == expected
    # every survivor is one the module scores count, in a measured module
    for name in names:
        score = next(s for s in document["modules"] if s["name"] == name)
        survivors = [s for s in document["survivors"] if s["module"] == name]
        # an equivalent survivor is listed with its reason but counts in no score
        assert len([s for s in survivors if s["justification"] is None]) == (
            score["total"] - score["killed"])
        assert all(s["location"].startswith(f"{name}:") for s in survivors)
    # a partial run backs no ID: QR-04 and the module IDs cannot turn CURRENT on it
    if set(names) != set(scopes):
        assert document["reqs"] == []


#: The least share of each module's killable mutants (all but the equivalent) the tests kill.
GOAL = 0.90


@pytest.mark.req("QR-04")
def test_the_tests_kill_at_least_90_percent_of_each_modules_mutants() -> None:
    document = _committed()
    mutated = sorted(ISSUE_MODULES)
    assert document.get("mutated") == mutated, "the record is keyed by the ten modules"
    if document["sources_sha256"] != files_sha256(mutated):
        pytest.skip("the mutation record is stale: one of the ten modules changed since it was "
                    "measured; rerun tox -e mutation")
    scores = {score["name"]: score for score in document["modules"]}
    assert set(scores) == ISSUE_MODULES
    for name, score in scores.items():
        assert score["total"] > 0 and score["killed"] >= GOAL * score["total"], (
            f"{name}: {score['killed']} of {score['total']} killable mutants killed")
    triage = record.load_triage()
    for survivor in document["survivors"]:  # each listed with its reason, justified or not
        entry = next((v for k, v in triage.items()
                      if k.split(" ", 1)[0] == survivor["location"]), None)
        assert entry is not None and entry[1].strip(), f"{survivor['location']} has no reason"
    assert document["reqs"], "a complete run backs the IDs its covering tests name"


@pytest.mark.req("QR-04-MAP")
def test_every_triage_entry_names_a_survivor_of_the_record() -> None:
    triage = record.load_triage()
    document = _committed()
    described = {s["location"] for s in document["survivors"]}
    measured = {score["name"] for score in document["modules"]}
    for key, (verdict, reason) in triage.items():
        assert verdict in record.VERDICTS and reason.strip()
        location = key.split(" ", 1)[0]
        if location.rsplit(":", 1)[0] in measured:  # a module still running may be triaged ahead
            assert location in described, f"triage of {key} matches no survivor: stale triage"
    justified = [s for s in document["survivors"] if s["justification"] is not None]
    assert all(s["justification"].startswith("equivalent: ") for s in justified)


@pytest.mark.req("QR-05", "QR-04-MAP")
def test_the_report_of_a_checkout_shows_the_committed_record(tmp_path: Path) -> None:
    report = tmp_path / "report"
    (report / "results").mkdir(parents=True)
    (report / "results" / "qualify.json").write_text(json.dumps({
        "schema_version": 1, "name": "qualify", "generated_at": "2026-01-01T00:00:00+00:00",
        "sources_sha256": sources_sha256(),
        "tests": [{"nodeid": "t.py::test_one", "outcome": "passed", "reqs": ["QR-05"],
                   "reason": None, "duration": 0.01}]}))
    done = cli("report", "--results", str(report), "--requirements",
               str(REPO / "qualification" / "requirements.toml"), cwd=REPO)
    assert done.returncode == 0, done.stderr
    status = json.loads((report / "status.json").read_text())
    committed = _committed()
    assert status["mutation"]["modules"] == committed["modules"]
    assert status["mutation"]["survivors"] == committed["survivors"]
    assert status["mutation"]["sources_sha256"] == committed["sources_sha256"]
    assert (status["mutation"]["sources"], status["mutation"]["stale"],
            status["mutation"]["changed"]) == ("current", False, []), \
        "the committed record was measured on this checkout's very modules"
    assert "- Mutation (" in (report / "STATUS.md").read_text()


@pytest.mark.req("QR-04-MAP")
def test_a_changed_module_makes_only_its_own_ids_stale(tmp_path: Path) -> None:
    from labfy_ref.report.evidence import (  # noqa: PLC0415
        COMMITTED_MUTATION_RECORD,
        MUTATION_RECORD,
        Freshness,
        read_mutation,
    )

    document = json.loads((REPO / COMMITTED_MUTATION_RECORD).read_text("utf-8"))
    (tmp_path / MUTATION_RECORD).write_text(json.dumps(document), "utf-8")
    fresh = read_mutation(tmp_path, None)
    assert fresh is not None
    assert (fresh.freshness, fresh.stale, fresh.changed, fresh.stale_reqs) == (
        Freshness.CURRENT, False, (), ()), "measured on these very sources"
    # one module measured on other bytes: the record is stale for that module's IDs only
    changed = document["modules"][0]
    changed["sha256"] = "0" * 64
    document["sources_sha256"] = "f" * 64
    (tmp_path / MUTATION_RECORD).write_text(json.dumps(document), "utf-8")
    stale = read_mutation(tmp_path, None)
    assert stale is not None
    assert (stale.freshness, stale.stale, stale.changed) == (
        Freshness.STALE, True, (changed["name"],))
    assert stale.stale_reqs == tuple(sorted(set(changed["reqs"]) & set(document["reqs"])))
    assert stale.stale_reqs and len(stale.stale_reqs) < len(document["reqs"])
