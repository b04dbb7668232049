"""QR-05: ``labfy-ref report --compare OLD --fail-on ...`` on real runs, as a pipeline gates on it.

Two runs of one generated project — all green, then with one parametrized case
broken — are compared through the real CLI: the broken ID is listed as a
regression in STATUS.md, status.json and on stdout, and the gate exits 1; two
identical runs exit 0. A file given to ``--compare`` that is not a status.json
this labfy-ref reads is one line ``REPORT_INVALID: ...``, exit 2, nothing written.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from labfy_ref.errors import ReportInvalid
from labfy_ref.report.compare import OldReport, compare
from labfy_ref.report.model import Line, Status
from qualification.report.projects import (
    BROKEN,
    GREEN,
    REQUIREMENTS,
    cli,
    make_project,
    run_project,
    valid_status,
)


def _green_then(pytester: pytest.Pytester, tests: str) -> tuple[Path, Path]:
    """Run the green project, keep its status.json, run ``tests``; (report dir, old copy)."""
    report = make_project(pytester)
    run_project(pytester).assert_outcomes(passed=4)
    old = pytester.path / "old-status.json"
    shutil.copyfile(report / "status.json", old)
    pytester.makepyfile(test_main=tests)
    return report, old


@pytest.mark.req("QR-05", "QR-02")
def test_a_broken_test_shows_in_changed_since_and_fails_the_regression_gate(
        pytester: pytest.Pytester) -> None:
    report, old = _green_then(pytester, BROKEN)
    run_project(pytester, "--run-name", "after").assert_outcomes(passed=3, failed=1)
    since = json.loads(old.read_text())["generated_at"]

    done = cli("report", "--results", str(report), "--format", "md,json,html",
               "--compare", str(old), "--fail-on", "regression")

    assert done.returncode == 1, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[lines.index(f"changed since {since}: 1") + 1] == \
        "changed: requirement AA-02 CURRENT -> FAIL (regression)"
    assert lines[-1] == "gate --fail-on regression: FAILED: regression: AA-02"
    document = valid_status(report / "status.json")
    assert document["changes"] == {
        "since": since, "source": str(old), "old_schema_version": 1,
        "items": [{"kind": "requirement", "id": "AA-02", "old": "CURRENT", "new": "FAIL",
                   "regression": True}]}
    failure = document["requirements"][1]["failures"]
    assert failure == [{"nodeid": "test_main.py::test_two[b]",
                        "message": "AssertionError: only a survives"}]
    markdown = (report / "STATUS.md").read_text()
    assert f"## Changed since {since}" in markdown
    assert "| requirement | AA-02 | CURRENT | FAIL | yes |" in markdown
    # the report is written before the gate decides: a pipeline publishes it either way
    assert (report / "status.html").is_file()


@pytest.mark.req("QR-05")
def test_identical_runs_pass_every_gate_they_can(pytester: pytest.Pytester) -> None:
    report, old = _green_then(pytester, GREEN)
    run_project(pytester).assert_outcomes(passed=4)

    done = cli("report", "--results", str(report), "--compare", str(old),
               "--fail-on", "regression,fail,not-run")

    assert done.returncode == 0, done.stdout + done.stderr
    assert "changed since" in done.stdout and not any(
        line.startswith("changed:") for line in done.stdout.splitlines())
    assert done.stdout.splitlines()[-1] == "gate --fail-on fail,not-run,regression: passed"
    assert valid_status(report / "status.json")["changes"]["items"] == []
    assert "Nothing changed." in (report / "STATUS.md").read_text()


@pytest.mark.req("QR-05")
def test_fail_and_not_run_gates_need_no_comparison(pytester: pytest.Pytester) -> None:
    skipping = BROKEN + '\n@pytest.mark.req("AA-03")\ndef test_later(): pytest.skip("no model")\n'
    report = make_project(pytester, skipping)
    run_project(pytester).assert_outcomes(passed=3, failed=1, skipped=1)

    failing = cli("report", "--results", str(report), "--fail-on", "fail")
    not_run = cli("report", "--results", str(report), "--fail-on", "not-run")
    regression = cli("report", "--results", str(report), "--fail-on", "regression")

    assert (failing.returncode, not_run.returncode) == (1, 1)
    assert failing.stdout.splitlines()[-1] == "gate --fail-on fail: FAILED: fail: AA-02"
    assert not_run.stdout.splitlines()[-1] == "gate --fail-on not-run: FAILED: not-run: AA-03"
    # a regression is only defined against an older report: refused, not silently passed
    assert regression.returncode == 2
    assert regression.stderr == ("CONFIG_INVALID: --fail-on regression needs --compare "
                                 "OLD_STATUS_JSON\n")


@pytest.mark.req("QR-05")
def test_a_stage_that_stops_passing_is_a_regression(pytester: pytest.Pytester) -> None:
    report, old = _green_then(pytester, GREEN)
    (pytester.path / "security" / "test_attacks.py").write_text(
        'import pytest\n\n@pytest.mark.req("AA-01")\ndef test_attack(): pytest.skip("later")\n')
    run_project(pytester).assert_outcomes(passed=3, skipped=1)

    done = cli("report", "--results", str(report), "--compare", str(old),
               "--fail-on", "regression")

    assert done.returncode == 1
    assert "changed: stage SECURITY_SUITES PASS -> NOT_RUN (regression)" in done.stdout.splitlines()
    # AA-01 still has a passing test and no failure: CURRENT needs every naming test to pass
    assert "changed: requirement AA-01 CURRENT -> NOT_RUN (regression)" in done.stdout


@pytest.mark.req("QR-05")
def test_an_id_removed_from_the_requirements_is_a_regression(pytester: pytest.Pytester) -> None:
    report, old = _green_then(pytester, GREEN)
    pytester.makefile(".toml", requirements=REQUIREMENTS.replace('"AA-03" = "nobody names it"\n',
                                                                 ""))
    run_project(pytester).assert_outcomes(passed=4)

    done = cli("report", "--results", str(report), "--compare", str(old),
               "--fail-on", "regression")

    # AA-03 was TARGET, so losing it changes the report but opens no gate; nothing regressed
    assert done.returncode == 0, done.stdout
    assert "changed: requirement AA-03 TARGET -> (absent)" in done.stdout.splitlines()


def _version_zero(old: Path) -> None:
    """Rewrite ``old`` as the status.json every labfy-ref before schema 1 wrote."""
    document = json.loads(old.read_text())
    for key in ("schema_version", "build"):
        document.pop(key, None)
    for line in document["requirements"] + document["stages"]:
        line.pop("failures")
    document["runs"] = [{k: v for k, v in run.items() if k in {"name", "generated_at", "tests"}}
                        for run in document["runs"]]
    old.write_text(json.dumps(document, indent=2))


@pytest.mark.req("QR-05")
def test_a_version_zero_status_json_is_compared(pytester: pytest.Pytester) -> None:
    report, old = _green_then(pytester, BROKEN)
    _version_zero(old)
    run_project(pytester).assert_outcomes(passed=3, failed=1)

    done = cli("report", "--results", str(report), "--compare", str(old), "--fail-on",
               "regression")

    assert done.returncode == 1
    changes = valid_status(report / "status.json")["changes"]
    assert changes["old_schema_version"] == 0
    assert [item["id"] for item in changes["items"]] == ["AA-02"]


#: Files that are not a status.json this labfy-ref reads, and what the one line says.
NOT_A_STATUS = {
    "not JSON": (b"{\"generated_at\": ", "not JSON"),
    "empty": (b"", "not JSON"),
    "invalid UTF-8": (b"{\"generated_at\": \"\xff\"}", "not JSON"),
    "NaN": (b"{\"generated_at\": NaN}", "NaN is not JSON"),
    "a JSON array": (b"[]", "not a JSON object"),
    "package.json": (b'{"name": "left-pad", "version": "1.3.0"}', "'generated_at' is a required"),
    "a later version": (b'{"schema_version": 2, "generated_at": "x"}', "unknown schema_version 2"),
    "a version as text": (b'{"schema_version": "1"}', "unknown schema_version \"1\""),
    "a time that is not a time": (b'{"schema_version": 1, "generated_at": "\\u001b[2J", '
                                  b'"summary": {}, "runs": [], "stages": [], '
                                  b'"requirements": []}', "at $.generated_at"),
    "a foreign status": (b'{"schema_version": 1, "generated_at": "2026-01-01T00:00:00Z", '
                         b'"summary": {}, "runs": [], '
                         b'"stages": [], "requirements": [{"id": "AA-01", "status": "GREEN"}]}',
                         "at $.requirements[0]"),
    "v0 with a bad id": (b'{"generated_at": "2026-01-01T00:00:00Z", "stages": [], '
                         b'"requirements": '
                         b'[{"id": "AA 01\\nFAKE: line", "status": "CURRENT"}]}',
                         "at $.requirements[0].id"),
}


@pytest.mark.req("QR-05", "CLI-01")
@pytest.mark.parametrize("case", list(NOT_A_STATUS))
def test_a_malformed_or_foreign_old_report_is_one_line_and_exit_2(
        pytester: pytest.Pytester, case: str) -> None:
    content, fragment = NOT_A_STATUS[case]
    report = make_project(pytester)
    run_project(pytester).assert_outcomes(passed=4)
    before = {name: (report / name).read_bytes() for name in ("STATUS.md", "status.json")}
    old = pytester.path / "old.json"
    old.write_bytes(content)

    done = cli("report", "--results", str(report), "--compare", str(old), "--fail-on",
               "regression")

    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(f"REPORT_INVALID: malformed status file {old}") or \
        done.stderr.startswith(f"REPORT_INVALID: status file {old}"), done.stderr
    assert fragment in done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert {name: (report / name).read_bytes() for name in before} == before  # nothing written


@pytest.mark.req("QR-05")
def test_a_missing_old_report_is_one_line_and_exit_2(pytester: pytest.Pytester) -> None:
    report = make_project(pytester)
    run_project(pytester)
    done = cli("report", "--results", str(report), "--compare", str(pytester.path / "nope.json"))
    assert done.returncode == 2
    assert done.stderr.startswith("REPORT_INVALID: cannot read status file ")
    assert done.stderr.count("\n") == 1


@pytest.mark.req("QR-05")
@pytest.mark.parametrize("value", ["sometimes", "", "regression,,fail,maybe"])
def test_fail_on_takes_only_known_gates(pytester: pytest.Pytester, value: str) -> None:
    report = make_project(pytester)
    done = cli("report", "--results", str(report), "--fail-on", value)
    assert done.returncode == 2
    assert done.stderr.startswith("CONFIG_INVALID: --fail-on takes a comma list of regression, "
                                  "fail, not-run")


_TEXT = st.text(st.characters(codec=None, categories=["Cs", "L", "N", "P", "Cc", "Zs"]),
                max_size=20)
_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
                     | _TEXT,
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(_TEXT | st.sampled_from(
                         ["schema_version", "generated_at", "stages", "requirements", "id",
                          "status", "summary", "runs"]), inner, max_size=5),
                     max_leaves=20)


@pytest.mark.req("QR-05")
@settings(deadline=None, max_examples=300,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=st.binary(max_size=200) | _JSON.map(
    lambda value: json.dumps(value).encode("utf-8", "surrogatepass")))
def test_any_file_is_read_or_refused_with_report_invalid(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "old.json"
    path.write_bytes(content)
    try:
        old = OldReport.read(path)
    except ReportInvalid as exc:
        assert str(exc).startswith("REPORT_INVALID: ") and "\n" not in str(exc)
        return
    # whatever was accepted holds what a comparison needs
    for lines in old.shown.values():
        assert all(isinstance(key, str) and status in {"CURRENT", "TARGET", "FAIL", "NOT_RUN",
                                                       "PASS", "PASS_LOCAL_SPECIMEN"}
                   for key, (status, _) in lines.items())


#: (kind, old shown status, new status, new ran_on) -> (listed as a change, regression)
DECISIONS = [
    ("requirement", "CURRENT", "CURRENT", (), False, False),
    ("requirement", "CURRENT", "FAIL", (), True, True),
    ("requirement", "CURRENT", "NOT_RUN", (), True, True),
    ("requirement", "CURRENT", "TARGET", (), True, True),
    ("requirement", "FAIL", "CURRENT", (), True, False),
    ("requirement", "TARGET", "NOT_RUN", (), True, False),
    ("stage", "PASS", "PASS", (), False, False),
    ("stage", "PASS", "FAIL", (), True, True),
    ("stage", "PASS", "NOT_RUN", (), True, True),
    ("stage", "PASS_LOCAL_SPECIMEN", "FAIL", (), True, True),
    ("stage", "PASS", "PASS_LOCAL_SPECIMEN", (), True, False),
    ("stage", "NOT_RUN", "PASS", (), True, False),
    # a browser that stops running is a change to read, not a failed gate
    ("stage", "PASS (firefox, chromium)", "PASS", ("firefox",), True, False),
]


@pytest.mark.req("QR-05")
@pytest.mark.parametrize(("kind", "old", "new", "ran_on", "changed", "regression"), DECISIONS)
def test_what_counts_as_a_change_and_a_regression(
        kind: str, old: str, new: str, ran_on: tuple[str, ...], changed: bool,
        regression: bool) -> None:
    status = old.split(" ", 1)[0]
    previous = OldReport("2026-01-01T00:00:00+00:00", "old.json", 1,
                         {"requirement": {}, "stage": {}} | {kind: {"XX-01": (status, old)}})
    line = Line("XX-01", "t", Status(new), ran_on=ran_on)
    changes = compare(previous, *(([line], []) if kind == "requirement" else ([], [line])))
    assert [(c.id, c.old, c.new, c.regression) for c in changes.items] == (
        [("XX-01", old, line.shown_status, regression)] if changed else [])
